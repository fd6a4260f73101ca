#!/usr/bin/env python3
"""A "dashboard open" poller for benches/dashboard.sh, and the script's summary.

  dashpoll.py poll BASE_URL OUT_FILE    until SIGTERM: once a second, what the page's
                                        timer does (crates/server/src/dashboard/assets/app.js)
  dashpoll.py summary RESULTS_DIR       per-round figures, medians, same-run ratio

The page polls only the view on screen: `api/overview` on the overview, `api/tasks?limit=25`
on the task list (no filter, newest page), `api/tasks/{id}` on a task. The poller asks for
the overview and the newest task page every second, as two open tabs would: an upper bound
for one open page. Like a browser it keeps one connection open, sends
`Accept: application/json`, and reads each body in full. Each line of OUT_FILE is one
request: `path status milliseconds bytes`.
"""
import glob
import http.client
import json
import os
import re
import signal
import statistics
import sys
import time
import urllib.parse

PATHS = ["api/overview", "api/tasks?limit=25"]


def poll(base, out_file):
    url = urllib.parse.urlsplit(base.rstrip("/") + "/")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    conn = None
    with open(out_file, "w", buffering=1) as out:
        next_tick = time.monotonic()
        while not stop:
            for path in PATHS:
                start = time.monotonic()
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
                    conn.request("GET", url.path + path, headers={"Accept": "application/json"})
                    resp = conn.getresponse()
                    body = resp.read()
                    status = resp.status
                except (OSError, http.client.HTTPException):
                    conn = None
                    status, body = 0, b""
                ms = (time.monotonic() - start) * 1000
                out.write(f"{path} {status} {ms:.2f} {len(body)}\n")
            next_tick += 1.0
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_tick = time.monotonic()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(out):
    rounds = {}
    for f in sorted(glob.glob(os.path.join(out, "r*-*.e2e"))):
        m = re.match(r"r(\d+)-(with|without)\.e2e$", os.path.basename(f))
        if not m:
            continue
        try:
            d = json.loads(open(f).read())
        except ValueError:
            continue
        rounds.setdefault(int(m.group(1)), {})[m.group(2)] = d["tasks_per_s"]
    print("round | without (tasks/s) | with dashboard (tasks/s) | with/without")
    ratios = []
    for r, v in sorted(rounds.items()):
        if "with" in v and "without" in v:
            ratios.append(v["with"] / v["without"])
            print(f"{r} | {v['without']:,.0f} | {v['with']:,.0f} | {ratios[-1]:.3f}")
    both = [v for v in rounds.values() if "with" in v and "without" in v]
    if both:
        mw = statistics.median(v["without"] for v in both)
        mx = statistics.median(v["with"] for v in both)
        print(f"median | {mw:,.0f} | {mx:,.0f} | {statistics.median(ratios):.3f} "
              f"(median of per-round ratios; ratio of medians {mx / mw:.3f})")
    lat = {}
    bad = 0
    for f in glob.glob(os.path.join(out, "r*-with.poll")):
        for line in open(f):
            parts = line.split()
            if len(parts) != 4:
                continue
            if parts[1] != "200":
                bad += 1
            lat.setdefault(parts[0], []).append(float(parts[2]))
    for path, ms in sorted(lat.items()):
        print(f"poller {path}: {len(ms)} requests, p50 {pct(ms, 50):.1f} ms, "
              f"p90 {pct(ms, 90):.1f} ms, max {max(ms):.1f} ms")
    print(f"poller non-200 answers: {bad}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "poll":
        poll(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        summary(sys.argv[2])
    else:
        sys.exit(__doc__)
