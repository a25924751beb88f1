"""--cache memory:SIZE[?ttl=DUR]: a replay (and a mismatch) answered from the
per-process cache, counted on /metrics; a delete through the admin listener
clears it; a second gateway on the same Redis keeps replaying its cached
answer after a delete elsewhere only until its ttl ends; a bad cache URI is
refused at start. --cache redis://: two gateways share it (one replays what
the other completed, a delete through either clears it), and a cache Redis
that is down costs nothing but its answers."""

import subprocess
import time

from harness import GatewayTestCase, idem_bin, main, wait_for
from redis_server import RedisServer
from test_gateway_admin import parse_metrics


def cache_hits(gw):
    text = gw.admin_request("GET", "/metrics").body.decode()
    return parse_metrics(text).get(("idem_cache_hits_total", ""), 0)


class Cache(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_replays_and_mismatches_come_from_the_cache(self):
        gw = self.start_gateway(self.up, "--cache", "memory:16MiB?ttl=1m", admin=True,
                                store="lmdb:%s/store" % self.tempdir())
        first = gw.request("POST", "/pay", body=b'{"amount":5}', key="c1")
        self.assertEqual(first.status, 200, self.gw_log())
        self.assertEqual(cache_hits(gw), 0)
        again = gw.request("POST", "/pay", body=b'{"amount":5}', key="c1")
        self.assertEqual((again.status, again.body, again.replayed), (200, first.body, True))
        self.assertEqual(cache_hits(gw), 1)
        other = gw.request("POST", "/pay", body=b'{"amount":6}', key="c1")
        self.assertEqual(other.status, 422, self.gw_log())
        self.assertEqual(cache_hits(gw), 2)
        self.assertEqual(self.up.count("c1"), 1)
        # the admin listener's delete clears this process's cache too
        self.assertEqual(gw.admin_request("DELETE", "/keys/c1").status, 204)
        rerun = gw.request("POST", "/pay", body=b'{"amount":5}', key="c1")
        self.assertEqual((rerun.status, rerun.replayed), (200, False), self.gw_log())
        self.assertEqual(self.up.count("c1"), 2)

    def test_stale_for_at_most_the_ttl_after_a_delete_elsewhere(self):
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        a = self.start_gateway(self.up, "--workers", "1", admin=True, store=redis.uri)
        b = self.start_gateway(self.up, "--workers", "1", "--cache", "memory:1MiB?ttl=1s",
                               store=redis.uri)
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="s1").status, 200)
        filled_at = time.monotonic()  # b's entry is trusted for 1 s from its filling
        self.assertTrue(b.request("POST", "/pay", body=b"x", key="s1").replayed)  # fills b
        self.assertEqual(a.admin_request("DELETE", "/keys/s1").status, 204)
        r = b.request("POST", "/pay", body=b"x", key="s1")
        if time.monotonic() - filled_at < 0.9:  # within the ttl: b's cache answers
            self.assertTrue(r.replayed, self.gw_log())
            self.assertEqual(self.up.count("s1"), 1)
        # after the ttl, b asks Redis, which has no record: the key runs again
        wait_for(lambda: not b.request("POST", "/pay", body=b"x", key="s1").replayed, 10,
                 what="b to stop replaying after its ttl")
        self.assertEqual(self.up.count("s1"), 2)

    def shared(self):
        store, cache = RedisServer().start(), RedisServer().start()
        self.addCleanup(store.cleanup)
        self.addCleanup(cache.cleanup)
        gws = [self.start_gateway(self.up, "--workers", "1", "--cache", cache.uri, admin=True,
                                  store=store.uri) for _ in range(2)]
        return cache, gws

    def test_shared_redis_cache_between_gateways(self):
        cache, (a, b) = self.shared()
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="r1").status, 200)
        # a fills the shared cache right after its complete, without waiting
        wait_for(lambda: cache.command("EXISTS", "idem:cache:{0::r1}") == 1, 10,
                 what="a's complete in the cache Redis")
        r = b.request("POST", "/pay", body=b"x", key="r1")
        self.assertEqual((r.status, r.replayed), (200, True), self.gw_log())
        self.assertEqual(cache_hits(b), 1)  # what a completed, from the shared cache
        self.assertEqual(b.request("POST", "/pay", body=b"y", key="r1").status, 422)
        # a delete through either gateway clears the shared copy: no staleness;
        # a tombstone takes its place, which no fill overwrites (a fill from a
        # replay the store answered just before the delete may come after it)
        self.assertEqual(a.admin_request("DELETE", "/keys/r1").status, 204)
        self.assertEqual(cache.command("GET", "idem:cache:{0::r1}"), b"idem:deleted")
        r = b.request("POST", "/pay", body=b"x", key="r1")
        self.assertEqual((r.status, r.replayed), (200, False), self.gw_log())
        self.assertEqual(self.up.count("r1"), 2)
        # that run's own fill yields to the tombstone: its retries replay from the store
        r2 = a.request("POST", "/pay", body=b"x", key="r1")
        self.assertEqual((r2.status, r2.replayed, r2.body), (200, True, r.body), self.gw_log())
        self.assertEqual(cache.command("GET", "idem:cache:{0::r1}"), b"idem:deleted")
        self.assertGreater(cache.command("PTTL", "idem:cache:{0::r1}"), 0)
        # a release's drop leaves a delete's tombstone in place
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="r9").status, 200)
        self.assertEqual(a.admin_request("DELETE", "/keys/r9").status, 204)
        r = b.request("POST", "/pay", body=b"x", key="r9", headers={"X-Test-Status": "500"})
        self.assertEqual(r.status, 500, self.gw_log())
        self.assertEqual(cache.command("GET", "idem:cache:{0::r9}"), b"idem:deleted")

    def test_cache_redis_down_costs_only_its_answers(self):
        cache, (a, b) = self.shared()
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="d1").status, 200)
        cache.kill()
        r = b.request("POST", "/pay", body=b"x", key="d1")
        self.assertEqual((r.status, r.replayed), (200, True), self.gw_log())  # from the store
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="d2").status, 200)
        self.assertEqual(self.up.count("d1"), 1)
        cache.start()  # back: filled and read again
        wait_for(lambda: b.request("POST", "/pay", body=b"x", key="d2").replayed and
                 cache.command("EXISTS", "idem:cache:{0::d2}") == 1, 10,
                 what="the cache Redis filled again")

    def test_a_delete_while_the_cache_redis_is_away_deletes_nothing(self):
        # the cached copy could not be dropped: had the record gone, every
        # gateway would replay it from the cache until the record's expiry
        cache, (a, b) = self.shared()
        self.assertEqual(a.request("POST", "/pay", body=b"x", key="g1").status, 200)
        wait_for(lambda: cache.command("EXISTS", "idem:cache:{0::g1}") == 1, 10,
                 what="the answer in the cache Redis")
        cache.kill()
        r = a.admin_request("DELETE", "/keys/g1")
        self.assertEqual(r.status, 503, r)
        # the answer and the log say the cache may be the one away
        self.assertIn("shared cache", r.json()["detail"])
        self.assertIn("nothing was deleted", r.json()["detail"])
        self.assertIn("admin: delete of key 'g1' failed", self.gw_log())
        self.assertEqual(a.admin_request("GET", "/keys/g1").status, 200)  # still there
        cache.start()
        wait_for(lambda: a.admin_request("DELETE", "/keys/g1").status == 204, 20,
                 what="the delete once the cache Redis is back")
        self.assertEqual(cache.command("GET", "idem:cache:{0::g1}"), b"idem:deleted")
        r = b.request("POST", "/pay", body=b"x", key="g1")
        self.assertEqual((r.status, r.replayed), (200, False), self.gw_log())
        self.assertEqual(self.up.count("g1"), 2)

    def test_bad_cache_uri_is_refused_at_start(self):
        for bad in ("memory:", "memory:lots", "redis-ish:1MiB", "memory:1MiB?ttl=soon",
                    "redis://h?colour=red"):
            out = subprocess.run([idem_bin(), "serve", "--upstream", self.up.url,
                                  "--cache", bad], capture_output=True, text=True, timeout=10)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("--cache", out.stderr)


if __name__ == "__main__":
    main()
