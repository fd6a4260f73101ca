#!/bin/sh
# report.sh — a long-running report: a progress line per section (one a second), then
# the result. A command tool for mcp-taskd (see docs/command-tools.md, "Command tool protocol").
#
# stdin:  {"arguments": {"topic": "...", "sections": N}, "inputResponses": {}, "state": null}
# stdout: {"progress": i, "total": N, "message": "..."} lines, then one {"result": ...} line.
#
# The tool's input_schema (examples/commands.toml) allows only plain characters in
# "topic", so sed can pick the values out of the compact JSON and the topic can be echoed
# into JSON as is. Real scripts would use jq or a language with a JSON parser.
set -eu

input=$(cat)
topic=$(printf '%s' "$input" | sed -n 's/.*"topic":"\([^"]*\)".*/\1/p')
sections=$(printf '%s' "$input" | sed -n 's/.*"sections":\([0-9][0-9]*\).*/\1/p')
sections=${sections:-4}

# Anything on stderr goes to the server's log, not to the client.
echo "report: starting $sections sections (task ${MCP_TASK_ID:-inline}, attempt ${MCP_TASK_ATTEMPT:-1})" >&2

body=""
i=1
while [ "$i" -le "$sections" ]; do
    printf '{"progress": %d, "total": %d, "message": "Writing section %d of %d"}\n' \
        $((i - 1)) "$sections" "$i" "$sections"
    sleep 1
    body="$body\\n$i. Section $i on $topic"
    i=$((i + 1))
done

printf '{"progress": %d, "total": %d, "message": "Report complete"}\n' "$sections" "$sections"
printf '{"result": {"content": [{"type": "text", "text": "Report on %s%s"}], "structuredContent": {"topic": "%s", "sections": %d}}}\n' \
    "$topic" "$body" "$topic" "$sections"
