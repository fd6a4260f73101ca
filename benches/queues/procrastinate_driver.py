"""procrastinate driver for benches/queues.sh (run with the bench cache's virtualenv,
which holds procrastinate and psycopg at the versions queues.sh pins).

    python procrastinate_driver.py setup   URL                   the schema
    python procrastinate_driver.py enqueue URL N PRODUCERS      one defer a call, PRODUCERS at once
    python procrastinate_driver.py work    URL N CONCURRENCY    until N no-op jobs have succeeded

procrastinate's defaults otherwise: jobs durable at commit, LISTEN/NOTIFY wakes the
worker (listen_notify on, fetch_job_polling_interval 5 s), finished jobs kept
(delete_jobs "never"). Producers share one pool of 16 connections, as many as
mcp-taskd's store.pool_size; the worker's pool holds 10, as graphile-worker's and
pg-boss's do by default (psycopg_pool's own default is 4).
"""

import asyncio
import json
import sys
import time

import procrastinate

PENDING = "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'"


def now_ms():
    return int(time.time() * 1000)


async def main(mode, url, n=0, conc=0):
    pool_size = 16 if mode == "enqueue" else 10
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=url, min_size=pool_size, max_size=pool_size)
    )
    done = 0
    all_run = asyncio.Event()

    @app.task(name="noop")
    async def noop():
        nonlocal done
        done += 1
        if done == n:
            all_run.set()

    async with app.open_async():
        if mode == "setup":
            await app.schema_manager.apply_schema_async()
        elif mode == "enqueue":
            remaining = n

            async def producer():
                nonlocal remaining
                while remaining > 0:
                    remaining -= 1
                    await noop.defer_async()

            started = now_ms()
            await asyncio.gather(*(producer() for _ in range(conc)))
            print(json.dumps({"n": n, "start_ms": started, "end_ms": now_ms()}), flush=True)
        elif mode == "work":
            worker = asyncio.create_task(app.run_worker_async(concurrency=conc, install_signal_handlers=False))
            print(f"ready {round(time.process_time() * 1000)}", file=sys.stderr, flush=True)
            await all_run.wait()
            # A job counts once its success is committed.
            while True:
                rows = await app.connector.execute_query_all_async(PENDING)
                if rows[0]["count"] == 0:
                    break
                await asyncio.sleep(0.01)
            print(json.dumps({"n": n, "last_ms": now_ms()}), flush=True)
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
        else:
            raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], *(int(a) for a in args[2:])))
