"""Redis outage under load: redis-server is killed (SIGKILL) and restarted
while clients keep sending keyed requests through the gateway. During the
outage the gateway answers 503 with Retry-After (or, with --on-store-error
open, passes requests through); it reconnects by itself when Redis is back;
and no key's upstream runs twice.

Redis runs with appendfsync always, so what it acknowledged survives the
kill: that is the deployment that can promise "once" across a Redis crash.
Leases are the default 30s, longer than the test: a claim or completion
whose reply was lost in the crash leaves its key busy (409), never re-run.
"""

import socket
import time

from harness import GatewayTestCase, LoadClients, main, wait_for
from redis_server import RedisServer

CLIENTS = 6


class Load(LoadClients):
    """CLIENTS threads, each taking fresh keys and retrying a key while the
    gateway answers 503, as a client honouring Retry-After would (faster)."""

    def __init__(self, gw):
        super().__init__(CLIENTS)
        self.gw = gw
        self.next_key = 0
        self.log = []        # (time, key, status, replayed, body, retry_after, ctype)
        self.final = {}      # key -> the response that ended its retries
        self.errors = []

    def count(self, pred):
        with self.lock:
            return sum(1 for e in self.log if pred(e))

    def run(self, i):
        while not self.stopping.is_set():
            with self.lock:
                key = "out-%d" % self.next_key
                self.next_key += 1
            while True:
                try:
                    r = self.gw.request("POST", "/orders", body=b'{"sku": 7}', key=key,
                                        headers={"X-Test-Delay-Ms": "10"}, timeout=20)
                except Exception as e:
                    with self.lock:
                        self.errors.append((key, repr(e)))
                    if self.stopping.wait(0.05):
                        break
                    continue
                with self.lock:
                    self.log.append((time.monotonic(), key, r.status, r.replayed, r.body,
                                     r.header("Retry-After"),
                                     (r.header("Content-Type") or "").split(";")[0]))
                if r.status != 503:
                    with self.lock:
                        self.final[key] = r
                    break
                if self.stopping.wait(0.05):  # a client would wait Retry-After
                    break


