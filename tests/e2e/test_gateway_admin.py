"""Admin listener: /healthz, Prometheus /metrics with request counters,
GET /keys/KEY shows one record, DELETE /keys/KEY lets the key run again. The
admin routes are not on the main listener."""

import os
import re
import urllib.parse

from harness import GatewayTestCase, free_port, main, wait_for

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$")


def parse_metrics(text):
    """{(name, labels): value}; fails on lines that are not Prometheus text."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError("not a Prometheus sample line: %r" % line)
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


class Admin(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()
        self.gw = self.start_gateway(self.up, admin=True)

    def test_healthz(self):
        r = self.gw.admin_request("GET", "/healthz")
        self.assertEqual(r.status, 200, self.gw_log())

    def test_readyz_asks_the_store(self):
        r = self.gw.admin_request("GET", "/readyz")
        self.assertEqual((r.status, r.body), (200, b"ready\n"), self.gw_log())
        self.assertEqual(self.gw.admin_request("POST", "/readyz").status, 405)
        # the probe reads, it writes nothing
        self.assertEqual(self.gw.admin_request("GET", "/keys/idem-readyz-probe").status, 404)
        # on lmdb the probe is a read snapshot, not a commit
        gw = self.start_gateway(self.up, admin=True, store="lmdb:%s/store" % self.tempdir())
        self.assertEqual(gw.admin_request("GET", "/readyz").status, 200, self.gw_log())
        # a store that does not answer: 503, and no spool line with nothing spooled
        gw = self.start_gateway(self.up, admin=True,
                                store="redis://127.0.0.1:%d?timeout=500ms" % free_port())
        doc = self.assertProblem(gw.admin_request("GET", "/readyz"), 503, self.gw_log())
        self.assertNotIn("spool", doc["detail"], doc)

    def test_metrics_count_requests(self):
        r = self.gw.admin_request("GET", "/metrics")
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertTrue((r.header("Content-Type") or "").startswith("text/plain"), r)
        text = r.body.decode()
        self.assertRegex(text, r"(?m)^# TYPE \S+ counter$")
        before = parse_metrics(text)
        self.gw.request("POST", "/m", body=b"x", key="m1")
        self.gw.request("POST", "/m", body=b"x", key="m1")        # replay
        self.gw.request("GET", "/m")                               # pass-through
        after = parse_metrics(self.gw.admin_request("GET", "/metrics").body.decode())

        def total(ms):
            return sum(v for (n, _), v in ms.items()
                       if "request" in n and not n.endswith(("_bucket", "_sum")))
        self.assertGreaterEqual(total(after) - total(before), 3,
                                "request counters did not count 3 requests:\n%s"
                                % "\n".join("%s%s %s" % (k[0], k[1], v) for k, v in sorted(after.items())))
        self.assertTrue(any("replay" in n + l for (n, l) in after),
                        "no metric counts replays")

    def test_lmdb_counters_only_for_an_lmdb_store(self):
        text = self.gw.admin_request("GET", "/metrics").body.decode()
        self.assertNotIn("idem_lmdb_", text)  # this gateway runs on memory:
        gw = self.start_gateway(self.up, admin=True, store="lmdb:%s/store" % self.tempdir())
        for i in range(3):
            self.assertEqual(gw.request("POST", "/c", body=b"x", key="c%d" % i).status, 200)
        self.assertTrue(gw.request("POST", "/c", body=b"x", key="c0").replayed)
        m = parse_metrics(gw.admin_request("GET", "/metrics").body.decode())
        # three claims and three completes, each durable before its answer
        self.assertGreaterEqual(m[("idem_lmdb_ops_written_total", "")], 6, m)
        self.assertGreaterEqual(m[("idem_lmdb_commits_total", "")], 2, m)
        self.assertLessEqual(m[("idem_lmdb_commits_total", "")],
                             m[("idem_lmdb_ops_written_total", "")])
        self.assertGreater(m[("idem_lmdb_commit_seconds_total", "")], 0)
        self.assertGreaterEqual(m[("idem_lmdb_max_batch", "")], 1)
        self.assertGreaterEqual(m[("idem_lmdb_ops_read_total", "")], 1, "the replay was read")
        self.assertEqual(m[("idem_lmdb_errors_total", '{kind="full"}')], 0)
        self.assertEqual(m[("idem_lmdb_errors_total", '{kind="store"}')], 0)
        # the records ahead of LMDB are checkpointed into it behind the log
        wait_for(lambda: parse_metrics(gw.admin_request("GET", "/metrics").body.decode())[
            ("idem_lmdb_overlay_keys", "")] == 0, 10, what="the overlay to empty")
        m = parse_metrics(gw.admin_request("GET", "/metrics").body.decode())
        self.assertEqual(m[("idem_lmdb_overlay_bytes", "")], 0)

    def test_every_metric_the_readme_lists_is_served(self):
        # The README's /metrics row (and the cache tier's line) is the
        # contract: each name it lists, with each value of a label it spells
        # out (op=claim|complete|release; not outcome=…), is a sample of an lmdb: gateway
        # with a --cache, from its start, before any request.
        readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                              "README.md")
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        row = next(line for line in text.splitlines() if line.startswith("| `GET /metrics` |"))
        cache = next(line for line in text.splitlines()
                     if line.startswith("- `/metrics`: `idem_cache_hits_total`"))
        listed = re.findall(r"`(idem_[a-z_]+)(?:\{([a-z_]+)=([^}`]+)\})?`", row + cache)
        self.assertGreater(len(listed), 20, listed)
        gw = self.start_gateway(self.up, "--cache", "memory:1MiB", admin=True,
                                store="lmdb:%s/store" % self.tempdir())
        served = parse_metrics(gw.admin_request("GET", "/metrics").body.decode())
        names = {n for n, _ in served}
        for name, label, values in listed:
            base = {name, name + "_count"}  # a histogram's samples
            self.assertTrue(base & names, "%s is not in /metrics" % name)
            for v in values.replace("\\|", "|").split("|") if label and values != "…" else []:
                self.assertTrue(any(n in base and '%s="%s"' % (label, v) in ls
                                    for n, ls in served),
                                '%s{%s="%s"} is not in /metrics' % (name, label, v))

    def test_get_and_delete_key(self):
        r1 = self.gw.request("POST", "/k", body=b"x", key="inspect-me")
        self.assertEqual(r1.status, 200, self.gw_log())
        r = self.gw.admin_request("GET", "/keys/inspect-me")
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        self.assertIn("completed", r.body.decode().lower(), r)
        self.assertIn("inspect-me", r.body.decode(), r)
        self.assertEqual(self.gw.admin_request("GET", "/keys/never-seen").status, 404)

        r = self.gw.admin_request("DELETE", "/keys/inspect-me")
        self.assertIn(r.status, (200, 204), r)
        self.assertEqual(self.gw.admin_request("GET", "/keys/inspect-me").status, 404)
        r2 = self.gw.request("POST", "/k", body=b"x", key="inspect-me")
        self.assertEqual(r2.status, 200)
        self.assertFalse(r2.replayed, "deleted key replayed: %r" % r2)
        self.assertEqual(self.up.count("inspect-me"), 2)

    def test_get_key_with_special_characters(self):
        key = "order 42/a?b"
        r = self.gw.request("POST", "/k", body=b"x", key='"%s"' % key, headers={"X-Test-Id": "sp"})
        self.assertEqual(r.status, 200, self.gw_log())
        r = self.gw.admin_request("GET", "/keys/" + urllib.parse.quote(key, safe=""))
        self.assertEqual(r.status, 200, r)
        self.assertIn("completed", r.body.decode().lower())

    def test_plus_in_key_path_is_a_plus(self):
        # '+' in a URL path is a plus (RFC 3986), not a space as in a query:
        # DELETE /keys/order+7 must not delete the record of "order 7"
        for key, rid in (("order+7", "plus"), ("order 7", "space")):
            r = self.gw.request("POST", "/k", body=b"x", key='"%s"' % key, headers={"X-Test-Id": rid})
            self.assertEqual(r.status, 200, self.gw_log())
        r = self.gw.admin_request("GET", "/keys/order+7")
        self.assertEqual(r.status, 200, r)
        self.assertIn('"key":"order+7"', r.body.decode(), r)
        r = self.gw.admin_request("DELETE", "/keys/order+7")
        self.assertIn(r.status, (200, 204), r)
        self.assertEqual(self.gw.admin_request("GET", "/keys/order+7").status, 404)
        self.assertEqual(self.gw.admin_request("GET", "/keys/order%207").status, 200,
                         "the record of another key was deleted")
        r = self.gw.request("POST", "/k", body=b"x", key='"order 7"', headers={"X-Test-Id": "space"})
        self.assertTrue(r.replayed, r)
        self.assertEqual(self.up.count("space"), 1)

    def test_processing_record_is_visible(self):
        import threading
        t = threading.Thread(target=self.gw.request, args=("POST", "/p"),
                             kwargs={"body": b"x", "key": "busy",
                                     "headers": {"X-Test-Delay-Ms": "1000"}}, daemon=True)
        t.start()
        self.up.wait_count("busy", 1)
        r = self.gw.admin_request("GET", "/keys/busy")
        t.join(30)
        self.assertEqual(r.status, 200, r)
        self.assertIn("processing", r.body.decode().lower(), r)

    def test_admin_errors(self):
        gw = self.gw
        self.assertEqual(gw.admin_request("GET", "/nope").status, 404)
        self.assertProblem(gw.admin_request("GET", "/keys/" + "k" * 256), 400)
        self.assertIn(gw.admin_request("POST", "/keys/k").status, (404, 405))
        self.assertEqual(gw.admin_request("DELETE", "/keys/never-seen").status, 404)
        self.assertEqual(gw.admin_request("GET", "/healthz").status, 200)

    def test_admin_routes_not_on_main_listener(self):
        self.gw.request("POST", "/k", body=b"x", key="hidden")
        r = self.gw.request("DELETE", "/keys/hidden", headers={"X-Test-Id": "del"})
        # passes through to the upstream like any request; the record stays
        self.assertEqual(self.up.count("del"), 1)
        r = self.gw.request("POST", "/k", body=b"x", key="hidden")
        self.assertTrue(r.replayed, r)


if __name__ == "__main__":
    main()
