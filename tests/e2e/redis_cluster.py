"""redis_cluster.py - a throwaway Redis Cluster of real redis-server
processes for the tests (tests/e2e/test_redis_cluster*.py, and the contract
suite through tests/support/with-redis-cluster.sh). Stdlib only.

    c = RedisCluster(primaries=3, replicas=1).start()  # 6 nodes, all slots served
    c.uri                       # redis+cluster://127.0.0.1:P1,127.0.0.1:P2
    node.asking("EXISTS", k)    # a command after ASKING (a slot being imported)
    c.primary_of(slot)          # the node (a RedisServer) serving slot now
    c.kill(node)                # SIGKILL; c.wait_promoted(slot, old) waits for its replica
    c.migrate_begin(slot, src, dst) / c.migrate_keys(slot, src, dst) / c.migrate_end(slot, dst)
    c.cleanup()                 # stop every node by PID, remove their dirs

The cluster is built by hand, as redis-cli --cluster create does: each node
gets its own config epoch, meets the first, the primaries take a third of
the slots each, the replicas REPLICATE them; start() returns once every
node says cluster_state:ok and every replica's link is up. Each node's bus
port is a free port of its own (--cluster-port), not port+10000.
cluster-node-timeout is short (default 1000 ms), so a killed primary's
replica is promoted within a few seconds.

Run as a program, it wraps a command: `python3 redis_cluster.py CMD ARG...`
starts a cluster, replaces {REDIS_CLUSTER_URI} in the arguments, runs CMD
(with IDEM_TEST_REDIS_CLUSTER_URI in its environment), stops the cluster and
exits with CMD's status.
"""

import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import free_port, wait_for  # noqa: E402
from redis_server import RedisServer, _Reader, _encode  # noqa: E402

SLOTS = 16384


def crc16(data):
    """CRC16-CCITT (XMODEM), the Cluster's key hash."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def key_slot(name):
    name = name.encode() if isinstance(name, str) else name
    s = name.find(b"{")
    if s >= 0:
        e = name.find(b"}", s + 1)
        if e > s + 1:
            name = name[s + 1:e]
    return crc16(name) % SLOTS


def record_name(key, scope="", prefix="idem"):
    """The Redis key idem gives a record (src/store/redis_uri.c)."""
    return "%s:{%d:%s:%s}" % (prefix, len(scope.encode()), scope, key)


class ClusterNode(RedisServer):
    name = "redis-cluster-node"

    def __init__(self, node_timeout_ms, aof):
        super().__init__(aof=aof)
        self.bus_port = free_port()
        self.node_timeout_ms = node_timeout_ms
        self.id = None

    def argv(self):
        return super().argv() + [
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-port", str(self.bus_port),
            # a replica may take over however long it was cut off (the tests
            # kill primaries on purpose)
            "--cluster-replica-validity-factor", "0",
            "--cluster-require-full-coverage", "yes"]

    def info(self, section):
        text = self.command("INFO", section)
        text = text.decode() if isinstance(text, bytes) else text
        out = {}
        for line in text.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def asking(self, *args, timeout=2.0):
        """One command after ASKING, on one connection: what a node importing
        a slot holds of it."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            sock.sendall(_encode(["ASKING"]) + _encode(args))
            reader = _Reader(sock)
            reader.reply()
            return reader.reply()
        finally:
            sock.close()

    def cluster_info(self):
        text = self.command("CLUSTER", "INFO")
        text = text.decode() if isinstance(text, bytes) else text
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


