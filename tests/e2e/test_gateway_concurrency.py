"""Concurrent duplicates: while the first request with a key is in flight a
duplicate gets 409 with Retry-After, or with --wait it waits and gets the
replay; 100 concurrent duplicates run the upstream exactly once."""

import threading
import time

from harness import GatewayTestCase, main, request_in_background

N = 100


class Concurrency(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    @staticmethod
    def _in_background(gw, key, delay_ms, body=b"c"):
        return request_in_background(gw, "POST", "/c", body=body, key=key,
                                     headers={"X-Test-Delay-Ms": str(delay_ms)})

    def test_409_with_retry_after_while_in_flight(self):
        gw = self.start_gateway(self.up)
        t, res = self._in_background(gw, "dup", 1500)
        self.assertEqual(self.up.wait_count("dup", 1), 1, self.gw_log())
        r = gw.request("POST", "/c", body=b"c", key="dup")
        self.assertProblem(r, 409, self.gw_log())
        ra = r.header("Retry-After")
        self.assertIsNotNone(ra, "409 without Retry-After: %r" % r)
        self.assertTrue(ra.strip().isdigit(), "Retry-After not delay-seconds: %r" % ra)
        self.assertLessEqual(int(ra), 30, "Retry-After past the 30s default lease: %r" % ra)
        self.assertFalse(r.replayed)
        t.join(30)
        self.assertEqual(res.get("r").status, 200, res)
        # after the first finished: replay
        r = gw.request("POST", "/c", body=b"c", key="dup")
        self.assertTrue(r.replayed, r)
        self.assertEqual(r.body, res["r"].body)
        self.assertEqual(self.up.count("dup"), 1)

    def _duplicate_while_in_flight(self, wait, key, delay_ms):
        """With --wait: a first request in flight for delay_ms, then its
        duplicate, timed. (the duplicate's answer, seconds it took, the
        first's thread and result)"""
        gw = self.start_gateway(self.up, "--wait", wait)
        t, res = self._in_background(gw, key, delay_ms)
        self.assertEqual(self.up.wait_count(key, 1), 1, self.gw_log())
        t0 = time.monotonic()
        r = gw.request("POST", "/c", body=b"c", key=key)
        return r, time.monotonic() - t0, t, res

    def test_wait_gets_the_replay(self):
        r, waited, t, res = self._duplicate_while_in_flight("5s", "w", 800)
        t.join(30)
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertTrue(r.replayed, r)
        self.assertEqual(r.body, res["r"].body)
        self.assertLess(waited, 5.0)
        self.assertEqual(self.up.count("w"), 1)

    def test_wait_after_a_released_first_runs_again(self):
        # the first answer is a 503 (released): the waiting duplicate is a
        # retry of a released key, so it runs (with a higher fence), it does
        # not replay the 503
        gw = self.start_gateway(self.up, "--wait", "5s")
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("a", gw.request(
            "POST", "/c", body=b"c", key="wr",
            headers={"X-Test-Delay-Ms": "800", "X-Test-Status": "503"})), daemon=True)
        t.start()
        self.assertEqual(self.up.wait_count("wr", 1), 1, self.gw_log())
        r = gw.request("POST", "/c", body=b"c", key="wr")
        t.join(30)
        self.assertEqual(res["a"].status, 503)
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("wr"), 2)
        f = [int(x) for x in self.up.fences("wr")]
        self.assertGreater(f[1], f[0])

    def test_wait_gives_up_with_409(self):
        r, waited, t, res = self._duplicate_while_in_flight("300ms", "wg", 3000)
        self.assertProblem(r, 409, self.gw_log())
        self.assertIsNotNone(r.header("Retry-After"))
        self.assertGreaterEqual(waited, 0.25, "did not wait --wait 300ms")
        self.assertLess(waited, 2.5, "waited far past --wait 300ms")
        t.join(30)
        self.assertEqual(self.up.count("wg"), 1)

    def _storm(self, gw, key, delay_ms):
        barrier = threading.Barrier(N)
        out = [None] * N

        def one(i):
            barrier.wait(30)
            try:
                out[i] = gw.request("POST", "/storm", body=b"storm", key=key,
                                    headers={"X-Test-Delay-Ms": str(delay_ms)}, timeout=30)
            except Exception as e:
                out[i] = e
        ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(N)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        errs = [o for o in out if not hasattr(o, "status")]
        self.assertEqual(errs, [], "client errors: %r\n%s" % (errs[:3], self.gw_log()))
        return out

    def test_100_concurrent_duplicates_run_once(self):
        gw = self.start_gateway(self.up)
        out = self._storm(gw, "storm", 500)
        statuses = sorted({r.status for r in out})
        self.assertEqual(self.up.count("storm"), 1, "upstream ran %d times" % self.up.count("storm"))
        self.assertTrue(set(statuses) <= {200, 409}, "statuses %s" % statuses)
        originals = [r for r in out if r.status == 200 and not r.replayed]
        self.assertEqual(len(originals), 1, "%d un-replayed 200s" % len(originals))
        for r in out:
            if r.status == 200:
                self.assertEqual(r.body, originals[0].body)
            else:
                self.assertProblem(r, 409)

    def test_100_concurrent_duplicates_with_wait_same_body(self):
        gw = self.start_gateway(self.up, "--wait", "5s")
        out = self._storm(gw, "stormw", 500)
        self.assertEqual(self.up.count("stormw"), 1)
        self.assertEqual([r.status for r in out if r.status != 200], [],
                         "not all 200 with --wait 5s")
        bodies = {r.body for r in out}
        self.assertEqual(len(bodies), 1, "different bodies: %r" % bodies)
        self.assertEqual(sum(1 for r in out if not r.replayed), 1)

    def test_100_concurrent_duplicates_lmdb(self):
        d = self.tempdir()
        gw = self.start_gateway(self.up, store="lmdb:%s/store" % d)
        out = self._storm(gw, "storml", 500)
        self.assertEqual(self.up.count("storml"), 1, "upstream ran %d times" % self.up.count("storml"))
        originals = [r for r in out if r.status == 200 and not r.replayed]
        self.assertEqual(len(originals), 1)
        self.assertTrue({r.status for r in out} <= {200, 409}, {r.status for r in out})

    def test_concurrent_distinct_keys_all_run(self):
        gw = self.start_gateway(self.up)
        out = [None] * 50

        def one(i):
            out[i] = gw.request("POST", "/d", body=b"d", key="d%d" % i,
                                headers={"X-Test-Delay-Ms": "100"})
        ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(50)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual([r.status for r in out], [200] * 50, self.gw_log())
        for i in range(50):
            self.assertEqual(self.up.count("d%d" % i), 1)


if __name__ == "__main__":
    main()
