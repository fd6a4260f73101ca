#!/bin/sh
# A command tool that reports where it may write and what it can see (.ci/sandbox.sh).
cat >/dev/null
try() { if ( : >"$1/.probe" ) 2>/dev/null; then rm -f "$1/.probe"; echo "$2=writable"; else echo "$2=read-only"; fi; }
{
  try "$PWD" cwd
  try /var/lib/mcp-taskd data_dir
  try /tmp tmp
  try /etc/mcp-taskd config_dir
  try /usr/local usr_local
  [ -e /root/.bashrc ] || [ -n "$(ls -A /home 2>/dev/null)" ] && echo homes=visible || echo homes=hidden
  [ -e /proc/cpuinfo ] && echo proc_subset=all || echo proc_subset=pid
  echo "processes_seen=$(find /proc -maxdepth 1 -name "[0-9]*" | wc -l)"
  echo "uid=$(id -u)"
} | tr '\n' ' ' | sed 's/ $//' | { read -r line; printf '{"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$line"; }
