#!/usr/bin/env python3
"""A toy orders API to put behind `idem serve`: every POST /orders creates a
new order with the next id, so a retry that reaches it twice is visible.

    python3 examples/orders_upstream.py [PORT]     (default 8080, 127.0.0.1)
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

orders_created = 0  # also the last order id
lock = threading.Lock()


class Orders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self, status, payload):
        body = json.dumps(payload).encode() + b"\n"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = self.rfile.read(length)
        if self.path != "/orders":
            return self._reply(404, {"error": "not found"})
        global orders_created
        with lock:
            orders_created += 1
            order_id = orders_created
        self._reply(201, {"order": order_id, "request": request.decode(errors="replace"),
                          "fence": self.headers.get("Idempotency-Fence")})

    def do_GET(self):
        with lock:
            created = orders_created
        self._reply(200, {"orders_created": created})

    def log_message(self, fmt, *args):
        sys.stderr.write("upstream: %s\n" % (fmt % args))


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    ThreadingHTTPServer(("127.0.0.1", port), Orders).serve_forever()
