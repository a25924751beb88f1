"""Claim, complete, replay: the first request runs once, a retry gets the
stored status, headers and body with Idempotent-Replayed: true; a different
request under a used key is 422; which upstream statuses are stored and which
release the key; the fence reaches the upstream; retention (--ttl)."""

import time

from harness import GatewayTestCase, RawConn, main, request_bytes, wait_for
from upstream import body_bytes

STORED = (200, 201, 302, 400, 404, 422)
RELEASED = (408, 409, 425, 429, 500, 503)


class Replay(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_first_runs_once_retry_replays(self):
        gw = self.start_gateway(self.up)
        hdrs = {"Content-Type": "application/json",
                "X-Test-Set-Header": "X-Custom: first-run"}
        r1 = gw.request("POST", "/orders?x=1", body=b'{"n":1}', key="order-1", headers=hdrs)
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertFalse(r1.replayed, "first response says replayed: %r" % r1)
        self.assertEqual(r1.json()["exec"], 1)
        self.assertEqual(r1.header("X-Custom"), "first-run")
        for _ in range(3):
            r = gw.request("POST", "/orders?x=1", body=b'{"n":1}', key="order-1", headers=hdrs)
            self.assertEqual(r.status, 200)
            self.assertTrue(r.replayed, r)
            self.assertEqual(r.header("Idempotent-Replayed"), "true")
            self.assertEqual(r.body, r1.body)
            self.assertEqual(r.header("X-Custom"), "first-run")
            self.assertEqual(r.header("X-Upstream-Exec"), "1")
            self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(self.up.count("order-1"), 1)

    def test_retry_with_other_headers_still_replays(self):
        # the fingerprint is method, target and body: headers do not count
        gw = self.start_gateway(self.up)
        r1 = gw.request("POST", "/h", body=b"x", key="hk", headers={"X-Whatever": "a"})
        r2 = gw.request("POST", "/h", body=b"x", key="hk", headers={"X-Whatever": "b"})
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(self.up.count("hk"), 1)

    def test_keys_are_independent(self):
        gw = self.start_gateway(self.up)
        for k in ("a1", "a2", "a3"):
            r = gw.request("POST", "/same", body=b"same", key=k)
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertFalse(r.replayed)
            self.assertEqual(self.up.count(k), 1)

    def _mismatch(self, first, second):
        gw = self.start_gateway(self.up)
        r1 = gw.request(*first[:2], body=first[2], key="mm")
        self.assertEqual(r1.status, 200, self.gw_log())
        r2 = gw.request(*second[:2], body=second[2], key="mm")
        self.assertProblem(r2, 422)
        self.assertFalse(r2.replayed)
        self.assertEqual(self.up.count("mm"), 1)
        # the record is unchanged: the original request still replays
        r3 = gw.request(*first[:2], body=first[2], key="mm")
        self.assertTrue(r3.replayed, r3)
        self.assertEqual(r3.body, r1.body)

    def test_the_gateways_own_answers_carry_a_date(self):
        # RFC 9110 6.6.1: an origin with a clock dates its answers; the
        # gateway is the origin of its problems and of the admin's answers
        from email.utils import parsedate_to_datetime
        gw = self.start_gateway(self.up, admin=True)
        gw.request("POST", "/a", body=b"one", key="dated")
        answers = [gw.request("POST", "/a", body=b"two", key="dated"),   # 422
                   gw.request("POST", "/a", body=b"one", key="bad\x01"),  # 400
                   gw.admin_request("GET", "/healthz")]
        for r in answers:
            date = r.header("Date")
            self.assertTrue(date and date.endswith(" GMT"), r)
            self.assertLess(abs(parsedate_to_datetime(date).timestamp() - time.time()), 60, date)
        self.assertEqual([r.status for r in answers], [422, 400, 200])

    def test_422_different_body(self):
        self._mismatch(("POST", "/a", b"one"), ("POST", "/a", b"two"))

    def test_422_different_method(self):
        self._mismatch(("POST", "/a", b"one"), ("PATCH", "/a", b"one"))

    def test_422_different_path(self):
        self._mismatch(("POST", "/a", b"one"), ("POST", "/b", b"one"))

    def test_422_different_query(self):
        self._mismatch(("POST", "/a?x=1", b"one"), ("POST", "/a?x=2", b"one"))

    def test_422_while_processing(self):
        gw = self.start_gateway(self.up)
        import threading
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("r", gw.request(
            "POST", "/slow", body=b"one", key="mp", headers={"X-Test-Delay-Ms": "800"})))
        t.start()
        self.up.wait_count("mp", 1)
        r = gw.request("POST", "/slow", body=b"two", key="mp")
        t.join(30)
        self.assertProblem(r, 422, self.gw_log())
        self.assertEqual(res["r"].status, 200)
        self.assertEqual(self.up.count("mp"), 1)

    def _first_and_retry(self, gw, key, status):
        """POST key with the upstream answering status; the first answer must
        be that status, executed. Return it and the answer to a retry."""
        h = {"X-Test-Status": str(status)}
        r1 = gw.request("POST", "/s", body=b"b", key=key, headers=h)
        self.assertEqual(r1.status, status, self.gw_log())
        self.assertFalse(r1.replayed)
        r2 = gw.request("POST", "/s", body=b"b", key=key, headers=h)
        return r1, r2

    def _retry_of(self, gw, st, stored):
        """A first answer st, then its retry: replayed when st is stored,
        run again (exec 2) when it releases the key."""
        k = "%s-%d" % ("stored" if stored else "released", st)
        r1, r2 = self._first_and_retry(gw, k, st)
        self.assertEqual(r2.status, st, "status %d: %r" % (st, r2))
        self.assertEqual(r2.replayed, stored, "status %d: %r" % (st, r2))
        self.assertEqual(self.up.count(k), 1 if stored else 2, "status %d" % st)
        return r1, r2

    def test_stored_statuses_replay(self):
        gw = self.start_gateway(self.up)
        for st in STORED:
            r1, r2 = self._retry_of(gw, st, True)
            self.assertEqual(r2.body, r1.body, st)
            if st in (201, 302):
                self.assertEqual(r2.header("Location"), r1.header("Location"), st)
                self.assertTrue(r1.header("Location"))

    def test_released_statuses_run_again(self):
        gw = self.start_gateway(self.up)
        for st in RELEASED:
            self.assertEqual(self._retry_of(gw, st, False)[1].json()["exec"], 2, st)
            k = "released-%d" % st
            f = [int(x) for x in self.up.fences(k)]
            self.assertGreater(f[1], f[0], "fence went back after release of %d: %s" % (st, f))
            # once the upstream succeeds the result is stored
            r3 = gw.request("POST", "/s", body=b"b", key=k)
            self.assertEqual(r3.status, 200)
            r4 = gw.request("POST", "/s", body=b"b", key=k)
            self.assertTrue(r4.replayed, r4)
            self.assertEqual(r4.body, r3.body)
            self.assertEqual(self.up.count(k), 3)

    def test_large_binary_body_replays_exactly(self):
        gw = self.start_gateway(self.up)
        size = 2 * 1024 * 1024 + 7
        want = body_bytes("big", 1, size)
        for key, extra in (("big", {}), ("bigc", {"X-Test-Chunked": "1"})):
            h = dict(extra, **{"X-Test-Body-Bytes": str(size), "X-Test-Id": "big"})
            want_key = body_bytes("big", self.up.count("big") + 1, size)
            r1 = gw.request("POST", "/big", body=b"x", key=key, headers=h)
            self.assertEqual(r1.status, 200, self.gw_log())
            self.assertEqual(len(r1.body), size)
            self.assertTrue(r1.body == want_key, "first answer corrupted (%s)" % key)
            r2 = gw.request("POST", "/big", body=b"x", key=key, headers=h)
            self.assertTrue(r2.replayed, r2)
            self.assertEqual(len(r2.body), size)
            self.assertTrue(r2.body == want_key, "replayed body differs (%s)" % key)
        self.assertEqual(self.up.count("big"), 2)
        self.assertEqual(want, body_bytes("big", 1, size))

    def test_answer_past_max_response_reaches_the_first_client_only(self):
        # 64 KiB kept at most: a bigger answer still runs once and reaches the
        # client that asked, whole; retries get a stored 502 that says so
        gw = self.start_gateway(self.up, "--max-response", "64KiB", admin=True)
        limit = 64 * 1024
        for key, size, extra in (("huge-cl", 300000, {}),
                                 ("huge-chunked", 300001, {"X-Test-Chunked": "1"}),
                                 ("just-over", limit + 1, {})):
            h = dict(extra, **{"X-Test-Body-Bytes": str(size), "X-Test-Id": key,
                               "X-Test-Status": "201"})
            r1 = gw.request("POST", "/big", body=b"x", key=key, headers=h)
            self.assertEqual(r1.status, 201, "%s: %r\n%s" % (key, r1, self.gw_log()))
            self.assertFalse(r1.replayed)
            self.assertEqual(len(r1.body), size, key)
            self.assertTrue(r1.body == body_bytes(key, 1, size), "first answer corrupted (%s)" % key)
            r2 = gw.request("POST", "/big", body=b"x", key=key, headers=h)
            self.assertProblem(r2, 502, self.gw_log())
            self.assertTrue(r2.replayed, r2)
            doc = r2.json()
            self.assertIn("upstream-response-not-stored", doc["type"])
            self.assertIn("answered 201", doc["detail"])
            # the gateway's own answer: one Date, kept with it
            self.assertEqual(len(r2.headers_all("Date")), 1, r2)
            self.assertEqual(self.up.count(key), 1, key)
        # at the limit: kept and replayed as usual
        h = {"X-Test-Body-Bytes": str(limit), "X-Test-Id": "at-limit"}
        r1 = gw.request("POST", "/big", body=b"x", key="at-limit", headers=h)
        r2 = gw.request("POST", "/big", body=b"x", key="at-limit", headers=h)
        self.assertEqual((r1.status, r2.status, r2.replayed), (200, 200, True), self.gw_log())
        self.assertEqual(r2.body, r1.body)
        self.assertEqual(self.up.count("at-limit"), 1)
        # the connection stays usable after a streamed keyed answer
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/big", b"x", key="huge-raw",
                                 headers={"X-Test-Body-Bytes": "200000", "X-Test-Id": "huge-raw"}))
            r = c.read_response()
            self.assertEqual((r.status, len(r.body)), (200, 200000))
            c.send(request_bytes("GET", "/after", headers={"X-Test-Id": "after"}))
            self.assertEqual(c.read_response().json()["target"], "/after")
        text = gw.admin_request("GET", "/metrics").body.decode()
        self.assertRegex(text, r'(?m)^idem_requests_total\{outcome="executed"\} ([5-9]|\d\d+)$')

    def test_large_answer_of_a_released_status_releases_the_key(self):
        # a 5xx (or 408/409/425/429) is passed on and releases the key
        # whatever its size: past --max-response it streams to its client,
        # and no 502 marker takes the key, so a retry runs again
        gw = self.start_gateway(self.up, "--max-response", "1KiB", admin=True)
        for st, extra in ((503, {}), (429, {"X-Test-Chunked": "1"}), (500, {})):
            key = "big-released-%d" % st
            h = dict(extra, **{"X-Test-Body-Bytes": "5000", "X-Test-Status": str(st)})
            r1 = gw.request("POST", "/big", body=b"x", key=key, headers=h)
            self.assertEqual((r1.status, len(r1.body)), (st, 5000), self.gw_log())
            self.assertTrue(r1.body == body_bytes(key, 1, 5000), "answer corrupted (%d)" % st)
            r2 = gw.request("POST", "/big", body=b"x", key=key)
            self.assertEqual(r2.status, 200, "%d: %r\n%s" % (st, r2, self.gw_log()))
            self.assertFalse(r2.replayed, r2)
            self.assertEqual([int(f) for f in self.up.fences(key)], [1, 2])
        text = gw.admin_request("GET", "/metrics").body.decode()
        self.assertRegex(text, r'(?m)^idem_requests_total\{outcome="released"\} 3$')
        self.assertRegex(text, r'(?m)^idem_inflight_leases 0$')
        # a client that hangs up while a big answer streams: the key is
        # still settled (the 502 was stored first) and the gateway goes on
        c = RawConn(gw.port)
        c.send(request_bytes("POST", "/big", b"x", key="hang-up",
                             headers={"X-Test-Body-Bytes": "5000000", "X-Test-Id": "hang-up"}))
        self.assertTrue(c.sock.recv(1024).startswith(b"HTTP/1.1 200"))
        c.close()
        r = wait_for(lambda: (lambda r: r if r.status != 409 else None)(
            gw.request("POST", "/big", body=b"x", key="hang-up")), 30, what="the key settled")
        self.assertProblem(r, 502, self.gw_log())
        self.assertTrue(r.replayed)
        self.assertEqual(self.up.count("hang-up"), 1)
        self.assertTrue(gw.alive(), self.gw_log())

    def test_204_replays_without_body(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            for i in range(2):
                c.send(request_bytes("POST", "/nc", b"x", key="nc", headers={"X-Test-Status": "204"}))
                r = c.read_response()
                self.assertEqual(r.status, 204, "%r\n%s" % (r, self.gw_log()))
                self.assertEqual(r.body, b"")
                self.assertEqual(r.replayed, i == 1, r)
            # the connection is still in sync: no stray body bytes after a 204
            c.send(request_bytes("GET", "/after", headers={"X-Test-Id": "after"}))
            self.assertEqual(c.read_response().json()["target"], "/after")
        self.assertEqual(self.up.count("nc"), 1)

    def test_repeated_headers_replay_in_order(self):
        gw = self.start_gateway(self.up)
        h = [("X-Test-Set-Header", "Set-Cookie: a=1; Path=/"),
             ("X-Test-Set-Header", "Set-Cookie: b=2; Path=/"),
             ("X-Test-Set-Header", "X-Multi: first"),
             ("X-Test-Set-Header", "X-Multi: second")]
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/rh", b"x", key="rh", headers=h))
            r1 = c.read_response()
            c.send(request_bytes("POST", "/rh", b"x", key="rh", headers=h))
            r2 = c.read_response()
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertTrue(r2.replayed, r2)
        for r in (r1, r2):
            self.assertEqual(r.headers_all("Set-Cookie"), ["a=1; Path=/", "b=2; Path=/"], r)
            self.assertEqual(r.headers_all("X-Multi"), ["first", "second"], r)
        self.assertEqual(len(r2.headers_all("Idempotent-Replayed")), 1, r2)

    def test_an_upstream_idempotent_replayed_is_not_kept(self):
        # the header is the gateway's: a replay says true once, whatever the
        # upstream said
        gw = self.start_gateway(self.up)
        h = [("X-Test-Set-Header", "Idempotent-Replayed: false")]
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/ir", b"x", key="ir", headers=h))
            r1 = c.read_response()
            c.send(request_bytes("POST", "/ir", b"x", key="ir", headers=h))
            r2 = c.read_response()
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertEqual(r1.headers_all("Idempotent-Replayed"), [], r1)
        self.assertEqual(r2.headers_all("Idempotent-Replayed"), ["true"], r2)

    def test_interim_1xx_is_not_the_stored_answer(self):
        gw = self.start_gateway(self.up)
        for code in ("100", "103"):
            k = "interim-" + code
            h = {"X-Test-Interim": code, "X-Test-Status": "201"}
            with RawConn(gw.port) as c:
                c.send(request_bytes("POST", "/i", b"x", key=k, headers=h))
                r1 = c.read_response()
                while 100 <= r1.status < 200:  # forwarding interims is allowed
                    r1 = c.read_response()
                c.send(request_bytes("POST", "/i", b"x", key=k, headers=h))
                r2 = c.read_response()
                while 100 <= r2.status < 200:
                    r2 = c.read_response()
            self.assertEqual(r1.status, 201, "%s: %r\n%s" % (code, r1, self.gw_log()))
            self.assertEqual(r2.status, 201, "%s: %r" % (code, r2))
            self.assertTrue(r2.replayed, r2)
            self.assertEqual(r2.body, r1.body)
            self.assertEqual(self.up.count(k), 1)

    def test_empty_body_post_replays(self):
        gw = self.start_gateway(self.up)
        r1, r2 = self.twice(gw, "POST", "/e", b"", "empty")
        self.assertTrue(r2.replayed, r2)
        self.assertProblem(gw.request("POST", "/e", body=b"x", key="empty"), 422)
        self.assertEqual(self.up.count("empty"), 1)

    def test_close_delimited_upstream_response_is_stored(self):
        gw = self.start_gateway(self.up)
        h = {"X-Test-Close-Delimited": "1"}
        r1 = gw.request("POST", "/cd", body=b"x", key="cd", headers=h)
        self.assertEqual(r1.status, 200, "%r\n%s" % (r1, self.gw_log()))
        self.assertEqual(r1.json()["exec"], 1)
        r2 = gw.request("POST", "/cd", body=b"x", key="cd", headers=h)
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.body, r1.body)
        self.assertEqual(self.up.count("cd"), 1)
        # and the next request on a new upstream connection works
        self.assertEqual(gw.request("POST", "/cd", body=b"x", key="cd2").status, 200)

    def test_fence_reaches_upstream(self):
        gw = self.start_gateway(self.up)
        gw.request("POST", "/f", body=b"x", key="fk")
        self.assertEqual(self.up.fences("fk"), ["1"])

    def test_client_cannot_forge_fence(self):
        gw = self.start_gateway(self.up)
        r = gw.request("POST", "/f", body=b"x", key="forge", headers={"Idempotency-Fence": "999"})
        self.assertEqual(r.status, 200, self.gw_log())
        seen = self.up.requests("forge")[0]["fences_seen"]
        self.assertEqual(seen, ["1"], "upstream saw client-supplied fence: %r" % seen)

    def test_ttl_expiry_runs_again(self):
        gw = self.start_gateway(self.up, "--ttl", "1s")
        t0 = time.monotonic()
        r1 = gw.request("POST", "/t", body=b"x", key="ttl")
        self.assertEqual(r1.status, 200, self.gw_log())
        r2 = gw.request("POST", "/t", body=b"x", key="ttl")
        if time.monotonic() - t0 < 0.9:
            self.assertTrue(r2.replayed, r2)

        def ran_again():
            r = gw.request("POST", "/t", body=b"x", key="ttl")
            return r if not r.replayed else None
        r3 = wait_for(ran_again, 10, 0.1, "record to expire after --ttl 1s")
        self.assertGreaterEqual(time.monotonic() - t0, 0.9, "expired before its ttl")
        self.assertEqual(r3.status, 200)
        self.assertEqual(r3.json()["exec"], 2)
        self.assertEqual(self.up.count("ttl"), 2)


if __name__ == "__main__":
    main()
