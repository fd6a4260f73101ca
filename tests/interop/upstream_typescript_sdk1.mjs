// TypeScript SDK @modelcontextprotocol/sdk 1.x against upstream MCP servers that no one
// here wrote, behind mcp-taskd's [[upstreams]] (see .ci/interop.sh): tools/list shows
// the prefixed tools of all three; fs_list_directory and time_get_current_time answer
// (the SDK checks structuredContent against the listed outputSchema); server-everything's
// long-running operation as a 2025-11-25 task (callToolStream: created, polled with its
// progress in statusMessage, to the upstream's result); its elicitation tool as a task
// (input_required, then tasks/result brings the upstream's question to this client's
// elicitation handler) and its sampling tool as a plain callTool (the bridge puts the
// question to the sampling handler); the upstream's results show the answers; and
// time_convert_time, whose outputSchema holds `$defs` that its `$ref`s point to.
// Usage: node upstream_typescript_sdk1.mjs URL, from a folder where the SDK is installed
// (MCP_TASKD_UPSTREAM_FILES is the folder the filesystem server was given).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema, ElicitRequestSchema, ListToolsResultSchema,
} from '@modelcontextprotocol/sdk/types.js';

const NAME = 'upstream-typescript-sdk-1.x';
const ANSWER_NAME = 'Katherine Johnson (TypeScript)';
const SAMPLED = 'sampled by the TypeScript client';
const asked = [];
// Wrong behaviour that does not stop the rest of the flow: reported at the end.
const problems = [];

function text(result) {
  return (result?.content ?? []).filter((block) => block.type === 'text').map((block) => block.text).join('\n');
}

async function flow(url) {
  const files = process.env.MCP_TASKD_UPSTREAM_FILES;
  const client = new Client(
    { name: 'mcp-taskd-interop', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} }, sampling: {} } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(`elicitation: ${request.params.message}`);
    return { action: 'accept', content: { name: ANSWER_NAME, check: true } };
  });
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    asked.push(`sampling: ${request.params.messages[0].content.text}`);
    return { role: 'assistant', content: { type: 'text', text: SAMPLED }, model: 'interop-model', stopReason: 'endTurn' };
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    // listTools compiles every listed outputSchema (the SDK checks results against them);
    // a schema it cannot compile fails the listing. Noted, and the listing read raw.
    let tools;
    try {
      ({ tools } = await client.listTools());
    } catch (error) {
      problems.push(`listTools: ${oneLine(error)}`);
      ({ tools } = await client.request({ method: 'tools/list', params: {} }, ListToolsResultSchema));
    }
    const names = tools.map((tool) => tool.name);
    for (const wanted of ['ev_trigger-long-running-operation', 'ev_trigger-elicitation-request',
      'ev_trigger-sampling-request', 'fs_list_directory', 'time_get_current_time']) {
      check(names.includes(wanted), `tools/list lacks ${wanted}: ${names}`);
    }

    const listing = await client.callTool({ name: 'fs_list_directory', arguments: { path: files } });
    check(!listing.isError && text(listing).includes('[FILE] hello.txt'), `fs_list_directory: ${JSON.stringify(listing)}`);

    const now = await client.callTool({ name: 'time_get_current_time', arguments: { timezone: 'America/New_York' } });
    check(!now.isError && now.structuredContent?.timezone === 'America/New_York', `time_get_current_time: ${JSON.stringify(now)}`);
    const drift = Math.abs(Date.parse(now.structuredContent.datetime) - Date.now());
    check(drift < 300_000, `time_get_current_time is ${drift} ms off: ${JSON.stringify(now)}`);

    // The long-running operation as a task, polled to its result.
    let created = false;
    let result;
    const progress = [];
    const stream = client.experimental.tasks.callToolStream({
      name: 'ev_trigger-long-running-operation',
      arguments: { duration: 4, steps: 4 },
    });
    for await (const message of stream) {
      if (message.type === 'taskCreated') created = true;
      if (message.type === 'taskStatus') {
        console.error(`# task ${message.task.status}: ${message.task.statusMessage}`);
        if (/^[1-3]\/4$/.test(message.task.statusMessage ?? '')) progress.push(message.task.statusMessage);
      }
      if (message.type === 'error') throw message.error;
      if (message.type === 'result') result = message.result;
    }
    check(created, 'the long-running operation did not run as a task');
    check(progress.length > 0, 'no upstream progress in statusMessage');
    check(text(result) === 'Long running operation completed. Duration: 4 seconds, Steps: 4.',
      `long-running operation: ${JSON.stringify(result)}`);

    // The elicitation tool as a task: input_required, answered through tasks/result.
    let status = [];
    result = undefined;
    const asking = client.experimental.tasks.callToolStream({ name: 'ev_trigger-elicitation-request', arguments: {} });
    for await (const message of asking) {
      if (message.type === 'taskStatus') status.push(message.task.status);
      if (message.type === 'error') throw message.error;
      if (message.type === 'result') result = message.result;
    }
    console.error(`# elicitation task statuses: ${status}`);
    check(asked.some((a) => a.startsWith('elicitation')), `never asked: ${asked}`);
    check(!result?.isError && text(result).includes(`- Name: ${ANSWER_NAME}`), `elicitation task: ${JSON.stringify(result)}`);

    // The sampling tool as a plain call: the bridge asks this client while it waits.
    let answer = await client.callTool({ name: 'ev_trigger-sampling-request', arguments: { prompt: 'a TypeScript question' } });
    while (answer.structuredContent?.taskId) {
      answer = await client.callTool({ name: 'task_wait', arguments: { taskId: answer.structuredContent.taskId } });
    }
    check(asked.some((a) => a.includes('a TypeScript question')), `never sampled: ${asked}`);
    check(!answer.isError && text(answer).includes(SAMPLED), `sampling tool: ${JSON.stringify(answer)}`);

    // An output schema with $defs (pydantic's, for nested models) checked by the SDK.
    answer = await client.callTool({
      name: 'time_convert_time',
      arguments: { source_timezone: 'UTC', time: '12:00', target_timezone: 'Asia/Tokyo' },
    });
    check(!answer.isError && answer.structuredContent?.target?.datetime?.includes('T21:00:00+09:00'),
      `time_convert_time: ${JSON.stringify(answer)}`);
    check(problems.length === 0, problems.join('; '));
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
