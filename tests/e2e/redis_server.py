"""redis_server.py - a throwaway redis-server for the e2e tests that need to
kill and restart it (tests/e2e/test_redis_*.py). Stdlib only.

    rs = RedisServer(aof=True).start()   # temp dir, free 127.0.0.1 port
    rs.uri                               # redis://127.0.0.1:PORT
    rs.kill()                            # SIGKILL, as a crash would
    rs.start()                           # again, same port and same dir
    rs.command("DBSIZE")                 # one command over a plain socket
    rs.stop()                            # SIGTERM, wait; rs.cleanup() removes the dir

With aof=True the server keeps an append-only file fsynced on every write
(appendfsync always): whatever it acknowledged survives a SIGKILL, as a
production deployment that promises durability would configure it. Without
it, nothing is persisted.

redis-server is found like tests/support/with-redis.sh does: REDIS_SERVER,
PATH, /usr/bin, /usr/sbin.
"""

import os
import shutil
import socket

from server_process import ServerProcess


def redis_server_bin():
    b = os.environ.get("REDIS_SERVER")
    if b:
        return b
    b = shutil.which("redis-server")
    if b:
        return b
    for c in ("/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(c, os.X_OK):
            return c
    raise RuntimeError("redis-server not found (apt-get install redis-server, or set REDIS_SERVER)")


def _encode(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class _Reader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError("bad reply %r" % line)


class RedisServer(ServerProcess):
    name = "redis"

    def __init__(self, aof=False, port=None, extra=()):
        super().__init__(port)
        self.aof = aof
        self.extra = list(extra)

    @property
    def uri(self):
        return "redis://127.0.0.1:%d" % self.port

    def argv(self):
        a = [redis_server_bin(), "--bind", "127.0.0.1", "--port", str(self.port),
             "--dir", self.dir, "--save", "", "--daemonize", "no",
             "--logfile", self._log]
        if self.aof:
            a += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            a += ["--appendonly", "no"]
        return a + self.extra

    def start(self, timeout=10.0):
        """Start (or start again, same port and dir) and wait for PING (a
        server still loading its AOF answers an error: not yet)."""
        if self.alive():
            return self
        self.spawn(self.argv())
        return self.wait_ready(lambda: self.command("PING") == "PONG", timeout, interval=0.02)

    def command(self, *args, timeout=2.0):
        """Send one command on a fresh connection and return its reply."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(_encode(args))
            return _Reader(s).reply()
        finally:
            s.close()
