// A real OAuth 2 authorization server as the referee of mcp-taskd's resource-server side
// (issue 32): oauth2-mock-server (npm; OpenID Connect discovery, a JWKS, RS256 tokens
// from its /token endpoint) issues the tokens, and mcp-taskd, started here with
// [auth.oauth] naming it, must accept exactly the right ones.
// - no token: 401 naming the protected-resource metadata, which names the issuer;
// - a client_credentials token for the resource (aud = the MCP URL): served, as its `sub`;
// - a token for another audience, an expired one, and one signed by another issuer's key
//   with the same `iss`: 401 invalid_token;
// - a tool call needing a scope the token lacks: 403 insufficient_scope naming it.
// Usage: node oauth2_mock_server.mjs BINARY, from a folder where oauth2-mock-server is
// installed.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { OAuth2Server } from 'oauth2-mock-server';

const NAME = 'oauth2-mock-server';
const VERSION = '2026-07-28';

async function flow(binary, work) {
  const issuer = new OAuth2Server();
  await issuer.issuer.keys.generate('RS256');
  await issuer.start(0, '127.0.0.1');
  const impostor = new OAuth2Server();
  await impostor.issuer.keys.generate('RS256');
  await impostor.start(0, '127.0.0.1');
  const server = { child: undefined };
  try {
    writeFileSync(
      join(work, 'config.toml'),
      `[auth.oauth]\nissuer = "${issuer.issuer.url}"\nscopes_supported = ["mcp:use"]\n\n` +
        '[[tools]]\nname = "guarded"\ndescription = "needs deploy:write"\n' +
        'command = ["/bin/cat"]\nscopes = ["deploy:write"]\ntask_policy = "inline"\n',
    );
    const url = await start(binary, work, server);
    const resource = url;

    const call = (token, method, params = {}) =>
      fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': VERSION,
          'mcp-method': method,
          ...(method === 'tools/call' ? { 'mcp-name': params.name } : {}),
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method,
          params: {
          ...params,
          _meta: {
            'io.modelcontextprotocol/protocolVersion': VERSION,
            'io.modelcontextprotocol/clientCapabilities': {},
          },
        },
        }),
      });

    // 1. No token: the challenge names the metadata, which names the issuer.
    const bare = await call(undefined, 'tools/list');
    check(bare.status === 401, `no token: HTTP ${bare.status}`);
    const challenge = bare.headers.get('www-authenticate') ?? '';
    const metadataUrl = /resource_metadata="([^"]+)"/.exec(challenge)?.[1];
    check(metadataUrl, `challenge without resource_metadata: ${challenge}`);
    const metadata = await (await fetch(metadataUrl)).json();
    check(metadata.resource === resource, `metadata resource: ${JSON.stringify(metadata)}`);
    check(
      metadata.authorization_servers?.includes(issuer.issuer.url),
      `metadata authorization_servers: ${JSON.stringify(metadata)}`,
    );

    // 2. A token the issuer minted for this resource, through its /token endpoint.
    const token = async (from, claims) => {
      from.service.once('beforeTokenSigning', (minted) => Object.assign(minted.payload, claims));
      const answer = await fetch(`${from.issuer.url}/token`, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from('host:secret').toString('base64')}`,
        },
        body: 'grant_type=client_credentials&scope=mcp%3Ause',
      });
      return (await answer.json()).access_token;
    };
    const good = await token(issuer, { aud: resource, sub: 'alice' });
    const listed = await call(good, 'tools/list');
    const listedText = await listed.text();
    check(listed.status === 200, `good token: HTTP ${listed.status} ${listedText}`);
    const tools = JSON.parse(listedText).result?.tools ?? [];
    check(tools.some((tool) => tool.name === 'guarded'), `tools/list: ${JSON.stringify(tools)}`);

    // 3. Tokens that must not pass.
    const now = Math.floor(Date.now() / 1000);
    const refused = {
      'another audience': await token(issuer, { aud: 'https://elsewhere.example/mcp', sub: 'alice' }),
      expired: await token(issuer, { aud: resource, sub: 'alice', iat: now - 7200, nbf: now - 7200, exp: now - 3600 }),
      "another key, the issuer's name": await token(impostor, {
        aud: resource,
        sub: 'alice',
        iss: issuer.issuer.url,
      }),
    };
    for (const [why, bad] of Object.entries(refused)) {
      const answer = await call(bad, 'tools/list');
      const header = answer.headers.get('www-authenticate') ?? '';
      check(answer.status === 401 && header.includes('invalid_token'), `${why}: HTTP ${answer.status} ${header}`);
    }

    // 4. A scope the token lacks: 403 naming it, one challenge for the step-up.
    const denied = await call(good, 'tools/call', { name: 'guarded', arguments: {} });
    const stepUp = denied.headers.get('www-authenticate') ?? '';
    check(
      denied.status === 403 && stepUp.includes('insufficient_scope') && stepUp.includes('deploy:write'),
      `missing scope: HTTP ${denied.status} ${stepUp}`,
    );
  } finally {
    server.child?.kill();
    await issuer.stop();
    await impostor.stop();
  }
}

/** Starts `binary serve` on `work` and resolves with its MCP URL. */
function start(binary, work, server) {
  const child = spawn(
    binary,
    ['serve', '--config', join(work, 'config.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(work, 'data')],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  server.child = child;
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`mcp-taskd exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const match = /listening on (http:\S+)/.exec(line);
      if (match) resolve(match[1]);
    });
  });
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(error) {
  return String(error?.message ?? error).replaceAll('\n', ' ').slice(0, 300);
}

const work = mkdtempSync(join(tmpdir(), 'mcp-taskd-oauth-'));
const timeout = new Promise((_, reject) => {
  setTimeout(() => reject(new Error('timed out after 30 s')), 30_000).unref();
});
try {
  await Promise.race([flow(process.argv[2], work), timeout]);
  console.log(`PASS ${NAME}`);
  process.exitCode = 0;
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exitCode = 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
process.exit();
