"""Strange upstreams: an answer that is not HTTP (a status outside 100-599,
a 1xx other than 100 and 103 as the answer, any 101, a malformed status
line) is a 502 upstream-bad-response, never relayed as it is; for a keyed
request the lease is kept (409 until --lock-ttl, then a takeover with fence
2), as for any request that was sent and got no valid answer. And
--upstream-timeout bounds the whole answer: an upstream that trickles one
byte at a time cannot hold a request past it, a streamed answer is cut."""

import socket
import threading
import time

from harness import GatewayTestCase, RawConn, main, request_bytes, wait_for

# Status lines (and what follows them) that are not a valid HTTP answer.
BAD_ANSWERS = {
    "999": b"HTTP/1.1 999 Weird\r\nContent-Length: 2\r\n\r\nok",
    "600": b"HTTP/1.1 600 Weird\r\nContent-Length: 2\r\n\r\nok",
    "2digit": b"HTTP/1.1 20 Short\r\nContent-Length: 2\r\n\r\nok",
    "4digit": b"HTTP/1.1 2000 Long\r\nContent-Length: 2\r\n\r\nok",
    "zero-padded": b"HTTP/1.1 0200 OK\r\nContent-Length: 2\r\n\r\nok",
    "101": b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
    "101-upgrade": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   b"Connection: Upgrade\r\n\r\nraw bytes of another protocol",
    "102": b"HTTP/1.1 102 Processing\r\n\r\n",
    "199": b"HTTP/1.1 199 Odd\r\n\r\n",
    "2x0": b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",
    "200OK": b"HTTP/1.1 200OK\r\nContent-Length: 2\r\n\r\nok",
    "http2": b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    # a transfer coding the gateway would drop with its header: the client
    # would get gzip bytes with nothing saying so
    # a control character as a header value's first byte (RFC 9110 5.5)
    "nul-in-value": b"HTTP/1.1 200 OK\r\nX-A: \x00evil\r\nContent-Length: 2\r\n\r\nok",
    "gzip-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                    b"2\r\nok\r\n0\r\n\r\n",
}

# RawUpstream closes each connection after one answer, so a good answer says
# so: without "Connection: close" the gateway pools the connection, and a
# keyed request sent on it before the close arrives breaks with nothing back
# (a 502 that keeps the lease, as it must for a request that may have run).
GOOD = (b"HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n"
        b"Connection: close\r\n\r\ncreated")


class RawUpstream:
    """An upstream on a raw socket: one request per connection, recorded
    (request line, headers), then answered with script(id, n), where id is
    the X-Test-Id header and n counts the requests seen under it from 1.
    The answer is bytes (sent, then the connection closes) or a callable
    that gets the socket and a stop event."""

    def __init__(self, script):
        self.script = script
        self.lock = threading.Lock()
        self.seen = {}  # id -> [(request line, {header: value})]
        self.stopping = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def stop(self):
        self.stopping.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)

    def count(self, rid):
        with self.lock:
            return len(self.seen.get(rid, []))

    def fences(self, rid):
        with self.lock:
            return [h.get("idempotency-fence") for _, h in self.seen.get(rid, [])]

    def requests(self, rid):
        with self.lock:
            return list(self.seen.get(rid, []))

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            conn.settimeout(10)
            try:
                line, headers = self._read_request(conn)
            except (OSError, ValueError):
                return
            rid = headers.get("x-test-id", "")
            with self.lock:
                self.seen.setdefault(rid, []).append((line, headers))
                n = len(self.seen[rid])
            answer = self.script(rid, n)
            try:
                if callable(answer):
                    answer(conn, self.stopping)
                else:
                    conn.sendall(answer)
            except OSError:
                pass

    @staticmethod
    def _read_request(conn):
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("eof before the end of the head")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        need = int(headers.get("content-length") or 0) - len(rest)
        while need > 0:
            chunk = conn.recv(need)
            if not chunk:
                break
            need -= len(chunk)
        return lines[0], headers


def trickle(head, body, interval=0.3):
    """An answer that sends its head, then its body one byte at a time."""
    def send(conn, stopping):
        conn.sendall(head)
        for i in range(len(body)):
            if stopping.wait(interval):
                return
            conn.sendall(body[i:i + 1])
    return send


