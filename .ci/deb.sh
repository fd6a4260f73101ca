#!/usr/bin/env bash
# deb.sh HOST_BINARY [TARGET]: builds the .deb of an already built release binary (the
# host's, or TARGET's: target/TARGET/release/mcp-taskd) with the pinned cargo-deb, checks
# it, and prints its path as the last line. Called by .ci/service.sh (the host) and
# .ci/arm64.sh (cross builds).
#   - the man pages and shell completions come from HOST_BINARY (`package-files`: they
#     depend on the command line only, not on the architecture);
#   - the package holds exactly the files listed below, with the configuration as a
#     conffile, systemd handling in the maintainer scripts, the unit as shipped, and
#     the binary of the package's architecture;
#   - lintian finds no error and no warning in it.
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BINARY="$(realpath "${1:?usage: .ci/deb.sh HOST_BINARY [TARGET]}")"
TARGET="${2:-}"
CARGO_DEB_VERSION=3.8.0
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "deb: $*" >&2; exit 1; }
log() { echo "deb: $*" >&2; }

if [ "$(cargo deb --version 2>/dev/null | awk '{print $2}')" != "$CARGO_DEB_VERSION" ]; then
  nice cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet >&2
fi
command -v lintian >/dev/null ||
  apt-get install -y -q --no-install-recommends lintian >/dev/null 2>&1 ||
  { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends lintian >/dev/null; }

rm -rf target/package-files
"$HOST_BINARY" package-files target/package-files
# --fast: lighter compression, same contents.
DEB="$(cargo deb --no-build --fast --quiet ${TARGET:+--target "$TARGET"} |
  grep '/mcp-taskd_[^/]*\.deb$')"
[ -f "$DEB" ] || fail "cargo deb built no package"

SCRATCH="$WORK/root"
dpkg -x "$DEB" "$SCRATCH"
# docs/*.md go in whole (the README links to them): only configuration.md is checked.
(cd "$SCRATCH" && find . -type f -o -type l | sort |
  grep -v '^\./usr/share/doc/mcp-taskd/docs/' || true) >"$WORK/files"
[ -f "$SCRATCH/usr/share/doc/mcp-taskd/docs/configuration.md" ] ||
  fail "no docs/configuration.md in $DEB"
cat >"$WORK/expected" <<'EOF'
./etc/mcp-taskd/config.toml
./usr/bin/mcp-taskd
./usr/lib/systemd/system/mcp-taskd.service
./usr/lib/systemd/system/mcp-taskd.socket
./usr/share/bash-completion/completions/mcp-taskd
./usr/share/doc/mcp-taskd/README.md
./usr/share/doc/mcp-taskd/changelog.Debian.gz
./usr/share/doc/mcp-taskd/copyright
./usr/share/doc/mcp-taskd/examples/strict.conf
./usr/share/fish/vendor_completions.d/mcp-taskd.fish
./usr/share/lintian/overrides/mcp-taskd
./usr/share/man/man1/mcp-taskd-backup.1.gz
./usr/share/man/man1/mcp-taskd-check-config.1.gz
./usr/share/man/man1/mcp-taskd-copy-store.1.gz
./usr/share/man/man1/mcp-taskd-reload.1.gz
./usr/share/man/man1/mcp-taskd-restore.1.gz
./usr/share/man/man1/mcp-taskd-schedules-list.1.gz
./usr/share/man/man1/mcp-taskd-schedules.1.gz
./usr/share/man/man1/mcp-taskd-serve.1.gz
./usr/share/man/man1/mcp-taskd-stats.1.gz
./usr/share/man/man1/mcp-taskd-stdio.1.gz
./usr/share/man/man1/mcp-taskd-tasks-cancel.1.gz
./usr/share/man/man1/mcp-taskd-tasks-list.1.gz
./usr/share/man/man1/mcp-taskd-tasks-logs.1.gz
./usr/share/man/man1/mcp-taskd-tasks-rerun.1.gz
./usr/share/man/man1/mcp-taskd-tasks-show.1.gz
./usr/share/man/man1/mcp-taskd-tasks-start.1.gz
./usr/share/man/man1/mcp-taskd-tasks.1.gz
./usr/share/man/man1/mcp-taskd-tools-list.1.gz
./usr/share/man/man1/mcp-taskd-tools-pause.1.gz
./usr/share/man/man1/mcp-taskd-tools-resume.1.gz
./usr/share/man/man1/mcp-taskd-tools.1.gz
./usr/share/man/man1/mcp-taskd-webhooks-list.1.gz
./usr/share/man/man1/mcp-taskd-webhooks-retry.1.gz
./usr/share/man/man1/mcp-taskd-webhooks.1.gz
./usr/share/man/man1/mcp-taskd.1.gz
./usr/share/zsh/vendor-completions/_mcp-taskd
EOF
# A subcommand added to the command line adds its man page: list it above.
diff -u "$WORK/expected" "$WORK/files" >&2 || fail "unexpected file list in $DEB"
dpkg-deb -I "$DEB" conffiles | grep -qx /etc/mcp-taskd/config.toml ||
  fail "/etc/mcp-taskd/config.toml is not a conffile"
for script in postinst prerm postrm; do
  dpkg-deb -I "$DEB" "$script" | grep -q 'mcp-taskd.service' || fail "no systemd handling in $script"
done
for unit in mcp-taskd.service mcp-taskd.socket; do
  cmp -s "$SCRATCH/usr/lib/systemd/system/$unit" "systemd/$unit" ||
    fail "the packaged unit differs from systemd/$unit"
done
# The socket is enabled and started at first install; an upgrade restarts the service
# only (a restarted socket would drop the connections it queues).
dpkg-deb -I "$DEB" postinst | grep -q 'deb-systemd-helper enable mcp-taskd.socket' ||
  fail "postinst does not enable mcp-taskd.socket"
if dpkg-deb -I "$DEB" postinst | grep -E 'restart[^"]*mcp-taskd\.socket' >&2; then
  fail "postinst restarts mcp-taskd.socket on upgrade"
fi

# The binary is the package's architecture's, and the changelog names its version.
arch="$(dpkg-deb -f "$DEB" Architecture)"
machine="$(LC_ALL=C readelf -h "$SCRATCH/usr/bin/mcp-taskd" | sed -n 's/^ *Machine: *//p')"
case "$arch:$machine" in
  amd64:*X86-64* | arm64:*AArch64* | armhf:*ARM*) ;;
  *) fail "a $machine binary in an $arch package" ;;
esac
version="$(dpkg-deb -f "$DEB" Version)"
logged="$(zcat "$SCRATCH/usr/share/doc/mcp-taskd/changelog.Debian.gz" | sed -n '1s/^mcp-taskd (\([^)]*\)).*/\1/p')"
[ "$logged" = "$version" ] ||
  fail "packaging/changelog.Debian's newest entry is $logged, the package $version: add an entry"

# lintian: no errors, and no warnings either (fix one, or override it, with its reason,
# in packaging/lintian-overrides).
lintian --tag-display-limit 0 "$DEB" >"$WORK/lintian" 2>&1 || true
grep -v '^running with root privileges' "$WORK/lintian" >"$WORK/findings" || true
if grep -q '^[EW]: ' "$WORK/findings"; then
  cat "$WORK/findings" >&2
  fail "lintian found errors or warnings in $DEB"
fi
log "$(basename "$DEB"): $(wc -l <"$WORK/files") files as expected, lintian clean" \
  "($(grep -c '^[IPX]: ' "$WORK/findings" || true) notes)"
echo "$DEB"
