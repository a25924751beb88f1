"""upstream.py - a deterministic test upstream for the idem gateway e2e tests.

An HTTP/1.1 keep-alive server (ThreadingHTTPServer) on a free 127.0.0.1 port
that answers any method and records every request it *executes*: method,
target, headers, body, the Idempotency-Fence it saw and which TCP connection
carried it. Behaviour is chosen per request by headers:

    X-Test-Status: 503        answer with this status (default 200)
    X-Test-Delay-Ms: 300      sleep this long before answering
    X-Test-Close: 1           read the request, then close without answering
    X-Test-Hang: 1            read the request, never answer (until stop())
    X-Test-Chunked: 1         send the response body chunked
    X-Test-Chunk-Bytes: N     chunked, in chunks of N bytes (written 64 KiB
                              of the encoding at a time)
    X-Test-Close-Delimited: 1 no Content-Length: the body ends when the
                              upstream closes the connection
    X-Test-Body-Bytes: N      answer with N pseudo-random bytes (all byte
                              values; a function of id and execution number)
                              instead of the JSON body
    X-Test-Set-Header: N: V   add a response header (may be repeated)
    X-Test-Interim: 103       send this 1xx interim response before the final one
    X-Test-Garbage: 1         answer with bytes that are not HTTP, then close
    X-Test-Reset: 1           read the request, then reset the connection (RST)
    X-Test-Truncate: 1        send the head and half the body, then close
    X-Test-Body-Delay-Ms: 300 send the head at once, the body this long after
    X-Test-Close-After: 1     answer normally (keep-alive), then close the
                              connection as an idle-timeout would
    X-Test-Bad-Framing: 1     answer with both Content-Length and chunked
    X-Test-Bad-Chunk: 1       answer chunked with an invalid chunk size
    X-Test-Id: ID             count this request under ID instead of its key

An execution is counted when the request has been read, before any delay,
close or hang: the upstream "ran" the request even if it never answered.
Requests are counted per id: X-Test-Id if present, else the raw
Idempotency-Key value (requests with neither count under "").

The response body is JSON: {"exec": n (1-based execution number for this
id), "id", "method", "target", "fence", "body_len", "body_sha256"} so that a
replay (same exec number) is told apart from a second execution.

In-process use (what the tests do):

    up = Upstream().start()          # up.port, up.url
    up.count("k1"); up.fences("k1"); up.requests("k1"); up.wait_count("k1", 1)
    up.stop()

Out-of-process use: `python3 upstream.py [--port N]` prints "PORT\\n" on stdout
when ready; GET /_count?key=K answers {"count": n, "fences": [...]}.
GET /_count is answered in both modes and is never counted.
"""

