"""rabbitmq_server.py - a throwaway rabbitmq-server for the e2e tests, and a
minimal AMQP 0-9-1 client (stdlib only) for what the tests need of it:

    rs = RabbitServer().start()     # temp dir, free loopback ports, its own epmd
    rs.kill(); rs.start()           # SIGKILL, then again on the same ports and dir
    rs.queue_counts("q")            # (ready, unacked), from rabbitmqctl
    c = AmqpClient(rs.port)
    c.publish_many("q", [(body, {"message_id": "k1", "headers": {...}}), ...])  # confirmed
    c.get_all("q.dead")             # [(properties, body)], acked
    rs.cleanup()

The server gets RABBITMQ_MNESIA_BASE, RABBITMQ_NODENAME, RABBITMQ_NODE_PORT,
RABBITMQ_DIST_PORT and an epmd (ERL_EPMD_PORT) of its own, all on 127.0.0.1,
so tests never meet another RabbitMQ; it is stopped by process id, its epmd
too (found by the environment it inherited).
"""

import os
import shutil
import signal
import socket
import struct
import subprocess

from harness import free_port
from server_process import ServerProcess

RMQ_BIN = "/usr/lib/rabbitmq/bin"


class RabbitServer(ServerProcess):
    name = "rabbitmq"

    def __init__(self):
        super().__init__()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = "idemtest%d@localhost" % self.port
        with open(os.path.join(self.dir, "rabbitmq.conf"), "w") as f:
            f.write("loopback_users = none\nlisteners.tcp.default = 127.0.0.1:%d\n" % self.port)
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[].\n")

    @property
    def url(self):
        return "amqp://guest:guest@127.0.0.1:%d/%%2f" % self.port

    def env(self):
        e = dict(os.environ)
        e.update({"HOME": self.dir, "ERL_EPMD_PORT": str(self.epmd_port),
                  "ERL_EPMD_ADDRESS": "127.0.0.1",
                  "RABBITMQ_MNESIA_BASE": os.path.join(self.dir, "mnesia"),
                  "RABBITMQ_LOG_BASE": os.path.join(self.dir, "log"),
                  "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
                  "RABBITMQ_DIST_PORT": str(self.dist_port),
                  "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                  "RABBITMQ_CONFIG_FILE": os.path.join(self.dir, "rabbitmq"),
                  "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(self.dir, "enabled_plugins"),
                  "RABBITMQ_CONF_ENV_FILE": os.path.join(self.dir, "env"),
                  "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(self.dir, "advanced.config")})
        return e

    def start(self, timeout=90.0):
        if self.alive():
            return self
        self.spawn([os.path.join(RMQ_BIN, "rabbitmq-server")], env=self.env())
        return self.wait_ready(lambda: AmqpClient(self.port).close() or True, timeout, interval=0.2)

    def kill(self):
        """SIGKILL the node (the shell, beam and its children: one process group)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

    def _own_epmd(self):
        """PIDs of the epmd this server started (it daemonizes: found by the
        environment it inherited, which names this server's dir and port)."""
        mark = ("ERL_EPMD_PORT=%d" % self.epmd_port).encode()
        home = ("HOME=%s" % self.dir).encode()
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    if b"epmd" not in f.read():
                        continue
                with open("/proc/%s/environ" % d, "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if mark in env and home in env:
                pids.append(int(d))
        return pids

    def cleanup(self):
        self.kill()
        for pid in self._own_epmd():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if not os.environ.get("IDEM_E2E_KEEP"):
            shutil.rmtree(self.dir, True)

    def queue_counts(self, queue):
        """(ready, unacked) of a queue, (0, 0) when it does not exist."""
        p = subprocess.run([os.path.join(RMQ_BIN, "rabbitmqctl"), "-n", self.node, "-q",
                            "list_queues", "name", "messages_ready", "messages_unacknowledged"],
                           env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           timeout=60)
        for line in p.stdout.decode().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == queue:
                return int(parts[1]), int(parts[2])
        if p.returncode:
            raise RuntimeError("rabbitmqctl failed")
        return 0, 0


# ---- a minimal AMQP 0-9-1 client ----

def _shortstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("B", len(b)) + b


def _longstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">I", len(b)) + b


class Typed:
    """A field value of an explicit AMQP kind: Typed("f", 1.5) (float32),
    Typed("T", seconds) (timestamp), Typed("D", (digits after the point,
    units)) (decimal: (2, 12345) is 123.45)."""

    def __init__(self, kind, value):
        self.kind, self.value = kind, value

    def __eq__(self, other):
        return isinstance(other, Typed) and (self.kind, self.value) == (other.kind, other.value)

    def __repr__(self):
        return "Typed(%r, %r)" % (self.kind, self.value)


def _value(v):
    """A field value: str S, bool t, int l, float d, dict F, list A, None V,
    Typed as it says."""
    if isinstance(v, Typed):
        fmt = ">" + {"f": "f", "T": "Q", "D": "BI"}[v.kind]
        return v.kind.encode() + struct.pack(fmt, *(v.value if v.kind == "D" else (v.value,)))
    if isinstance(v, bool):
        return b"t" + struct.pack("B", v)
    if isinstance(v, int):
        return b"l" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"d" + struct.pack(">d", v)
    if isinstance(v, dict):
        return b"F" + _table(v)
    if isinstance(v, list):
        items = b"".join(_value(x) for x in v)
        return b"A" + struct.pack(">I", len(items)) + items
    if v is None:
        return b"V"
    return b"S" + _longstr(v)


def _table(d):
    out = b"".join(_shortstr(k) + _value(v) for k, v in (d or {}).items())
    return struct.pack(">I", len(out)) + out


class _Reader:
    def __init__(self, data):
        self.d, self.i = data, 0

    def take(self, n):
        v = self.d[self.i:self.i + n]
        self.i += n
        return v

    def u(self, fmt):
        n = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(n))[0]

    def shortstr(self):
        return self.take(self.u("B")).decode("utf-8", "replace")

    def longstr(self):
        return self.take(self.u(">I"))

    def value(self):
        k = self.take(1)
        if k == b"S":
            return self.longstr().decode("utf-8", "replace")
        if k == b"I":
            return self.u(">i")
        if k == b"l":
            return self.u(">q")
        if k == b"t":
            return bool(self.u("B"))
        if k == b"F":
            return self.table()
        if k == b"d":
            return self.u(">d")
        if k == b"f":
            return Typed("f", self.u(">f"))
        if k == b"T":
            return Typed("T", self.u(">Q"))
        if k == b"D":
            return Typed("D", (self.u("B"), self.u(">I")))
        if k == b"V":
            return None
        if k == b"A":
            end = self.u(">I") + self.i
            out = []
            while self.i < end:
                out.append(self.value())
            return out
        raise ValueError("field kind %r" % k)

    def table(self):
        end = self.u(">I") + self.i
        out = {}
        while self.i < end:
            k = self.shortstr()
            out[k] = self.value()
        return out


# basic properties, in flag order (bit 15 first)
_PROPS = [("content_type", "s"), ("content_encoding", "s"), ("headers", "t"),
          ("delivery_mode", "B"), ("priority", "B"), ("correlation_id", "s"),
          ("reply_to", "s"), ("expiration", "s"), ("message_id", "s"), ("timestamp", "Q"),
          ("type", "s"), ("user_id", "s"), ("app_id", "s"), ("cluster_id", "s")]


def _encode_props(p):
    flags, out = 0, b""
    for i, (name, kind) in enumerate(_PROPS):
        if name in p:
            flags |= 1 << (15 - i)
            v = p[name]
            out += _shortstr(v) if kind == "s" else _table(v) if kind == "t" else struct.pack(">" + kind, v)
    return struct.pack(">H", flags) + out


def _decode_props(r):
    flags = r.u(">H")
    p = {}
    for i, (name, kind) in enumerate(_PROPS):
        if flags & (1 << (15 - i)):
            p[name] = r.shortstr() if kind == "s" else r.table() if kind == "t" else r.u(">" + kind)
    return p


class AmqpClient:
    """One connection, channel 1, publisher confirms on."""

    def __init__(self, port, timeout=30.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""
        self.s.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(10, 10)  # connection.start
        self._method(0, 10, 11, _table({}) + _shortstr("PLAIN") +
                     _longstr(b"\x00guest\x00guest") + _shortstr("en_US"))
        _, _, args = self._expect(10, 30)  # tune
        r = _Reader(args)
        chmax, fmax = r.u(">H"), r.u(">I")
        self._method(0, 10, 31, struct.pack(">HIH", chmax, fmax, 0))
        self._method(0, 10, 40, _shortstr("/") + _shortstr("") + b"\x00")
        self._expect(10, 41)
        self._method(1, 20, 10, _shortstr(""))
        self._expect(20, 11)
        self._method(1, 85, 10, b"\x00")  # confirm.select
        self._expect(85, 11)
        self.seq = 0

    def close(self):
        self.s.close()

    def _frame(self):
        while True:
            if len(self.buf) >= 7:
                t, ch, size = struct.unpack(">BHI", self.buf[:7])
                if len(self.buf) >= 8 + size:
                    payload = self.buf[7:7 + size]
                    self.buf = self.buf[8 + size:]
                    return t, ch, payload
            chunk = self.s.recv(65536)
            if not chunk:
                raise RuntimeError("AMQP connection closed")
            self.buf += chunk

    def _method(self, ch, cls, mid, args):
        payload = struct.pack(">HH", cls, mid) + args
        self.s.sendall(struct.pack(">BHI", 1, ch, len(payload)) + payload + b"\xce")

    def _expect(self, cls, mid):
        while True:
            t, ch, payload = self._frame()
            if t != 1:
                continue
            c, m = struct.unpack(">HH", payload[:4])
            if (c, m) in ((10, 50), (20, 40)):
                raise RuntimeError("AMQP closed: %r" % payload[4:80])
            if (c, m) == (cls, mid):
                return c, m, payload[4:]

    def declare(self, queue, arguments=None):
        """A durable queue, with its x-arguments if given."""
        self._method(1, 50, 10, b"\x00\x00" + _shortstr(queue) + b"\x02" + _table(arguments))
        self._expect(50, 11)

    def publish_many(self, queue, msgs):
        """(body, properties) pairs to the default exchange, routed to queue;
        waits for every confirm."""
        out = b""
        for body, props in msgs:
            body = body.encode() if isinstance(body, str) else body
            p = dict(props or {})
            p.setdefault("delivery_mode", 2)
            pay = struct.pack(">HH", 60, 40) + b"\x00\x00" + _shortstr("") + _shortstr(queue) + b"\x00"
            out += struct.pack(">BHI", 1, 1, len(pay)) + pay + b"\xce"
            hdr = struct.pack(">HHQ", 60, 0, len(body)) + _encode_props(p)
            out += struct.pack(">BHI", 2, 1, len(hdr)) + hdr + b"\xce"
            if body:
                out += struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce"
            self.seq += 1
            if len(out) > 1 << 20:
                self.s.sendall(out)
                out = b""
        self.s.sendall(out)
        confirmed = 0
        while confirmed < self.seq:
            t, ch, payload = self._frame()
            c, m = struct.unpack(">HH", payload[:4]) if t == 1 else (0, 0)
            if (c, m) == (60, 80):
                tag, multiple = struct.unpack(">QB", payload[4:13])
                confirmed = tag if multiple & 1 else max(confirmed, tag)
            elif (c, m) == (60, 120):
                raise RuntimeError("publish nacked")

    def get_all(self, queue):
        """Every message of queue (basic.get, acked): [(properties, body)]."""
        out = []
        while True:
            self._method(1, 60, 70, b"\x00\x00" + _shortstr(queue) + b"\x00")
            while True:
                t, ch, payload = self._frame()
                c, m = struct.unpack(">HH", payload[:4]) if t == 1 else (0, 0)
                if (c, m) in ((60, 71), (60, 72)):
                    break
                if (c, m) == (20, 40):
                    return out  # no such queue
            if m == 72:
                return out
            tag = struct.unpack(">Q", payload[4:12])[0]
            t, ch, hdr = self._frame()
            r = _Reader(hdr)
            r.take(4)
            size = r.u(">Q")
            props = _decode_props(r)
            body = b""
            while len(body) < size:
                body += self._frame()[2]
            self._method(1, 60, 80, struct.pack(">QB", tag, 0))
            out.append((props, body))
