"""Idempotency-Key rules: an sf-string or a bare token, 1..255 characters
after unquoting; anything else is 400 (problem+json) and never reaches the
upstream. --require-key makes a missing key 400 on methods with semantics."""

from harness import GatewayTestCase, RawConn, request_bytes, main

BAD_KEYS = [
    ("empty", b""),
    ("only spaces", b"   "),
    ("empty sf-string", b'""'),
    ("256 chars", b"k" * 256),
    ("256 chars quoted", b'"' + b"q" * 256 + b'"'),
    ("control char", b"ab\x01cd"),
    ("DEL char", b"ab\x7fcd"),
    ("tab inside token", b"ab\tcd"),
    ("control char in sf-string", b'"ab\x02cd"'),
    ("unterminated sf-string", b'"abc'),
    ("bad escape in sf-string", b'"a\\qb"'),
    ("trailing garbage after sf-string", b'"abc"x'),
    ("space inside bare token", b"abc def"),
    ("non-ASCII", "caf\u00e9".encode("utf-8")),
    ("256 unquoted with an escape", b'"' + b"e" * 255 + b'\\\\' + b'"'),
]

GOOD_KEYS = [
    ("token", b"abc-123_XYZ.~:/", "abc-123_XYZ.~:/"),
    ("255 chars", b"k" * 255, "k" * 255),
    ("sf-string with spaces", b'"order 42 for bob"', "order 42 for bob"),
    ("sf-string with escapes", b'"a\\"b\\\\c"', 'a"b\\c'),
    ("uuid", b"5f0c1c7e-0a7b-4a4e-9d7e-2f0f1b1e6c11", "5f0c1c7e-0a7b-4a4e-9d7e-2f0f1b1e6c11"),
    # 257 bytes on the wire, 255 characters once unquoted
    ("255 unquoted with an escape", b'"' + b"e" * 254 + b'\\"' + b'"', "e" * 254 + '"'),
]


class Keys(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def _raw(self, gw, method, raw_key, body=b"x", extra=()):
        hdrs = [("X-Test-Id", "raw")] + [("Idempotency-Key", raw_key)] + list(extra)
        with RawConn(gw.port) as c:
            c.send(request_bytes(method, "/k", body, headers=hdrs))
            return c.read_response()

    def test_bad_keys_are_400(self):
        gw = self.start_gateway(self.up)
        for name, raw in BAD_KEYS:
            with self.subTest(key=name):
                r = self._raw(gw, "POST", raw)
                self.assertProblem(r, 400, "key %s (%r)\n%s" % (name, raw, self.gw_log()))
        self.assertEqual(self.up.total(), 0, "a request with a bad key reached the upstream")

    def test_bad_key_on_patch_is_400(self):
        gw = self.start_gateway(self.up)
        self.assertProblem(self._raw(gw, "PATCH", b"k" * 256), 400)
        self.assertEqual(self.up.total(), 0)

    def test_two_different_keys_are_400(self):
        gw = self.start_gateway(self.up)
        r = self._raw(gw, "POST", b"one", extra=[("Idempotency-Key", "two")])
        self.assertProblem(r, 400)
        self.assertEqual(self.up.total(), 0)

    def test_good_keys(self):
        gw = self.start_gateway(self.up)
        for name, raw, _ in GOOD_KEYS:
            with self.subTest(key=name):
                r1 = self._raw(gw, "POST", raw)
                self.assertEqual(r1.status, 200, "key %s: %r\n%s" % (name, r1, self.gw_log()))
                self.assertFalse(r1.replayed)
                r2 = self._raw(gw, "POST", raw)
                self.assertEqual(r2.status, 200)
                self.assertTrue(r2.replayed, "key %s: %r" % (name, r2))
                self.assertEqual(r2.body, r1.body)
        self.assertEqual(self.up.total(), len(GOOD_KEYS))

    def test_key_is_the_unquoted_value(self):
        # "abc" and abc are the same key once unquoted; surrounding spaces too
        gw = self.start_gateway(self.up)
        r1 = self._raw(gw, "POST", b'"same-key"')
        self.assertEqual(r1.status, 200, self.gw_log())
        r2 = self._raw(gw, "POST", b"same-key")
        self.assertTrue(r2.replayed, r2)
        r3 = self._raw(gw, "POST", b"  same-key  ")
        self.assertTrue(r3.replayed, r3)
        self.assertEqual(self.up.total(), 1)

    def test_keys_are_case_sensitive(self):
        gw = self.start_gateway(self.up)
        self.assertEqual(self._raw(gw, "POST", b"Order-A").status, 200, self.gw_log())
        r = self._raw(gw, "POST", b"order-a")
        self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.total(), 2)

    def test_header_name_is_case_insensitive(self):
        gw = self.start_gateway(self.up)
        for name in ("idempotency-key", "IDEMPOTENCY-KEY"):
            with RawConn(gw.port) as c:
                c.send(request_bytes("POST", "/k", b"x", headers=[("X-Test-Id", "ci"), (name, "ci")]))
                r = c.read_response()
                self.assertEqual(r.status, 200, self.gw_log())
                self.assertEqual(r.replayed, name == "IDEMPOTENCY-KEY", (name, r))
        self.assertEqual(self.up.count("ci"), 1)

    def test_require_key(self):
        gw = self.start_gateway(self.up, "--require-key")
        r = gw.request("POST", "/p", body=b"x", headers={"X-Test-Id": "nokey"})
        self.assertProblem(r, 400, self.gw_log())
        r = gw.request("PATCH", "/p", body=b"x", headers={"X-Test-Id": "nokey"})
        self.assertProblem(r, 400)
        self.assertEqual(self.up.count("nokey"), 0)
        # methods without semantics still pass through without a key
        r = gw.request("GET", "/p", headers={"X-Test-Id": "get"})
        self.assertEqual(r.status, 200)
        # and a keyed POST works
        r = gw.request("POST", "/p", body=b"x", key="have")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.up.count("have"), 1)

    def test_without_require_key_missing_key_passes(self):
        gw = self.start_gateway(self.up)
        r = gw.request("POST", "/p", body=b"x", headers={"X-Test-Id": "nokey"})
        self.assertEqual(r.status, 200, self.gw_log())


if __name__ == "__main__":
    main()