class BadUpstream(GatewayTestCase):
    def raw_upstream(self, script):
        up = RawUpstream(script)
        self.addCleanup(up.stop)
        return up

    def assertBadResponse(self, r, what):
        doc = self.assertProblem(r, 502, "%s\n%s" % (what, self.gw_log()))
        self.assertEqual(doc["type"], "urn:idem:problem:upstream-bad-response", what)
        return doc

    def test_not_http_answer_is_502_and_lease_kept(self):
        up = self.raw_upstream(lambda rid, n: BAD_ANSWERS.get(rid, GOOD))
        gw = self.start_gateway(up.url, "--lock-ttl", "60s")
        for name in BAD_ANSWERS:
            r = gw.request("POST", "/pay", body=b"x", key=name)
            doc = self.assertBadResponse(r, name)
            if name == "gzip-chunked":  # the detail says what was wrong with it
                self.assertIn("Transfer-Encoding other than chunked", doc["detail"])
            self.assertEqual(up.count(name), 1, name)
            r = gw.request("POST", "/pay", body=b"x", key=name)
            self.assertProblem(r, 409, "%s: retry while the lease holds" % name)
            self.assertEqual(up.count(name), 1, "%s: the request ran again" % name)
        # the gateway still serves other keys
        r = gw.request("POST", "/pay", body=b"x", key="fine")
        self.assertEqual((r.status, r.body), (201, b"created"), self.gw_log())

    def test_takeover_after_lock_ttl_with_fence_2(self):
        # the first execution of each key answers garbage, the next one 201
        up = self.raw_upstream(lambda rid, n: BAD_ANSWERS[rid] if n == 1 else GOOD)
        gw = self.start_gateway(up.url, "--lock-ttl", "1s")
        for name in BAD_ANSWERS:
            self.assertBadResponse(gw.request("POST", "/pay", body=b"x", key=name), name)
        for name in BAD_ANSWERS:
            def taken_over():
                r = gw.request("POST", "/pay", body=b"x", key=name)
                return r if r.status != 409 else None
            r = wait_for(taken_over, 20, 0.1, "%s: takeover after --lock-ttl 1s" % name)
            self.assertEqual((r.status, r.body), (201, b"created"), "%s\n%s" % (name, self.gw_log()))
            self.assertEqual(up.fences(name), ["1", "2"], name)
            r = gw.request("POST", "/pay", body=b"x", key=name)
            self.assertTrue(r.replayed, "%s: %r" % (name, r))

    def test_passthrough_not_http_is_502(self):
        up = self.raw_upstream(lambda rid, n: BAD_ANSWERS.get(rid, GOOD))
        gw = self.start_gateway(up.url)
        for name in ("999", "2digit", "101-upgrade", "102", "2x0"):
            self.assertBadResponse(gw.request("GET", "/g", headers={"X-Test-Id": name}), "GET " + name)
            self.assertBadResponse(gw.request("POST", "/p", body=b"x", headers={"X-Test-Id": name}),
                                   "keyless POST " + name)
            self.assertEqual(up.count(name), 2, name)  # GET is not re-sent either

    def test_answer_without_date_gets_one_kept_for_replays(self):
        # RFC 9110 6.6.1: a recipient with a clock that forwards an answer
        # without a Date appends one; the replay carries that same Date
        from email.utils import parsedate_to_datetime
        undated = (b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\nConnection: close\r\n\r\n"
                   b"created")
        up = self.raw_upstream(lambda rid, n: undated)
        gw = self.start_gateway(up.url)
        r1 = gw.request("POST", "/pay", body=b"x", key="undated")
        time.sleep(1.1)  # a second later: a replay dated anew would differ
        r2 = gw.request("POST", "/pay", body=b"x", key="undated")
        r3 = gw.request("GET", "/plain", headers={"X-Test-Id": "undated-get"})
        self.assertEqual((r1.status, r2.status, r3.status), (201, 201, 201), self.gw_log())
        self.assertTrue(r2.replayed, r2)
        for r in (r1, r2, r3):
            self.assertEqual(len(r.headers_all("Date")), 1, r)
            date = r.header("Date")
            self.assertLess(abs(parsedate_to_datetime(date).timestamp() - time.time()), 60, date)
        self.assertEqual(r2.header("Date"), r1.header("Date"))

    def test_interim_100_and_103_then_final(self):
        interims = {
            "100": b"HTTP/1.1 100 Continue\r\n\r\n",
            "103": b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n",
            "both": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n",
        }
        up = self.raw_upstream(lambda rid, n: interims[rid] + GOOD)
        gw = self.start_gateway(up.url)
        for name in interims:
            with RawConn(gw.port) as c:
                c.send(request_bytes("POST", "/i", b"x", key=name))
                r = c.read_response()
                while 100 <= r.status < 200:  # forwarding interims is allowed
                    r = c.read_response()
            self.assertEqual((r.status, r.body), (201, b"created"), "%s\n%s" % (name, self.gw_log()))
            r2 = gw.request("POST", "/i", body=b"x", key=name)
            self.assertEqual((r2.status, r2.body), (201, b"created"), name)
            self.assertTrue(r2.replayed, "%s: %r" % (name, r2))
            self.assertEqual(up.count(name), 1, name)

    def _read_until_closed(self, c, deadline):
        """Bytes the gateway sends until it closes the connection; fails the
        test if it stays open past the deadline."""
        got = b""
        while True:
            c.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = c.sock.recv(65536)
            except socket.timeout:
                self.fail("the answer was still open at the deadline; got %d bytes\n%s"
                          % (len(got), self.gw_log()))
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk

    def test_trickling_answer_is_cut_at_upstream_timeout(self):
        # 1000 bytes at one byte per 300 ms would take 300 s; --upstream-timeout
        # 2s bounds the whole answer, so the client sees it cut long before
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
        up = self.raw_upstream(lambda rid, n: trickle(head, b"t" * 1000))
        gw = self.start_gateway(up.url, "--upstream-timeout", "2s")
        with RawConn(gw.port) as c:
            c.send(request_bytes("GET", "/slow", headers={"X-Test-Id": "slow", "Connection": "close"}))
            got = self._read_until_closed(c, time.monotonic() + 60)
        h, _, body = got.partition(b"\r\n\r\n")
        self.assertTrue(h.startswith(b"HTTP/1.1 200"), got[:200])
        self.assertIn(b"content-length: 1000", h.lower())
        self.assertLess(len(body), 1000, "the cut answer looks complete")
        self.assertIn("timed out midway", gw.stderr())

    def test_trickling_chunked_answer_never_looks_complete(self):
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        body = b"".join(b"1\r\n%c\r\n" % (97 + i % 26) for i in range(200)) + b"0\r\n\r\n"
        up = self.raw_upstream(lambda rid, n: trickle(head, body, 0.05))
        gw = self.start_gateway(up.url, "--upstream-timeout", "2s")
        with RawConn(gw.port) as c:
            c.send(request_bytes("GET", "/slow", headers={"X-Test-Id": "slowc", "Connection": "close"}))
            got = self._read_until_closed(c, time.monotonic() + 60)
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got[:200])
        self.assertIn(b"chunked", got.lower().partition(b"\r\n\r\n")[0])
        self.assertFalse(got.endswith(b"0\r\n\r\n"), "the cut answer ends with the last chunk")

    def test_304_and_204_with_content_length_end_at_their_head(self):
        # RFC 9110 8.6: a 304 may carry the Content-Length of the
        # representation; RFC 9112 6.3: a 1xx, 204 or 304 ends with its head
        # whatever its Content-Length says. The upstream keeps the
        # connection open: waiting for body bytes would hang past the
        # client's 20 s (--upstream-timeout is longer), a timeout here.
        # "Connection: close" keeps the gateway from pooling the connection
        # (RawUpstream reads one request per connection).
        answers = {
            "304": b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n"
                   b"Connection: close\r\n\r\n",
            "204": b"HTTP/1.1 204 No Content\r\nContent-Length: 7\r\nConnection: close\r\n\r\n",
        }

        def hold(answer):
            def send(conn, stopping):
                conn.sendall(answer)
                stopping.wait(30)
            return send
        up = self.raw_upstream(lambda rid, n: hold(answers[rid.split("-")[0]]))
        gw = self.start_gateway(up.url, "--upstream-timeout", "60s", "--lock-ttl", "120s")
        for name in answers:
            status = int(name)
            r = gw.request("GET", "/doc", headers={"X-Test-Id": name + "-get"}, timeout=20)
            self.assertEqual(r.status, status, "GET %s\n%s" % (name, self.gw_log()))
            key = name + "-key"
            r = gw.request("POST", "/pay", body=b"x", key=key, timeout=20)
            self.assertEqual(r.status, status, "POST %s\n%s" % (name, self.gw_log()))
            r = gw.request("POST", "/pay", body=b"x", key=key, timeout=20)
            self.assertEqual(r.status, status, "retry %s\n%s" % (name, self.gw_log()))
            self.assertTrue(r.replayed, "retry %s: %r" % (name, r))
            self.assertEqual(up.count(key), 1, name)

    def test_upstream_head_is_not_held_to_max_header(self):
        # --max-header bounds the client's request head; an upstream's answer
        # may carry a bigger head (a long Content-Security-Policy, cookies):
        # it is stored and replayed, not a 502 that locks the key
        csp = b"default-src 'self' " + b"x" * 3000
        big = (b"HTTP/1.1 201 Created\r\nContent-Security-Policy: " + csp +
               b"\r\nContent-Length: 7\r\nConnection: close\r\n\r\ncreated")
        up = self.raw_upstream(lambda rid, n: big)
        gw = self.start_gateway(up.url, "--max-header", "1KiB")
        r = gw.request("POST", "/pay", body=b"x", key="bighead")
        self.assertEqual(r.status, 201, self.gw_log())
        self.assertEqual(r.header("Content-Security-Policy"), csp.decode())
        r2 = gw.request("POST", "/pay", body=b"x", key="bighead")
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.header("Content-Security-Policy"), csp.decode())
        self.assertEqual(up.count("bighead"), 1)
        r = gw.request("GET", "/doc", headers={"X-Test-Id": "bighead-get"})
        self.assertEqual(r.status, 201, self.gw_log())

    def test_trickling_keyed_answer_is_504_lease_kept(self):
        head = b"HTTP/1.1 201 Created\r\nContent-Length: 1000\r\n\r\n"
        up = self.raw_upstream(lambda rid, n: trickle(head, b"t" * 1000))
        gw = self.start_gateway(up.url, "--upstream-timeout", "2s", "--lock-ttl", "60s")
        r = gw.request("POST", "/slow", body=b"x", key="slowk", timeout=60)
        self.assertProblem(r, 504, self.gw_log())
        self.assertProblem(gw.request("POST", "/slow", body=b"x", key="slowk"), 409)
        self.assertEqual(up.count("slowk"), 1)


if __name__ == "__main__":
    main()
