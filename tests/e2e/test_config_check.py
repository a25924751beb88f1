"""test_config_check.py - `idem config check FILE` (the effective policy per
route; exit 1 with FILE:LINE and the reason on a bad file), `idem config
openapi FILE` (an OpenAPI 3.1 fragment) and GET /policy on the admin
listener."""

import json
import subprocess
import time

from config_util import ConfigTestCase
from harness import idem_bin, main, run_idem

GOOD = """listen: 127.0.0.1:8081
upstream: http://127.0.0.1:8080
store: lmdb:./idem-data
admin_listen: 127.0.0.1:8082
defaults:
  methods: [POST, PATCH]
  ttl: 24h
  lock_ttl: 30s
  wait: 0s
  require_key: false
  key: header:Idempotency-Key
  fingerprint: raw
  store_statuses: [2xx, 3xx, 4xx]
  replay_headers: {drop: [Set-Cookie]}
  mode: enforce
routes:
  - match: {methods: [POST], path: /v1/payments/*}
    ttl: 7d
    require_key: true
    fingerprint: json
  - match: {path: /v1/orders}
    key: json:/order_id
  - match: {path: /internal/**}
    mode: off
  - match: {path: /v1/charges/**}
    fingerprint: {json: [/amount, /currency]}
    store_statuses: [2xx, "500"]
    mode: shadow
"""

# (file text, line, words the reason must hold)
BAD = [
    ("listen: 127.0.0.1:8081\nlistn: x\n", 2, "unknown key listn"),
    ("routes:\n  - match: {path: /a}\n    ttl: 3x\n", 3, "ttl: '3x' is not a duration"),
    ("routes:\n  - match: {path: /a}\n    listen: 127.0.0.1:1\n", 3,
     "listen is not a route setting"),
    ("routes:\n  - match: {path: /a, host: x}\n", 2, "match takes methods and path"),
    ("routes:\n  - match: {path: a}\n", 2, "must start with /"),
    # a path no request can take (requests are matched normalised) is refused
    ("routes:\n  - match: {path: /v1//payments/*}\n", 2,
     "path '/v1//payments/*' can never match: a request's path is matched as '/v1/payments/*'"),
    ("routes:\n  - match: {path: /v1/%70ayments}\n", 2, "is matched as '/v1/payments'"),
    ("routes:\n  - match: {path: /x/../v1/*}\n", 2, "is matched as '/v1/*'"),
    ("routes:\n  - match: {path: '/v1/a;v=1'}\n", 2, "is matched as '/v1/a'"),
    ("defaults:\n  store_statuses: [2xx, 409]\n", 2, "409 is never stored"),
    ("defaults:\n  store_statuses: [1xx]\n", 2, "is not a status list"),
    ("defaults:\n  fingerprint: {json: [amount]}\n", 2, "is not a fingerprint"),
    ("defaults:\n  key: body:/x\n", 2, "is not a key source"),
    ("defaults:\n  mode: dry-run\n", 2, "is not a mode"),
    ("defaults:\n  require_key: yes\n", 2, "'yes' is not true or false"),
    ("ttl: 1h\ndefaults:\n  ttl: 2h\n", 3, "ttl is set twice (first at line 1)"),
    ("routes:\n  - match: {path: /a}\n    methods: []\n", 3, "is not a method list"),
    ("routes:\n  - match: {methods: [POST, FROB]}\n", 2, "is not a method list"),
    ("defaults:\n  methods: [POST, FROB]\n", 2, "'POST,FROB' is not a method list"),
    # a number and a unit out of range is said as such, not "not a duration"
    ("defaults:\n  lock_ttl: 0s\n", 2, "lock_ttl: '0s' is out of range; use a duration from 1ms to"),
    ("ttl: 99999999999d\n", 1, "ttl: '99999999999d' is out of range"),
    ("routes: [\n", 2, "did not find expected node content"),
    # the YAML slips libyaml words least clearly get a hint
    ("defaults:\n\tttl: 1h\n", 2, "(a tab: YAML indents with spaces)"),
    ("defaults:\n  ttl: 1h\n\tmode: off\n", 3, "(a tab: YAML indents with spaces)"),
    ("store: memory:\n", 1, "(quote a value that holds ': ' or ends with ':', e.g. store: \"memory:\")"),
    ("upstream: ftp://x\n", 1, "upstream: 'ftp://x' is not an upstream URL"),
    ("defaults:\n  listen: 127.0.0.1:1\n", 2, "listen is not a route setting"),
    ("- a\n- b\n", 1, "must be a map"),
    # nothing after a second document is left out silently
    ("ttl: 1h\n---\nbogus: 2h\n", 2, "a second YAML document"),
    ("ttl: 1h\n---\n: : :\n[[[\n", 3, "did not find expected key"),
    # a store URI is read as serve opens it: a bad one names its line
    ('store: "foo:bar"\n', 1, "store: unknown store URI"),
    ('ttl: 1h\nstore: "lmdb:"\n', 2, "store: lmdb: no directory given"),
    ('store: "memory:a?x=1"\n', 1, "store: memory: takes no options"),
    ('store: "lmdb:/tmp/x?colour=red"\n', 1, "unknown option 'colour'"),
    # a second match: is refused, not merged into the first
    ("routes:\n  - match: {path: /a}\n    match: {methods: [POST]}\n", 3,
     "match is set twice (first at line 2)"),
    # a very long value: the reason is still said, after the value cut short
    ("key: json:/" + "a" * 3000 + "\n", 1, "...' is not a key source; use header:NAME"),
    ("defaults:\n  replay_headers: {drop: [" + "a" * 3000 + "]}\n", 2,
     "...' is not a replay rule; use all, or drop:NAME"),
    ("upstream: http://" + "h" * 2000 + "\n", 1, "...' is not an upstream URL"),
    ("routes:\n  - match: {methods: [" + ", ".join("M%d" % i for i in range(500)) + "]}\n", 2,
     "...' is not a method list; use method names"),
    # an encoding error is said at the line of its byte (libyaml gives only the offset)
    (b"listen: 127.0.0.1:1\nttl: 1h\nwait: 1s\nmode: enforce\nkey: \"a\xffb\"\n", 5,
     "invalid leading UTF-8 octet"),
    (b"ttl: 1h\r\nwait: 1s\r\nkey: a\xc3(\r\n", 3, "invalid trailing UTF-8 octet"),
    # a value quoted in the reason keeps it on one line
    ("ttl: |\n  2h\n", 1, "ttl: '2h\\n' is not a duration"),
    ('routes:\n  - match: {methods: ["PO\\tST"]}\n', 2, "'PO\\tST' is not a method list"),
    ('"a\\nb": 1\n', 1, "unknown key a\\nb (the file"),
    # a setting given twice is named as the line it is on spells it
    ("admin_listen: 127.0.0.1:1\nadmin-listen: 127.0.0.1:2\n", 2,
     "admin-listen is set twice (first at line 1, as admin_listen)"),
    # nesting is refused where it goes too deep, before libyaml's time grows
    ("routes: " + "[" * 40000 + "]" * 40000 + "\n", 1, "nested deeper than 64 levels"),
    ("".join(" " * i + "k%d:\n" % i for i in range(100)), 65, "nested deeper than 64 levels"),
    # the access log serve would fail to open, at the line that names it
    ("listen: 127.0.0.1:1\naccess_log: /nonexistent/dir/x.log\n", 2,
     "access_log: cannot open '/nonexistent/dir/x.log': No such file or directory"),
]