class RedisOutage(GatewayTestCase):
    def setUp(self):
        self.redis = RedisServer(aof=True).start()
        self.addCleanup(self.redis.cleanup)
        self.up = self.start_upstream()

    def ctx(self, load=None):
        tail = "\n--- redis log ---\n" + self.redis.log()
        if load is not None:
            with load.lock:
                tail += "\n--- last responses ---\n" + "\n".join(
                    "%s %d" % (e[1], e[2]) for e in load.log[-20:])
        return self.gw_log() + tail

    def test_fail_closed_503_then_recovers_and_no_key_runs_twice(self):
        gw = self.start_gateway(self.up, "--workers", "2", store=self.redis.uri, admin=True)
        self.assertEqual(gw.admin_request("GET", "/readyz").status, 200, self.ctx())
        load = Load(gw).start()
        self.addCleanup(load.stop)
        ok = lambda e: e[2] == 200  # noqa: E731
        wait_for(lambda: load.count(ok) >= 40, 30, what="40 answers before the outage")

        t_kill = time.monotonic()
        self.redis.kill()
        wait_for(lambda: load.count(lambda e: e[0] > t_kill and e[2] == 503) >= 60, 30,
                 what="503s during the outage")
        self.assertTrue(gw.alive(), self.ctx(load))
        # a load balancer asking /readyz learns it, and /healthz stays up
        r = wait_for(lambda: (lambda r: r if r.status == 503 else None)(
            gw.admin_request("GET", "/readyz")), 30, what="/readyz 503 during the outage")
        self.assertEqual((r.header("Content-Type") or "").split(";")[0], "application/problem+json")
        self.assertEqual(gw.admin_request("GET", "/healthz").status, 200)

        t_back = time.monotonic()
        self.redis.start()
        # nobody touches the gateway: it must reconnect by itself
        wait_for(lambda: load.count(lambda e: e[0] > t_back and e[2] == 200) >= 40, 30,
                 what="40 answers after Redis came back")
        wait_for(lambda: gw.admin_request("GET", "/readyz").status == 200, 30,
                 what="/readyz 200 after Redis came back")
        self.assertTrue(load.stop(), "clients hung\n" + self.ctx(load))

        with load.lock:
            log, final, errors = list(load.log), dict(load.final), list(load.errors)
        ctx = self.ctx(load)
        print("\n  %d keys, %d answers: %d x 200, %d x 503, %d x 409; outage %.2fs"
              % (len(final), len(log), sum(e[2] == 200 for e in log),
                 sum(e[2] == 503 for e in log), sum(e[2] == 409 for e in log),
                 t_back - t_kill))
        self.assertEqual(errors, [], ctx)
        # the outage was seen as 503 problems with Retry-After, nothing else
        statuses = {e[2] for e in log}
        self.assertTrue(statuses <= {200, 409, 503}, "%r\n%s" % (statuses, ctx))
        outage = [e for e in log if e[2] == 503]
        self.assertGreater(len(outage), 0, ctx)
        for e in outage:
            self.assertIsNotNone(e[5], "503 without Retry-After\n" + ctx)
            self.assertEqual(e[6], "application/problem+json", ctx)
        # every key ran at most once; every key answered 200 ran exactly once
        keys = {e[1] for e in log}
        for key in keys:
            n = self.up.count(key)
            self.assertLessEqual(n, 1, "key %s ran %d times\n%s" % (key, n, ctx))
        for key, r in final.items():
            if r.status == 200:
                self.assertEqual(self.up.count(key), 1, "key %s\n%s" % (key, ctx))
                self.assertEqual(r.json()["exec"], 1, ctx)
        # a lost reply leaves a key busy, never re-run; these are few
        busy = [k for k, r in final.items() if r.status == 409]
        self.assertLessEqual(len(busy), 2 * CLIENTS, "%r\n%s" % (busy, ctx))
        # what was acknowledged before the kill survived it: replayed as is
        before = [e for e in log if e[0] < t_kill and e[2] == 200 and not e[3]][:10]
        self.assertTrue(before, ctx)
        for e in before:
            # a worker whose connection is still backing off answers 503
            r = wait_for(lambda: (lambda r: r if r.status != 503 else None)(
                gw.request("POST", "/orders", body=b'{"sku": 7}', key=e[1])), 30,
                what="an answer other than 503")
            self.assertEqual(r.status, 200, ctx)
            self.assertTrue(r.replayed, "%s not replayed: %r\n%s" % (e[1], r, ctx))
            self.assertEqual(r.body, e[4], ctx)
            self.assertEqual(self.up.count(e[1]), 1, ctx)
        self.assertIn("connected again", gw.stderr(), ctx)

    def test_fail_open_passes_through_during_the_outage(self):
        # one worker, one store connection: "back" below means back for all
        gw = self.start_gateway(self.up, "--on-store-error", "open", "--workers", "1",
                                store=self.redis.uri)
        r = gw.request("POST", "/orders", body=b"a", key="open-before")
        self.assertEqual(r.status, 200, self.ctx())
        self.redis.kill()
        r = gw.request("POST", "/orders", body=b"a", key="open-during")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.ctx()))
        self.assertFalse(r.replayed)
        self.assertEqual(self.up.count("open-during"), 1)
        self.redis.start()
        n = [0]

        def stored_again():
            # a fresh key twice: replayed the second time once the store is back
            n[0] += 1
            key = "open-after-%d" % n[0]
            first = gw.request("POST", "/orders", body=b"a", key=key)
            second = gw.request("POST", "/orders", body=b"a", key=key)
            return first.status == 200 and second.replayed
        wait_for(stored_again, 30, interval=0.05, what="the store back in use")
        r = gw.request("POST", "/orders", body=b"a", key="open-before")
        self.assertTrue(r.replayed, "%r\n%s" % (r, self.ctx()))
        self.assertEqual(self.up.count("open-before"), 1)

    def test_gateway_started_while_redis_is_down_answers_503_then_serves(self):
        self.redis.kill()
        gw = self.start_gateway(self.up, store=self.redis.uri)
        r = gw.request("POST", "/orders", body=b"a", key="early")
        self.assertProblem(r, 503, self.ctx())
        self.assertIsNotNone(r.header("Retry-After"))
        self.assertEqual(self.up.count("early"), 0)
        self.redis.start()
        wait_for(lambda: gw.request("POST", "/orders", body=b"a", key="early").status == 200,
                 30, interval=0.05, what="the gateway to use Redis once it is up")
        self.assertEqual(self.up.count("early"), 1)
        # each worker's store connection backs off on its own (at most ~2.5s):
        # until all are back a request may still get a 503, never a re-run
        wait_for(lambda: gw.request("POST", "/orders", body=b"a", key="early").replayed,
                 30, interval=0.05, what="the replay from every worker")
        self.assertEqual(self.up.count("early"), 1)

    def test_an_outage_is_logged_a_line_a_second_not_a_line_a_request(self):
        # every claim fails while Redis is down: one line a second per
        # worker, the next one counting the failures it stood for
        self.redis.kill()
        gw = self.start_gateway(self.up, "--workers", "1", store=self.redis.uri)
        lines = lambda: self.gw_log().count("store claim of key")  # noqa: E731
        t0 = time.monotonic()
        for i in range(40):
            self.assertProblem(gw.request("POST", "/orders", body=b"a", key="o-%d" % i), 503)
        self.assertLessEqual(lines(), int(time.monotonic() - t0) + 2, self.ctx())
        # a failure past the second is logged, with the count
        wait_for(lambda: gw.request("POST", "/orders", body=b"a", key="o-next").status == 503 and
                 "more store failures since the last such line" in self.gw_log(), 10,
                 interval=0.2, what="the count of the failures not logged")

    def test_an_answer_not_kept_says_when_the_lease_ends(self):
        # --spool off: Redis killed while the upstream runs, the answer has
        # nowhere to go; the 503 says to come back when the lease ends (a
        # retry before that is 409), not in a second
        import threading
        gw = self.start_gateway(self.up, "--spool", "off", "--lock-ttl", "20s",
                                "--workers", "1", store=self.redis.uri)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=gw.request(
            "POST", "/orders", body=b"a", key="lost", headers={"X-Test-Delay-Ms": "1500"})))
        t.start()
        self.up.wait_count("lost", 1)
        self.redis.kill()
        t.join(30)
        doc = self.assertProblem(out["r"], 503, self.ctx())
        self.assertEqual(doc["type"], "urn:idem:problem:answer-not-kept", doc)
        self.assertGreaterEqual(int(out["r"].header("Retry-After")), 10, out["r"].headers)
        self.assertLessEqual(int(out["r"].header("Retry-After")), 20, out["r"].headers)


