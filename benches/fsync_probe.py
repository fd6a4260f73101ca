#!/usr/bin/env python3
"""Raw commit-flush probe (../shared/reference/job-queues.md §4.1): one single-row INSERT
per BEGIN IMMEDIATE ... COMMIT on one connection, journal_mode=WAL, synchronous=FULL, for
SECONDS (default 2). Prints one JSON line: commits/s and µs per commit.

    python3 benches/fsync_probe.py [DIR] [SECONDS]   # DIR: where the probe DB lives (same
                                                     # filesystem as the server's data dir)
"""
import json
import os
import sqlite3
import sys
import tempfile
import time

where = sys.argv[1] if len(sys.argv) > 1 else None
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
with tempfile.TemporaryDirectory(dir=where, prefix="fsync-probe-") as tmp:
    conn = sqlite3.connect(os.path.join(tmp, "probe.db"), isolation_level=None)
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    conn.execute("PRAGMA synchronous = FULL")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert (mode, sync) == ("wal", 2), (mode, sync)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (n,))
        conn.execute("COMMIT")
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            break
    conn.close()
elapsed = now - start
print(json.dumps({
    "probe": "sqlite WAL+FULL single-row commit",
    "sqlite": sqlite3.sqlite_version,
    "commits": n,
    "seconds": round(elapsed, 3),
    "commits_per_s": round(n / elapsed, 1),
    "us_per_commit": round(elapsed / n * 1e6, 1),
}))
