"""race_upstream.py - a raw-socket upstream that races the gateway's
connection handling, for tests/e2e/test_gateway_upstream_races.py.

Every connection gets its own thread. A request is counted as executed as
soon as its head has been read (the upstream "saw" it, even if it then
answers early, breaks or never reads the body), per id: X-Test-Id, else
Idempotency-Key. Its answer is JSON naming the id and the execution number,
so that a client can tell its own answer from another request's and a
replay from a second run.

What it does is chosen per upstream (constructor) and per request (headers):

    idle_close_ms=(lo, hi)   a keep-alive connection left idle is closed
                             after a random lo..hi ms (a plain close(): bytes
                             that arrive after it are refused with a RST)
    close_header=p           with probability p an answer says
                             "Connection: close", and the connection closes
    close_silent=p           with probability p the connection closes right
                             after an answer that did not say so
    keep_alive_hint=N        every answer says "Keep-Alive: timeout=N"
    X-Test-Early: STATUS     answer STATUS after the head, before reading the
                             body, then close
    X-Test-Extra: 1          send a second, unasked answer right after the
                             first (a buggy upstream)
    X-Test-Long: N           the body is N bytes longer than Content-Length
    X-Test-Short: 1          the body is shorter than Content-Length, then close
    X-Test-Continue: 1       "100 Continue" before the final answer
    X-Test-Trailers: 1       a chunked answer with trailer fields
    X-Test-Stall: 1          read the head, then stop reading (the body stays
                             in the socket buffers) until stop()
"""

import json
import random
import socket
import threading


class RaceUpstream:
    def __init__(self, idle_close_ms=None, close_header=0.0, close_silent=0.0,
                 rcvbuf=None, keep_alive_hint=None, seed=None):
        self.idle_close_ms = idle_close_ms
        self.close_header = close_header
        self.close_silent = close_silent
        self.rcvbuf = rcvbuf
        self.hint = (b"Keep-Alive: timeout=%d\r\n" % keep_alive_hint
                     if keep_alive_hint is not None else b"")
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {}
        self.conns = 0
        self.stopping = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.threads = []
        self.socks = set()

    def start(self):
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)
        return self

    def stop(self):
        self.stopping.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads:
            t.join(5)

    def count(self, rid):
        with self.lock:
            return self.counts.get(rid, 0)

    def _accept(self):
        while not self.stopping.is_set():
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                cid = self.conns
                self.socks.add(s)
            t = threading.Thread(target=self._serve, args=(s, cid), daemon=True)
            t.start()
            self.threads.append(t)

    def _chance(self, p):
        with self.lock:
            return p > 0 and self.rng.random() < p

    def _idle_wait(self):
        lo, hi = self.idle_close_ms
        with self.lock:
            return self.rng.uniform(lo, hi) / 1000.0

    def _serve(self, s, cid):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            while not self.stopping.is_set():
                # wait for the next request's head, closing an idle connection
                s.settimeout(self._idle_wait() if self.idle_close_ms and not buf else 30)
                while b"\r\n\r\n" not in buf:
                    try:
                        d = s.recv(65536)
                    except socket.timeout:
                        return  # idle timeout: close
                    if not d:
                        return
                    buf += d
                    s.settimeout(30)
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                hdrs = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                rid = hdrs.get("x-test-id", hdrs.get("idempotency-key", ""))
                with self.lock:
                    n = self.counts.get(rid, 0) + 1
                    self.counts[rid] = n
                clen = int(hdrs.get("content-length", "0"))
                if hdrs.get("x-test-stall"):
                    self.stopping.wait(120)
                    return
                early = hdrs.get("x-test-early")
                if early:
                    body = json.dumps({"exec": n, "id": rid, "early": True}).encode()
                    s.sendall(b"HTTP/1.1 %s Early\r\nContent-Length: %d\r\n"
                              b"Connection: close\r\n\r\n%s" % (early.encode(), len(body), body))
                    return  # close with the body unread: a RST follows
                while len(buf) < clen:
                    d = s.recv(65536)
                    if not d:
                        return
                    buf += d
                body_len = clen
                buf = buf[clen:]
                payload = json.dumps({"exec": n, "id": rid, "conn": cid,
                                      "body_len": body_len}).encode()
                close = self._chance(self.close_header)
                silent = not close and self._chance(self.close_silent)
                out = b""
                if hdrs.get("x-test-continue"):
                    out += b"HTTP/1.1 100 Continue\r\n\r\n"
                if hdrs.get("x-test-trailers"):
                    out += (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Transfer-Encoding: chunked\r\nTrailer: X-Sum\r\n") + self.hint
                    if close:
                        out += b"Connection: close\r\n"
                    out += b"\r\n%x\r\n%s\r\n0\r\nX-Sum: 1\r\nX-Other: 2\r\n\r\n" % (
                        len(payload), payload)
                else:
                    long_by = int(hdrs.get("x-test-long", "0"))
                    short = hdrs.get("x-test-short")
                    cl = len(payload) + (7 if short else 0)
                    out += (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n" % cl) + self.hint
                    if close:
                        out += b"Connection: close\r\n"
                    out += b"\r\n" + payload + b"x" * long_by
                    if short:
                        s.sendall(out)
                        return
                if hdrs.get("x-test-extra"):
                    extra = json.dumps({"exec": n, "id": rid, "extra": True}).encode()
                    out += (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                            % (len(extra), extra))
                s.sendall(out)
                if close or silent:
                    return
        except OSError:
            return
        finally:
            with self.lock:
                self.socks.discard(s)
            try:
                s.close()
            except OSError:
                pass
