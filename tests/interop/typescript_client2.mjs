// TypeScript @modelcontextprotocol/client 2.x in its default mode (versionNegotiation
// 'legacy': a plain 2025-11-25 initialize, no server/discover probe): tools/list and echo.
// Usage: node typescript_client2.mjs URL, from a folder where the client is installed.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const NAME = 'typescript-client-2.x';

async function flow(url) {
  const client = new Client({ name: 'mcp-taskd-interop', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const { tools } = await client.listTools();
    const names = tools.map((tool) => tool.name);
    check(names.includes('echo'), `tools/list: ${names}`);

    const echo = await client.callTool({ name: 'echo', arguments: { text: 'hello' } });
    check(!echo.isError && echo.content[0].text === 'hello', `echo: ${JSON.stringify(echo)}`);
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
