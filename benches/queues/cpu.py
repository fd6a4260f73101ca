"""CPU time for benches/queues.sh, in ms of user + system time, read from /proc.

    python3 cpu.py pid PID             one live process
    python3 cpu.py cluster PIDFILE     a PostgreSQL cluster: the postmaster, its live
                                       children, and the children it has reaped

Sampled before and after a step, the difference is the CPU the step cost, backends that
connected and left during it included (the postmaster's reaped-children times).
"""

import os
import sys

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def stat(pid):
    """(ppid, utime, stime, cutime, cstime) in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])


def cluster_ticks(postmaster):
    _, utime, stime, cutime, cstime = stat(postmaster)
    total = utime + stime + cutime + cstime
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid, u, s, _, _ = stat(int(entry))
        except (OSError, IndexError, ValueError):
            continue  # gone since the listing
        if ppid == postmaster:
            total += u + s
    return total


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    if mode == "pid":
        _, utime, stime, _, _ = stat(int(arg))
        print(round((utime + stime) * TICK_MS))
    elif mode == "cluster":
        with open(arg) as f:
            postmaster = int(f.readline())
        print(round(cluster_ticks(postmaster) * TICK_MS))
    else:
        raise SystemExit(f"unknown mode {mode}")
