#!/usr/bin/env python3
"""A client traced by the official OpenTelemetry Python SDK (tests/tracing.rs): in a
span of its own, it sends tools/list to the MCP endpoint argv[1], with the span's
context injected into `params._meta` by the SDK's configured propagator (W3C Trace
Context), as the OpenTelemetry conventions for MCP say. Prints its span's ids as JSON.
"""
import json
import sys
import urllib.request

from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("otel-client")

with tracer.start_as_current_span("tools/list", kind=trace.SpanKind.CLIENT) as span:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    propagate.inject(meta)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                       "params": {"_meta": meta}}).encode()
    request = urllib.request.Request(sys.argv[1], data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    })
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200, answer.status
        json.load(answer)
    context = span.get_span_context()
    print(json.dumps({"trace_id": format(context.trace_id, "032x"),
                      "span_id": format(context.span_id, "016x")}))
