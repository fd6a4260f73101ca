// A certified OpenID provider as the authorization server of the drivers that do the
// whole OAuth dance (issue 32): npm `oidc-provider` (panva; OpenID Certified), set up as
// an MCP deployment would set it up:
// - dynamic client registration (RFC 7591), open: clients register themselves;
// - resource indicators (RFC 8707): an access token names the resource it was asked
//   for in `aud`, as a JWT (RFC 9068) signed RS256, scopes `mcp:use` and `deploy:write`;
// - PKCE required; refresh tokens for clients that may use them;
// - introspection (RFC 7662) for the confidential client `mcp-taskd` (secret
//   `introspection secret`), so that a resource server can check opaque tokens: a
//   resource indicator ending in `?format=opaque` (removed from the audience) gets
//   opaque ones;
// - its development login and consent pages (`devInteractions`), which a driver fills
//   in over plain HTTP as the user would;
// - ACCESS_TOKEN_TTL seconds per access token (default 3600);
// - KEYS (default 1) RS256 signing keys, of which the first signs; `rotate` on stdin
//   makes a fresh key the signing one (the old ones still served, as a provider rolling
//   its keys does; clients, grants and tokens are kept), then prints ROTATED.
// Prints `ISSUER <url>` once listening; stops when its stdin closes.
// Usage: node oidc_provider.mjs, from a folder where oidc-provider is installed.
import { createServer } from 'node:http';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import Provider from 'oidc-provider';
// Its in-memory storage, shared by the provider objects a rotation creates (each would
// otherwise start empty and forget the clients registered so far). Internals of the
// pinned version (9.13.3), for a test only.
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';
import LRU from 'oidc-provider/lib/helpers/lru.js';

const OPAQUE = '?format=opaque';
const accessTokenTtl = Number(process.env.ACCESS_TOKEN_TTL ?? 3600);

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

const storage = new LRU({ maxSize: 1000 });
const keys = Array.from({ length: Number(process.env.KEYS ?? 1) }, signingKey);
const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;
let provider;

function start() {
  provider = new Provider(issuer, {
    adapter: (model) => new MemoryAdapter(model, storage),
    clients: [
      {
        client_id: 'mcp-taskd',
        client_secret: 'introspection secret',
        grant_types: [],
        redirect_uris: [],
        response_types: [],
      },
    ],
    jwks: { keys },
    scopes: ['openid', 'offline_access', 'mcp:use', 'deploy:write'],
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      introspection: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'mcp:use deploy:write',
          audience: resource.endsWith(OPAQUE) ? resource.slice(0, -OPAQUE.length) : resource,
          accessTokenTTL: accessTokenTtl,
          accessTokenFormat: resource.endsWith(OPAQUE) ? 'opaque' : 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    // Every client that may refresh gets a refresh token, offline_access or not (the
    // MCP SDKs do not ask for it).
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  });
  // Why a request was refused, on stderr (the driver shows it when it fails).
  for (const event of ['authorization.error', 'grant.error', 'registration_create.error', 'introspection.error']) {
    provider.on(event, (_ctx, error) => console.error(`oidc-provider ${event}: ${error.message} ${error.error_detail ?? ''}`));
  }
  server.removeAllListeners('request');
  server.on('request', provider.callback());
}
start();

console.log(`ISSUER ${issuer}`);
const input = createInterface({ input: process.stdin });
input.on('line', (line) => {
  if (line.trim() === 'rotate') {
    keys.unshift(signingKey());
    start();
    console.log('ROTATED');
  }
});
input.on('close', () => {
  server.close();
  process.exit(0);
});
