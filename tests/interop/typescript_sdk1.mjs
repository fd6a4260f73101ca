// TypeScript SDK @modelcontextprotocol/sdk 1.x (legacy era, 2025-11-25): initialize,
// tools/list, echo, then generate_report as a 2025-11-25 task through the SDK's
// experimental tasks client (callToolStream creates the task and polls it to the result);
// then generate_report as a plain callTool, as a client that does not speak tasks.
// Usage: node typescript_sdk1.mjs URL, from a folder where the SDK is installed.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const NAME = 'typescript-sdk-1.x';

async function flow(url) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    check(names.includes('echo') && names.includes('generate_report'), `tools/list: ${names}`);

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);

    // A tool listed with execution.taskSupport runs as a task here, with no option set.
    let created = false;
    let report;
    const stream = client.experimental.tasks.callToolStream({
      name: 'generate_report',
      arguments: { topic: 'interop', sections: 2 },
    });
    for await (const message of stream) {
      if (message.type === 'taskCreated') created = true;
      if (message.type === 'taskStatus') console.error(`# task ${message.task.status}: ${message.task.statusMessage}`);
      if (message.type === 'error') throw message.error;
      if (message.type === 'result') report = message.result;
    }
    check(created, 'generate_report did not run as a task');
    check(report?.structuredContent?.topic === 'interop', `task result: ${JSON.stringify(report)}`);

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
