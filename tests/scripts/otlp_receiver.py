#!/usr/bin/env python3
"""A minimal OTLP/HTTP collector for the tracing tests (tests/tracing.rs).

Listens on 127.0.0.1 (an ephemeral port, printed as the first line of stdout), takes
POST /v1/traces and /v1/metrics with protobuf bodies, decodes them with the official
OpenTelemetry protobuf definitions (PyPI `opentelemetry-proto`, installed by
.ci/otel.sh) and appends one JSON line per span (or per metric) to the file named by
argv[1]. Ends by itself after argv[2] seconds (default 300), or when stdin closes.

A span line: {"signal": "span", "trace_id", "span_id", "parent_span_id" (hex, "" for
a root), "name", "kind", "start_ns", "end_ns", "status": {"code", "message"},
"attributes": {key: value}, "events": [names], "links": [{"trace_id", "span_id"}],
"resource": {key: value}}.
A metric line: {"signal": "metric", "name", "unit", "type" ("sum", "gauge",
"histogram"), "points": [{"attributes", "start_ns", "time_ns", "value"} (a histogram's
point adds "sum", "bounds", "buckets"; its value is its count)], "resource",
"monotonic" and "temporality" where the type has them}.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]
LIFETIME = float(sys.argv[2]) if len(sys.argv) > 2 else 300.0
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


def point(data, p):
    """A data point: its attributes and value (a histogram's count, sum, bounds and
    per-bucket counts)."""
    line = {"attributes": attributes(p.attributes),
            "start_ns": p.start_time_unix_nano, "time_ns": p.time_unix_nano}
    if data in ("sum", "gauge"):
        line["value"] = p.as_int if p.WhichOneof("value") == "as_int" else p.as_double
    else:
        line.update(value=p.count, sum=p.sum, bounds=list(p.explicit_bounds),
                    buckets=list(p.bucket_counts))
    return line


def write(lines):
    with LOCK, open(OUT, "a", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Type") != "application/x-protobuf":
            return self.answer(415, b"")
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            lines = []
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        lines.append({
                            "signal": "span",
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "start_ns": span.start_time_unix_nano,
                            "end_ns": span.end_time_unix_nano,
                            "status": {"code": span.status.code, "message": span.status.message},
                            "attributes": attributes(span.attributes),
                            "events": [event.name for event in span.events],
                            "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()}
                                      for link in span.links],
                            "resource": resource,
                        })
            write(lines)
            return self.answer(200, ExportTraceServiceResponse().SerializeToString())
        if self.path == "/v1/metrics":
            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            lines = []
            for resource_metrics in request.resource_metrics:
                resource = attributes(resource_metrics.resource.attributes)
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        data = metric.WhichOneof("data")
                        body = getattr(metric, data)
                        line = {
                            "signal": "metric",
                            "name": metric.name,
                            "unit": metric.unit,
                            "type": data,
                            "points": [point(data, p) for p in body.data_points],
                            "resource": resource,
                        }
                        if data == "sum":
                            line["monotonic"] = body.is_monotonic
                        if data in ("sum", "histogram"):
                            line["temporality"] = body.aggregation_temporality
                        lines.append(line)
            write(lines)
            return self.answer(200, ExportMetricsServiceResponse().SerializeToString())
        return self.answer(404, b"")

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(LIFETIME)
    server.shutdown()


if __name__ == "__main__":
    main()
