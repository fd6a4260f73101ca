// mcp-remote (the stdio bridge desktop hosts launch) with default options across a restart
// of the server (issue 28), driven over its stdio the way a host does: initialize, start
// generate_report as a plain tools/call (a task handle after the 1 s inline wait), print
// RESTART and wait for a line on stdin while the harness restarts the server (SIGTERM,
// same port and data dir); then echo, and task_wait for the task started before.
// Usage: node mcp_remote_restart.mjs URL, from a folder where mcp-remote is installed.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const NAME = 'mcp-remote-restart';
const BRIDGE = fileURLToPath(new URL('./node_modules/mcp-remote/dist/proxy.js', import.meta.url));

async function flow(url, bridge) {
  const pending = new Map();
  let nextId = 1;
  createInterface({ input: bridge.stdout }).on('line', (line) => {
    const message = JSON.parse(line);
    if (message.method && message.id !== undefined) {
      // A request from the server, relayed: answer ping, decline the rest (no capabilities).
      const reply =
        message.method === 'ping' ? { result: {} } : { error: { code: -32601, message: 'not supported' } };
      bridge.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: message.id, ...reply }) + '\n');
    } else if (pending.has(message.id)) {
      pending.get(message.id)(message);
    }
  });
  const request = (method, params) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, (message) =>
        message.error ? reject(new Error(`${method}: ${JSON.stringify(message.error)}`)) : resolve(message.result),
      );
      bridge.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
    });

  const init = await request('initialize', {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'mcp-taskd-interop-host', version: '1.0.0' },
  });
  console.error(`# negotiated ${init.protocolVersion}`);
  bridge.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');

  let answer = await request('tools/call', { name: 'generate_report', arguments: { topic: 'restart', sections: 4 } });
  check(answer.structuredContent?.taskId, `expected a task handle: ${JSON.stringify(answer)}`);

  console.log('RESTART');
  await new Promise((resolve) => createInterface({ input: process.stdin }).once('line', resolve));

  const echo = await request('tools/call', { name: 'echo', arguments: { text: 'after the restart' } });
  check(!echo.isError && echo.content[0].text === 'after the restart', `echo: ${JSON.stringify(echo)}`);
  while (answer.structuredContent?.taskId) {
    answer = await request('tools/call', { name: 'task_wait', arguments: { taskId: answer.structuredContent.taskId } });
    check(!answer.isError, `task_wait: ${JSON.stringify(answer)}`);
  }
  check(answer.structuredContent?.topic === 'restart', `result: ${JSON.stringify(answer)}`);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(error) {
  return String(error?.message ?? error).replaceAll('\n', ' ').slice(0, 300);
}

// The bridge logs to stderr: pass it on, and keep its last error line for the verdict.
const bridge = spawn(process.execPath, [BRIDGE, process.argv[2]], { stdio: ['pipe', 'pipe', 'pipe'] });
let lastError = '';
createInterface({ input: bridge.stderr }).on('line', (line) => {
  console.error(line);
  if (/error/i.test(line)) lastError = line.replace(/^\[\d+\] /, '');
});
const exited = new Promise((_, reject) =>
  bridge.on('exit', (code) => reject(new Error(`mcp-remote exited with ${code}: ${lastError}`))),
);
const timeout = new Promise((_, reject) => {
  setTimeout(() => reject(new Error('timed out after 45 s')), 45_000).unref();
});
let failure;
try {
  await Promise.race([flow(process.argv[2], bridge), exited, timeout]);
} catch (error) {
  failure = error;
}
bridge.kill();
if (failure) {
  console.log(`FAIL ${NAME}: ${oneLine(failure)}`);
  process.exit(1);
}
console.log(`PASS ${NAME}`);
process.exit(0);
