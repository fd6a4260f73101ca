#!/usr/bin/python3
"""Runs a command under the seccomp part of systemd/mcp-taskd.service, for hosts where
systemd cannot start the unit (.ci/sandbox.sh). Needs Debian's python3-seccomp.

    seccomp_exec.py [--strict] -- COMMAND [ARG...]

Mirrors, with libseccomp and the syscall groups of `systemd-analyze syscall-filter`:
  SystemCallFilter=@system-service, SystemCallFilter=~@privileged @resources,
  SystemCallErrorNumber=EPERM, SystemCallArchitectures=native,
  RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX, RestrictNamespaces=yes,
  LockPersonality=yes, RestrictSUIDSGID=yes (and RestrictRealtime=yes, which
  ~@resources covers); with --strict also MemoryDenyWriteExecute=yes (strict.conf).
"""
import errno
import os
import socket
import subprocess
import sys

import seccomp

CLONE_NEW = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
PROT_WRITE, PROT_EXEC = 0x2, 0x4
SUID_SGID = 0o6000


def groups():
    """Every syscall group systemd knows, as {name: [members]} (members may be groups)."""
    text = subprocess.run(["systemd-analyze", "syscall-filter"], check=True,
                          capture_output=True, text=True).stdout
    table, current = {}, None
    for line in text.splitlines():
        if line.startswith("@"):
            current = table.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return table


def expand(name, table):
    names = set()
    for member in table.get(name, []):
        names |= expand(member, table) if member.startswith("@") else {member}
    return names


def main():
    args = sys.argv[1:]
    strict = args[:1] == ["--strict"]
    args = args[1:] if strict else args
    if args[:1] == ["--"]:
        args = args[1:]
    table = groups()
    allowed = expand("@system-service", table) - expand("@privileged", table) - expand("@resources", table)
    # Calls allowed only with some arguments (the rules below), or not at all.
    conditional = {"socket", "clone", "clone3", "unshare", "setns", "personality",
                   "chmod", "fchmod", "fchmodat", "fchmodat2"}
    if strict:
        conditional |= {"mmap", "mprotect", "pkey_mprotect", "shmat"}
    rules = seccomp.SyscallFilter(defaction=seccomp.ERRNO(errno.EPERM))
    for name in sorted(allowed - conditional):
        try:
            rules.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError):
            pass  # a name this libseccomp does not know (or not on this architecture)
    A = seccomp.Arg
    for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6):
        rules.add_rule(seccomp.ALLOW, "socket", A(0, seccomp.EQ, family))
    rules.add_rule(seccomp.ALLOW, "clone", A(0, seccomp.MASKED_EQ, CLONE_NEW, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # as systemd: glibc falls back to clone
    for persona in (0, 0xFFFFFFFF):  # PER_LINUX, or a query
        rules.add_rule(seccomp.ALLOW, "personality", A(0, seccomp.EQ, persona))
    rules.add_rule(seccomp.ALLOW, "chmod", A(1, seccomp.MASKED_EQ, SUID_SGID, 0))
    rules.add_rule(seccomp.ALLOW, "fchmod", A(1, seccomp.MASKED_EQ, SUID_SGID, 0))
    rules.add_rule(seccomp.ALLOW, "fchmodat", A(2, seccomp.MASKED_EQ, SUID_SGID, 0))
    if strict:
        for prot in (0, PROT_WRITE, PROT_EXEC):  # never both
            rules.add_rule(seccomp.ALLOW, "mmap", A(2, seccomp.MASKED_EQ, PROT_WRITE | PROT_EXEC, prot))
        rules.add_rule(seccomp.ALLOW, "mprotect", A(2, seccomp.MASKED_EQ, PROT_EXEC, 0))
        rules.add_rule(seccomp.ALLOW, "pkey_mprotect", A(2, seccomp.MASKED_EQ, PROT_EXEC, 0))
    else:
        for name in ("mmap", "mprotect", "pkey_mprotect", "shmat"):
            rules.add_rule(seccomp.ALLOW, name)
    rules.load()  # sets no_new_privs first
    os.execvp(args[0], args)


if __name__ == "__main__":
    main()
