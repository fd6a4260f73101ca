#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL (and libfaketime) is installed for the PostgreSQL tests (tests/cluster.rs
# and the integration suite's postgres pass) and prints its bin dir (initdb, pg_ctl,
# psql). The tests start their own throwaway clusters: no server is started here, and
# the package's default cluster is not created.
#   MCP_TASKD_PG_BIN="$(.ci/postgres.sh)"
set -euo pipefail

bin_dir() {
  local dir
  if dir="$(pg_config --bindir 2>/dev/null)" && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
    echo "$dir"
    return
  fi
  for dir in $(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
      echo "$dir"
      return
    fi
  done
  return 1
}

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
if ! bin_dir >/dev/null; then
  # The tests never use the package's "main" cluster: do not create (or start) it.
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" |
    $SUDO tee /etc/postgresql-common/createcluster.d/mcp-taskd-ci.conf >/dev/null
  # Debian's own package (its default major version, 15 on bookworm), from its archive.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends postgresql >&2
fi
# libfaketime: tests/postgres.rs runs a node with its clock an hour behind.
if ! ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 >/dev/null 2>&1; then
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends libfaketime >&2
fi
bin_dir || { echo "postgresql is installed, but no initdb and pg_ctl were found" >&2; exit 1; }