class RedisRefuses(GatewayTestCase):
    """A Redis that refuses the gateway (a wrong password, a /db past its
    databases) is a store that is down: serve starts, answers 503, logs the
    server's reason at each try (README, --store), and serves once the
    operator fixes the server, without a restart."""

    def setUp(self):
        self.redis = RedisServer().start()  # its readiness check asks PING without a password
        self.addCleanup(self.redis.cleanup)
        self.assertEqual(self.redis.command("CONFIG", "SET", "requirepass", "right"), "OK")
        self.up = self.start_upstream()

    def refused_then_fixed(self, uri, reason, fix):
        gw = self.start_gateway(self.up, "--workers", "1", store=uri)
        t0 = time.monotonic()
        i = 0
        # the store tries again with a backoff from 100 ms (100, 200, 400,
        # 800 ms...): five tries or more in 3 s, each one logged
        while time.monotonic() - t0 < 3.0:
            self.assertProblem(gw.request("POST", "/orders", body=b"a", key="r-%d" % i), 503,
                               self.gw_log())
            i += 1
            time.sleep(0.05)
        self.assertGreaterEqual(gw.stderr().count(reason), 3, self.gw_log())
        self.assertEqual(self.up.count("r-0"), 0)
        if fix is None:
            return
        fix()
        wait_for(lambda: gw.request("POST", "/orders", body=b"a", key="fixed").status == 200,
                 30, interval=0.1, what="the gateway to serve once the server takes it")
        self.assertEqual(self.up.count("fixed"), 1)

    def test_a_wrong_password_is_logged_at_each_try_and_fixed_while_serve_runs(self):
        uri = "redis://:wrong@127.0.0.1:%d" % self.redis.port
        self.refused_then_fixed(uri, "AUTH refused: WRONGPASS", lambda: self.set_password("wrong"))

    def test_a_db_past_databases_is_logged_at_each_try(self):
        uri = "redis://:right@127.0.0.1:%d/20" % self.redis.port
        self.refused_then_fixed(uri, "SELECT refused", None)  # databases is fixed at start

    def set_password(self, pw):
        s = socket.create_connection(("127.0.0.1", self.redis.port), timeout=2)
        try:
            s.sendall(b"AUTH right\r\nCONFIG SET requirepass %s\r\n" % pw.encode())
            got = b""
            while got.count(b"\r\n") < 2:
                got += s.recv(100)
            self.assertEqual(got, b"+OK\r\n+OK\r\n")
        finally:
            s.close()


if __name__ == "__main__":
    main()
