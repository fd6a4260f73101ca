// mcp-remote (the stdio bridge desktop hosts launch) doing the whole OAuth dance with its
// default OAuth support, headless (issue 32), against mcp-taskd naming a real
// authorization server (oauth_idp.mjs: oauth2-mock-server), driven over its stdio the
// way a host does:
// 1. mcp-remote meets the 401, reads the metadata, and asks the user to authorize: it
//    logs the URL (its browser opener is a no-op here, BROWSER=true), and the driver,
//    as the user, opens it; the provider redirects at once to mcp-remote's own local
//    callback, and mcp-remote exchanges the code (the client is registered beforehand,
//    `--static-oauth-client-info`: the provider has no dynamic registration);
// 2. the host initializes, lists the tools, calls echo, and creates a 2025-11-25 task;
// 3. the tokens are accepted for 15 s only (JWT_LIFETIME -15, inside mcp-taskd's 30 s
//    clock leeway): the host reads the task until mcp-taskd refuses the token and
//    mcp-remote refreshes it, and reads it back with the new token.
// Usage: node mcp_remote_oauth.mjs BINARY, from a folder where mcp-remote is installed,
// with MCP_TASKD_NODE and MCP_TASKD_IDP as for python_sdk1_oauth.py.
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { startIssuer, startServer } from './oauth_setup.mjs';

const NAME = 'mcp-remote-oauth';
const BRIDGE = fileURLToPath(new URL('./node_modules/mcp-remote/dist/proxy.js', import.meta.url));
const VERSION = '2025-11-25';

/** A port in 20000-32000 (below Linux's ephemeral range) that nothing listens on now. */
async function freePortBelowEphemeral() {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    const free = await new Promise((resolve) => {
      const probe = createServer();
      probe.once('error', () => resolve(false));
      probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port in 20000-32000');
}

async function flow(binary, work, children) {
  const issuer = await startIssuer(children, { JWT_LIFETIME: '-15' });
  const url = await startServer(binary, work, issuer.url, children);
  mkdirSync(join(work, 'home'), { recursive: true });
  // mcp-remote derives its callback port from a hash of the server URL, anywhere in
  // 3335-49150: often inside the ephemeral range, where another connection on a busy
  // box may hold it ("Callback port … is already in use"). A port below that range,
  // free a moment ago, is given instead (its second argument).
  const callbackPort = await freePortBelowEphemeral();
  const bridge = spawn(
    process.execPath,
    [BRIDGE, url, String(callbackPort), '--static-oauth-client-info', JSON.stringify({ client_id: NAME })],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, HOME: join(work, 'home'), BROWSER: 'true' } },
  );
  children.push(bridge);

  // The user: opens the URL mcp-remote asks them to visit, once its callback server
  // listens (it logs the URL first, then starts that server; a person is never faster).
  let authorizations = 0;
  let nextLineIsUrl = false;
  let authorizationUrl;
  let listening = false;
  const visit = async () => {
    if (!authorizationUrl || !listening) return;
    const target = authorizationUrl;
    authorizationUrl = undefined;
    authorizations += 1;
    // Following the redirects ends at mcp-remote's callback, which completes the sign-in.
    await fetch(target).catch((error) => console.error(`# the browser: ${error}`));
  };
  createInterface({ input: bridge.stderr }).on('line', (line) => {
    console.error(line);
    const text = line.replace(/^\[\d+\] /, '').trim();
    if (nextLineIsUrl && text.startsWith('http')) {
      nextLineIsUrl = false;
      authorizationUrl = text;
    }
    if (text.includes('Please authorize this client by visiting')) nextLineIsUrl = true;
    if (text.includes('OAuth callback server running at')) listening = true;
    visit();
  });

  const pending = new Map();
  let nextId = 1;
  createInterface({ input: bridge.stdout }).on('line', (line) => {
    const message = JSON.parse(line);
    if (message.method && message.id !== undefined) {
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
  const exited = new Promise((_, reject) =>
    bridge.on('exit', (code) => reject(new Error(`mcp-remote exited with ${code}`))),
  );

  const steps = async () => {
    // 1 and 2: the dance happens under the host's first request.
    await request('initialize', {
      protocolVersion: VERSION,
      capabilities: { tasks: {} },
      clientInfo: { name: 'mcp-taskd-interop-host', version: '1.0.0' },
    });
    bridge.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
    check(authorizations === 1, `${authorizations} authorizations`);
    check(issuer.grants.join() === 'authorization_code mcp:use', `grants: ${issuer.grants}`);
    const echo = await request('tools/call', { name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);
    const created = await request('tools/call', {
      name: 'generate_report',
      arguments: { topic: 'oauth', sections: 1 },
      task: {},
    });
    const taskId = created.task?.taskId;
    check(taskId, `no task: ${JSON.stringify(created)}`);

    // 3. Read the task until the token is refused and mcp-remote refreshes it.
    const deadline = Date.now() + 30_000;
    while (!issuer.grants.includes('refresh_token mcp:use')) {
      check(Date.now() < deadline, `no refresh within 30 s: grants ${issuer.grants}`);
      const task = await request('tasks/get', { taskId });
      check(task.taskId === taskId, `tasks/get: ${JSON.stringify(task)}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const task = await request('tasks/get', { taskId });
    check(task.status === 'completed', `after the refresh: ${JSON.stringify(task)}`);
    check(authorizations === 1, `${authorizations} authorizations: a new sign-in, not a refresh`);
  };
  await Promise.race([steps(), exited]);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(error) {
  return String(error?.message ?? error).replaceAll('\n', ' ').slice(0, 300);
}

const work = mkdtempSync(join(tmpdir(), 'mcp-taskd-oauth-'));
const children = [];
const timeout = new Promise((_, reject) => {
  setTimeout(() => reject(new Error('timed out after 45 s')), 45_000).unref();
});
try {
  await Promise.race([flow(process.argv[2], work, children), timeout]);
  console.log(`PASS ${NAME}`);
  process.exitCode = 0;
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exitCode = 1;
} finally {
  for (const child of children) child.kill();
  rmSync(work, { recursive: true, force: true });
}
process.exit();
