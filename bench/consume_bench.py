"""consume_bench.py - `idem consume` on lmdb: vs the same consumer forwarding
without a store (IDEM_BENCH_NO_STORE=1, a benchmark switch, not a product
mode), per broker, side by side in one run. Driven by consume_bench.sh.

For each broker and round: N messages are published first (unique keys),
then one consumer drains them into nginx (a fixed 200); messages/s is N over
the time from the consumer's start until its /metrics count N settled, and
p50/p99 per message (receipt to ack) are read from its idem_message_seconds
histogram (interpolated within buckets). Rounds alternate lmdb and
forwarder, so both see the same machine state.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "tests", "e2e")
sys.path.insert(0, E2E)

from harness import free_port, wait_for  # noqa: E402
from consume_harness import Consumer, RedisClient  # noqa: E402
from redis_server import RedisServer  # noqa: E402
from nats_server import NatsClient, NatsServer  # noqa: E402
from rabbitmq_server import AmqpClient, RabbitServer  # noqa: E402

N = int(os.environ.get("BENCH_MESSAGES", "20000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
CONC = os.environ.get("BENCH_CONCURRENCY", "64")


def start_nginx(tmp):
    port = free_port()
    d = os.path.join(tmp, "nginx")
    os.makedirs(d)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("worker_processes 1; daemon off; pid %s/pid; error_log %s/err.log;\n"
                "events { worker_connections 4096; }\n"
                "http { access_log off; client_body_temp_path %s;\n"
                " server { listen 127.0.0.1:%d; keepalive_requests 1000000;\n"
                "  location / { return 200 '{\"ok\":true}'; } } }\n" % (d, d, d, port))
    p = subprocess.Popen(["nginx", "-c", conf, "-p", d], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_for(lambda: _connects(port), 10, what="nginx")
    return p, port


def _connects(port):
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


# diagnostics: BENCH_STORE=memory (what the flow costs without a durable
# store), BENCH_BROKERS=redis,nats (a subset), BENCH_METRICS_DIR=DIR (each
# run's /metrics kept as DIR/BROKER-MODE-ROUND.txt: the store's latencies
# and the idem_lmdb_* counters)
STORE = os.environ.get("BENCH_STORE", "lmdb")
BROKERS = os.environ.get("BENCH_BROKERS", "redis,rabbitmq,nats").split(",")
METRICS_DIR = os.environ.get("BENCH_METRICS_DIR")


def metrics(c):
    body = c.admin_get("/metrics")[1]
    settled, buckets = 0, []
    for line in body.splitlines():
        if line.startswith("idem_messages_total{outcome=\"executed\"}") or \
           line.startswith("idem_messages_total{outcome=\"forwarded\"}"):
            settled += int(line.split()[-1])
        if line.startswith("idem_message_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), int(line.split()[-1])))
    return settled, buckets


def quantile(buckets, q):
    total = buckets[-1][1]
    want = q * total
    prev_le, prev_n = 0.0, 0
    for le, n in buckets:
        if n >= want:
            if le == float("inf"):
                return prev_le
            frac = (want - prev_n) / max(1, n - prev_n)
            return prev_le + frac * (le - prev_le)
        prev_le, prev_n = le, n
    return prev_le


def run_one(broker, mode, tmp, handler_url, r):
    src = broker.fresh(r, mode)
    broker.publish(src, N)
    env = dict(os.environ)
    if mode == "forwarder":
        env["IDEM_BENCH_NO_STORE"] = "1"
    store = ("memory:" if STORE == "memory" else "lmdb:%s/" % tmp) + \
        "store-%s-%s-%d" % (broker.name, mode, r)
    c = Consumer(broker.uri(src), handler_url + "/messages", store=store,
                 args=["--concurrency", CONC], admin=True, env=env)
    t0 = time.monotonic()
    c.start(timeout=60)
    wait_for(lambda: metrics(c)[0] >= N, 600, interval=0.05, what="%s %s drained" % (broker.name, mode))
    secs = time.monotonic() - t0
    _, buckets = metrics(c)
    if METRICS_DIR:
        with open(os.path.join(METRICS_DIR, "%s-%s-%d.txt" % (broker.name, mode, r)), "w") as f:
            f.write(c.admin_get("/metrics")[1])
    c.stop()
    return N / secs, quantile(buckets, 0.5) * 1000, quantile(buckets, 0.99) * 1000


class Broker:
    """A broker server of the bench's own (self.s), stopped by close()."""

    def __init__(self, server):
        self.s = server.start()
        self.url = getattr(self.s, "url", None)

    def uri(self, name):
        return "%s?%s" % (self.url, self.query % name)

    def close(self):
        self.s.cleanup()


