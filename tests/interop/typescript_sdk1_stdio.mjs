// TypeScript SDK @modelcontextprotocol/sdk 1.x StdioClientTransport launching
// `mcp-taskd stdio` (legacy era, 2025-11-25), as a desktop host does: initialize,
// tools/list, echo, then task tools called plainly (callTool, no tasks declared):
// noop_task, a task that completes at once, is answered within the call's inline wait;
// generate_report (four sections, 2.4 s) answers its result, or a task handle and then
// the result through task_wait. The SDK checks each answer against the listed
// outputSchema.
// Usage: node typescript_sdk1_stdio.mjs COMMAND [ARG...], from a folder where the SDK is
// installed; COMMAND [ARG...] is the command line to launch (`mcp-taskd stdio --config
// FILE --data-dir DIR`, or `mcp-taskd stdio --connect URL` for the relay). With
// MCP_TASKD_EXPECT_HANDLE=1 (an inline wait of about 1 s) the longer one must answer a
// handle.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const NAME = process.argv.includes('--connect') ? 'typescript-sdk-1.x-relay' : 'typescript-sdk-1.x-stdio';

async function flow([command, ...args]) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(
    new StdioClientTransport({ command, args, stderr: 'inherit' }),
  );
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    const expected = ['echo', 'noop_task', 'generate_report', 'task_status', 'task_wait', 'task_cancel'];
    check(expected.every((name) => names.includes(name)), `tools/list: ${names}`);

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);

    const noop = await client.callTool({ name: 'noop_task', arguments: {} });
    check(!noop.isError && noop.content[0].text === 'done', `noop_task: ${JSON.stringify(noop)}`);

    let answer = await client.callTool({
      name: 'generate_report',
      arguments: { topic: 'long', sections: 4 },
    });
    if (process.env.MCP_TASKD_EXPECT_HANDLE === '1') {
      check(answer.structuredContent?.taskId, `expected a task handle: ${JSON.stringify(answer)}`);
    }
    while (answer.structuredContent?.taskId) {
      check(!answer.isError && answer.content[0].text.includes('task_wait'), `handle: ${JSON.stringify(answer)}`);
      answer = await client.callTool({
        name: 'task_wait',
        arguments: { taskId: answer.structuredContent.taskId },
      });
    }
    check(!answer.isError && answer.structuredContent?.topic === 'long', `long report: ${JSON.stringify(answer)}`);
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
  setTimeout(() => reject(new Error('timed out after 30 s')), 30_000).unref();
});
try {
  await Promise.race([flow(process.argv.slice(2)), timeout]);
  console.log(`PASS ${NAME}`);
  process.exit(0);
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exit(1);
}