class RedisCluster:
    def __init__(self, primaries=3, replicas=1, node_timeout_ms=1000, aof=False):
        self.nprimaries = primaries
        self.nodes = [ClusterNode(node_timeout_ms, aof) for _ in range(primaries * (1 + replicas))]
        self.replicas = replicas

    @property
    def uri(self):
        return "redis+cluster://" + ",".join("127.0.0.1:%d" % n.port for n in self.nodes[:2])

    def start(self, timeout=60.0):
        try:
            self._build(timeout)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _build(self, timeout):
        for i, n in enumerate(self.nodes):
            n.start()
            n.id = self._str(n.command("CLUSTER", "MYID"))
            n.command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)
        first = self.nodes[0]
        for n in self.nodes[1:]:
            n.command("CLUSTER", "MEET", "127.0.0.1", first.port, first.bus_port)
        wait_for(lambda: all(self._known(n) == len(self.nodes) for n in self.nodes),
                 timeout, what="every node to know every other")
        per = SLOTS // self.nprimaries
        for i, p in enumerate(self.nodes[:self.nprimaries]):
            lo = i * per
            hi = SLOTS - 1 if i == self.nprimaries - 1 else (i + 1) * per - 1
            p.command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for i, r in enumerate(self.nodes[self.nprimaries:]):
            primary = self.nodes[i % self.nprimaries]
            wait_for(lambda: self._knows_primary(r, primary), timeout, what="replica to see its primary")
            r.command("CLUSTER", "REPLICATE", primary.id)
        self.wait_ok(timeout)

    def wait_ok(self, timeout=60.0, nodes=None):
        """Until every (live) node says cluster_state:ok and every replica's link is up."""
        def ok():
            for n in nodes or self.nodes:
                if not n.alive():
                    continue
                if n.cluster_info().get("cluster_state") != "ok":
                    return False
                rep = n.info("replication")
                if rep.get("role") == "slave" and rep.get("master_link_status") != "up":
                    return False
            return True
        wait_for(ok, timeout, interval=0.05, what="cluster_state:ok")

    @staticmethod
    def _str(v):
        return v.decode() if isinstance(v, bytes) else v

    def _nodes_lines(self, n):
        return [l.split() for l in self._str(n.command("CLUSTER", "NODES")).splitlines() if l]

    def _known(self, n):
        return len(self._nodes_lines(n))

    def _knows_primary(self, n, primary):
        return any(f[0] == primary.id and "master" in f[2] for f in self._nodes_lines(n))

    def by_id(self, node_id):
        return next(n for n in self.nodes if n.id == node_id)

    def primary_of(self, slot, ask=None):
        """The node serving slot, as a live node (ask, or any) sees the map."""
        ask = ask or next(n for n in self.nodes if n.alive())
        for entry in ask.command("CLUSTER", "SLOTS"):
            if entry[0] <= slot <= entry[1]:
                return self.by_id(self._str(entry[2][2]))
        return None

    def kill(self, node):
        node.kill()

    def wait_promoted(self, slot, old, timeout=60.0):
        """Until a live node names another primary than old for slot; returns it."""
        def promoted():
            for n in self.nodes:
                if n is old or not n.alive():
                    continue
                p = self.primary_of(slot, ask=n)
                if p is None or p is old:
                    return False
            return True
        wait_for(promoted, timeout, interval=0.05, what="a replica to be promoted")
        return self.primary_of(slot, ask=next(n for n in self.nodes if n.alive() and n is not old))

    def restart(self, node, timeout=60.0):
        """Start a killed node again (same port, dir, nodes.conf): it rejoins,
        as a replica of the primary that took its slots."""
        node.start()
        self.wait_ok(timeout)

    # -- slot migration, step by step (as redis-cli --cluster reshard does)

    def migrate_begin(self, slot, src, dst):
        dst.command("CLUSTER", "SETSLOT", slot, "IMPORTING", src.id)
        src.command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id)

    def migrate_keys(self, slot, src, dst):
        while True:
            keys = src.command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                return
            src.command("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)

    def migrate_end(self, slot, dst, target_first=True):
        """Every primary learns that dst serves slot: the target first (it
        stops importing), as redis-cli does; target_first=False tells it last,
        so that for a moment the source sends the slot's keys to the target
        with MOVED and the target, still importing, sends them back."""
        masters = [n for n in self.nodes if n.alive() and n is not dst
                   and self._str(n.info("replication").get("role")) == "master"]
        for n in ([dst] + masters if target_first else masters + [dst]):
            n.command("CLUSTER", "SETSLOT", slot, "NODE", dst.id)

    def cleanup(self):
        for n in self.nodes:
            n.cleanup()


def main(argv):
    if not argv:
        print("usage: redis_cluster.py CMD [ARG...]  ({REDIS_CLUSTER_URI} in ARGs is replaced)",
              file=sys.stderr)
        return 2
    # a wrapper stopped (ctest's timeout, Ctrl-C) still stops its six nodes
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, f: sys.exit(128 + n))
    c = RedisCluster().start()
    try:
        args = [a.replace("{REDIS_CLUSTER_URI}", c.uri) for a in argv]
        env = dict(os.environ, IDEM_TEST_REDIS_CLUSTER_URI=c.uri)
        return subprocess.call(args, env=env)
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
