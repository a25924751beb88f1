"""--scope-header: the same key in two scopes is two records (runs twice,
never replays the other tenant's response); the header value is not stored
in clear."""

import json
import os
import urllib.parse

from harness import GatewayTestCase, RawConn, main, request_bytes, run_idem

SECRET_A = "Bearer sk-live-ALPHA-7c1d9e3f5a0b2468ace13579bdf02468"
SECRET_B = "Bearer sk-live-BRAVO-0f9e8d7c6b5a49382716afbecd051234"


class Scope(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_same_key_two_scopes_runs_twice(self):
        gw = self.start_gateway(self.up, "--scope-header", "Authorization")
        ra = gw.request("POST", "/s", body=b"x", key="shared", headers={"Authorization": SECRET_A})
        rb = gw.request("POST", "/s", body=b"x", key="shared", headers={"Authorization": SECRET_B})
        self.assertEqual((ra.status, rb.status), (200, 200), self.gw_log())
        self.assertFalse(rb.replayed, "tenant B got tenant A's replay: %r" % rb)
        self.assertEqual(self.up.count("shared"), 2)
        self.assertEqual(rb.json()["exec"], 2)
        ra2 = gw.request("POST", "/s", body=b"x", key="shared", headers={"Authorization": SECRET_A})
        rb2 = gw.request("POST", "/s", body=b"x", key="shared", headers={"Authorization": SECRET_B})
        self.assertTrue(ra2.replayed and rb2.replayed, (ra2, rb2))
        self.assertEqual(ra2.body, ra.body)
        self.assertEqual(rb2.body, rb.body)
        self.assertEqual(self.up.count("shared"), 2)
        # fences are per record: each scope's first claim is fence 1
        self.assertEqual(self.up.fences("shared"), ["1", "1"])

    def test_scope_header_still_reaches_upstream(self):
        # the upstream needs its Authorization: scoping must not strip it
        gw = self.start_gateway(self.up, "--scope-header", "Authorization")
        gw.request("POST", "/s", body=b"x", key="auth", headers={"Authorization": SECRET_A})
        got = [(k.lower(), v) for k, v in self.up.requests("auth")[0]["headers"]]
        self.assertIn(("authorization", SECRET_A), got)

    def test_scope_does_not_leak_mismatch(self):
        # a different body under the same key in another scope is not a 422
        gw = self.start_gateway(self.up, "--scope-header", "X-Tenant")
        ra = gw.request("POST", "/s", body=b"a", key="k", headers={"X-Tenant": "a"})
        rb = gw.request("POST", "/s", body=b"b", key="k", headers={"X-Tenant": "b"})
        self.assertEqual((ra.status, rb.status), (200, 200), self.gw_log())

    def test_scope_header_sent_twice_is_refused(self):
        # which value names the tenant cannot be known (a proxy may append
        # the real one after a forged one): never a replay of either's record
        gw = self.start_gateway(self.up, "--scope-header", "X-Tenant")
        ra = gw.request("POST", "/s", body=b"x", key="k2", headers={"X-Tenant": "victim"})
        self.assertEqual(ra.status, 200, self.gw_log())
        with RawConn(gw.port) as c:
            c.send(request_bytes("POST", "/s", b"x", key="k2",
                                 headers=[("X-Tenant", "victim"), ("X-Tenant", "attacker")]))
            r = c.read_response()
        self.assertEqual(r.status, 400, r)
        self.assertIn(b"invalid-scope", r.body)
        self.assertFalse(r.replayed, r)
        self.assertEqual(self.up.count("k2"), 1)

    def test_without_scope_header_flag_tenants_share(self):
        gw = self.start_gateway(self.up)
        gw.request("POST", "/s", body=b"x", key="k", headers={"X-Tenant": "a"})
        r = gw.request("POST", "/s", body=b"x", key="k", headers={"X-Tenant": "b"})
        self.assertTrue(r.replayed, r)

    def test_scope_value_not_stored_in_clear(self):
        d = self.tempdir()
        store = "lmdb:%s/store" % d
        gw = self.start_gateway(self.up, "--scope-header", "Authorization", store=store)
        for s in (SECRET_A, SECRET_B):
            r = gw.request("POST", "/s", body=b"x", key="secret-key", headers={"Authorization": s})
            self.assertEqual(r.status, 200, self.gw_log())
        self.assertEqual(gw.stop(), 0, self.gw_log())
        needles = [s.encode() for s in (SECRET_A, SECRET_B)] + [b"ALPHA-7c1d9e3f", b"BRAVO-0f9e8d7c"]
        files = []
        for root, _, names in os.walk(d):
            for n in names:
                files.append(os.path.join(root, n))
        self.assertTrue(files, "lmdb store wrote no files under %s" % d)
        for p in files:
            with open(p, "rb") as f:
                data = f.read()
            for nd in needles:
                self.assertNotIn(nd, data, "scope value %r stored in clear in %s" % (nd, p))
        rc, out, err = run_idem(["keys", "list", "--store", store])
        if rc == 0:
            for nd in needles:
                self.assertNotIn(nd.decode(), out + err, "idem keys list shows the scope value")


class ScopeAdmin(GatewayTestCase):
    def test_admin_key_with_scope(self):
        # The operator's flow: list the records, then GET/DELETE one of them
        # by its key and the scope shown in the listing (?scope=...).
        up = self.start_upstream()
        d = self.tempdir()
        store = "lmdb:%s/store" % d
        gw = self.start_gateway(up, "--scope-header", "X-Tenant", store=store, admin=True)
        for t in ("acme", "globex"):
            r = gw.request("POST", "/s", body=b"x", key="k", headers={"X-Tenant": t, "X-Test-Id": t})
            self.assertEqual(r.status, 200, self.gw_log())
        rc, out, err = run_idem(["keys", "list", "--store", store])
        if rc != 0:
            self.skipTest("idem keys list unavailable: %s" % err.strip())
        try:
            recs = [json.loads(line) for line in out.splitlines() if line.strip()]
        except ValueError:
            self.skipTest("idem keys list does not print JSON lines")
        scopes = [r.get("scope") for r in recs if r.get("key") == "k"]
        self.assertEqual(len(scopes), 2, out)
        self.assertTrue(all(scopes), "scoped records listed without a scope: %s" % out)
        self.assertNotIn("acme", out)
        # without a scope the (unscoped) record does not exist
        self.assertEqual(gw.admin_request("GET", "/keys/k").status, 404)
        for s in scopes:
            r = gw.admin_request("GET", "/keys/k?scope=" + urllib.parse.quote(s, safe=""))
            self.assertEqual(r.status, 200, r)
            self.assertIn("completed", r.body.decode().lower())
        # delete one tenant's record: that tenant runs again, the other replays
        r = gw.admin_request("DELETE", "/keys/k?scope=" + urllib.parse.quote(scopes[0], safe=""))
        self.assertIn(r.status, (200, 204), r)
        again = [gw.request("POST", "/s", body=b"x", key="k", headers={"X-Tenant": t, "X-Test-Id": t})
                 for t in ("acme", "globex")]
        self.assertEqual(sorted(r.replayed for r in again), [False, True], again)
        self.assertEqual(up.count("acme") + up.count("globex"), 3)


if __name__ == "__main__":
    main()
