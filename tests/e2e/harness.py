"""harness.py - run `idem serve` in end-to-end tests and talk to it.

Small API, stdlib only (import it from any tests/e2e/test_*.py; the directory
is on sys.path when a test runs as a script):

    from harness import Gateway, Upstream, GatewayTestCase, RawConn, main

    up = Upstream().start()                       # tests/e2e/upstream.py
    gw = Gateway(up.url, store="memory:t", args=["--wait", "2s"],
                 admin=True).start()              # waits until ready
    r = gw.request("POST", "/orders", body=b"{}", key="k1")
    r.status, r.header("Idempotent-Replayed"), r.body, r.json()
    gw.admin_request("GET", "/healthz")
    gw.stop()      # SIGTERM, SIGKILL after a deadline; returns the exit code
    gw.kill()      # SIGKILL (crash)
    gw.restart()   # same flags and ports, fresh process
    gw.stderr()    # everything the process wrote to stderr
    gw.spool_dir   # its --spool DIR (see below)

Every gateway gets `--spool DIR`, a temp dir of its own, unless its args
already hold `--spool`: tests never share ./idem-spool. The dir is kept
across kill() and restart() (a restarted gateway drains what its previous
run spooled) and removed by stop() (unless IDEM_E2E_KEEP=1, or
stop(keep_spool=True)); gw.spool_dir is None when the args chose the spool.

GatewayTestCase.start_upstream()/start_gateway() register cleanups, so a
test stops what it started even when it fails; an atexit hook kills any
gateway still alive. A failing assertion can include gw.stderr(). The
cleanup stops a gateway with SIGTERM and fails the test if its stderr holds
a sanitizer report (AddressSanitizer, LeakSanitizer, UBSan), so the suite
can be run against an -DIDEM_SANITIZE=ON build as it is.

Environment: IDEM_BIN (path of the idem binary; default build-e2e/ or build/
under the source tree), IDEM_E2E_KEEP=1 keeps temp dirs.

RawConn is a byte-level client for framing tests (pipelining, bad framing,
slow clients): send() bytes, read_response() parses one response, closed()
tells whether the peer closed the connection.
"""

import atexit
import fcntl
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from upstream import Upstream  # noqa: E402  (re-exported)

SRC = os.path.dirname(os.path.dirname(HERE))

__all__ = ["Gateway", "Upstream", "GatewayTestCase", "RawConn", "Response",
           "free_port", "idem_bin", "request_bytes", "run_idem", "terminate", "wait_for", "main"]


def idem_bin():
    """Path of the idem binary under test."""
    b = os.environ.get("IDEM_BIN")
    if b:
        return b
    for d in ("build-e2e", "build"):
        p = os.path.join(SRC, d, "idem")
        if os.path.exists(p):
            return p
    raise RuntimeError("set IDEM_BIN to the built idem binary")


_held_ports = {}  # port -> the descriptor of its lock file, held while this process lives


