// What the Node drivers doing the whole OAuth dance share: the authorization server
// (oauth_idp.mjs, oauth2-mock-server) and mcp-taskd naming it in [auth.oauth], each a
// child process pushed onto `children` for the driver to stop. Copied beside each driver
// by .ci/interop.sh.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** oauth_idp.mjs (MCP_TASKD_IDP) with `env` added; resolves with its URL and the GRANT
 * lines it prints, collected as they come. */
export function startIssuer(children, env = {}) {
  const child = spawn(process.env.MCP_TASKD_NODE ?? process.execPath, [process.env.MCP_TASKD_IDP], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  children.push(child);
  const grants = [];
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`the issuer exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.startsWith('ISSUER ')) resolve({ url: line.split(' ')[1], grants });
      if (line.startsWith('GRANT ')) grants.push(line.slice('GRANT '.length));
    });
  });
}

/** `binary serve` (the demo tools, and `guarded`, which needs deploy:write) with
 * `issuer` in [auth.oauth]; resolves with its MCP URL. */
export function startServer(binary, work, issuer, children) {
  writeFileSync(
    join(work, 'config.toml'),
    `[auth.oauth]\nissuer = "${issuer}"\nscopes_supported = ["mcp:use"]\n\n` +
      '[[tools]]\nname = "guarded"\ndescription = "needs deploy:write"\ntask_policy = "inline"\n' +
      'scopes = ["deploy:write"]\ncommand = ["/bin/cat"]\n',
  );
  const child = spawn(
    binary,
    ['serve', '--config', join(work, 'config.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(work, 'data')],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  children.push(child);
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`mcp-taskd exited with ${code}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const match = /listening on (http:\S+)/.exec(line);
      if (match) resolve(match[1]);
    });
  });
}
