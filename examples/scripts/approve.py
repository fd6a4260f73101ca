#!/usr/bin/env python3
"""approve.py — asks a person to approve a deployment, then deploys or stands down.

A command tool for mcp-taskd (see docs/command-tools.md, "Command tool protocol"). The first run has
no answer yet, so it asks for one with an elicitation form ("inputRequired"); the server
runs it again with the client's answer in "inputResponses" and the "state" it returned.
"""
import json
import sys


def emit(message):
    print(json.dumps(message), flush=True)


request = json.load(sys.stdin)
arguments = request["arguments"]
target = f"{arguments['service']}@{arguments['version']}"
answer = request["inputResponses"].get("approval")

if answer is None:
    emit({
        "inputRequired": {
            "requests": {
                "approval": {
                    "method": "elicitation/create",
                    "params": {
                        "message": f"Deploy {target} to production?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {
                                "approve": {"type": "boolean", "title": "Approve"},
                                "note": {"type": "string", "title": "Change-log note"},
                            },
                            "required": ["approve"],
                        },
                    },
                }
            },
            # Opaque to the server; handed back on the next run.
            "state": {"target": target},
        }
    })
    sys.exit(0)

content = answer.get("content") or {}
if answer.get("action") == "accept" and content.get("approve") is True:
    emit({"progress": 1, "total": 2, "message": f"Deploying {target}"})
    note = content.get("note", "")
    emit({
        "result": {
            "content": [{"type": "text", "text": f"Deployed {target}. {note}".strip()}],
            "structuredContent": {"target": target, "approved": True},
        }
    })
else:
    emit({
        "result": {
            "content": [{"type": "text", "text": f"Deployment of {target} was declined; nothing changed."}],
            "structuredContent": {"target": target, "approved": False},
        }
    })
