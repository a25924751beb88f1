"""consume_harness.py - run `idem consume` in end-to-end tests (stdlib only).

    from consume_harness import Handler, Consumer, RedisClient

    h = Handler().start()                  # POST endpoint counting executions per key
    h.fail_first = {"k1"}                  # 503 on the first attempt of these keys
    h.fail_always = {"k2"}                 # 500 every time
    h.status = {"k3": 400}                 # answer this status
    h.delay = {"k4": 1.0}                  # take this long
    h.script = {"k5": [(200, 3.0), (503, 0)]}  # per attempt, in order of arrival
    c = Consumer(from_uri, h.url + "/messages", store="lmdb:DIR", args=[...],
                 admin=True).start()       # waits for "broker connected"
    c.stop() / c.kill() / c.restart(); c.stderr()
    r = RedisClient(port)
    r.pipeline([("XADD", "s", "*", "message_id", "k", "body", "x"), ...])

Handler records every request: h.attempts(key) is a list of dicts (status
answered, fence, headers, header_list: every (name, value) in order);
h.successes(key) counts 2xx answers.
"""

import http.server
import signal
import socket
import socketserver
import subprocess
import threading
import time

from harness import IdemProcess, free_port, idem_bin, wait_for
from redis_server import _encode, _Reader


class _HandlerServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def handle_error(self, request, client_address):
        pass  # a consumer killed mid-request resets its connections: expected here


class _H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        owner = self.server.owner
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        key = self.headers.get("Idempotency-Key", "")
        status, delay = owner._decide(key)
        with owner._lock:
            owner.active += 1
            owner.max_active = max(owner.max_active, owner.active)
        if delay:
            time.sleep(delay)
        with owner._lock:
            owner.active -= 1
        rec = {"status": status, "fence": self.headers.get("Idempotency-Fence"),
               "headers": dict(self.headers.items()), "header_list": self.headers.items(),
               "body": body, "path": self.path}
        with owner._lock:
            owner._log.setdefault(key, []).append(rec)
            owner._cond.notify_all()
        payload = b'{"ok":true,"key":"%s"}' % key.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Handler", "yes")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class Handler:
    def __init__(self):
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._log = {}
        self.fail_first = set()
        self.fail_always = set()
        self.status = {}
        self.delay = {}
        self.fail_first_fraction = 0.0  # 503 on the first attempt of this share of keys
        self.script = {}  # key -> [(status, delay), ...] for its attempts, in order of arrival
        self._arrived = {}
        self.active = self.max_active = 0  # requests being handled now, and the most at once
        self._server = None

    def _decide(self, key):
        with self._lock:
            first = key not in self._log
            n = self._arrived[key] = self._arrived.get(key, 0) + 1
        if n <= len(self.script.get(key, ())):
            return self.script[key][n - 1]
        if key in self.fail_always:
            return 500, self.delay.get(key, 0)
        if first and (key in self.fail_first or
                      (self.fail_first_fraction and
                       (hash(("ff", key)) % 1000) < self.fail_first_fraction * 1000)):
            return 503, self.delay.get(key, 0)
        return self.status.get(key, 200), self.delay.get(key, 0)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        # free_port(): a test stops the handler and starts it again on its port
        self._server = _HandlerServer(("127.0.0.1", free_port()), _H)
        self._server.owner = self
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self):
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def attempts(self, key):
        with self._lock:
            return list(self._log.get(key, []))

    def successes(self, key):
        return sum(1 for a in self.attempts(key) if 200 <= a["status"] < 300)

    def arrivals(self, key):
        """Requests for key that reached the handler, answered or not yet."""
        with self._lock:
            return self._arrived.get(key, 0)

    def keys(self):
        with self._lock:
            return set(self._log)

    def success_counts(self):
        with self._lock:
            return {k: sum(1 for a in v if 200 <= a["status"] < 300) for k, v in self._log.items()}

    def total(self):
        with self._lock:
            return sum(len(v) for v in self._log.values())


