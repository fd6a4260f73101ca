// MCP Inspector CLI 2.x with default options (an ad-hoc URL target: Streamable HTTP,
// legacy era): `--method tools/list`, then `--method tools/call --tool-name echo`.
// Each is one run of the CLI, as a shell or CI job uses it; it prints the result as JSON.
// Usage: node inspector_cli.mjs URL, from a folder where the Inspector is installed.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const NAME = 'inspector-cli';
const INSPECTOR = fileURLToPath(
  new URL('./node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js', import.meta.url),
);

async function inspector(url, ...args) {
  try {
    const run = promisify(execFile);
    const { stdout } = await run(process.execPath, [INSPECTOR, '--cli', url, ...args], { timeout: 30_000 });
    return JSON.parse(stdout);
  } catch (error) {
    // The CLI reports a failure as a JSON envelope on stderr and a non-zero exit.
    throw new Error(`${args.join(' ')}: ${(error.stderr || error.message).trim()}`);
  }
}

async function flow(url) {
  const { tools } = await inspector(url, '--method', 'tools/list');
  const names = tools.map((tool) => tool.name);
  check(names.includes('echo'), `tools/list: ${names}`);

  const echo = await inspector(url, '--method', 'tools/call', '--tool-name', 'echo', '--tool-arg', 'text=hello');
  check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(error) {
  return String(error?.message ?? error).replaceAll('\n', ' ').slice(0, 300);
}

try {
  await flow(process.argv[2]);
  console.log(`PASS ${NAME}`);
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exit(1);
}
