"""Several gateways, one Redis: three `idem serve` processes share the
records in one redis-server, so concurrent duplicates of a key spread over
them run the upstream exactly once, and any of them replays what another
stored. And an answer larger than Redis keeps."""

import threading

from harness import GatewayTestCase, main
from redis_server import RedisServer

KEYS = 20
PER_GATEWAY = 3  # duplicates of each key sent to each gateway, all at once


class SeveralGateways(GatewayTestCase):
    def setUp(self):
        self.redis = RedisServer().start()
        self.addCleanup(self.redis.cleanup)
        self.up = self.start_upstream()

    def gateways(self, *args):
        return [self.start_gateway(self.up, "--workers", "1", *args,
                                   store=self.redis.uri) for _ in range(3)]

    def burst(self, gws, prefix, delay_ms):
        """Every duplicate of every key at once, spread over the gateways.
        Returns {key: [response or exception, ...]}."""
        jobs = []
        for k in range(KEYS):
            key = "%s-%d" % (prefix, k)
            for gw in gws:
                for _ in range(PER_GATEWAY):
                    jobs.append((gw, key))
        results = {}
        lock = threading.Lock()
        start = threading.Barrier(len(jobs))

        def run(gw, key):
            try:
                start.wait(30)
                r = gw.request("POST", "/pay", body=b'{"amount": 5}', key=key,
                               headers={"X-Test-Delay-Ms": str(delay_ms)})
            except Exception as e:  # reported below, with the key
                r = e
            with lock:
                results.setdefault(key, []).append(r)

        threads = [threading.Thread(target=run, args=j, daemon=True) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "requests hung\n" + self.gw_log())
        return results

    def test_duplicates_over_three_gateways_run_once_and_wait_for_the_replay(self):
        gws = self.gateways("--wait", "10s")
        results = self.burst(gws, "wait", 300)
        for key, rs in sorted(results.items()):
            ctx = "key %s: %r\n%s" % (key, rs, self.gw_log())
            self.assertEqual(self.up.count(key), 1, ctx)
            self.assertEqual(self.up.fences(key), ["1"], ctx)
            self.assertTrue(all(not isinstance(r, Exception) for r in rs), ctx)
            self.assertEqual([r.status for r in rs], [200] * len(rs), ctx)
            # one execution: the same body everywhere, replayed by all but one
            self.assertEqual(len({r.body for r in rs}), 1, ctx)
            self.assertEqual(rs[0].json()["exec"], 1, ctx)
            self.assertEqual(sum(1 for r in rs if not r.replayed), 1, ctx)

    def test_duplicates_without_wait_get_409_and_still_run_once(self):
        gws = self.gateways()
        results = self.burst(gws, "nowait", 300)
        for key, rs in sorted(results.items()):
            ctx = "key %s: %r\n%s" % (key, rs, self.gw_log())
            self.assertEqual(self.up.count(key), 1, ctx)
            self.assertTrue(all(not isinstance(r, Exception) for r in rs), ctx)
            statuses = sorted(r.status for r in rs)
            self.assertIn(200, statuses, ctx)
            self.assertTrue(set(statuses) <= {200, 409}, ctx)
            for r in rs:
                if r.status == 409:
                    self.assertIsNotNone(r.header("Retry-After"), ctx)
            # afterwards every gateway replays the one stored answer
            first = [r for r in rs if r.status == 200 and not r.replayed][0]
            for gw in gws:
                again = gw.request("POST", "/pay", body=b'{"amount": 5}', key=key)
                self.assertEqual(again.status, 200, ctx)
                self.assertTrue(again.replayed, ctx)
                self.assertEqual(again.body, first.body, ctx)
            self.assertEqual(self.up.count(key), 1, ctx)

    def test_a_record_stored_by_one_gateway_is_seen_by_the_others(self):
        a, b, c = self.gateways()
        r = a.request("POST", "/pay", body=b"x", key="shared")
        self.assertEqual(r.status, 200, self.gw_log())
        rb = b.request("POST", "/pay", body=b"x", key="shared")
        self.assertTrue(rb.replayed, rb)
        self.assertEqual(rb.body, r.body)
        # the same key with another body on the third gateway: 422
        self.assertProblem(c.request("POST", "/pay", body=b"y", key="shared"), 422,
                           self.gw_log())
        self.assertEqual(self.up.count("shared"), 1)
        # and the record is in Redis, one hash under the idem: prefix
        names = self.redis.command("KEYS", "idem:*")
        self.assertEqual(len(names), 1, names)
        self.assertIn(b"shared}", names[0])


class LargeAnswer(GatewayTestCase):
    def test_an_answer_larger_than_redis_keeps_is_kept_as_the_502_marker(self):
        # Redis takes no argument over 512 MiB (proto-max-bulk-len) and
        # drops the connection on one: sent anyway, the answer was spooled,
        # and its drain dropped the connection again and again, forever.
        # The store refuses it up front, and the gateway keeps its 502
        # marker, as for a full store: the first client gets the answer,
        # retries the marker, and the upstream runs once
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        up = self.start_upstream()
        gw = self.start_gateway(up, "--max-response", "1GiB", store=redis.uri)
        size = (512 << 20) + 1
        big = {"X-Test-Body-Bytes": str(size)}
        r = gw.request("POST", "/pay", body=b"x", key="huge", headers=big, timeout=120)
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertEqual(len(r.body), size)
        del r
        again = gw.request("POST", "/pay", body=b"x", key="huge", headers=big, timeout=120)
        self.assertProblem(again, 502, self.gw_log())
        self.assertTrue(again.replayed, again)
        self.assertIn("larger than the store keeps", again.json()["detail"])
        self.assertEqual(up.count("huge"), 1)
        self.assertEqual(gw.request("POST", "/pay", body=b"x", key="small").status, 200)
        self.assertNotIn("reconnecting", self.gw_log())
        self.assertNotIn("spool", self.gw_log())


if __name__ == "__main__":
    main()
