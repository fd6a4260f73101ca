// Shared by the Node drivers of benches/queues.sh.

// Runs `enqueue` N times from PRODUCERS concurrent loops, each one call at a time.
export async function producers(n, concurrency, enqueue) {
  let next = 0;
  const loop = async () => {
    while (next < n) {
      next++;
      await enqueue();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
}

// Polls SQL (one row, column n) every 10 ms until it answers 0; returns that moment (ms).
export async function pendingGone(client, sql) {
  for (;;) {
    const { rows } = await client.query(sql);
    if (rows[0].n === 0) return Date.now();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

export function report(result) {
  process.stdout.write(JSON.stringify(result) + "\n");
}

// CPU time this process has used so far, user + system, in ms.
export function cpuMs() {
  const { user, system } = process.cpuUsage();
  return Math.round((user + system) / 1000);
}
