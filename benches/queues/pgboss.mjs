// pg-boss driver for benches/queues.sh (run from the bench cache, where node_modules
// holds pg-boss at the version queues.sh pins).
//
//   node pgboss.mjs setup   URL                       schema and the queue `noop`
//   node pgboss.mjs enqueue URL N PRODUCERS           one send() a call, PRODUCERS at once
//   node pgboss.mjs work    URL N CONCURRENCY         until N no-op jobs are completed
//
// pg-boss's defaults otherwise (jobs durable at commit, completed jobs kept). Its worker
// default (batchSize 1, one fetch loop, a 2 s pause after every fetch) runs ~0.5 jobs/s:
// the worker here fetches CONCURRENCY jobs at a time (batchSize), at most that many in
// flight as with mcp-taskd's 8 worker threads, and fetches again at once while batches
// come back full (burstWhenBatchFull); the queue is created with `notify: true`, pg-boss's
// LISTEN/NOTIFY wake-up, so that a waiting worker hears of new jobs. Producers share one
// pool of 16 connections, as many as mcp-taskd's store.pool_size.
import pg from "pg";
import { PgBoss } from "pg-boss";
import { cpuMs, pendingGone, producers, report } from "./common.mjs";

const [mode, url, n, conc] = process.argv.slice(2);
const N = Number(n);

if (mode === "setup") {
  const boss = new PgBoss({ connectionString: url });
  boss.on("error", (e) => console.error(e));
  await boss.start();
  await boss.createQueue("noop", { notify: true });
  await boss.stop();
} else if (mode === "enqueue") {
  const boss = new PgBoss({ connectionString: url, max: 16 });
  boss.on("error", (e) => console.error(e));
  await boss.start();
  const started = Date.now();
  await producers(N, Number(conc), () => boss.send("noop", {}));
  report({ n: N, start_ms: started, end_ms: Date.now() });
  await boss.stop();
} else if (mode === "work") {
  const boss = new PgBoss({ connectionString: url });
  boss.on("error", (e) => console.error(e));
  let done = 0;
  let finished;
  const allRun = new Promise((resolve) => (finished = resolve));
  await boss.start();
  await boss.work("noop", { batchSize: Number(conc), burstWhenBatchFull: true }, async (jobs) => {
    done += jobs.length;
    if (done >= N) finished();
  });
  console.error(`ready ${cpuMs()}`);
  await allRun;
  const probe = new pg.Client({ connectionString: url });
  await probe.connect();
  const last = await pendingGone(probe, "SELECT count(*)::int AS n FROM pgboss.job WHERE state <> 'completed'");
  report({ n: N, last_ms: last });
  await probe.end();
  await boss.stop({ graceful: true, wait: true });
} else {
  throw new Error(`unknown mode ${mode}`);
}
