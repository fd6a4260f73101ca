#!/usr/bin/env python3
"""Test program: writes a report of `sections` sections, one every `pace` seconds, with
a progress line per section, then a structured result (see the bridge tests)."""
import json
import sys
import time

arguments = json.load(sys.stdin)["arguments"]
topic = arguments.get("topic", "")
count = int(arguments.get("sections", 1))
pace = float(arguments.get("pace", 0.5))
sections = []
for index in range(count):
    print(json.dumps({"progress": index, "total": count,
                      "message": f"Writing section {index + 1} of {count}"}), flush=True)
    time.sleep(pace)
    sections.append(f"{index + 1}. on {topic}")
print(json.dumps({"result": {
    "content": [{"type": "text", "text": f"Report: {topic}"}],
    "structuredContent": {"topic": topic, "sections": sections},
}}), flush=True)
