"""nats_server.py - a throwaway nats-server with JetStream for the e2e tests,
and a minimal NATS client (stdlib only) for what the tests need of it:

    ns = NatsServer().start()          # temp dir, free 127.0.0.1 port, -js
    ns.kill(); ns.start()              # SIGKILL, then again on the same port and dir
    c = NatsClient(ns.port)
    c.js("STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders"]})
    c.publish_many("orders", [(b"body", {"Nats-Msg-Id": "k1"}), ...])   # JetStream-acked
    c.js("CONSUMER.INFO.ORDERS.billing")   # {"num_ack_pending": ..., "num_pending": ...}
    c.stream_messages("ORDERS_DEAD")   # [(headers, body)]
    ns.cleanup()

JetStream keeps its files in the temp dir, fsynced as nats-server does by
default; a restart on the same dir finds streams and consumers again.
"""

import base64
import json
import os
import shutil
import socket

from server_process import ServerProcess


def nats_server_bin():
    b = os.environ.get("NATS_SERVER") or shutil.which("nats-server")
    for c in (b, "/usr/bin/nats-server", "/usr/sbin/nats-server"):
        if c and os.access(c, os.X_OK):
            return c
    raise RuntimeError("nats-server not found (apt-get install nats-server, or set NATS_SERVER)")


class NatsServer(ServerProcess):
    name = "nats"

    @property
    def url(self):
        return "nats://127.0.0.1:%d" % self.port

    def start(self, timeout=15.0):
        if self.alive():
            return self
        self.spawn([nats_server_bin(), "-js", "-a", "127.0.0.1", "-p", str(self.port),
                    "-sd", os.path.join(self.dir, "js"), "-l", self._log])
        return self.wait_ready(lambda: NatsClient(self.port).js("INFO", timeout=1.0) is not None,
                               timeout)


class NatsClient:
    """One connection per call: CONNECT, then requests over an inbox."""

    def __init__(self, port):
        self.port = port

    def _open(self, timeout):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        f = s.makefile("rb")
        if not f.readline().startswith(b"INFO"):
            raise RuntimeError("not a NATS server")
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                  b'"no_responders":true}\r\nSUB _INBOX.t.* 1\r\nPING\r\n')
        while f.readline().strip() != b"PONG":
            pass
        return s, f

    @staticmethod
    def _read_msg(f, sock):
        """Read until one MSG/HMSG: (subject, headers dict, payload)."""
        while True:
            line = f.readline()
            if not line:
                raise RuntimeError("NATS connection closed")
            parts = line.split()
            if not parts:
                continue
            if parts[0] == b"PING":
                sock.sendall(b"PONG\r\n")
            elif parts[0] == b"MSG":
                n = int(parts[-1])
                data = f.read(n + 2)[:n]
                return parts[1].decode(), {}, data
            elif parts[0] == b"HMSG":
                hlen, total = int(parts[-2]), int(parts[-1])
                data = f.read(total + 2)[:total]
                return parts[1].decode(), _parse_headers(data[:hlen]), data[hlen:]
            elif parts[0] == b"-ERR":
                raise RuntimeError(line.decode())

    def js(self, api, payload=None, timeout=5.0):
        """A JetStream API request ($JS.API.<api>); the decoded JSON answer,
        RuntimeError when it holds an error."""
        s, f = self._open(timeout)
        try:
            body = json.dumps(payload).encode() if payload is not None else b""
            s.sendall(b"PUB $JS.API.%s _INBOX.t.0 %d\r\n%s\r\n" % (api.encode(), len(body), body))
            _, hdrs, data = self._read_msg(f, s)
            if hdrs.get(":status") == "503":
                raise RuntimeError("no responders (JetStream not ready)")
            out = json.loads(data)
            if "error" in out:
                raise RuntimeError(out["error"])
            return out
        finally:
            s.close()

    def publish_many(self, subject, msgs, timeout=60.0):
        """Publish (body, headers) pairs to JetStream, pipelined; wait for
        every publish ack. Returns the acks. Headers: a dict, or a list of
        (name, value) pairs for a header given more than once."""
        s, f = self._open(timeout)
        try:
            out = []
            for i in range(0, len(msgs), 1000):
                buf = []
                for j, (body, hdrs) in enumerate(msgs[i:i + 1000]):
                    pairs = (hdrs or {}).items() if isinstance(hdrs or {}, dict) else hdrs
                    h = b"NATS/1.0\r\n" + b"".join(
                        b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in pairs) + b"\r\n"
                    buf.append(b"HPUB %s _INBOX.t.%d %d %d\r\n%s%s\r\n"
                               % (subject.encode(), i + j, len(h), len(h) + len(body), h, body))
                s.sendall(b"".join(buf))
                for _ in range(len(buf)):
                    _, _, data = self._read_msg(f, s)
                    ack = json.loads(data)
                    if "error" in ack:
                        raise RuntimeError(ack["error"])
                    out.append(ack)
            return out
        finally:
            s.close()

    def stream_messages(self, stream, every_value=False):
        """Every message of a stream: [(headers, body)]; with every_value,
        headers map each name to the list of its values."""
        try:
            info = self.js("STREAM.INFO." + stream)
        except RuntimeError:
            return []
        st = info["state"]
        out = []
        for seq in range(st["first_seq"], st["last_seq"] + 1) if st["messages"] else []:
            try:
                m = self.js("STREAM.MSG.GET." + stream, {"seq": seq})["message"]
            except RuntimeError:
                continue
            hdrs = (_parse_headers(base64.b64decode(m["hdrs"]), every_value) if m.get("hdrs")
                    else {})
            out.append((hdrs, base64.b64decode(m.get("data", ""))))
        return out


def _parse_headers(block, every_value=False):
    lines = block.decode("utf-8", "replace").split("\r\n")
    out = {}
    first = lines[0].split()
    if len(first) >= 2:
        out[":status"] = [first[1]] if every_value else first[1]
    for ln in lines[1:]:
        if ":" in ln:
            k, _, v = ln.partition(":")
            if every_value:
                out.setdefault(k.strip(), []).append(v.strip())
            else:
                out.setdefault(k.strip(), v.strip())
    return out
