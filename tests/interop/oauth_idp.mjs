// A headless authorization server for the drivers of real clients doing the whole OAuth
// dance against mcp-taskd (issue 32): oauth2-mock-server (npm), which answers
// /authorize with an immediate redirect carrying a code (no login page to script), made
// to mint what a real provider mints:
// - an authorization code grants the scopes /authorize was asked for, for the resource
//   it named (RFC 8707: `aud` = the MCP server's URL), to the subject `alice`;
// - a refresh token grants the same again, as a new access token;
// - each access token says it expires in EXPIRES_IN seconds (default 3600), so that a
//   client that watches the clock refreshes when the driver wants it to;
// - its `exp` is JWT_LIFETIME seconds after issue (default 3600). A negative lifetime
//   makes tokens that a resource server accepts only for what is left of its clock
//   leeway (mcp-taskd's is 30 s): for clients that refresh only once refused.
// - ID_TOKEN_CLAIMS (JSON) are added to each ID token (the dashboard's sign-in reads
//   its roles there).
// Prints `ISSUER <url>` once listening, then one line per grant (`GRANT <grant_type>
// <scope>`) for the driver to count; stops when its stdin closes.
// Usage: node oauth_idp.mjs, from a folder where oauth2-mock-server is installed.
import { createInterface } from 'node:readline';
import { OAuth2Server } from 'oauth2-mock-server';

const expiresIn = Number(process.env.EXPIRES_IN ?? 3600);
const jwtLifetime = Number(process.env.JWT_LIFETIME ?? 3600);
const idTokenClaims = JSON.parse(process.env.ID_TOKEN_CLAIMS ?? '{}');
const server = new OAuth2Server();
await server.issuer.keys.generate('RS256');
await server.start(0, '127.0.0.1');

const byCode = new Map(); // code -> { scope, resource }
const byRefresh = new Map(); // refresh token -> { scope, resource }

server.service.on('beforeAuthorizeRedirect', (redirect, req) => {
  const code = redirect.url.searchParams.get('code');
  if (code) {
    byCode.set(code, { scope: req.query.scope ?? '', resource: req.query.resource });
  }
});

// What the token request is for: its code's grant, or its refresh token's.
const grantOf = (body) =>
  body.grant_type === 'authorization_code'
    ? byCode.get(body.code)
    : body.grant_type === 'refresh_token'
      ? byRefresh.get(body.refresh_token)
      : undefined;

server.service.on('beforeTokenSigning', (token, req) => {
  const grant = grantOf(req.body);
  // The ID token is signed too; only the access token carries a scope.
  if (!('scope' in token.payload)) {
    Object.assign(token.payload, idTokenClaims);
  } else if (grant) {
    Object.assign(token.payload, {
      sub: 'alice',
      scope: grant.scope,
      aud: grant.resource,
      exp: token.payload.iat + jwtLifetime,
    });
  }
});

server.service.on('beforeResponse', (response, req) => {
  const grant = grantOf(req.body);
  if (response.statusCode !== 200 || !grant) {
    return;
  }
  if (req.body.grant_type === 'authorization_code') {
    byCode.delete(req.body.code);
  } else {
    byRefresh.delete(req.body.refresh_token);
  }
  byRefresh.set(response.body.refresh_token, grant);
  Object.assign(response.body, { scope: grant.scope, expires_in: expiresIn });
  console.log(`GRANT ${req.body.grant_type} ${grant.scope}`);
});

console.log(`ISSUER ${server.issuer.url}`);
createInterface({ input: process.stdin }).on('close', async () => {
  await server.stop();
  process.exit(0);
});
