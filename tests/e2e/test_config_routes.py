"""test_config_routes.py - `idem serve --config FILE`: every route setting
(key from a JSON pointer or a query parameter, canonical and partial JSON
fingerprints, store_statuses with 500 stored, replay_headers drop, per-route
ttl, require_key, methods, mode off), first match wins, and flags over the
file."""

import json
import time

from config_util import ConfigTestCase
from harness import main, wait_for

ROUTES = """
defaults:
  methods: [POST, PATCH]
routes:
  - match: {path: /v1/orders}
    key: json:/order_id
  - match: {path: /v1/strict-orders}
    key: json:/order_id
    require_key: true
  - match: {methods: [POST], path: /v1/payments/*}
    fingerprint: json
    require_key: true
    ttl: 1s
  - match: {path: /v1/charges/**}
    fingerprint: {json: [/amount, /currency]}
  - match: {path: /v1/jobs}
    store_statuses: [2xx, 500]
  - match: {path: /v1/login}
    replay_headers: {drop: [Set-Cookie, X-Secret-*]}
  - match: {path: /internal/**}
    mode: off
  - match: {path: /v1/put/*}
    methods: [PUT]
  - match: {path: /v1/search}
    key: query:request_id
"""


def body(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


class Routes(ConfigTestCase):
    @classmethod
    def setUpClass(cls):
        pass

    def setUp(self):
        self.up, self.gw, self.path = self.start_config_gateway(ROUTES)

    def post(self, target, b, key=None, tid=None, headers=None, method="POST"):
        h = {"X-Test-Id": tid or key or "none"}
        h.update(headers or {})
        return self.gw.request(method, target, body=b, key=None, headers=dict(
            h, **({"Idempotency-Key": key} if key else {})))

    def test_key_from_json_pointer(self):
        b1 = body({"order_id": "o-1", "sku": "tea"})
        r1 = self.post("/v1/orders", b1, tid="o-1")
        r2 = self.post("/v1/orders", b1, tid="o-1")
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertFalse(r1.replayed)
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r1.json()["exec"], r2.json()["exec"])
        self.assertEqual(self.up.count("o-1"), 1)
        # the key is the member's value: another body under it is refused
        r3 = self.post("/v1/orders", body({"order_id": "o-1", "sku": "milk"}), tid="o-1")
        self.assertProblem(r3, 422)
        # a number is a key too
        for _ in range(2):
            r = self.post("/v1/orders", b'{"order_id": 42}', tid="o-42")
        self.assertTrue(r.replayed, r)
        self.assertEqual(self.up.count("o-42"), 1)
        # an Idempotency-Key header is not this route's key source
        for _ in range(2):
            self.post("/v1/orders", body({"sku": "x"}), key="hdr", tid="nokey")
        self.assertEqual(self.up.count("nokey"), 2)
        # no such member, or no body: no key, passed through
        for _ in range(2):
            self.post("/v1/orders", body({"sku": "x"}), tid="nomember")
            self.post("/v1/orders", b"", tid="empty")
        self.assertEqual(self.up.count("nomember"), 2)
        self.assertEqual(self.up.count("empty"), 2)
        # a body that is not JSON, even one that some parsers take (a member
        # given twice, a byte order mark): refused, never passed through
        # unkeyed, where every retry would run again
        for b in (b"order_id=o-1", b'{"order_id":"d-1","order_id":"d-1"}',
                  b'\xef\xbb\xbf{"order_id":"d-2"}'):
            r = self.post("/v1/orders", b, tid="notjson")
            doc = self.assertProblem(r, 400)
            self.assertEqual(doc["type"], "urn:idem:problem:body-not-json", doc)
            self.assertIn("/order_id", doc["detail"])
        self.assertEqual(self.up.count("notjson"), 0)
        # a value that is not a string or a number is not a key
        r = self.post("/v1/orders", b'{"order_id": {"a": 1}}', tid="obj")
        self.assertProblem(r, 400)
        self.assertIn("/order_id", r.json()["detail"])
        self.assertEqual(self.up.count("obj"), 0)

    def test_json_key_required(self):
        r = self.post("/v1/strict-orders", body({"sku": "tea"}), tid="strict")
        doc = self.assertProblem(r, 400)
        self.assertEqual(doc["type"], "urn:idem:problem:key-required")
        self.assertIn("/order_id", doc["detail"])
        self.assertEqual(self.up.count("strict"), 0)
        r = self.post("/v1/strict-orders", body({"order_id": "s-1"}), tid="strict")
        self.assertEqual(r.status, 200)

    def test_canonical_json_fingerprint(self):
        r1 = self.post("/v1/payments/p1", b'{"a":1,"b":2}', key="pay-1")
        r2 = self.post("/v1/payments/p1", b'{"b":2,"a":1}', key="pay-1")
        r3 = self.post("/v1/payments/p1", b' {"b": 2, "a": 1}\n', key="pay-1")
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertTrue(r2.replayed, r2)
        self.assertTrue(r3.replayed, r3)
        self.assertEqual(self.up.count("pay-1"), 1)
        r4 = self.post("/v1/payments/p1", b'{"a":1,"b":3}', key="pay-1")
        self.assertProblem(r4, 422)
        # a body that is not JSON cannot be fingerprinted as JSON
        r5 = self.post("/v1/payments/p1", b"a=1", key="pay-2")
        doc = self.assertProblem(r5, 400)
        self.assertEqual(doc["type"], "urn:idem:problem:body-not-json")
        self.assertEqual(self.up.count("pay-2"), 0)
        # the defaults compare bytes: reordered members are another request
        self.post("/v1/other", b'{"a":1,"b":2}', key="raw-1")
        self.assertProblem(self.post("/v1/other", b'{"b":2,"a":1}', key="raw-1"), 422)

    def test_route_ttl_and_require_key(self):
        r = self.post("/v1/payments/p2", b"{}", tid="no-key")
        self.assertEqual(self.assertProblem(r, 400)["type"], "urn:idem:problem:key-required")
        self.assertEqual(self.up.count("no-key"), 0)
        # the defaults do not require a key
        self.assertEqual(self.post("/v1/other", b"{}", tid="free").status, 200)
        # ttl: 1s on this route: the key runs again once its record expires
        t0 = time.monotonic()
        self.post("/v1/payments/p2", b"{}", key="short")
        r = self.post("/v1/payments/p2", b"{}", key="short")
        if time.monotonic() - t0 < 0.9:  # a stalled test may see it expired already
            self.assertTrue(r.replayed, r)
        deadline = time.monotonic() + 10
        while self.post("/v1/payments/p2", b"{}", key="short").replayed:
            self.assertLess(time.monotonic(), deadline, "record never expired")
            time.sleep(0.2)
        self.assertEqual(self.up.count("short"), 2)
        # match methods: a PATCH under /v1/payments/* is not that route's
        self.assertEqual(self.post("/v1/payments/p3", b"{}", method="PATCH", tid="patch").status,
                         200)

    def test_partial_fingerprint(self):
        a = body({"amount": 5, "currency": "EUR", "note": "first"})
        b = body({"note": "second", "currency": "EUR", "amount": 5, "extra": [1]})
        r1 = self.post("/v1/charges/c/1", a, key="ch-1")
        r2 = self.post("/v1/charges/c/1", b, key="ch-1")
        self.assertEqual(r1.status, 200)
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(self.up.count("ch-1"), 1)
        self.assertProblem(self.post("/v1/charges/c/1",
                                     body({"amount": 6, "currency": "EUR"}), key="ch-1"), 422)
        self.assertProblem(self.post("/v1/charges/c/1", body({"amount": 5}), key="ch-1"), 422)
        # the target still counts
        self.assertProblem(self.post("/v1/charges/c/2", a, key="ch-1"), 422)

    def test_store_statuses_500_stored(self):
        h = {"X-Test-Status": "500"}
        r1 = self.post("/v1/jobs", b"{}", key="job-500", headers=h)
        r2 = self.post("/v1/jobs", b"{}", key="job-500", headers=h)
        self.assertEqual(r1.status, 500)
        self.assertEqual(r2.status, 500)
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(self.up.count("job-500"), 1)
        # 503 is not listed: released, runs again
        h = {"X-Test-Status": "503"}
        for _ in range(2):
            self.assertFalse(self.post("/v1/jobs", b"{}", key="job-503", headers=h).replayed)
        self.assertEqual(self.up.count("job-503"), 2)
        # 4xx is not listed on this route: 404 releases the key
        h = {"X-Test-Status": "404"}
        for _ in range(2):
            self.post("/v1/jobs", b"{}", key="job-404", headers=h)
        self.assertEqual(self.up.count("job-404"), 2)
        # the defaults: 500 released, 404 stored
        for _ in range(2):
            self.post("/v1/x", b"{}", key="d-500", headers={"X-Test-Status": "500"})
            self.post("/v1/x", b"{}", key="d-404", headers={"X-Test-Status": "404"})
        self.assertEqual(self.up.count("d-500"), 2)
        self.assertEqual(self.up.count("d-404"), 1)

    def test_replay_headers_drop(self):
        h = [("X-Test-Set-Header", "Set-Cookie: session=abc; Path=/"),
             ("X-Test-Set-Header", "X-Secret-Token: t"),
             ("X-Test-Set-Header", "X-Kept: yes")]
        from harness import RawConn, request_bytes
        with RawConn(self.gw.port) as c:
            c.send(request_bytes("POST", "/v1/login", b"{}", key="login", headers=h))
            r1 = c.read_response()
            c.send(request_bytes("POST", "/v1/login", b"{}", key="login", headers=h))
            r2 = c.read_response()
        # the first client gets its cookie; a replay does not
        self.assertEqual(r1.headers_all("Set-Cookie"), ["session=abc; Path=/"], r1)
        self.assertEqual(r1.header("X-Secret-Token"), "t")
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(r2.headers_all("Set-Cookie"), [], r2)
        self.assertIsNone(r2.header("X-Secret-Token"), r2)
        self.assertEqual(r2.header("X-Kept"), "yes", r2)
        self.assertEqual(r1.body, r2.body)
        self.assertEqual(self.up.count("login"), 1)

    def test_mode_off_and_methods(self):
        for _ in range(2):
            r = self.post("/internal/a/b", b"{}", key="int")
            self.assertFalse(r.replayed)
        self.assertEqual(self.up.count("int"), 2)
        # methods: [PUT] on /v1/put/*: PUT has semantics, POST does not
        for _ in range(2):
            r = self.post("/v1/put/1", b"{}", key="put", method="PUT")
        self.assertTrue(r.replayed, r)
        for _ in range(2):
            self.post("/v1/put/1", b"{}", key="put-post")
        self.assertEqual(self.up.count("put"), 1)
        self.assertEqual(self.up.count("put-post"), 2)

    def test_routes_match_the_path_the_upstream_reads(self):
        # an encoded unreserved character or a dot-segment does not slip a
        # request past its route: not past require_key ...
        for target in ("/v1/%70ayments/p4", "/x/../v1/payments/p4", "/v1/./payments/p4"):
            r = self.post(target, b"{}", tid="sneak")
            self.assertEqual(self.assertProblem(r, 400)["type"],
                             "urn:idem:problem:key-required", target)
        self.assertEqual(self.up.count("sneak"), 0)
        # ... nor into a mode off route, which would run a keyed request twice
        for _ in range(2):
            r = self.post("/internal/../v1/orders", body({"order_id": "o-dots"}), tid="dots")
        self.assertTrue(r.replayed, r)
        self.assertEqual(self.up.count("dots"), 1)

    def test_key_from_query(self):
        for _ in range(2):
            r = self.post("/v1/search?request_id=q%2D1&x=1", b"{}", tid="q-1")
        self.assertTrue(r.replayed, r)
        self.assertEqual(self.up.count("q-1"), 1)
        r = self.post("/v1/search?request_id=a&request_id=b", b"{}", tid="q-2")
        self.assertProblem(r, 400)
        for _ in range(2):
            self.post("/v1/search?x=1", b"{}", tid="q-none")
        self.assertEqual(self.up.count("q-none"), 2)