class Consumer(IdemProcess):
    """One `idem consume` process."""

    def __init__(self, from_uri, to_url, store="memory:consume", args=(), admin=False, env=None):
        super().__init__(env)
        self.from_uri = from_uri
        self.to_url = to_url
        self.store = store
        self.args = list(args)
        self.admin_port = free_port() if admin else None

    def argv(self):
        a = [idem_bin(), "consume", "--from", self.from_uri, "--to", self.to_url,
             "--store", self.store]
        if self.admin_port:
            a += ["--admin-listen", "127.0.0.1:%d" % self.admin_port]
        return a + self.args

    def start(self, timeout=15.0, wait_connected=True):
        for moves in range(4):
            self._spawn("consume")
            if not wait_connected:
                return self

            def ready():
                if self.proc.poll() is not None:
                    if self.admin_port and moves < 3 and self.port_taken():
                        return "moved"
                    raise RuntimeError("idem consume exited %d:\n%s" % (self.proc.returncode,
                                                                       self.stderr()))
                return "broker connected" in self._current_err()
            if wait_for(ready, timeout, what="idem consume to connect") != "moved":
                return self
            self._reap()
            self.admin_port = free_port()
        return self

    def stop(self, timeout=20.0):
        if self.proc is None or self._errpath is None:
            return self.proc.returncode if self.proc else None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reap()
        return self.proc.returncode

    def restart(self, **kw):
        if self.alive():
            self.stop()
        return self.start(**kw)

    def metric(self, series):
        """The value of one series of its /metrics, such as
        'idem_messages_total{outcome="ok"}'; 0 when it is not there."""
        for line in self.admin_get("/metrics")[1].splitlines():
            name, _, value = line.rpartition(" ")
            if name == series:
                return float(value)
        return 0.0

    def admin_get(self, path):
        s = socket.create_connection(("127.0.0.1", self.admin_port), timeout=5)
        try:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode()



def _group_lag(groups, group):
    """The lag of group in an XINFO GROUPS reply (entries not yet delivered
    to it, Redis 7); None if it is not there."""
    for g in groups:
        d = dict(zip(g[::2], g[1::2]))
        if d[b"name"] == group.encode():
            return d.get(b"lag")
    return None


class RedisClient:
    """A pipelining client over one socket: enough for tests."""

    def __init__(self, port, password=None, user=None):
        self.port = port
        self.password = password  # sent with AUTH first on each connection
        self.user = user  # AUTH user password, when given

    def pipeline(self, commands, timeout=30.0):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            auth = ([("AUTH", self.user, self.password or "")] if self.user else
                    [("AUTH", self.password)] if self.password else [])
            s.sendall(b"".join(_encode(c) for c in auth + list(commands)))
            rd = _Reader(s)
            if auth:
                rd.reply()
            out = []
            for _ in commands:
                try:
                    out.append(rd.reply())
                except RuntimeError as e:  # an error reply
                    out.append(e)
            return out
        finally:
            s.close()

    def command(self, *args):
        r = self.pipeline([args])[0]
        if isinstance(r, RuntimeError):
            raise r
        return r

    def pending(self, stream, group):
        """How many entries the group has delivered and not acked
        (RuntimeError if the group is missing)."""
        return self.command("XPENDING", stream, group)[0]

    def pending_and_lag(self, stream, group):
        """(pending, lag) of the group read in one MULTI, so that no
        delivery or ack falls between the two: read one after the other, an
        ack just before a fetch and the fetch just after it look like
        nothing pending and nothing left (RuntimeError if the group is
        missing)."""
        out = self.pipeline([("MULTI",), ("XPENDING", stream, group),
                             ("XINFO", "GROUPS", stream), ("EXEC",)])
        if isinstance(out[-1], Exception):
            raise out[-1]
        pending, groups = out[-1]
        return pending[0], _group_lag(groups, group)

    def entries(self, stream):
        """[(id, {field: value})] of a stream."""
        out = []
        for eid, fields in self.command("XRANGE", stream, "-", "+") or []:
            out.append((eid.decode(), {fields[i].decode(): fields[i + 1]
                                       for i in range(0, len(fields), 2)}))
        return out