class Redis(Broker):
    name = "redis"
    query = "stream=%s&group=g"

    def __init__(self):
        super().__init__(RedisServer(aof=True))
        self.url = "redis://127.0.0.1:%d" % self.s.port
        self.r = RedisClient(self.s.port)

    def fresh(self, r, mode):
        return "bench-%s-%d" % (mode, r)

    def publish(self, stream, n):
        cmds = [("XADD", stream, "*", "message_id", "%s-%d" % (stream, i), "body", '{"i":%d}' % i)
                for i in range(n)]
        for i in range(0, n, 2000):
            self.r.pipeline(cmds[i:i + 2000])


class Nats(Broker):
    name = "nats"
    query = "stream=%s&consumer=c"

    def __init__(self):
        super().__init__(NatsServer())
        self.c = NatsClient(self.s.port)

    def fresh(self, r, mode):
        name = "B%s%d" % (mode.upper()[:3], r)
        self.c.js("STREAM.CREATE." + name, {"name": name, "subjects": [name.lower()], "storage": "file"})
        return name

    def publish(self, name, n):
        self.c.publish_many(name.lower(), [(b'{"i":%d}' % i, {"Nats-Msg-Id": "%s-%d" % (name, i)})
                                           for i in range(n)])


class Amqp(Broker):
    name = "rabbitmq"
    query = "queue=%s"

    def __init__(self):
        super().__init__(RabbitServer())

    def fresh(self, r, mode):
        q = "bench-%s-%d" % (mode, r)
        c = AmqpClient(self.s.port)
        c.declare(q)
        c.close()
        return q

    def publish(self, q, n):
        c = AmqpClient(self.s.port)
        c.publish_many(q, [('{"i":%d}' % i, {"message_id": "%s-%d" % (q, i)}) for i in range(n)])
        c.close()



def main():
    tmp = tempfile.mkdtemp(prefix="idem-consume-bench-")
    nginx, port = start_nginx(tmp)
    rows = []
    try:
        for cls in [c for c in (Redis, Amqp, Nats) if c.name in BROKERS]:
            b = cls()
            try:
                res = {"lmdb": [], "forwarder": []}
                for r in range(ROUNDS):
                    for mode in ("lmdb", "forwarder"):
                        res[mode].append(run_one(b, mode, tmp, "http://127.0.0.1:%d" % port, r))
                        print(b.name, mode, r, "%.0f msg/s p50 %.2f ms p99 %.2f ms" % res[mode][-1],
                              file=sys.stderr)
                rows.append((b.name, res))
            finally:
                b.close()
    finally:
        nginx.terminate()
        nginx.wait(10)
        shutil.rmtree(tmp, True)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print("| broker | lmdb msg/s | forwarder msg/s | ratio | lmdb p50 / p99 ms | forwarder p50 / p99 ms | rounds (lmdb/forwarder msg/s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, res in rows:
        lm = med([x[0] for x in res["lmdb"]])
        fw = med([x[0] for x in res["forwarder"]])
        print("| %s | %.0f | %.0f | %.2fx | %.1f / %.1f | %.1f / %.1f | %s |" % (
            name, lm, fw, lm / fw,
            med([x[1] for x in res["lmdb"]]), med([x[2] for x in res["lmdb"]]),
            med([x[1] for x in res["forwarder"]]), med([x[2] for x in res["forwarder"]]),
            ", ".join("%.0f/%.0f" % (a[0], b[0]) for a, b in zip(res["lmdb"], res["forwarder"]))))


if __name__ == "__main__":
    main()
