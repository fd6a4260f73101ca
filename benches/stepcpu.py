#!/usr/bin/env python3
"""Runs a load-generator command and records where the box's CPU went meanwhile.

    stepcpu.py SERVER_PID OUT.cpu -- COMMAND [ARGS...]

Writes one JSON line to OUT.cpu: the step's wall time and, in cores (CPU-seconds per
second), the whole box's busy time, the server process's, the load generator's (the
command and its children) and everything else's ("others": other users of the machine,
the best sign of a disturbed step), and the steal time the hypervisor reports (zero
where it reports none). The command's stdout and exit status pass through.
"""
import json
import os
import resource
import subprocess
import sys
import time

pid, out, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
if rest[:1] == ["--"]:
    rest = rest[1:]
HZ = os.sysconf("SC_CLK_TCK")


def box():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    # busy: all but idle, iowait and steal (time the hypervisor gave to someone else)
    return (sum(f[:8]) - f[3] - f[4] - f[7]) / HZ, f[7] / HZ


def server():
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / HZ
    except OSError:
        return float("nan")


def children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


(b0, st0), s0, c0, t0 = box(), server(), children(), time.monotonic()
status = subprocess.run(rest).returncode
(b1, st1), s1, c1, t1 = box(), server(), children(), time.monotonic()
wall = t1 - t0
cores = {k: round(v / wall, 3) for k, v in
         {"box": b1 - b0, "server": s1 - s0, "loadgen": c1 - c0, "steal": st1 - st0}.items()}
cores["others"] = round(max(0.0, cores["box"] - cores["server"] - cores["loadgen"]), 3)
with open(out, "w") as f:
    f.write(json.dumps({"wall_s": round(wall, 3), "server_cpu_s": round(s1 - s0, 3),
                        "cores": cores}) + "\n")
sys.exit(status)
