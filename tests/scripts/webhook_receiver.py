"""A webhook receiver for tests/webhooks.rs: verifies each delivery with the
`standardwebhooks` package from PyPI (the reference verifier, not mcp-taskd's code) and
appends what it received, one JSON line per request, to OUT:

    {"id": webhook-id, "type": ..., "taskId": ..., "status": ..., "ok": true}
    {"ok": false, "why": "..."}              (a signature that does not verify)

Usage: webhook_receiver.py SECRET OUT [PORT]. Prints its port on the first line of
stdout. While the file OUT.fail exists it answers 500 (after verifying and recording
nothing), so a test can make deliveries fail and come back.
"""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRET, OUT = sys.argv[1], sys.argv[2]
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 0
VERIFIER = Webhook(SECRET)
LOCK = threading.Lock()


def record(entry):
    with LOCK:
        with open(OUT, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")
            out.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender died mid-request (a kill -9): no delivery was made.
            self.close_connection = True
            return
        if os.path.exists(OUT + ".fail"):
            self.answer(500)
            return
        headers = {name: value for name, value in self.headers.items()}
        try:
            event = VERIFIER.verify(body, headers)
        except WebhookVerificationError as error:
            record({"ok": False, "why": str(error)})
            self.answer(400)
            return
        data = event.get("data", {})
        record(
            {
                "ok": True,
                "id": headers.get("webhook-id") or headers.get("Webhook-Id"),
                "type": event.get("type"),
                "taskId": data.get("taskId"),
                "status": data.get("status"),
                "hasResult": "result" in data,
                "hasError": "error" in data,
            }
        )
        self.answer(204)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


server = Server(("127.0.0.1", PORT), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