import hashlib
import json
import random
import struct
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def __init__(self, addr, owner):
        self.owner = owner
        super().__init__(addr, _Handler)

    def handle_error(self, request, client_address):
        # a peer that went away (killed gateway, timeout) is expected here
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def version_string(self):
        return "idem-test-upstream"

    def log_message(self, fmt, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        # head and body go out in separate writes: without NODELAY, Nagle
        # and the peer's delayed ACK add ~40ms to every answer
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        owner = self.server.owner
        with owner._lock:
            owner._conn_seq += 1
            self.conn_id = owner._conn_seq
            owner._open.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.owner._lock:
                self.server.owner._open.discard(self.connection)

    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = bytearray()
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ConnectionError("eof in chunk size")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(3)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _handle(self):
        owner = self.server.owner
        body = self._read_body()
        path = urllib.parse.urlsplit(self.path)
        if path.path == "/_count":
            q = urllib.parse.parse_qs(path.query)
            k = q.get("key", [""])[0]
            self._send(200, json.dumps({"count": owner.count(k), "fences": owner.fences(k)}).encode(),
                       [("Content-Type", "application/json")])
            return
        h = self.headers
        rid = h.get("X-Test-Id")
        if rid is None:
            rid = h.get("Idempotency-Key") or ""
        self.rid = rid
        fence = h.get("Idempotency-Fence")
        rec = {
            "id": rid,
            "method": self.command,
            "target": self.path,
            "headers": [(k, v) for k, v in h.items()],
            "body": body,
            "fence": fence,
            "fences_seen": h.get_all("Idempotency-Fence") or [],
            "conn": self.conn_id,
            "time": time.monotonic(),
        }
        with owner._lock:
            owner._log.append(rec)
            n = owner._counts.get(rid, 0) + 1
            owner._counts[rid] = n
            owner._cond.notify_all()
        delay = int(h.get("X-Test-Delay-Ms") or 0)
        if delay:
            owner._stopping.wait(delay / 1000.0)
        if h.get("X-Test-Close"):
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if h.get("X-Test-Garbage"):
            self.close_connection = True
            self.wfile.write(b"THIS IS NOT HTTP AT ALL\r\n\r\n")
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            return
        if h.get("X-Test-Reset"):
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if h.get("X-Test-Hang"):
            owner._stopping.wait(300)
            self.close_connection = True
            return
        interim = h.get("X-Test-Interim")
        if interim:
            self.wfile.write(b"HTTP/1.1 %d Interim\r\nLink: </style.css>; rel=preload\r\n\r\n"
                             % int(interim))
            self.wfile.flush()
        status = int(h.get("X-Test-Status") or 200)
        payload = json.dumps({
            "exec": n, "id": rid, "method": self.command, "target": self.path,
            "fence": fence, "body_len": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }, sort_keys=True).encode() + b"\n"
        nbytes = h.get("X-Test-Body-Bytes")
        ctype = "application/json"
        if nbytes is not None:
            payload = body_bytes(rid, n, int(nbytes))
            ctype = "application/octet-stream"
        extra = [("Content-Type", ctype), ("X-Upstream-Exec", str(n))]
        if status in (201, 301, 302, 303, 307, 308):
            extra.append(("Location", "/things/%s/%d" % (urllib.parse.quote(rid, safe=""), n)))
        for v in h.get_all("X-Test-Set-Header") or []:
            name, _, val = v.partition(":")
            extra.append((name.strip(), val.strip()))
        if h.get("X-Test-Bad-Framing") or h.get("X-Test-Bad-Chunk"):
            self.close_connection = True
            self.send_response(status)
            for k, v in extra:
                self.send_header(k, v)
            if h.get("X-Test-Bad-Framing"):
                self.send_header("Content-Length", "3")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if h.get("X-Test-Bad-Chunk"):
                self.wfile.write(b"zz\r\n" + payload + b"\r\n0\r\n\r\n")
            else:
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload))
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            return
        if h.get("X-Test-Body-Delay-Ms"):
            self.send_response(status)
            for k, v in extra:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.flush()
            time.sleep(int(h["X-Test-Body-Delay-Ms"]) / 1000.0)
            self.wfile.write(payload)
            self.wfile.flush()
            return
        if h.get("X-Test-Truncate"):
            self.close_connection = True
            self.send_response(status)
            for k, v in extra:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload[:len(payload) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            return
        if h.get("X-Test-Chunk-Bytes"):
            self._send_small_chunks(status, payload, extra, int(h["X-Test-Chunk-Bytes"]))
            return
        self._send(status, payload, extra, chunked=bool(h.get("X-Test-Chunked")),
                   close_delimited=bool(h.get("X-Test-Close-Delimited")))
        if h.get("X-Test-Close-After"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            with owner._lock:
                owner._closed_after += 1
                owner._cond.notify_all()

    def _send_small_chunks(self, status, payload, headers, size):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = []
        for i in range(0, len(payload), size):
            p = payload[i:i + size]
            block.append(b"%x\r\n%s\r\n" % (len(p), p))
            if len(block) * (size + 6) >= 65536:
                self.wfile.write(b"".join(block))
                block = []
        block.append(b"0\r\n\r\n")
        self.wfile.write(b"".join(block))
        self.wfile.flush()

    def _send(self, status, payload, headers, chunked=False, close_delimited=False):
        no_body = status in (204, 304) or 100 <= status < 200
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if self.command == "HEAD":  # the length a GET would have, no body
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
        elif no_body:
            if status != 204 and status != 304:
                self.send_header("Content-Length", "0")
            self.end_headers()
        elif close_delimited:
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)
            return
        elif chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            # deliberately uneven chunks, flushed apart
            parts = [payload[:5], payload[5:17], payload[17:]]
            for p in parts:
                if p:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                # the gateway dropped the connection before the body was out
                self.close_connection = True
                owner = self.server.owner
                with owner._lock:
                    rid = getattr(self, "rid", "")
                    owner._cut[rid] = owner._cut.get(rid, 0) + 1
                    owner._cond.notify_all()
                return
        self.wfile.flush()

    def do_GET(self):
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET


def body_bytes(rid, n, size):
    """The body X-Test-Body-Bytes answers: deterministic per (id, exec).
    Past 16 MiB, a 1 MiB block repeated (randbytes stops at 256 MiB)."""
    rng = random.Random("%s/%d" % (rid, n))
    if size <= 16 << 20:
        return rng.randbytes(size)
    block = rng.randbytes(1 << 20)
    return (block * (size // len(block) + 1))[:size]


class Upstream:
    """A test upstream on 127.0.0.1; port=0 picks a free port."""

    def __init__(self, port=0):
        self.port = port
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._log = []
        self._counts = {}
        self._conn_seq = 0
        self._closed_after = 0
        self._cut = {}  # id -> answers whose body the peer did not take whole
        self._open = set()
        self._stopping = threading.Event()
        self._server = None
        self._thread = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._server = _Server(("127.0.0.1", self.port), self)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop listening, wake hanging handlers, close open connections."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._open)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server = None

    # ---- what the upstream saw ------------------------------------------
    def count(self, rid):
        with self._lock:
            return self._counts.get(rid, 0)

    def total(self):
        with self._lock:
            return len(self._log)

    def requests(self, rid=None):
        with self._lock:
            return [r for r in self._log if rid is None or r["id"] == rid]

    def fences(self, rid):
        return [r["fence"] for r in self.requests(rid)]

    def connections(self):
        """Distinct TCP connections that carried executed requests."""
        with self._lock:
            return len({r["conn"] for r in self._log})

    def cut(self, rid):
        """How many answers under rid the gateway dropped mid-body."""
        with self._lock:
            return self._cut.get(rid, 0)

    def idle_closes(self):
        """How many connections X-Test-Close-After has closed so far."""
        with self._lock:
            return self._closed_after

    def wait_count(self, rid, n, timeout=10.0):
        """Block until count(rid) >= n or timeout; returns the count."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._counts.get(rid, 0) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._counts.get(rid, 0)


def main(argv):
    port = 0
    if len(argv) > 2 and argv[1] == "--port":
        port = int(argv[2])
    up = Upstream(port).start()
    sys.stdout.write("%d\n" % up.port)
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        up.stop()


if __name__ == "__main__":
    main(sys.argv)
