"""Upstream failures: unreachable before sending is 502 and releases the key;
sent but unanswered (timeout: 504, closed: 502) keeps the lease, so an
immediate retry is 409 and one after --lock-ttl takes over with fence 2."""

import time

import json

from harness import GatewayTestCase, Upstream, free_port, main, request_in_background, wait_for


class UpstreamFailures(GatewayTestCase):
    def test_upstream_down_502_and_released(self):
        port = free_port()
        gw = self.start_gateway("http://127.0.0.1:%d" % port)
        r = gw.request("POST", "/down", body=b"x", key="down")
        self.assertProblem(r, 502, self.gw_log())
        r = gw.request("GET", "/down-get")
        self.assertProblem(r, 502)
        up = Upstream(port).start()
        self.addCleanup(up.stop)
        r = gw.request("POST", "/down", body=b"x", key="down")
        self.assertEqual(r.status, 200, "retry after upstream came up: %r\n%s" % (r, self.gw_log()))
        self.assertFalse(r.replayed)
        self.assertEqual(up.count("down"), 1)
        r2 = gw.request("POST", "/down", body=b"x", key="down")
        self.assertTrue(r2.replayed, r2)

    def test_upstream_timeout_504_lease_kept_then_takeover(self):
        up = self.start_upstream()
        lock_ttl = 3.0
        gw = self.start_gateway(up, "--upstream-timeout", "500ms", "--lock-ttl", "3s")
        t0 = time.monotonic()
        r = gw.request("POST", "/hang", body=b"x", key="hang", headers={"X-Test-Hang": "1"})
        took = time.monotonic() - t0
        self.assertProblem(r, 504, self.gw_log())
        self.assertLess(took, 5, "504 took %.1fs with --upstream-timeout 500ms" % took)
        self.assertGreaterEqual(took, 0.4, "504 before --upstream-timeout 500ms")
        r = gw.request("POST", "/hang", body=b"x", key="hang")
        if time.monotonic() - t0 < lock_ttl - 0.3:
            self.assertProblem(r, 409, "immediate retry after 504")
            self.assertIsNotNone(r.header("Retry-After"))
        self.assertEqual(up.count("hang"), 1)

        def taken_over():
            rr = gw.request("POST", "/hang", body=b"x", key="hang")
            return rr if rr.status != 409 else None
        r = wait_for(taken_over, 20, 0.1, "takeover after --lock-ttl 3s")
        self.assertGreaterEqual(time.monotonic() - t0, lock_ttl - 0.3, "lease ended early")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(up.count("hang"), 2)
        self.assertEqual(up.fences("hang"), ["1", "2"])
        r2 = gw.request("POST", "/hang", body=b"x", key="hang")
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.body, r.body)

    def slow_first_then_takeover(self, second_headers):
        """A keyed request whose upstream answers after its lease (--lock-ttl
        1s, the upstream 3 s), and a retry that takes the key over meanwhile
        with second_headers: (the first's response, the takeover's)."""
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "1s", "--upstream-timeout", "6s")
        t, first = request_in_background(gw, "POST", "/late", body=b"x", key="late",
                                         headers={"X-Test-Delay-Ms": "3000"})
        wait_for(lambda: up.count("late") >= 1, 10, what="the first request upstream")

        def taken_over():
            r = gw.request("POST", "/late", body=b"x", key="late", headers=second_headers)
            return r if r.status != 409 else None
        second = wait_for(taken_over, 20, 0.1, "the takeover after --lock-ttl 1s")
        t.join(20)
        self.assertNotIn("err", first)
        self.assertEqual(up.fences("late"), ["1", "2"])
        return up, gw, first["r"], second

    def test_answer_after_a_takeover_is_not_handed_out(self):
        # the takeover's answer is the one kept: the first client must not
        # get its own (never kept) answer, and a retry gets the kept one
        up, gw, first, second = self.slow_first_then_takeover({})
        self.assertEqual(second.status, 200, second)
        self.assertProblem(first, 503, self.gw_log())
        self.assertEqual(first.json()["type"], "urn:idem:problem:answer-not-kept")
        r = gw.request("POST", "/late", body=b"x", key="late")
        self.assertTrue(r.replayed, r)
        self.assertEqual(r.body, second.body)
        self.assertEqual(json.loads(r.body)["fence"], "2")
        self.assertEqual(up.count("late"), 2)

    def test_answer_after_a_released_takeover_is_kept(self):
        # the takeover failed (503: released), so the key is free when the
        # first answer comes: it is kept under a new claim and handed out
        up, gw, first, second = self.slow_first_then_takeover({"X-Test-Status": "503"})
        self.assertEqual(second.status, 503, second)
        self.assertEqual(first.status, 200, "%r\n%s" % (first, self.gw_log()))
        self.assertEqual(json.loads(first.body)["fence"], "1")
        r = gw.request("POST", "/late", body=b"x", key="late")
        self.assertTrue(r.replayed, r)
        self.assertEqual(r.body, first.body)
        self.assertEqual(up.count("late"), 2)

    def test_upstream_timeout_on_a_pooled_connection(self):
        # One loop, so the hanging request goes out on the connection the
        # earlier ones left in the pool, whose timer was last armed for the
        # idle close (15 s): the deadline must still be --upstream-timeout.
        up = self.start_upstream()
        gw = self.start_gateway(up, "--workers", "1", "--upstream-timeout", "500ms")
        for i in range(3):
            r = gw.request("POST", "/pooled", body=b"x", key="pooled-%d" % i)
            self.assertEqual(r.status, 200, r)
        time.sleep(0.6)  # past the first request's deadline: the timer has re-armed
        for hang in ("pooled-hang-1", "pooled-hang-2"):
            t0 = time.monotonic()
            r = gw.request("POST", "/pooled", body=b"x", key=hang, headers={"X-Test-Hang": "1"})
            took = time.monotonic() - t0
            self.assertProblem(r, 504, self.gw_log())
            self.assertLess(took, 3, "504 took %.1fs with --upstream-timeout 500ms" % took)
            self.assertGreaterEqual(took, 0.4, "504 before --upstream-timeout 500ms")
        r = gw.request("POST", "/pooled", body=b"x", key="pooled-after")
        self.assertEqual(r.status, 200, r)

    def test_upstream_closes_without_answer_502_lease_kept(self):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "30s")
        r = gw.request("POST", "/close", body=b"x", key="cl", headers={"X-Test-Close": "1"})
        self.assertProblem(r, 502, self.gw_log())
        self.assertEqual(up.count("cl"), 1, "POST was re-sent to the upstream")
        r = gw.request("POST", "/close", body=b"x", key="cl")
        self.assertProblem(r, 409, "retry after a sent-but-unanswered request")
        self.assertIsNotNone(r.header("Retry-After"))
        self.assertEqual(up.count("cl"), 1)
        # the gateway still works for other keys (pooled connection not reused dead)
        r = gw.request("POST", "/close", body=b"x", key="other")
        self.assertEqual(r.status, 200)

    def test_closes_then_takeover_with_higher_fence(self):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "2s")
        t0 = time.monotonic()
        r = gw.request("POST", "/close", body=b"x", key="clt", headers={"X-Test-Close": "1"})
        self.assertProblem(r, 502, self.gw_log())

        def taken_over():
            rr = gw.request("POST", "/close", body=b"x", key="clt")
            return rr if rr.status != 409 else None
        r = wait_for(taken_over, 20, 0.1, "takeover after --lock-ttl 2s")
        self.assertGreaterEqual(time.monotonic() - t0, 1.7)
        self.assertEqual(r.status, 200)
        self.assertEqual(up.fences("clt"), ["1", "2"])

    def _sent_no_valid_answer(self, header):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "30s")
        key = "bad-" + header
        r = gw.request("POST", "/bad", body=b"x", key=key, headers={header: "1"})
        self.assertProblem(r, 502, "%s\n%s" % (header, self.gw_log()))
        self.assertEqual(up.count(key), 1, "%s: POST re-sent to the upstream" % header)
        r = gw.request("POST", "/bad", body=b"x", key=key)
        self.assertProblem(r, 409, "%s: retry after a sent request with no valid answer" % header)
        self.assertFalse(r.replayed)
        self.assertEqual(up.count(key), 1)
        self.assertEqual(gw.request("POST", "/bad", body=b"x", key="fine").status, 200)

    def test_upstream_garbage_answer_502_lease_kept(self):
        self._sent_no_valid_answer("X-Test-Garbage")

    def test_upstream_reset_502_lease_kept(self):
        self._sent_no_valid_answer("X-Test-Reset")

    def test_upstream_truncated_body_502_not_stored(self):
        # half a body must never become the stored answer
        self._sent_no_valid_answer("X-Test-Truncate")

    def test_upstream_bad_chunk_502_not_stored(self):
        self._sent_no_valid_answer("X-Test-Bad-Chunk")

    def test_upstream_ambiguous_framing_not_stored_as_is(self):
        # Content-Length with chunked from the upstream: RFC 9112 says chunked
        # wins (and the connection is closed after); a gateway may also refuse
        # it (502). It must never store or relay the first 3 bytes as the body.
        up = self.start_upstream()
        gw = self.start_gateway(up)
        r = gw.request("POST", "/amb", body=b"x", key="amb", headers={"X-Test-Bad-Framing": "1"})
        if r.status == 200:
            self.assertEqual(r.json()["exec"], 1)
            r2 = gw.request("POST", "/amb", body=b"x", key="amb")
            self.assertTrue(r2.replayed, r2)
            self.assertEqual(r2.body, r.body)
        else:
            self.assertProblem(r, 502, self.gw_log())
        self.assertEqual(up.count("amb"), 1)

    def test_client_gone_mid_flight_result_still_stored(self):
        # The client gives up while the upstream runs; the upstream did run,
        # so its answer is stored and the client's retry replays it.
        from harness import RawConn, request_bytes
        up = self.start_upstream()
        gw = self.start_gateway(up)
        c = RawConn(gw.port)
        c.send(request_bytes("POST", "/gone", b"x", key="gone", headers={"X-Test-Delay-Ms": "800"}))
        self.assertEqual(up.wait_count("gone", 1), 1, self.gw_log())
        c.close()

        def settled():
            rr = gw.request("POST", "/gone", body=b"x", key="gone")
            return rr if rr.status != 409 else None
        r = wait_for(settled, 15, 0.1, "the abandoned request to finish")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertTrue(r.replayed, "upstream ran again after the client went away: %r" % r)
        self.assertEqual(r.json()["exec"], 1)
        self.assertEqual(up.count("gone"), 1)

    def test_late_answer_after_takeover_is_not_stored(self):
        # A zombie: the first execution outlives its lease, a retry takes over
        # (fence 2) and completes; the first one's late answer must not
        # overwrite the record (its fence is stale).
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "1s", "--upstream-timeout", "20s")
        import threading
        res = {}

        def first():
            res["a"] = gw.request("POST", "/z", body=b"x", key="zombie",
                                  headers={"X-Test-Delay-Ms": "3000"})
        t = threading.Thread(target=first, daemon=True)
        t.start()
        self.assertEqual(up.wait_count("zombie", 1), 1, self.gw_log())

        def taken_over():
            rr = gw.request("POST", "/z", body=b"x", key="zombie")
            return rr if rr.status != 409 else None
        b = wait_for(taken_over, 15, 0.05, "takeover after --lock-ttl 1s")
        self.assertEqual(b.status, 200, "%r\n%s" % (b, self.gw_log()))
        self.assertEqual(b.json()["exec"], 2)
        t.join(30)
        self.assertIn("a", res, "first client got no answer")
        self.assertEqual(up.fences("zombie"), ["1", "2"])
        for _ in range(2):
            c = gw.request("POST", "/z", body=b"x", key="zombie")
            self.assertTrue(c.replayed, c)
            self.assertEqual(c.body, b.body, "record overwritten by the stale execution")
        self.assertEqual(up.count("zombie"), 2)

    def test_passthrough_timeout_504(self):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--upstream-timeout", "500ms")
        r = gw.request("GET", "/slow-get", headers={"X-Test-Hang": "1", "X-Test-Id": "sg"})
        self.assertProblem(r, 504, self.gw_log())
        self.assertEqual(gw.request("GET", "/next", headers={"X-Test-Id": "n"}).status, 200)

    def test_upstream_5xx_passes_through_without_key(self):
        up = self.start_upstream()
        gw = self.start_gateway(up)
        r = gw.request("GET", "/e", headers={"X-Test-Status": "503", "X-Test-Id": "g"})
        self.assertEqual(r.status, 503)
        self.assertEqual(r.header("Content-Type"), "application/json")


if __name__ == "__main__":
    main()