def _reserved_range():
    """Ports for free_port(): below the kernel's ephemeral range, so that no
    bind to port 0 (shell and C tests, upstreams, outgoing connections) can
    land on them."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return (max(1024, low - 12000), low) if low > 2048 else (61000, 65535)


def free_port():
    """A port free on 127.0.0.1 and kept for this process until it exits.

    A test that restarts a server (a broker outage, gw.restart()) leaves its
    port free meanwhile; another test running in parallel must not take it,
    or the first test's clients reconnect to the second test's server (their
    streams and groups have the same names). So each port handed out is
    locked with flock on a file under /tmp/idem-test-ports-UID for the life
    of the process (a fixed path: TMPDIR may differ between tests), and the
    ports come from a range the kernel never hands out for port 0."""
    lo, hi = _reserved_range()
    d = "/tmp/idem-test-ports-%d" % os.getuid()
    os.makedirs(d, exist_ok=True)
    for _ in range(1000):
        p = random.randrange(lo, hi)
        if p in _held_ports:
            continue
        # a bare descriptor, not a file object: Python warns at exit about
        # file objects still open, and these stay open on purpose
        fd = os.open(os.path.join(d, str(p)), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            finally:
                s.close()
        except OSError:
            os.close(fd)  # held by another test process, or in use
            continue
        _held_ports[p] = fd
        return p
    raise RuntimeError("no free port in %d-%d" % (lo, hi))


def terminate(proc, timeout=10.0):
    """SIGTERM proc, wait up to timeout seconds, then SIGKILL it (and wait
    up to 5 s more)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def wait_for(pred, timeout, interval=0.02, what="condition"):
    """Poll pred() until it returns a true value; return it or raise
    TimeoutError naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def run_idem(args, timeout=30, env=None):
    """Run `idem ARGS...` to completion: (exit code, stdout, stderr)."""
    p = subprocess.run([idem_bin()] + list(args), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


class Response:
    """A complete HTTP response: status, headers (list of pairs), body."""

    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    def headers_all(self, name):
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    @property
    def replayed(self):
        return (self.header("Idempotent-Replayed") or "").strip().lower() == "true"

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "<Response %d %r %r>" % (self.status, self.headers, self.body[:300])


_live = set()
_live_lock = threading.Lock()
_spools = set()  # spool dirs of gateways not stopped yet


@atexit.register
def _kill_leftovers():
    with _live_lock:
        procs = list(_live)
        spools = list(_spools)
    for p in procs:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(5)
            except Exception:
                pass
    if not os.environ.get("IDEM_E2E_KEEP"):
        for d in spools:
            shutil.rmtree(d, True)


def _has_spool_arg(args):
    return any(a == "--spool" or str(a).startswith("--spool=") for a in args)


class IdemProcess:
    """An idem process whose stdout and stderr go to a temp file (kept over
    restarts), registered in _live so that a dying test run kills it."""

    SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer: detected",
                       "runtime error:", "WARNING: ThreadSanitizer")

    def __init__(self, env=None):
        self.env = env
        self.proc = None
        self._errf = None
        self._errpath = None
        self._errs = []  # stderr of earlier runs (restart)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def _spawn(self, kind):
        fd, self._errpath = tempfile.mkstemp(prefix="idem-%s-" % kind, suffix=".err")
        self._errf = os.fdopen(fd, "w+b")
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=self._errf, stderr=self._errf,
                                     env=self.env, start_new_session=True)
        with _live_lock:
            _live.add(self.proc)

    def _current_err(self):
        if not self._errpath:
            return ""
        with open(self._errpath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def port_taken(self):
        """Did the run that just ended fail on a port already in use?
        free_port() answers what was free a moment ago; with tests in
        parallel another process can take it first."""
        return "address already in use" in self._current_err().lower()

    def stderr(self):
        """Everything the process printed, over all its runs."""
        return "".join(self._errs) + self._current_err()

    def sanitizer_report(self):
        """The sanitizer report in stderr (from its first line), or None."""
        err = self.stderr()
        at = [err.find(m) for m in self.SANITIZER_MARKS if m in err]
        if not at:
            return None
        start = err.rfind("\n", 0, min(at)) + 1
        return err[start:start + 6000]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _reap(self):
        with _live_lock:
            _live.discard(self.proc)
        if self._errpath:
            self._errs.append(self._current_err())
            self._errf.close()
            os.unlink(self._errpath)
            self._errpath = None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        """SIGKILL, as a crash would. Returns the exit code."""
        if self.proc is None or self._errpath is None:
            return self.proc.returncode if self.proc else None
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._reap()
        return self.proc.returncode

    def wait_exit(self, timeout):
        """Wait for the process to exit on its own; return its code."""
        rc = self.proc.wait(timeout)
        self._reap()
        return rc


class Gateway(IdemProcess):
    """One `idem serve` process on 127.0.0.1 free ports."""

    def __init__(self, upstream_url, store="memory:e2e", args=(), admin=False,
                 port=None, admin_port=None, env=None):
        super().__init__(env)
        self.upstream_url = upstream_url
        self.store = store
        self.args = list(args)
        self.port = port or free_port()
        self.admin_port = (admin_port or free_port()) if admin else None
        # ports of its own choosing may move if another process takes one first
        self._may_move = port is None and admin_port is None
        self.spool_dir = None
        if not _has_spool_arg(self.args):
            self.spool_dir = tempfile.mkdtemp(prefix="idem-spool-")
            with _live_lock:
                _spools.add(self.spool_dir)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def argv(self):
        a = [idem_bin(), "serve", "--listen", "127.0.0.1:%d" % self.port]
        if self.upstream_url is not None:
            a += ["--upstream", self.upstream_url]
        if self.store is not None:
            a += ["--store", self.store]
        if self.admin_port:
            a += ["--admin-listen", "127.0.0.1:%d" % self.admin_port]
        if self.spool_dir is not None:
            a += ["--spool", self.spool_dir]
        return a + self.args

    def start(self, timeout=15.0):
        """Start and wait until "listening on" was printed and the port
        accepts connections; raise with the stderr if it exits first."""
        if self.spool_dir is not None:  # stop() removed it: start empty
            os.makedirs(self.spool_dir, 0o700, exist_ok=True)
            with _live_lock:
                _spools.add(self.spool_dir)
        self._spawn("serve")
        deadline = time.monotonic() + timeout
        moves = 0
        while True:
            if self.proc.poll() is not None:
                if self._may_move and moves < 3 and self.port_taken():
                    self._reap()
                    self.port = free_port()
                    self.admin_port = free_port() if self.admin_port else None
                    moves += 1
                    self._spawn("serve")
                    continue
                raise RuntimeError("idem serve exited %d before ready:\n%s"
                                   % (self.proc.returncode, self.stderr()))
            if "listening on" in self._current_err() and self._connects(self.port) and (
                    not self.admin_port or self._connects(self.admin_port)):
                return self
            if time.monotonic() > deadline:
                err = self.stderr()
                self.kill()
                raise RuntimeError("idem serve not ready after %.0fs:\n%s" % (timeout, err))
            time.sleep(0.02)

    @staticmethod
    def _connects(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self, timeout=10.0, keep_spool=False):
        """SIGTERM, wait up to timeout, then SIGKILL. Returns the exit code
        (negative: killed by that signal). Idempotent. Removes the spool
        dir unless keep_spool or IDEM_E2E_KEEP."""
        if self.proc is not None and self._errpath is not None:
            if self.proc.poll() is None:
                terminate(self.proc, timeout)
            self._reap()
        if not keep_spool:
            self._remove_spool()
        return self.proc.returncode if self.proc else None

    def _remove_spool(self):
        if self.spool_dir is None:
            return
        with _live_lock:
            _spools.discard(self.spool_dir)
        if not os.environ.get("IDEM_E2E_KEEP"):
            shutil.rmtree(self.spool_dir, True)

    def restart(self, timeout=15.0):
        """Start again with the same flags and ports (after stop or kill)."""
        if self.alive():
            self.stop(keep_spool=True)
        return self.start(timeout)

    # ---- requests ---------------------------------------------------------
    def request(self, method, target, body=None, headers=None, key=None,
                timeout=30.0, port=None):
        """One request on a fresh connection; key sets Idempotency-Key (and
        X-Test-Id, so the upstream counts it under the same name)."""
        h = {}
        if key is not None:
            h["Idempotency-Key"] = key
            h["X-Test-Id"] = key
        h.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        try:
            if body is None and method in ("POST", "PUT", "PATCH"):
                body = b""
            conn.request(method, target, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            return Response(r.status, r.reason, r.getheaders(), data)
        finally:
            conn.close()

    def admin_request(self, method, target, timeout=10.0):
        assert self.admin_port, "gateway started without admin=True"
        return self.request(method, target, timeout=timeout, port=self.admin_port)


class RawConn:
    """A raw TCP client for framing tests."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def send_until_answered(self, data, step=16384):
        """Send data in pieces, stopping early (without error) when the
        peer answers or closes. Returns the number of bytes sent."""
        import select
        sent = 0
        while sent < len(data):
            r, w, _ = select.select([self.sock], [self.sock], [], 10)
            if r:
                return sent
            if not w:
                raise TimeoutError("socket not writable for 10s")
            try:
                sent += self.sock.send(data[sent:sent + step])
            except (BrokenPipeError, ConnectionResetError):
                return sent
        return sent

    def _fill(self, deadline):
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("connection closed by peer")
        self.buf += chunk

    def _line(self, deadline):
        while b"\r\n" not in self.buf:
            self._fill(deadline)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n, deadline):
        while len(self.buf) < n:
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, timeout=10.0, head=False):
        """Read one response (Content-Length, chunked or until close)."""
        deadline = time.monotonic() + timeout
        line = self._line(deadline)
        m = re.match(rb"HTTP/1\.[01] (\d{3})(?: (.*))?$", line)
        if not m:
            raise ValueError("bad status line %r" % line)
        status = int(m.group(1))
        reason = (m.group(2) or b"").decode("latin-1")
        headers = []
        while True:
            line = self._line(deadline)
            if not line:
                break
            k, _, v = line.partition(b":")
            headers.append((k.decode("latin-1").strip(), v.decode("latin-1").strip()))
        resp = Response(status, reason, headers, b"")
        if head or status in (204, 304) or 100 <= status < 200:
            return resp
        te = (resp.header("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            body = b""
            while True:
                size = int(self._line(deadline).split(b";")[0], 16)
                if size == 0:
                    while self._line(deadline):
                        pass
                    break
                body += self._exact(size, deadline)
                self._exact(2, deadline)
            resp.body = body
        elif resp.header("Content-Length") is not None:
            resp.body = self._exact(int(resp.header("Content-Length")), deadline)
        else:
            try:
                while True:
                    self._fill(deadline)
            except EOFError:
                pass
            resp.body, self.buf = self.buf, b""
        return resp

    def closed(self, timeout=5.0):
        """True when the peer closes (EOF or reset) within timeout with no
        further bytes; False if it stays open; raises if bytes arrive."""
        if self.buf:
            raise AssertionError("unexpected bytes pending: %r" % self.buf[:200])
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    chunk = self.sock.recv(65536)
                except socket.timeout:
                    return False
                if not chunk:
                    return True
                raise AssertionError("unexpected bytes after response: %r" % chunk[:200])
        except ConnectionResetError:
            return True
        return False


class LoadClients:
    """n client threads running self.run(i) until stop(); a subclass writes
    run and checks self.stopping (an Event) between requests."""

    def __init__(self, n):
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(n)]

    def run(self, i):
        raise NotImplementedError

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout=60.0):
        """Stop and join them: whether every thread ended in time."""
        self.stopping.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)