class WaitAndLease(ConfigTestCase):
    def test_route_wait_and_lock_ttl(self):
        text = """
routes:
  - match: {path: /patient}
    wait: 5s
  - match: {path: /short-lease}
    lock_ttl: 1s
"""
        up, gw, _ = self.start_config_gateway(text, "--upstream-timeout", "500ms")
        import threading
        out = {}

        def first(target, key, headers):
            out[key] = gw.request("POST", target, body=b"{}", key=key, headers=headers)

        # wait: 5s on /patient: a duplicate waits and replays
        t = threading.Thread(target=first, args=("/patient", "w1", {"X-Test-Delay-Ms": "400"}))
        t.start()
        up.wait_count("w1", 1)
        r = gw.request("POST", "/patient", body=b"{}", key="w1",
                       headers={"X-Test-Delay-Ms": "400"})
        t.join()
        self.assertTrue(r.replayed, (r, self.gw_log()))
        self.assertEqual(up.count("w1"), 1)
        # the defaults: 409 at once
        t = threading.Thread(target=first, args=("/other", "w2", {"X-Test-Delay-Ms": "3000"}))
        t.start()
        up.wait_count("w2", 1)
        self.assertProblem(gw.request("POST", "/other", body=b"{}", key="w2"), 409)
        t.join()
        # lock_ttl: 1s: a request whose answer never came is taken over
        # after one second, with fence 2
        claimed_at = time.monotonic()
        self.assertEqual(gw.request("POST", "/short-lease", body=b"{}", key="l1",
                                    headers={"X-Test-Hang": "1"}).status, 504)
        r = gw.request("POST", "/short-lease", body=b"{}", key="l1")
        if time.monotonic() - claimed_at < 0.9:  # a stalled test may reach the takeover
            self.assertProblem(r, 409)
        deadline = time.monotonic() + 10
        while True:
            r = gw.request("POST", "/short-lease", body=b"{}", key="l1")
            if r.status == 200:
                break
            self.assertLess(time.monotonic(), deadline, r)
            time.sleep(0.1)
        self.assertEqual(up.fences("l1"), ["1", "2"])


