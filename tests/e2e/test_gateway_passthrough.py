"""Pass-through: methods without semantics and requests without a key reach
the upstream every time, unchanged; keep-alive on both sides; chunked bodies
in both directions; --methods."""

import hashlib
import os
import socket
import time

from harness import GatewayTestCase, RawConn, request_bytes, main, rss_kib, wait_for


class PassThrough(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_get_passes_through_every_time(self):
        gw = self.start_gateway(self.up)
        for i in (1, 2, 3):
            r = gw.request("GET", "/items?x=1", headers={"X-Test-Id": "get"})
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertEqual(r.json()["exec"], i)
            self.assertEqual(r.json()["target"], "/items?x=1")
            self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("get"), 3)

    def test_get_with_key_is_not_deduplicated(self):
        gw = self.start_gateway(self.up)
        for i in (1, 2):
            r = gw.request("GET", "/items", key="getkey")
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("getkey"), 2)

    def test_post_without_key_passes_through(self):
        gw = self.start_gateway(self.up)
        for i in (1, 2):
            r = gw.request("POST", "/orders", body=b'{"a":1}', headers={"X-Test-Id": "nokey"})
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertEqual(r.json()["exec"], i)
            self.assertEqual(r.json()["body_sha256"], hashlib.sha256(b'{"a":1}').hexdigest())
            self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("nokey"), 2)

    def test_upstream_status_and_headers_pass_through(self):
        gw = self.start_gateway(self.up)
        r = gw.request("GET", "/x", headers={"X-Test-Id": "h", "X-Test-Status": "404",
                                              "X-Test-Set-Header": "X-Custom: yes"})
        self.assertEqual(r.status, 404)
        self.assertEqual(r.header("X-Custom"), "yes")
        self.assertEqual(r.header("Content-Type"), "application/json")

    def test_target_and_headers_reach_upstream_unchanged(self):
        gw = self.start_gateway(self.up)
        target = "/a%20b/c;p=1?x=1&y=%2F&z=%C3%A9"
        for key in (None, "tg"):
            h = [("X-Test-Id", "tg-%s" % key), ("Authorization", "Bearer abc"),
                 ("X-Custom", "v1"), ("X-Custom", "v2"), ("Content-Type", "text/plain")]
            if key:
                h.append(("Idempotency-Key", key))
            with RawConn(gw.port) as c:
                c.send(request_bytes("POST", target, b"body", headers=h))
                self.assertEqual(c.read_response().status, 200, self.gw_log())
            seen = self.up.requests("tg-%s" % key)[0]
            self.assertEqual(seen["target"], target)
            got = [(k.lower(), v) for k, v in seen["headers"]]
            self.assertIn(("authorization", "Bearer abc"), got)
            self.assertIn(("content-type", "text/plain"), got)
            # repeated fields may be kept apart or joined with commas
            custom = [x.strip() for k, v in got if k == "x-custom" for x in v.split(",")]
            self.assertEqual(custom, ["v1", "v2"], got)

    def hop_twice(self, gw, test_id, h):
        """POST /TEST_ID with headers h twice on one connection: the two
        answers (the first a 200), and the header names the upstream saw."""
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/" + test_id, b"x", headers=h))
            r1 = c.read_response()
            c.send(request_bytes("POST", "/" + test_id, b"x", headers=h))
            r2 = c.read_response()
        self.assertEqual(r1.status, 200, self.gw_log())
        return r1, r2, {k.lower() for k, v in self.up.requests(test_id)[0]["headers"]}

    def test_hop_by_hop_headers_not_forwarded(self):
        # RFC 9110 7.6.1: Connection and the fields it names are per hop
        gw = self.start_gateway(self.up)
        h = [("X-Test-Id", "hop"), ("Idempotency-Key", "hop"), ("Connection", "keep-alive, X-Hop"),
             ("X-Hop", "secret"), ("Keep-Alive", "timeout=5"), ("Proxy-Connection", "keep-alive"),
             ("X-Test-Set-Header", "Connection: X-Up-Hop"), ("X-Test-Set-Header", "X-Up-Hop: v")]
        r1, r2, names = self.hop_twice(gw, "hop", h)
        for n in ("x-hop", "keep-alive", "proxy-connection"):
            self.assertNotIn(n, names, "%s forwarded to the upstream" % n)
        self.assertTrue(r2.replayed, r2)
        for r in (r1, r2):
            self.assertIsNone(r.header("X-Up-Hop"), "upstream hop-by-hop field relayed: %r" % r)

    def test_hop_by_hop_named_by_a_second_connection_line(self):
        # a list field may come in several lines (RFC 9110 5.3): what a
        # second Connection line names is hop-by-hop as much as the first's,
        # from the client and from the upstream, on the answer and its replay
        gw = self.start_gateway(self.up)
        h = [("X-Test-Id", "hop2"), ("Idempotency-Key", "hop2"), ("Connection", "keep-alive"),
             ("Connection", "X-Hop"), ("X-Hop", "secret"),
             ("X-Test-Set-Header", "Connection: keep-alive"),
             ("X-Test-Set-Header", "Connection: X-Up-Hop"), ("X-Test-Set-Header", "X-Up-Hop: v")]
        r1, r2, names = self.hop_twice(gw, "hop2", h)
        self.assertNotIn("x-hop", names, "a field named by a second Connection line forwarded")
        self.assertTrue(r2.replayed, r2)
        for r in (r1, r2):
            self.assertIsNone(r.header("X-Up-Hop"), "upstream hop-by-hop field relayed: %r" % r)

    def test_upstream_given_by_name(self):
        gw = self.start_gateway("http://localhost:%d" % self.up.port)
        r = gw.request("POST", "/byname", body=b"x", key="byname")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))

    def test_upstream_url_with_trailing_slash(self):
        gw = self.start_gateway(self.up.url + "/")
        r = gw.request("GET", "/slash", headers={"X-Test-Id": "slash"})
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertEqual(r.json()["target"], "/slash")

    def test_large_answers_pass_through(self):
        # Pass-through stores nothing, so no answer size limit applies: a
        # 12 MiB download reaches the client intact (chunked or not).
        from upstream import body_bytes
        gw = self.start_gateway(self.up)
        size = 12 * 1024 * 1024 + 3
        for m, rid, extra in (("GET", "dl-get", {}), ("POST", "dl-post", {}),
                              ("GET", "dl-chunked", {"X-Test-Chunked": "1"})):
            r = gw.request(m, "/download", body=b"x" if m == "POST" else None,
                           headers=dict(extra, **{"X-Test-Id": rid, "X-Test-Body-Bytes": str(size)}))
            self.assertEqual(r.status, 200, "%s %s: %r\n%s" % (m, rid, r, self.gw_log()))
            self.assertEqual(len(r.body), size, rid)
            self.assertTrue(r.body == body_bytes(rid, 1, size), "%s: body corrupted" % rid)

    def test_client_leaving_a_download_cuts_the_upstream(self):
        # A client that hangs up mid-download: the gateway drops the upstream
        # connection instead of reading the rest of the answer (64 MiB, more
        # than the socket buffers can hold, so the upstream sees the cut).
        # Both ways an answer streams: pass-through, and a keyed answer past
        # --max-response (settled first with a stored 502).
        gw = self.start_gateway(self.up, "--max-response", "64KiB", admin=True)
        size = str(64 * 1024 * 1024)
        for rid, req in (("cut-get", request_bytes("GET", "/dl", headers={
                              "X-Test-Id": "cut-get", "X-Test-Body-Bytes": size})),
                         ("cut-keyed", request_bytes("POST", "/dl", b"x", key="cut-keyed", headers={
                              "X-Test-Id": "cut-keyed", "X-Test-Body-Bytes": size}))):
            c = RawConn(gw.port)
            c.send(req)
            self.assertTrue(c.sock.recv(65536).startswith(b"HTTP/1.1 200"), rid)
            c.close()
            wait_for(lambda: self.up.cut(rid), 20, what="the upstream connection cut (%s)" % rid)
            self.assertEqual(self.up.count(rid), 1)
        # the key is settled, the gateway goes on, nothing counted as failed
        r = gw.request("POST", "/dl", body=b"x", key="cut-keyed")
        self.assertProblem(r, 502, self.gw_log())
        self.assertTrue(r.replayed)
        self.assertEqual(gw.request("GET", "/after").status, 200, self.gw_log())
        text = gw.admin_request("GET", "/metrics").body.decode()
        self.assertNotRegex(text, r'(?m)^idem_requests_total\{outcome="upstream_error"\} [1-9]')
        self.assertNotIn("midway", self.gw_log())

    def test_truncated_streamed_answer_is_not_made_whole(self):
        # the upstream dies mid-body of a pass-through answer: the client must
        # see an incomplete message (closed early), never a complete one
        gw = self.start_gateway(self.up)
        for extra in ({}, {"X-Test-Chunked": "1"}):
            h = dict(extra, **{"X-Test-Id": "trunc", "X-Test-Truncate": "1",
                               "X-Test-Body-Bytes": str(3 * 1024 * 1024)})
            with RawConn(gw.port) as c:
                c.send(request_bytes("GET", "/trunc", headers=h))
                try:
                    r = c.read_response(timeout=20)
                except EOFError:
                    continue  # closed mid-body: the client knows it is incomplete
                except ValueError:
                    continue  # broken chunk framing: also detectably incomplete
                self.assertNotEqual(r.status, 200, "a truncated answer was delivered as complete "
                                    "(%d bytes)" % len(r.body))
                self.assertGreaterEqual(r.status, 500, r)

    def test_http10_client_gets_a_streamed_answer_without_chunking(self):
        from upstream import body_bytes
        gw = self.start_gateway(self.up)
        size = 3 * 1024 * 1024
        with RawConn(gw.port, timeout=30) as c:
            c.send(b"GET /h10big HTTP/1.0\r\nHost: x\r\nX-Test-Id: h10big\r\n"
                   b"X-Test-Chunked: 1\r\nX-Test-Body-Bytes: %d\r\n\r\n" % size)
            r = c.read_response(timeout=30)
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertNotIn("chunked", (r.header("Transfer-Encoding") or "").lower(),
                         "chunked sent to an HTTP/1.0 client")
        self.assertTrue(r.body == body_bytes("h10big", 1, size), "body differs (%d bytes)" % len(r.body))

    def test_slow_reader_of_a_large_answer_bounded_memory(self):
        # backpressure: a client that does not read must not make the gateway
        # buffer the whole 64 MiB answer
        from upstream import body_bytes
        gw = self.start_gateway(self.up)
        size = 64 * 1024 * 1024

        before = rss_kib(gw.pid)
        with RawConn(gw.port, timeout=60) as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            c.send(request_bytes("GET", "/huge", headers={"X-Test-Id": "huge",
                                                           "X-Test-Body-Bytes": str(size)}))
            self.up.wait_count("huge", 1)
            peak = before
            for _ in range(10):  # 1s of not reading, sampling the gateway's memory
                time.sleep(0.1)
                peak = max(peak, rss_kib(gw.pid))
            r = c.read_response(timeout=60)
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertEqual(len(r.body), size)
        self.assertTrue(r.body == body_bytes("huge", 1, size))
        if os.environ.get("IDEM_E2E_VERBOSE"):
            print("rss before %d KiB, peak %d KiB" % (before, peak))
        self.assertLess(peak - before, 24 * 1024,
                        "gateway buffered %d KiB for a client that did not read" % (peak - before))

    def test_slow_reader_of_tiny_chunks_bounded_memory(self):
        # an upstream answering in one-byte chunks: the pieces a client that
        # does not read leaves behind are gathered, not kept a write each
        from upstream import body_bytes
        gw = self.start_gateway(self.up)
        before = rss_kib(gw.pid)
        with RawConn(gw.port, timeout=60) as c:
            c.send(request_bytes("GET", "/tiny", headers={
                "X-Test-Id": "tiny", "X-Test-Chunk-Bytes": "1",
                "X-Test-Body-Bytes": str(4 * 1024 * 1024)}))
            self.up.wait_count("tiny", 1)
            peak = before
            for _ in range(20):  # 2s of not reading
                time.sleep(0.1)
                peak = max(peak, rss_kib(gw.pid))
        self.assertLess(peak - before, 24 * 1024,
                        "gateway held %d KiB for a client that did not read" % (peak - before))
        # and what is gathered goes out whole, in order
        size = 200000
        with RawConn(gw.port, timeout=60) as c:
            c.send(request_bytes("GET", "/tiny", headers={
                "X-Test-Id": "tiny2", "X-Test-Chunk-Bytes": "1", "X-Test-Body-Bytes": str(size)}))
            r = c.read_response(timeout=60)
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertTrue(r.body == body_bytes("tiny2", 1, size), "body differs")

    def test_put_and_delete_pass_through_by_default(self):
        gw = self.start_gateway(self.up)
        for m in ("PUT", "DELETE"):
            for _ in (1, 2):
                r = gw.request(m, "/r", body=b"x" if m == "PUT" else None, key="k-" + m)
                self.assertEqual(r.status, 200, self.gw_log())
                self.assertFalse(r.replayed, r)
            self.assertEqual(self.up.count("k-" + m), 2, m)

    def test_patch_has_semantics_by_default(self):
        gw = self.start_gateway(self.up)
        r1, r2 = self.twice(gw, "PATCH", "/r", b"p", "kp")
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(self.up.count("kp"), 1)

    def test_methods_flag(self):
        gw = self.start_gateway(self.up, "--methods", "PUT")
        r1 = gw.request("PUT", "/r", body=b"p", key="kput")
        r2 = gw.request("PUT", "/r", body=b"p", key="kput")
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(self.up.count("kput"), 1)
        # POST is no longer in the list: passes through
        gw.request("POST", "/r", body=b"p", key="kpost")
        r = gw.request("POST", "/r", body=b"p", key="kpost")
        self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("kpost"), 2)

    def test_client_keep_alive_reuse(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            for i in range(5):
                c.send(request_bytes("POST", "/ka", b"b%d" % i, key="ka%d" % i))
                r = c.read_response()
                self.assertEqual(r.status, 200, self.gw_log())
                self.assertNotEqual((r.header("Connection") or "").lower(), "close", r)
            for i in range(3):
                c.send(request_bytes("GET", "/ka-get", headers={"X-Test-Id": "kaget"}))
                self.assertEqual(c.read_response().status, 200)
            self.assertFalse(c.closed(0.2), "gateway closed a keep-alive connection")

    def test_upstream_connections_are_reused(self):
        # one client connection (one worker, whatever the core count)
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            for i in range(10):
                c.send(request_bytes("POST", "/pool", b"x", key="pool%d" % i))
                self.assertEqual(c.read_response().status, 200, self.gw_log())
        self.assertEqual(self.up.total(), 10)
        self.assertLessEqual(self.up.connections(), 2,
                             "10 sequential requests used %d upstream connections"
                             % self.up.connections())

    def test_connection_close_from_client(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/cc", b"x", key="cc", headers={"Connection": "close"}))
            r = c.read_response()
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertTrue(c.closed(5), "connection kept open after Connection: close")

    def test_head_response_has_no_body(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            c.send(b"HEAD /hd HTTP/1.1\r\nHost: x\r\nX-Test-Id: hd\r\n\r\n")
            r = c.read_response(head=True, timeout=5)
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertNotEqual(r.header("Content-Length"), "0", r)
            # the connection is in sync: the next answer is the next request's
            c.send(request_bytes("GET", "/after-head", headers={"X-Test-Id": "ah"}))
            r2 = c.read_response(timeout=5)
            self.assertEqual(r2.json()["target"], "/after-head")
        self.assertEqual(self.up.count("hd"), 1)

    def test_keyed_head_replays_its_content_length(self):
        # HEAD in --methods: its answer is kept and replayed, and a replay
        # carries the Content-Length the first answer had (a GET's length),
        # not the empty body's 0
        gw = self.start_gateway(self.up, "--methods", "POST,PATCH,HEAD")
        answers = []
        for _ in range(2):
            with RawConn(gw.port) as c:
                c.send(b"HEAD /khd HTTP/1.1\r\nHost: x\r\nX-Test-Id: khd\r\n"
                       b"Idempotency-Key: khd\r\n\r\n")
                answers.append(c.read_response(head=True, timeout=5))
        first, replay = answers
        self.assertEqual(first.status, 200, self.gw_log())
        self.assertTrue(replay.replayed, replay)
        self.assertNotIn(first.header("Content-Length"), (None, "0"), first)
        self.assertEqual(replay.header("Content-Length"), first.header("Content-Length"), replay)
        self.assertEqual(len([v for k, v in replay.headers if k.lower() == "content-length"]), 1,
                         replay)
        self.assertEqual(self.up.count("khd"), 1)

    def test_http10_client(self):
        gw = self.start_gateway(self.up)
        for key in (None, "h10"):
            with RawConn(gw.port) as c:
                hk = ("Idempotency-Key: %s\r\n" % key).encode() if key else b""
                c.send(b"POST /h10 HTTP/1.0\r\nHost: x\r\nX-Test-Id: h10\r\n" + hk +
                       b"Content-Length: 3\r\n\r\nabc")
                r = c.read_response()
                self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
                self.assertEqual(r.json()["body_sha256"],
                                 hashlib.sha256(b"abc").hexdigest())
                self.assertTrue(c.closed(5), "HTTP/1.0 connection kept open without keep-alive")

    def test_upstream_connection_close_is_honoured(self):
        gw = self.start_gateway(self.up)
        for i in range(4):
            r = gw.request("POST", "/uc", body=b"x", key="uc%d" % i,
                           headers={"X-Test-Set-Header": "Connection: close"})
            self.assertEqual(r.status, 200, "request %d after upstream Connection: close: %r\n%s"
                             % (i, r, self.gw_log()))
            self.assertNotEqual((r.header("Connection") or "").lower(), "close",
                                "hop-by-hop Connection header leaked to the client")
        self.assertEqual(self.up.connections(), 4)

    def test_upstream_idle_close_is_not_a_failure(self):
        # The upstream closes a pooled connection after answering (an idle
        # timeout). The next request must not fail on that dead connection.
        from harness import wait_for
        gw = self.start_gateway(self.up)
        for i in range(5):
            with RawConn(gw.port) as c:
                c.send(request_bytes("POST", "/ic", b"x", key="ic-a%d" % i,
                                     headers={"X-Test-Close-After": "1"}))
                self.assertEqual(c.read_response().status, 200, self.gw_log())
                wait_for(lambda: self.up.idle_closes() > i, 5, what="the upstream to close")
                c.send(request_bytes("POST", "/ic", b"x", key="ic-b%d" % i))
                r = c.read_response()
            self.assertEqual(r.status, 200, "request %d after an upstream idle close: %r\n%s"
                             % (i, r, self.gw_log()))
            self.assertEqual(self.up.count("ic-b%d" % i), 1)

    def test_expect_100_continue(self):
        # curl sends Expect: 100-continue for large bodies; RFC 9110 wants an
        # immediate 100 (or a final answer), not a wait for the body.
        gw = self.start_gateway(self.up)
        body = b"e" * 5000
        with RawConn(gw.port) as c:
            c.send(b"POST /exp HTTP/1.1\r\nHost: x\r\nIdempotency-Key: exp\r\nX-Test-Id: exp\r\n"
                   b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
            try:
                interim = c.read_response(timeout=3, head=True)
            except Exception as e:
                self.fail("no 100 Continue within 3s: %r\n%s" % (e, self.gw_log()))
            self.assertEqual(interim.status, 100, interim)
            c.send(body)
            r = c.read_response()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.json()["body_len"], len(body))
        self.assertEqual(self.up.count("exp"), 1)
        self.assertEqual(self.up.requests("exp")[0]["body"], body)

    def test_expect_100_continue_after_an_answer_given_at_once(self):
        # A pipelined request answered at once (a 400 for its key), while
        # its own 100 Continue is still queued: the next request's head asks
        # for a 100 too, and its client waits for that before its body.
        gw = self.start_gateway(self.up, "--client-timeout", "5s")
        head = (b"POST /exp2 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nX-Test-Id: exp2\r\n"
                b"Expect: 100-continue\r\nContent-Length: 2\r\n\r\n")
        with RawConn(gw.port) as c:
            c.send(head % b"a b" + b"hi" + head % b"exp2")
            self.assertEqual(c.read_response(timeout=3, head=True).status, 100)
            self.assertEqual(c.read_response(timeout=3).status, 400, self.gw_log())
            try:
                interim = c.read_response(timeout=3, head=True)
            except Exception as e:
                self.fail("no 100 Continue for the second request within 3s: %r\n%s"
                          % (e, self.gw_log()))
            self.assertEqual(interim.status, 100, interim)
            c.send(b"hi")
            self.assertEqual(c.read_response().status, 200, self.gw_log())
        self.assertEqual(self.up.count("exp2"), 1)

    def test_chunked_request_body(self):
        gw = self.start_gateway(self.up)
        body = b"hello chunked world" * 10
        chunks = [body[:7], body[7:100], body[100:]]
        raw = (b"POST /chunked HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ck\r\nX-Test-Id: ck\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
        for ch in chunks:
            raw += b"%x\r\n%s\r\n" % (len(ch), ch)
        raw += b"0\r\n\r\n"
        with RawConn(gw.port) as c:
            c.send(raw)
            r = c.read_response()
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertFalse(r.replayed)
        seen = self.up.requests("ck")
        self.assertEqual(len(seen), 1)
        self.assertEqual(seen[0]["body"], body)
        # the same body sent with Content-Length is the same request: replay
        r2 = gw.request("POST", "/chunked", body=body, key="ck")
        self.assertEqual(r2.status, 200)
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.body, r.body)
        self.assertEqual(self.up.count("ck"), 1)

    def test_chunked_request_body_without_key(self):
        gw = self.start_gateway(self.up)
        raw = (b"POST /c HTTP/1.1\r\nHost: x\r\nX-Test-Id: cnk\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        with RawConn(gw.port) as c:
            c.send(raw)
            r = c.read_response()
            self.assertEqual(r.status, 200, self.gw_log())
            self.assertEqual(self.up.requests("cnk")[0]["body"], b"abcde")
            c.send(request_bytes("GET", "/after", headers={"X-Test-Id": "after"}))
            self.assertEqual(c.read_response().status, 200)

    def test_chunked_request_with_trailer(self):
        # Trailer fields are legal after the last chunk; the body and the
        # header fields before it must reach the upstream unchanged.
        gw = self.start_gateway(self.up)
        for rid, key in (("tr-nokey", None), ("tr-key", "tr-key")):
            hk = b"Idempotency-Key: %s\r\n" % key.encode() if key else b""
            raw = (b"POST /tr HTTP/1.1\r\nHost: x\r\nX-Test-Id: " + rid.encode() + b"\r\n" + hk +
                   b"Transfer-Encoding: chunked\r\nX-Before: one\r\n\r\n"
                   b"3\r\nabc\r\n3\r\ndef\r\n0\r\nX-Checksum: sum1\r\n\r\n")
            with RawConn(gw.port) as c:
                c.send(raw)
                r = c.read_response()
                self.assertEqual(r.status, 200, "%s: %r\n%s" % (rid, r, self.gw_log()))
            seen = self.up.requests(rid)
            self.assertEqual(len(seen), 1, rid)
            hdrs = seen[0]["headers"]
            self.assertEqual(seen[0]["body"], b"abcdef", "%s: body changed: %r" % (rid, hdrs))
            self.assertIn(("X-Before", "one"), hdrs, "%s: header before the body mangled: %r" % (rid, hdrs))
            for k, v in hdrs:
                self.assertNotIn("\x00", k + v, "%s: NUL forwarded upstream: %r" % (rid, hdrs))

    def test_chunked_upstream_response_and_replay(self):
        gw = self.start_gateway(self.up)
        r1 = gw.request("POST", "/ch", body=b"z", key="chr", headers={"X-Test-Chunked": "1"})
        self.assertEqual(r1.status, 200, self.gw_log())
        doc = r1.json()
        self.assertEqual(doc["exec"], 1)
        r2 = gw.request("POST", "/ch", body=b"z", key="chr")
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.body, r1.body)
        # and a chunked pass-through response on a kept-alive connection
        with RawConn(gw.port) as c:
            for _ in range(2):
                c.send(request_bytes("GET", "/chg", headers={"X-Test-Chunked": "1", "X-Test-Id": "chg"}))
                r = c.read_response()
                self.assertEqual(r.status, 200)
                self.assertEqual(r.json()["target"], "/chg")
        self.assertEqual(self.up.count("chr"), 1)


if __name__ == "__main__":
    main()
