// TypeScript @modelcontextprotocol/client 2.x in its default mode (versionNegotiation
// 'legacy': a plain 2025-11-25 initialize, no server/discover probe): tools/list, echo,
// and generate_report without declaring tasks (its result, or a handle then task_wait).
// Usage: node typescript_client2.mjs URL, from a folder where the client is installed.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const NAME = 'typescript-client-2.x';

async function flow(url) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    check(names.includes('echo'), `tools/list: ${names}`);

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);

    // generate_report as a plain callTool (no tasks declared): its result, or a task
    // handle (checked by the SDK against the listed outputSchema) and then the result
    // through task_wait.
    let answer = await client.callTool({ name: 'generate_report', arguments: { topic: 'plain', sections: 4 } });
    check(!answer.isError, `plain call: ${JSON.stringify(answer)}`);
    if (process.env.MCP_TASKD_EXPECT_HANDLE === '1') {
      check(answer.structuredContent?.taskId, `expected a task handle: ${JSON.stringify(answer)}`);
    }
    while (answer.structuredContent?.taskId) {
      console.error(`# handle ${answer.structuredContent.status}: ${answer.structuredContent.statusMessage}`);
      answer = await client.callTool({ name: 'task_wait', arguments: { taskId: answer.structuredContent.taskId } });
      check(!answer.isError, `task_wait: ${JSON.stringify(answer)}`);
    }
    check(answer.structuredContent?.topic === 'plain', `plain result: ${JSON.stringify(answer)}`);
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
  await Promise.race([flow(process.argv[2]), timeout]);
  console.log(`PASS ${NAME}`);
  process.exit(0);
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exit(1);
}