class FlagsOverFile(ConfigTestCase):
    def test_flags_override_the_file(self):
        text = """
require_key: false
ttl: 1h
routes:
  - match: {path: /own}
    require_key: false
"""
        up, gw, path = self.start_config_gateway(text, "--require-key")
        # the flag sets the defaults over the file's top level
        r = gw.request("POST", "/x", body=b"{}")
        self.assertEqual(self.assertProblem(r, 400)["type"], "urn:idem:problem:key-required")
        # a route's own setting stays
        self.assertEqual(gw.request("POST", "/own", body=b"{}").status, 200)

    def test_file_sets_serve_settings(self):
        up = self.start_upstream()
        text = "upstream: %s\nmethods: [PUT]\nwait: 0s\n" % up.url
        path = self.write_config(text)
        gw = self.start_gateway(None, "--config", path)
        for _ in range(2):
            r = gw.request("PUT", "/p", body=b"{}", key="fput")
        self.assertTrue(r.replayed, r)
        self.assertEqual(up.count("fput"), 1)

    def test_bad_file_stops_serve(self):
        up = self.start_upstream()
        path = self.write_config("routes:\n  - match: {path: /a}\n    ttl: 3x\n")
        gw = self.start_gateway(up, "--config", path, start=False)
        with self.assertRaises(RuntimeError):
            gw.start(timeout=10)
        self.assertEqual(gw.proc.returncode, 2)
        self.assertIn("%s:3: ttl: '3x' is not a duration" % path, gw.stderr())


if __name__ == "__main__":
    main()
