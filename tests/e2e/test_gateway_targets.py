"""Request targets (RFC 9112 3.2): an absolute-form target is sent upstream
in origin form, with the target's authority as Host, and is fingerprinted
as that origin form (so "http://h/a" and "/a" with one key and body are one
request); other schemes, userinfo, "*" on a method other than OPTIONS and
authority form are refused with 400 before anything runs."""

from harness import GatewayTestCase, RawConn, main


def raw(method, target, host="x", key=None, body=b"x", version="HTTP/1.1", rid=None):
    """One request as bytes; rid names it for the upstream's count."""
    h = "%s %s %s\r\n" % (method, target, version)
    if host is not None:
        h += "Host: %s\r\n" % host
    if key is not None:
        h += "Idempotency-Key: %s\r\n" % key
    if key is not None or rid is not None:
        h += "X-Test-Id: %s\r\n" % (rid or key)
    h += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    return h.encode() + body


class Targets(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()
        self.gw = self.start_gateway(self.up)

    def send(self, data):
        with RawConn(self.gw.port) as c:
            c.send(data)
            return c.read_response()

    def seen(self, rid):
        """(target, Host) of each request the upstream got under rid."""
        out = []
        for rec in self.up.requests(rid):
            hosts = [v for k, v in rec["headers"] if k.lower() == "host"]
            out.append((rec["target"], hosts))
        return out

    def test_absolute_form_goes_upstream_in_origin_form(self):
        r = self.send(raw("POST", "http://evil.example/a?q=1", key="abs"))
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        # RFC 9112 3.2.2: the target's authority replaces the client's Host
        self.assertEqual(self.seen("abs"), [("/a?q=1", ["evil.example"])])
        cases = {"http://h": ("/", "h"), "HTTPS://h:8443?x=1": ("/?x=1", "h:8443"),
                 "http://[::1]:81/p/q": ("/p/q", "[::1]:81")}
        for i, (target, want) in enumerate(cases.items()):
            rid = "get%d" % i
            r = self.send(raw("GET", target, body=b"", rid=rid))
            self.assertEqual(r.status, 200, "%s: %r" % (target, r))
            self.assertEqual(self.seen(rid), [(want[0], [want[1]])], target)

    def test_absolute_and_origin_form_are_one_request(self):
        first = self.send(raw("POST", "http://evil.example/a?q=1", key="same"))
        self.assertEqual(first.status, 200, "%r\n%s" % (first, self.gw_log()))
        for data in (raw("POST", "/a?q=1", key="same"),
                     raw("POST", "http://other.example/a?q=1", key="same")):
            r = self.send(data)
            self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
            self.assertEqual(r.header("Idempotent-Replayed"), "true", r)
            self.assertEqual(r.body, first.body)
        self.assertEqual(self.up.count("same"), 1)
        # a different path is a different request under that key
        r = self.send(raw("POST", "http://evil.example/b?q=1", key="same"))
        self.assertProblem(r, 422)

    def test_http10_absolute_form_without_host(self):
        r = self.send(raw("POST", "http://h10/p", host=None, key="h10", version="HTTP/1.0"))
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(self.seen("h10"), [("/p", ["h10"])])

    def test_options_asterisk_passes(self):
        r = self.send(raw("OPTIONS", "*", body=b"", rid="star"))
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertEqual(self.seen("star"), [("*", ["x"])])

    def test_refused_targets(self):
        for method, target in (("POST", "ftp://h/a"), ("POST", "httpx://h/a"),
                               ("POST", "http://user:pw@h/a"), ("GET", "*"), ("POST", "*"),
                               ("GET", "h.example:80"), ("POST", "http:///a")):
            r = self.send(raw(method, target, key="bad"))
            self.assertProblem(r, 400, "%s %s\n%s" % (method, target, self.gw_log()))
        self.assertEqual(self.up.total(), 0)


if __name__ == "__main__":
    main()
