// TypeScript SDK @modelcontextprotocol/sdk 1.x across a restart of the server (issue
// 28): connect, start generate_report as a plain callTool (a task handle after the 1 s
// inline wait), print RESTART and wait for a line on stdin while the harness restarts the
// server (SIGTERM, same port and data dir); then, on the same Client: echo, and task_wait
// for the task started before the restart.
// Usage: node typescript_sdk1_restart.mjs URL, from a folder where the SDK is installed.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const NAME = 'typescript-sdk-1.x-restart';

async function flow(url) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    let answer = await client.callTool({ name: 'generate_report', arguments: { topic: 'restart', sections: 4 } });
    check(answer.structuredContent?.taskId, `expected a task handle: ${JSON.stringify(answer)}`);

    console.log('RESTART');
    await new Promise((resolve) => createInterface({ input: process.stdin }).once('line', resolve));

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'after the restart' } });
    check(!echo.isError && echo.content[0].text === 'after the restart', `echo: ${JSON.stringify(echo)}`);
    while (answer.structuredContent?.taskId) {
      answer = await client.callTool({ name: 'task_wait', arguments: { taskId: answer.structuredContent.taskId } });
      check(!answer.isError, `task_wait: ${JSON.stringify(answer)}`);
    }
    check(answer.structuredContent?.topic === 'restart', `result: ${JSON.stringify(answer)}`);
  } finally {
    await client.close();
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(error) {
  return String(error?.message ?? error).replaceAll('\n', ' ').slice(0, 300);
}

const timeout = new Promise((_, reject) => {
  setTimeout(() => reject(new Error('timed out after 45 s')), 45_000).unref();
});
try {
  await Promise.race([flow(process.argv[2]), timeout]);
  console.log(`PASS ${NAME}`);
  process.exit(0);
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exit(1);
}
