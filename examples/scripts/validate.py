#!/usr/bin/env python3
"""validate.py — checks a user record; fails in the two ways a tool can fail.

- An invalid record is a *tool error*: {"result": {"isError": true, ...}}. The call
  completes; the model reads the problems and can fix its input.
- {"crash": true} simulates a bug: a message on stderr (kept as the task's output) and
  exit status 1 with no final line. That is a *failed attempt*: as a task it is retried
  up to max_attempts, then the task fails naming the reason and the end of its output;
  an inline call answers a tool error saying the same.
"""
import json
import sys

request = json.load(sys.stdin)
arguments = request["arguments"]

if arguments.get("crash"):
    print("validate.py: simulated crash", file=sys.stderr)
    sys.exit(1)

record = arguments["record"]
problems = []
email = record.get("email")
if not isinstance(email, str) or "@" not in email:
    problems.append("email must contain '@'")
age = record.get("age")
if not isinstance(age, int) or isinstance(age, bool) or not 0 <= age <= 150:
    problems.append("age must be an integer from 0 to 150")

if problems:
    result = {"isError": True, "content": [{"type": "text", "text": "Invalid record: " + "; ".join(problems)}]}
else:
    result = {
        "content": [{"type": "text", "text": "The record is valid."}],
        "structuredContent": {"valid": True, "fields": len(record)},
    }
print(json.dumps({"result": result}))