def rss_kib(pid):
    """The resident memory of a process, KiB (0 when it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def request_in_background(gw, method, target, **kw):
    """gw.request(method, target, **kw) on a thread of its own: (thread,
    res), res["r"] the response or res["err"] what it raised."""
    res = {}

    def run():
        try:
            res["r"] = gw.request(method, target, **kw)
        except Exception as e:  # reported by the caller
            res["err"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, res


def request_bytes(method, target, body=b"", headers=None, key=None):
    """Serialize one HTTP/1.1 request with Content-Length framing."""
    h = [("Host", "127.0.0.1")]
    if key is not None:
        h += [("Idempotency-Key", key), ("X-Test-Id", key)]
    h += list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
    if body or method in ("POST", "PUT", "PATCH"):
        h.append(("Content-Length", str(len(body))))
    out = ("%s %s HTTP/1.1\r\n" % (method, target)).encode()
    for k, v in h:
        out += k.encode("latin-1") + b": " + (v if isinstance(v, bytes) else v.encode("latin-1")) + b"\r\n"
    return out + b"\r\n" + body


def finish_process(test, proc):
    """Stop an IdemProcess at the end of a test; its sanitizer report, if
    any, fails the test."""
    proc.stop()
    rep = proc.sanitizer_report()
    if rep:
        test.fail("sanitizer report from %s (pid %s):\n%s" % (proc.argv()[1], proc.pid, rep))


class GatewayTestCase(unittest.TestCase):
    """unittest base: start_upstream()/start_gateway() stop what they start."""

    def start_upstream(self, port=0):
        up = Upstream(port).start()
        self.addCleanup(up.stop)
        return up

    def start_gateway(self, upstream=None, *args, store="memory:e2e", admin=False,
                      start=True, **kw):
        url = upstream.url if isinstance(upstream, Upstream) else upstream
        gw = Gateway(url, store=store, args=args, admin=admin, **kw)
        self.addCleanup(self._finish_gateway, gw)
        self._gateways = getattr(self, "_gateways", []) + [gw]
        if start:
            gw.start()
        return gw

    def _finish_gateway(self, gw):
        finish_process(self, gw)

    def twice(self, gw, method, target, body, key):
        """The same request twice through gw; the first must get 200."""
        r1 = gw.request(method, target, body=body, key=key)
        r2 = gw.request(method, target, body=body, key=key)
        self.assertEqual(r1.status, 200, self.gw_log())
        return r1, r2

    def tempdir(self):
        d = tempfile.mkdtemp(prefix="idem-e2e-")
        if not os.environ.get("IDEM_E2E_KEEP"):
            self.addCleanup(shutil.rmtree, d, True)
        return d

    def gw_log(self):
        """Stderr of every gateway this test started, for failure messages."""
        return "\n".join("--- idem serve stderr ---\n" + g.stderr()[-4000:]
                         for g in getattr(self, "_gateways", []))

    def assertProblem(self, r, status, msg=None):
        """r is an RFC 9457 problem with this status."""
        ctx = "%s\nresponse: %r" % (msg or "", r)
        self.assertEqual(r.status, status, ctx)
        ct = (r.header("Content-Type") or "").split(";")[0].strip().lower()
        self.assertEqual(ct, "application/problem+json", ctx)
        try:
            doc = r.json()
        except ValueError:
            self.fail("problem body is not JSON: %s" % ctx)
        self.assertIsInstance(doc, dict, ctx)
        for f in ("type", "title", "detail"):
            self.assertIsInstance(doc.get(f), str, "problem lacks string %r: %s" % (f, ctx))
            self.assertTrue(doc[f], "problem has empty %r: %s" % (f, ctx))
        self.assertEqual(doc.get("status"), status, "problem status: %s" % ctx)
        return doc


def main():
    """unittest.main with verbosity; exits non-zero on any failure."""
    unittest.main(verbosity=2)
