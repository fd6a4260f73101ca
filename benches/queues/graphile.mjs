// graphile-worker driver for benches/queues.sh (run from the bench cache, where
// node_modules holds graphile-worker and pg at the versions queues.sh pins).
//
//   node graphile.mjs setup   URL
//   node graphile.mjs enqueue URL N PRODUCERS        one addJob a call, PRODUCERS at once
//   node graphile.mjs work    URL N CONCURRENCY      until N no-op jobs are done
//
// The library's defaults otherwise: jobs are durable at commit (PostgreSQL's
// synchronous_commit), LISTEN/NOTIFY wakes the runner, pollInterval 2 s, no local queue.
// Producers share one pool of 16 connections, as many as mcp-taskd's store.pool_size.
// Its log is cut to warnings and errors: by default it writes a line to stdout for every
// job completed, which mcp-taskd does not do.
import pg from "pg";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";
import { cpuMs, pendingGone, producers, report } from "./common.mjs";

const [mode, url, n, conc] = process.argv.slice(2);
const N = Number(n);
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`${level}: ${message}`);
});

if (mode === "setup") {
  await runMigrations({ connectionString: url, logger });
} else if (mode === "enqueue") {
  const pgPool = new pg.Pool({ connectionString: url, max: 16 });
  pgPool.on("error", (e) => console.error(e));
  pgPool.on("connect", (client) => client.on("error", (e) => console.error(e)));
  const utils = await makeWorkerUtils({ pgPool, logger });
  const started = Date.now();
  await producers(N, Number(conc), () => utils.addJob("noop", {}));
  report({ n: N, start_ms: started, end_ms: Date.now() });
  await utils.release();
  await pgPool.end();
} else if (mode === "work") {
  let done = 0;
  let finished;
  const allRun = new Promise((resolve) => (finished = resolve));
  const runner = await run({
    connectionString: url,
    concurrency: Number(conc),
    noHandleSignals: true,
    logger,
    taskList: {
      noop: async () => {
        if (++done === N) finished();
      },
    },
  });
  console.error(`ready ${cpuMs()}`);
  await allRun;
  // A job counts once its completion is committed: graphile-worker deletes the row.
  const probe = new pg.Client({ connectionString: url });
  await probe.connect();
  const last = await pendingGone(probe, "SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
  report({ n: N, last_ms: last });
  await probe.end();
  await runner.stop();
} else {
  throw new Error(`unknown mode ${mode}`);
}