class Check(ConfigTestCase):
    def test_good_file(self):
        path = self.write_config(GOOD)
        rc, out, err = run_idem(["config", "check", path])
        self.assertEqual(rc, 0, err)
        self.assertIn("%s: ok, 4 routes" % path, out)
        self.assertIn("route 1 (line 17): POST /v1/payments/*", out)
        self.assertIn("route 4 (line 25): * /v1/charges/**", out)
        self.assertIn("defaults (requests no route matches):", out)
        # the defaults read as the README writes them (ttl 24h, not 1d)
        self.assertIn("ttl             24h", out.split("defaults (")[1])
        route1 = out.split("route 1")[1].split("route 2")[0]
        for line in ("ttl             7d", "require_key     true", "fingerprint     json",
                     "replay_headers  drop:Set-Cookie", "lock_ttl        30s", "mode            enforce"):
            self.assertIn(line, route1)
        route4 = out.split("route 4")[1].split("defaults")[0]
        self.assertIn("fingerprint     json:/amount,/currency", route4)
        self.assertIn("store_statuses  2xx,500", route4)
        self.assertIn("mode            shadow", route4)
        # flags after FILE override it, as for serve
        rc, out, err = run_idem(["config", "check", path, "--ttl", "2h"])
        self.assertEqual(rc, 0, err)
        self.assertIn("ttl             2h", out.split("route 2")[1])

    def test_bad_files(self):
        for text, line, words in BAD:
            path = self.write_config(text)
            rc, out, err = run_idem(["config", "check", path])
            self.assertEqual(rc, 1, (text, out, err))
            self.assertIn("%s:%d: " % (path, line), err, text)
            self.assertIn(words, err, text)
            # serve refuses it the same way, before it opens anything
            rc, out, err = run_idem(["serve", "--config", path, "--listen", "127.0.0.1:0",
                                     "--upstream", "http://127.0.0.1:1"])
            self.assertEqual(rc, 2, (text, out, err))
            self.assertIn("%s:%d: " % (path, line), err, text)
            self.assertIn(words, err, text)
            self.assertEqual(len(err.splitlines()), 2, err)  # the reason, then "Run ..."

    def test_deep_nesting_is_refused_at_once(self):
        # 40k "[" took 2 s in libyaml before the depth was bounded (quadratic)
        path = self.write_config("routes: " + "[" * 40000 + "]" * 40000 + "\n")
        t = time.monotonic()
        rc, out, err = run_idem(["config", "check", path])
        self.assertEqual(rc, 1, err)
        self.assertLess(time.monotonic() - t, 0.5, err)
        # as deep as 64 is still read (here: refused for what it holds)
        path = self.write_config("routes: " + "[" * 63 + "]" * 63 + "\n")
        rc, out, err = run_idem(["config", "check", path])
        self.assertEqual(rc, 1, err)
        self.assertNotIn("nested", err)

    def test_short_lease_warned_as_serve_warns(self):
        text = "upstream_timeout: 60s\nroutes:\n  - match: {path: /a}\n    lock_ttl: 5s\n"
        path = self.write_config(text)
        rc, out, err = run_idem(["config", "check", path])
        self.assertEqual(rc, 0, err)  # a warning, not an error
        for where in ("the lock_ttl of route 1 (line 3) (5000ms)", "--lock-ttl (30000ms)"):
            self.assertIn("idem config: warning: --upstream-timeout (60000ms) is longer than %s: "
                          "a request still running when its lease ends can be taken over and "
                          "run again" % where, err)
        rc, out, err = run_idem(["config", "check", path, "--upstream-timeout", "1s"])
        self.assertEqual((rc, err), (0, ""))

    def test_usage(self):
        self.assertEqual(run_idem(["config", "check"])[0], 2)
        self.assertEqual(run_idem(["config", "frob", "x"])[0], 2)
        # --help after the subcommand is help too, as for keys and gc
        for args in (["config", "--help"], ["config", "check", "--help"], ["config", "openapi", "-h"]):
            rc, out, err = run_idem(args)
            self.assertEqual((rc, err), (0, ""), args)
            self.assertIn("usage: idem config check FILE", out)
        rc, out, err = run_idem(["config", "check", "/nonexistent/idem.yaml"])
        self.assertEqual(rc, 1)
        self.assertIn("/nonexistent/idem.yaml: No such file", err)
        # a directory opens but does not read: the reason is said
        d = self.tempdir()
        rc, out, err = run_idem(["config", "check", d])
        self.assertEqual(rc, 1)
        self.assertIn("%s: cannot read it: Is a directory" % d, err)
        path = self.write_config(GOOD)
        self.assertEqual(run_idem(["config", "check", path, "--ttl", "x"])[0], 2)

    def test_output_that_cannot_be_written_is_a_failure(self):
        # a full disk must not leave a cut policy or OpenAPI document that
        # exits 0 (a deploy script would publish it)
        path = self.write_config(GOOD)
        for cmd in ("check", "openapi"):
            with open("/dev/full", "w") as full:
                p = subprocess.run([idem_bin(), "config", cmd, path], stdin=subprocess.DEVNULL,
                                   stdout=full, stderr=subprocess.PIPE, timeout=30)
            self.assertEqual(p.returncode, 1, (cmd, p.stderr))
            self.assertIn(b"idem config: cannot write the output: No space left on device",
                          p.stderr, cmd)

    def test_openapi(self):
        path = self.write_config(GOOD)
        rc, out, err = run_idem(["config", "openapi", path])
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["openapi"], "3.1.0")
        op = doc["paths"]["/v1/payments/{p1}"]["post"]
        self.assertNotIn("patch", doc["paths"]["/v1/payments/{p1}"])  # the route matches POST
        key = [p for p in op["parameters"] if p["in"] == "header"][0]
        self.assertEqual((key["name"], key["required"]), ("Idempotency-Key", True))
        self.assertEqual(key["schema"]["maxLength"], 255)
        self.assertTrue({"400", "409", "422"} <= set(op["responses"]))
        self.assertIn("application/problem+json", op["responses"]["409"]["content"])
        self.assertEqual(op["x-idem-ttl"], "7d")
        orders = doc["paths"]["/v1/orders"]
        self.assertEqual(set(orders), {"post", "patch"})
        self.assertEqual(orders["post"]["x-idem-key"], "a key at /order_id in a JSON body")
        self.assertFalse([p for p in orders["post"]["parameters"] if p["in"] == "header"])
        # mode off is not published; a ** glob is listed as a route
        self.assertFalse([p for p in doc["paths"] if p.startswith("/internal")])
        self.assertIn("* /v1/charges/**", [r["match"] for r in doc["x-idem-routes"]])
        self.assertIn("IdemProblem", doc["components"]["schemas"])

    def openapi(self, text):
        rc, out, err = run_idem(["config", "openapi", self.write_config(text)])
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        routes = {r["match"]: sorted(r["operations"]) for r in doc["x-idem-routes"]}
        return {p: sorted(item) for p, item in doc["paths"].items()}, routes, doc

    def test_openapi_first_match_per_method(self):
        # a PUT route in mode off does not hide the POST route of its path
        paths, routes, doc = self.openapi(
            "routes:\n"
            "  - match: {methods: [PUT], path: /v1/orders}\n    mode: off\n"
            "  - match: {methods: [POST], path: /v1/orders}\n    require_key: true\n")
        self.assertEqual(paths, {"/v1/orders": ["post"]})
        key = doc["paths"]["/v1/orders"]["post"]["parameters"][0]
        self.assertIs(key["required"], True)
        # routes of one glob with other methods share its path item
        paths, routes, doc = self.openapi(
            "routes:\n"
            "  - match: {methods: [POST], path: /v1/payments/*}\n"
            "  - match: {methods: [PUT], path: /v1/payments/*}\n    methods: [PUT]\n"
            "    ttl: 1h\n"
            "  - match: {path: /v1/payments/*}\n    methods: [POST, PATCH, PUT]\n"
            "    mode: shadow\n")
        item = doc["paths"]["/v1/payments/{p1}"]
        self.assertEqual(sorted(item), ["patch", "post", "put"])
        self.assertEqual((item["post"]["x-idem-ttl"], item["post"]["x-idem-mode"]),
                         ("24h", "enforce"))  # route 1's, not route 3's
        self.assertEqual(item["put"]["x-idem-ttl"], "1h")  # route 2's
        self.assertEqual(item["patch"]["x-idem-mode"], "shadow")  # route 3's
        self.assertEqual(list(routes), ["defaults"])
        # a route an earlier glob takes for every method is not published;
        # one it takes for some methods keeps the others
        paths, routes, doc = self.openapi(
            "routes:\n"
            "  - match: {path: /internal/**}\n    mode: off\n"
            "  - match: {path: /internal/jobs}\n"
            "  - match: {methods: [POST], path: /v2/**}\n"
            "  - match: {path: /v2/charges/*}\n"
            "  - match: {path: /v2/refunds/**}\n")
        self.assertEqual(paths, {"/v2/charges/{p1}": ["patch"]})
        self.assertEqual(routes, {"POST /v2/**": ["post"], "* /v2/refunds/**": ["patch"],
                                  "defaults": ["patch", "post"]})

    def test_policy_on_the_admin_listener(self):
        up = self.start_upstream()
        path = self.write_config(GOOD)
        gw = self.start_gateway(up, "--config", path, admin=True)
        r = gw.admin_request("GET", "/policy")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "application/json")
        doc = r.json()
        self.assertEqual(doc["source"], path)
        self.assertEqual(len(doc["routes"]), 4)
        r1 = doc["routes"][0]
        self.assertEqual(r1["match"], {"methods": ["POST"], "path": "/v1/payments/*"})
        self.assertEqual((r1["index"], r1["line"]), (1, 17))
        self.assertEqual(r1["ttl"], "7d")
        self.assertIs(r1["require_key"], True)
        self.assertEqual(r1["replay_headers"], {"drop": ["Set-Cookie"]})
        self.assertEqual(r1["methods"], ["POST", "PATCH"])
        self.assertEqual(doc["routes"][1]["key"], "json:/order_id")
        self.assertEqual(doc["routes"][3]["fingerprint"], {"json": ["/amount", "/currency"]})
        self.assertEqual(doc["routes"][3]["store_statuses"], ["2xx", "500"])
        self.assertEqual(doc["defaults"]["mode"], "enforce")
        self.assertEqual(doc["defaults"]["ttl"], "24h")
        self.assertEqual(doc["routes"][1]["match"], {"methods": None, "path": "/v1/orders"})
        # without --config: the defaults from the flags
        gw2 = self.start_gateway(up, "--ttl", "5m", admin=True)
        doc = gw2.admin_request("GET", "/policy").json()
        self.assertEqual((doc["source"], doc["routes"], doc["defaults"]["ttl"]), (None, [], "5m"))
        self.assertEqual(gw2.admin_request("POST", "/policy").status, 405)


if __name__ == "__main__":
    main()
