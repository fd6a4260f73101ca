// TypeScript SDK @modelcontextprotocol/sdk 1.x doing the whole OAuth dance with its
// default OAuth support (an `authProvider` on the transport, issue 32) against mcp-taskd
// as a protected resource, with a real authorization server (oauth_idp.mjs:
// oauth2-mock-server, headless) as the issuer:
// 1. connect gets 401; the SDK reads the protected-resource metadata, the issuer's
//    metadata, and sends the "user" to authorize (code + PKCE, for our URL); the
//    scripted browser reads the code off the redirect, and the host finishes the
//    authorization and connects again, as the SDK's documentation says;
// 2. it calls a tool and runs a 2025-11-25 task;
// 3. this SDK refreshes only when the server refuses a token, so the issuer mints tokens
//    that mcp-taskd accepts for 15 s (JWT_LIFETIME -15, inside its 30 s clock leeway):
//    once refused, the SDK refreshes, and the new token reads the same task back;
// 4. step-up: a tool needing a scope the token lacks answers 403 insufficient_scope.
//    SDK 1.32.2 answers that with a refresh (which cannot widen the grant), then gives up
//    with "Server returned 403 after trying upscoping": the driver checks exactly that,
//    so that a release that does step up properly shows here.
// Usage: node typescript_sdk1_oauth.mjs BINARY, from a folder where the SDK is installed,
// with MCP_TASKD_NODE and MCP_TASKD_IDP as for python_sdk1_oauth.py.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { startIssuer, startServer } from './oauth_setup.mjs';

const NAME = 'typescript-sdk-1.x-oauth';
const REDIRECT = 'http://127.0.0.1:9/callback';

/** A host's OAuth state, the client registered beforehand (the issuer has no dynamic
 * registration), and a scripted browser that follows the authorization URL to its
 * redirect. */
function host() {
  const state = { logins: 0, code: undefined, tokens: undefined, verifier: undefined };
  let client = { client_id: NAME, redirect_uris: [REDIRECT] };
  state.provider = {
    get redirectUrl() {
      return REDIRECT;
    },
    get clientMetadata() {
      return { client_name: NAME, redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' };
    },
    clientInformation: () => client,
    saveClientInformation: (information) => {
      client = information;
    },
    tokens: () => state.tokens,
    saveTokens: (tokens) => {
      state.tokens = tokens;
    },
    saveCodeVerifier: (verifier) => {
      state.verifier = verifier;
    },
    codeVerifier: () => state.verifier,
    redirectToAuthorization: async (url) => {
      const answer = await fetch(url, { redirect: 'manual' });
      check(answer.status === 302 || answer.status === 303, `authorize: HTTP ${answer.status}`);
      state.code = new URL(answer.headers.get('location')).searchParams.get('code');
      state.logins += 1;
    },
  };
  return state;
}

async function flow(binary, work, children) {
  const issuer = await startIssuer(children, { JWT_LIFETIME: '-15' });
  const url = new URL(await startServer(binary, work, issuer.url, children));
  const oauth = host();

  // 1. The dance: the first connect is refused, the host finishes the authorization.
  const first = new StreamableHTTPClientTransport(url, { authProvider: oauth.provider });
  try {
    await new Client({ name: NAME, version: '1.0.0' }).connect(first);
    throw new Error('connected without a token');
  } catch (error) {
    if (!(error instanceof UnauthorizedError)) throw error;
  }
  check(oauth.logins === 1 && oauth.code, `${oauth.logins} authorizations`);
  await first.finishAuth(oauth.code);
  check(issuer.grants.join() === 'authorization_code mcp:use', `grants: ${issuer.grants}`);

  const client = new Client({ name: NAME, version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(url, { authProvider: oauth.provider }));
  try {
    // 2. A tool, and a task (the SDK runs a tool as a task only once tools/list has
    // said it may).
    const { tools } = await client.listTools();
    check(tools.some((tool) => tool.name === 'guarded'), `tools/list: ${tools.map((t) => t.name)}`);
    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);
    let taskId;
    const stream = client.experimental.tasks.callToolStream({
      name: 'generate_report',
      arguments: { topic: 'oauth', sections: 1 },
    });
    for await (const message of stream) {
      if (message.type === 'taskCreated') taskId = message.task.taskId;
      if (message.type === 'error') throw message.error;
    }
    check(taskId, 'generate_report did not run as a task');

    // 3. Read the task until mcp-taskd refuses the token and the SDK refreshes it.
    const deadline = Date.now() + 30_000;
    while (!issuer.grants.includes('refresh_token mcp:use')) {
      check(Date.now() < deadline, `no refresh within 30 s: grants ${issuer.grants}`);
      const task = await client.experimental.tasks.getTask(taskId);
      check(task.taskId === taskId, `tasks/get: ${JSON.stringify(task)}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const task = await client.experimental.tasks.getTask(taskId);
    check(task.status === 'completed', `after the refresh: ${JSON.stringify(task)}`);
    const report = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    check(report?.structuredContent?.topic === 'oauth', `task result: ${JSON.stringify(report)}`);

    // 4. Step-up, as far as this SDK goes.
    const refusal = await client.callTool({ name: 'guarded', arguments: {} }).then(
      (answer) => `answered ${JSON.stringify(answer)}`,
      (error) => String(error?.message ?? error),
    );
    check(refusal.includes('403 after trying upscoping'), `guarded: ${refusal}`);
    check(oauth.logins === 1, `${oauth.logins} authorizations`);
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
