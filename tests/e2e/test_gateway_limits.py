"""Limits and framing: 413 over --max-body, 431 on huge headers, 408 on a
client that stops mid-request, 400 and a closed connection on ambiguous or
malformed framing (nothing reaches the upstream), pipelined requests
answered in order."""

import threading
import time

from harness import GatewayTestCase, RawConn, request_bytes, main

KIB = 1024


class Limits(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_413_over_max_body(self):
        gw = self.start_gateway(self.up, "--max-body", "64KiB")
        ok = gw.request("POST", "/b", body=b"a" * (64 * KIB), key="atlimit")
        self.assertEqual(ok.status, 200, "body of exactly --max-body refused: %r\n%s"
                         % (ok, self.gw_log()))
        self.assertEqual(ok.json()["body_len"], 64 * KIB)
        with RawConn(gw.port) as c:
            c.send_until_answered(request_bytes("POST", "/b", b"a" * (64 * KIB + 1), key="over"))
            r = c.read_response()
        self.assertProblem(r, 413, self.gw_log())
        self.assertEqual(self.up.count("over"), 0)
        # a retry with a small body under the same key is not blocked by the 413
        r = gw.request("POST", "/b", body=b"small", key="over")
        self.assertEqual(r.status, 200)

    def test_413_chunked_over_max_body(self):
        gw = self.start_gateway(self.up, "--max-body", "1KiB")
        chunk = b"z" * 512
        raw = (b"POST /b HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ch413\r\nX-Test-Id: ch413\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + (b"200\r\n" + chunk + b"\r\n") * 4 + b"0\r\n\r\n")
        with RawConn(gw.port) as c:
            c.send_until_answered(raw)
            r = c.read_response()
        self.assertProblem(r, 413, self.gw_log())
        self.assertEqual(self.up.count("ch413"), 0)

    def test_431_huge_headers(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            c.send_until_answered(request_bytes("POST", "/h", b"x", key="big",
                                                headers={"X-Big": "v" * (256 * KIB)}))
            r = c.read_response()
        self.assertProblem(r, 431, self.gw_log())
        self.assertEqual(self.up.count("big"), 0)

    def test_431_many_headers(self):
        gw = self.start_gateway(self.up)
        hdrs = [("X-H%d" % i, "v" * 100) for i in range(2000)]
        with RawConn(gw.port) as c:
            c.send_until_answered(request_bytes("GET", "/h", headers=hdrs + [("X-Test-Id", "many")]))
            r = c.read_response()
        self.assertProblem(r, 431, self.gw_log())
        self.assertEqual(self.up.count("many"), 0)

    def test_408_slow_client(self):
        # No flag sets the client timeout; a gateway must still give up on a
        # client that stops mid-request (nginx does after 60s). Both halves
        # run at once to keep the test short.
        gw = self.start_gateway(self.up)
        out = {}

        def stall(name, data):
            try:
                with RawConn(gw.port, timeout=100) as c:
                    c.send(data)
                    out[name] = c.read_response(timeout=95)
                    out[name + "-closed"] = c.closed(5)
            except Exception as e:
                out[name] = e
        mid_body = (b"POST /slow HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slowb\r\nX-Test-Id: slowb\r\n"
                    b"Content-Length: 100\r\n\r\nonly-part-of-it")
        mid_head = b"POST /slow HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slowh\r\nX-Te"
        ts = [threading.Thread(target=stall, args=a, daemon=True)
              for a in (("body", mid_body), ("head", mid_head))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(110)
        for name in ("body", "head"):
            r = out.get(name)
            self.assertTrue(hasattr(r, "status"), "%s: no 408 within 95s: %r\n%s"
                            % (name, r, self.gw_log()))
            self.assertProblem(r, 408, name)
            self.assertTrue(out[name + "-closed"], "%s: connection left open after 408" % name)
        self.assertEqual(self.up.count("slowb"), 0)
        # a request that never arrived whole claimed nothing: a retry runs now
        r = gw.request("POST", "/slow", body=b"x" * 100, key="slowb")
        self.assertEqual(r.status, 200, "retry after a 408: %r" % r)
        self.assertFalse(r.replayed)

    def _bad_framing(self, raw, what):
        # a fresh upstream and gateway per case: a case that desynchronises
        # a pooled upstream connection must not make the next case fail
        up = self.start_upstream()
        gw = self.start_gateway(up)
        try:
            with RawConn(gw.port) as c:
                c.send(raw)
                try:
                    r = c.read_response()
                except EOFError:
                    self.fail("%s: connection closed without a 400\n%s" % (what, gw.stderr()))
                forwarded = [(q["method"], q["target"], q["headers"], q["body"]) for q in up.requests()]
                self.assertEqual(forwarded, [], "%s: reached the upstream (answer %d)" % (what, r.status))
                self.assertProblem(r, 400, what)
                self.assertTrue(c.closed(5), "%s: connection not closed after 400" % what)
            # the gateway still serves
            self.assertEqual(gw.request("GET", "/ok").status, 200, what)
        finally:
            gw.stop()
            up.stop()

    def test_400_bad_framing_closes_connection(self):
        cases = [
            ("Content-Length with Transfer-Encoding",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f1\r\nContent-Length: 5\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            ("Content-Length with Transfer-Encoding, keyed",
             b"POST /f HTTP/1.1\r\nHost: x\r\nIdempotency-Key: f2\r\nX-Test-Id: f2\r\n"
             b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
            ("two differing Content-Length",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f3\r\nContent-Length: 3\r\n"
             b"Content-Length: 4\r\n\r\nabcd"),
            ("differing Content-Length list",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f4\r\nContent-Length: 3, 4\r\n\r\nabcd"),
            ("bad chunk size",
             b"POST /f HTTP/1.1\r\nHost: x\r\nIdempotency-Key: f5\r\nX-Test-Id: f5\r\n"
             b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
            ("negative Content-Length",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f6\r\nContent-Length: -1\r\n\r\n"),
            ("non-numeric Content-Length",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f7\r\nContent-Length: 1x\r\n\r\nab"),
            ("unknown Transfer-Encoding",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f8\r\nTransfer-Encoding: gzip\r\n\r\nab"),
            ("garbage request line",
             b"THIS IS NOT HTTP\r\n\r\n"),
            ("whitespace before the colon",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f9\r\nContent-Length : 3\r\n\r\nabc"),
            ("signed Content-Length",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f10\r\nContent-Length: +3\r\n\r\nabc"),
            ("chunked not last",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f11\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
             b"3\r\nabc\r\n0\r\n\r\n"),
            ("chunk data not followed by CRLF",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f14\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"3\r\nabcXX0\r\n\r\n"),
            ("space in a field name",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f15\r\nBad Name: v\r\nContent-Length: 0\r\n\r\n"),
            ("chunk size overflow",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f12\r\nTransfer-Encoding: chunked\r\n\r\n"
             b"fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"),
            ("NUL in a header value",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: f13\r\nX-Bad: a\x00b\r\nContent-Length: 0\r\n\r\n"),
        ]
        for what, raw in cases:
            with self.subTest(case=what):
                self._bad_framing(raw, what)

    def test_400_chunk_framing_a_strict_peer_reads_otherwise(self):
        # http_parser takes any byte after the CR of a chunk size line or of
        # the final CRLF, and any byte in a chunk extension: a front proxy
        # that ends those lines at a bare LF (or refuses them) reads another
        # body, and what follows it as another request. Each is a 400.
        head = b"POST /f HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nX-Test-Id: %s\r\n" \
               b"Transfer-Encoding: chunked\r\n\r\n"
        after = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        cases = [
            ("a byte other than LF after a chunk size's CR", b"c1", b"2\rXab\r\n0\r\n\r\n"),
            ("a bare LF in a chunk extension", b"c2", b"2;a\nb\r\nab\r\n0\r\n\r\n"),
            ("a NUL in a chunk extension", b"c3", b"2;a\x00\r\nab\r\n0\r\n\r\n"),
            ("a byte other than LF after the last chunk's CR", b"c4", b"2\r\nab\r\n0\rX\r\n"),
            ("a byte other than LF after the final CR", b"c5", b"2\r\nab\r\n0\r\n\rX"),
            ("a final empty line of a bare LF", b"c6", b"2\r\nab\r\n0\r\n\n"),
        ]
        for what, rid, body in cases:
            with self.subTest(case=what):
                self._bad_framing(head % (rid, rid) + body + after, what)

    def test_400_head_a_strict_peer_reads_otherwise(self):
        # http_parser takes any byte after a CR as the LF, and joins a line
        # that starts with a space to the one before (obs-fold, RFC 9112
        # 5.2 lets a server refuse it): a front proxy reading either
        # otherwise sees other headers or another end of the head, and the
        # body as a request of its own. Each is a 400.
        inner = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
        cases = [
            ("a byte other than LF after the head's last CR",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h1\r\nContent-Length: 2\r\n\rXok" + inner),
            ("a CR after a bare LF",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h2\n\rContent-Length: %d\r\n\r\n"
             % len(inner) + inner),
            ("Content-Length folded onto the line before",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h3\r\n Content-Length: %d\r\n\r\n"
             % len(inner) + inner),
            ("a TAB in the request target, sent on in the request line",
             b"POST /f\tHTTP/1.0 HTTP/1.1\r\nHost: x\r\nX-Test-Id: h5\r\nContent-Length: 2\r\n\r\nok"),
            ("another version than HTTP/1.x in the request line",
             b"POST /f HXXP/1.1\r\nHost: x\r\nX-Test-Id: h7\r\nContent-Length: 2\r\n\r\nok"),
            ("two spaces in the request line",
             b"POST  /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h8\r\nContent-Length: 2\r\n\r\nok"),
            ("a NUL as the first byte of a header value",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h6\r\nX-A: \x00evil\r\nContent-Length: 2\r\n\r\nok"),
            ("a folded key",
             b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: h4\r\nIdempotency-Key: a\r\n b\r\n"
             b"Content-Length: 2\r\n\r\nok"),
        ]
        for what, raw in cases:
            with self.subTest(case=what):
                self._bad_framing(raw, what)

    def test_host_header_exactly_once(self):
        # RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is a 400
        gw = self.start_gateway(self.up)
        for what, raw in (
                ("no Host", b"POST /h HTTP/1.1\r\nX-Test-Id: nohost\r\nContent-Length: 0\r\n\r\n"),
                ("two Hosts", b"POST /h HTTP/1.1\r\nHost: a\r\nHost: b\r\nX-Test-Id: twohosts\r\n"
                              b"Content-Length: 0\r\n\r\n")):
            with self.subTest(case=what), RawConn(gw.port) as c:
                c.send(raw)
                self.assertProblem(c.read_response(), 400, what)
        self.assertEqual(self.up.total(), 0, [(r["id"], r["headers"]) for r in self.up.requests()])

    def test_slow_but_steady_client_is_served(self):
        # a body that trickles in over ~1.5s is not a stalled client
        gw = self.start_gateway(self.up)
        parts = [b"part%d-" % i for i in range(6)]
        body = b"".join(parts)
        with RawConn(gw.port) as c:
            c.send(b"POST /trickle HTTP/1.1\r\nHost: x\r\nIdempotency-Key: trickle\r\n"
                   b"X-Test-Id: trickle\r\nContent-Length: %d\r\n\r\n" % len(body))
            for p in parts:
                time.sleep(0.25)  # pacing the client, not waiting for a condition
                c.send(p)
            r = c.read_response()
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(self.up.requests("trickle")[0]["body"], body)

    def test_bad_framing_after_good_request_on_same_connection(self):
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/g", b"ok", key="good1"))
            self.assertEqual(c.read_response().status, 200, self.gw_log())
            c.send(b"POST /f HTTP/1.1\r\nHost: x\r\nX-Test-Id: smug\r\nContent-Length: 5\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertProblem(c.read_response(), 400)
            self.assertTrue(c.closed(5))
        self.assertEqual(self.up.count("smug"), 0)
        self.assertEqual([r for r in self.up.requests() if r["target"] == "/smuggled"], [])

    def test_no_smuggling_via_whitespace_before_colon(self):
        # RFC 9112 5.1: whitespace between a field name and the colon is a
        # 400. Read leniently, the body below becomes a second request.
        gw = self.start_gateway(self.up)
        inner = b"GET /smuggled-ws HTTP/1.1\r\nHost: x\r\nX-Test-Id: smug-ws\r\n\r\n"
        with RawConn(gw.port) as c:
            c.send(b"POST /outer HTTP/1.1\r\nHost: x\r\nX-Test-Id: outer\r\n"
                   b"Content-Length : %d\r\n\r\n" % len(inner) + inner)
            first = c.read_response()
            # the smuggled request would reach the upstream right after the
            # outer one; give it 2s to show up (returns at once if it does)
            self.assertEqual(self.up.wait_count("smug-ws", 1, timeout=2), 0,
                             "smuggled GET /smuggled-ws reached the upstream: %r"
                             % [(r["method"], r["target"], r["conn"]) for r in self.up.requests()])
            self.assertProblem(first, 400, self.gw_log())
            self.assertTrue(c.closed(5))

    def test_pipelined_requests_answered_in_order(self):
        gw = self.start_gateway(self.up)
        reqs = [
            request_bytes("POST", "/p1", b"one", key="p1", headers={"X-Test-Delay-Ms": "300"}),
            request_bytes("GET", "/p2", headers={"X-Test-Id": "p2"}),
            request_bytes("POST", "/p3", b"three", key="p3", headers={"X-Test-Delay-Ms": "100"}),
            request_bytes("POST", "/p1", b"one", key="p1"),   # replay of the first
            request_bytes("GET", "/p5", headers={"X-Test-Id": "p5"}),
        ]
        with RawConn(gw.port) as c:
            c.send(b"".join(reqs))
            got = [c.read_response(timeout=15) for _ in reqs]
        targets = [r.json()["target"] if r.status == 200 else r.status for r in got]
        self.assertEqual(targets, ["/p1", "/p2", "/p3", "/p1", "/p5"], self.gw_log())
        self.assertFalse(got[0].replayed)
        self.assertTrue(got[3].replayed, got[3])
        self.assertEqual(got[3].body, got[0].body)
        self.assertEqual(self.up.count("p1"), 1)

    def test_nothing_after_connection_close_in_a_pipeline(self):
        # RFC 9112 9.6: after a request with Connection: close the server
        # closes; later pipelined requests are not processed
        gw = self.start_gateway(self.up)
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/c1", b"1", key="cc1") +
                   request_bytes("POST", "/c2", b"2", key="cc2", headers={"Connection": "close"}) +
                   request_bytes("POST", "/c3", b"3", key="cc3"))
            self.assertEqual(c.read_response().json()["target"], "/c1", self.gw_log())
            self.assertEqual(c.read_response().json()["target"], "/c2")
            self.assertTrue(c.closed(5), "connection open after Connection: close")
        self.assertEqual(self.up.wait_count("cc3", 1, timeout=1), 0,
                         "request after Connection: close was run")

    def test_deep_pipeline(self):
        gw = self.start_gateway(self.up)
        reqs = []
        for i in range(200):
            if i % 3 == 0:
                reqs.append(request_bytes("GET", "/g%d" % i, headers={"X-Test-Id": "dp"}))
            else:
                reqs.append(request_bytes("POST", "/p%d" % i, b"b%d" % i, key="dp%d" % i))
        with RawConn(gw.port, timeout=30) as c:
            c.send_until_answered(b"".join(reqs), step=1 << 20)
            got = []
            for i in range(200):
                got.append(c.read_response(timeout=30))
        targets = [r.json()["target"] for r in got]
        want = [("/g%d" if i % 3 == 0 else "/p%d") % i for i in range(200)]
        self.assertEqual(targets, want, self.gw_log())

    def test_many_tiny_chunks(self):
        gw = self.start_gateway(self.up)
        body = bytes(range(256)) * 40
        raw = (b"POST /tiny HTTP/1.1\r\nHost: x\r\nIdempotency-Key: tiny\r\nX-Test-Id: tiny\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" +
               b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n")
        with RawConn(gw.port, timeout=30) as c:
            c.send(raw)
            r = c.read_response(timeout=30)
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(self.up.requests("tiny")[0]["body"], body)

    def test_pipelined_split_across_writes(self):
        gw = self.start_gateway(self.up)
        data = b"".join(request_bytes("POST", "/s%d" % i, b"body%d" % i, key="s%d" % i)
                        for i in range(4))
        with RawConn(gw.port) as c:
            # byte boundaries that split request lines, headers and bodies
            for i in range(0, len(data), 37):
                c.send(data[i:i + 37])
            got = [c.read_response(timeout=15) for _ in range(4)]
        self.assertEqual([r.json()["target"] for r in got], ["/s0", "/s1", "/s2", "/s3"])


if __name__ == "__main__":
    main()
