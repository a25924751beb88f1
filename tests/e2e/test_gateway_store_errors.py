"""Store failures at run time, made with lmdb itself: a store with a tiny
map (lmdb:DIR?map_size=1MiB) fills up and starts to refuse claims. Fail
closed (default): 503 problem+json with Retry-After, the upstream is not
called, keyless requests still pass. --on-store-error open: the request
passes through (the upstream sees it without a fence). Outages of a
networked store are tested with Redis and PostgreSQL."""

import re
import threading
import time

from harness import GatewayTestCase, RawConn, main, request_bytes


class StoreErrors(GatewayTestCase):
    def _fill(self, gw, until):
        """Send keyed requests from 16 threads until until(key, response)
        is true; return that (key, response), or fail after 120s."""
        stop = threading.Event()
        found = {}
        lock = threading.Lock()
        deadline = time.monotonic() + 120

        def client(tid):
            n = 0
            with RawConn(gw.port, timeout=30) as c:
                while not stop.is_set() and time.monotonic() < deadline:
                    k = "fill-%d-%d" % (tid, n)
                    n += 1
                    c.send(request_bytes("POST", "/fill", b"y" * 200, key=k,
                                         headers={"X-Test-Body-Bytes": "2000"}))
                    r = c.read_response()
                    if until(k, r):
                        with lock:
                            found.setdefault("r", (k, r))
                        stop.set()
        ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(150)
        self.assertIn("r", found, "the store never failed within 120s\n%s" % self.gw_log())
        return found["r"]

    def test_full_store_fails_closed(self):
        up = self.start_upstream()
        store = "lmdb:%s/store?map_size=1MiB" % self.tempdir()
        gw = self.start_gateway(up, store=store, admin=True)
        key, r = self._fill(gw, lambda k, r: r.status != 200)
        self.assertProblem(r, 503, self.gw_log())
        # the refusal is counted where an operator looks
        metrics = gw.admin_request("GET", "/metrics").body.decode()
        full = re.search(r'(?m)^idem_lmdb_errors_total\{kind="full"\} (\d+)$', metrics)
        self.assertTrue(full and int(full.group(1)) >= 1, metrics)
        ra = r.header("Retry-After")
        self.assertTrue(ra and ra.strip().isdigit(), "503 without a delay-seconds Retry-After: %r" % r)
        self.assertEqual(up.count(key), 0, "upstream called although the claim failed")
        # requests without semantics do not need the store
        self.assertEqual(gw.request("GET", "/g", headers={"X-Test-Id": "full-get"}).status, 200)
        r = gw.request("POST", "/nokey", body=b"x", headers={"X-Test-Id": "full-nokey"})
        self.assertEqual(r.status, 200)

    def test_a_map_grown_by_another_gateway_is_adopted(self):
        # the cure for a full map is a restart with a larger map_size; in a
        # rolling restart the gateway still on the old size must follow the
        # file past its own map instead of failing every request
        up = self.start_upstream()
        d = self.tempdir()
        old = self.start_gateway(up, store="lmdb:%s/store?map_size=1MiB" % d)
        self.assertEqual(old.request("POST", "/a", body=b"x", key="before").status, 200)
        new = self.start_gateway(up, store="lmdb:%s/store?map_size=64MiB" % d)
        errors = []

        def fill(tid):
            with RawConn(new.port, timeout=30) as c:
                for n in range(100):  # 16 x 100 answers of 2000 bytes: 3 MiB and more
                    c.send(request_bytes("POST", "/fill", b"y", key="grow-%d-%d" % (tid, n),
                                         headers={"X-Test-Body-Bytes": "2000"}))
                    r = c.read_response()
                    if r.status != 200:
                        errors.append(r)
                        return
        threads = [threading.Thread(target=fill, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [], self.gw_log())
        # the old gateway reads, writes and replays in the grown file
        r = old.request("POST", "/a", body=b"x", key="after")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        r = old.request("POST", "/fill", body=b"y", key="grow-15-99")
        self.assertTrue(r.replayed, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(len(r.body), 2000)
        self.assertTrue(old.request("POST", "/a", body=b"x", key="before").replayed)
        self.assertEqual(up.count("after"), 1)

    def test_full_store_fails_open(self):
        # with --on-store-error open a failed claim passes the request
        # through: the upstream sees it without an Idempotency-Fence
        up = self.start_upstream()
        store = "lmdb:%s/store?map_size=1MiB" % self.tempdir()
        gw = self.start_gateway(up, "--on-store-error", "open", store=store)
        statuses = []

        def passed_through(k, r):
            statuses.append(r.status)
            seen = up.requests(k)
            return bool(seen) and seen[0]["fence"] is None
        key, r = self._fill(gw, passed_through)
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertFalse(r.replayed)
        self.assertEqual(up.count(key), 1)
        self.assertEqual(sorted(set(statuses)), [200], "fail-open answered other than 200")


if __name__ == "__main__":
    main()
