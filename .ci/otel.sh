#!/usr/bin/env bash
# otel.sh: installs, once, the official OpenTelemetry Python packages that the tracing
# tests use, pinned exactly, into a venv in a cache folder outside the repository
# (default ~/.cache/mcp-taskd-otel; set MCP_TASKD_OTEL_HOME to move it), and prints the
# venv's python:
#   opentelemetry-proto  the OTLP protobuf definitions: tests/scripts/otlp_receiver.py
#                        decodes what the server exports with them
#   opentelemetry-sdk    a client traced by the official SDK (tests/scripts/otel_client.py)
# Re-running is cheap: the venv is rebuilt only when a pin changes.
set -euo pipefail
OTEL_VERSION=1.45.2
# Their dependencies are pinned too, so that a new protobuf release cannot change a run.
SPEC="opentelemetry-proto==$OTEL_VERSION opentelemetry-sdk==$OTEL_VERSION opentelemetry-api==$OTEL_VERSION \
opentelemetry-semantic-conventions==0.66b2 protobuf==7.36.2 typing_extensions==4.16.0"
HOME_DIR="${MCP_TASKD_OTEL_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-otel}"
PYTHON="${PYTHON:-python3}"
VENV="$HOME_DIR/venv"
if [ "$(cat "$VENV/.pinned" 2>/dev/null)" != "$SPEC" ]; then
  rm -rf "$VENV"
  mkdir -p "$HOME_DIR"
  "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $SPEC >&2
  echo "$SPEC" >"$VENV/.pinned"
fi
echo "$VENV/bin/python"
