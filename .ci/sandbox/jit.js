#!/usr/bin/env node
// A command tool on a JIT runtime (.ci/sandbox.sh): the hot loop is compiled to machine
// code at run time, which needs writable-then-executable memory.
let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { arguments: args } = JSON.parse(input);
  let sum = 0;
  for (let i = 0; i < (args.n || 1000000); i++) sum += i % 7;
  const text = `node ${process.version} computed ${sum}`;
  console.log(JSON.stringify({ result: { content: [{ type: "text", text }] } }));
});
