// TypeScript SDK @modelcontextprotocol/sdk 1.x StdioClientTransport launching
// `mcp-taskd stdio` (legacy era, 2025-11-25), as a desktop host does: initialize,
// tools/list, echo, and generate_report called plainly (callTool), which a task tool
// answers inline within the call.
// Usage: node typescript_sdk1_stdio.mjs COMMAND [ARG...], from a folder where the SDK is
// installed; COMMAND [ARG...] is the command line to launch (`mcp-taskd stdio --data-dir
// DIR`, or `mcp-taskd stdio --connect URL` for the relay).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const NAME = process.argv.includes('--connect') ? 'typescript-sdk-1.x-relay' : 'typescript-sdk-1.x-stdio';

async function flow([command, ...args]) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(
    new StdioClientTransport({ command, args, stderr: 'inherit' }),
  );
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    check(names.includes('echo') && names.includes('generate_report'), `tools/list: ${names}`);

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);

    const report = await client.callTool({
      name: 'generate_report',
      arguments: { topic: 'interop', sections: 1 },
    });
    check(!report.isError && report.structuredContent?.topic === 'interop', `generate_report: ${JSON.stringify(report)}`);
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
  await Promise.race([flow(process.argv.slice(2)), timeout]);
  console.log(`PASS ${NAME}`);
  process.exit(0);
} catch (error) {
  console.log(`FAIL ${NAME}: ${oneLine(error)}`);
  process.exit(1);
}
