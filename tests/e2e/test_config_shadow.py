"""test_config_shadow.py - `mode: shadow`: every request reaches the
upstream, nothing is blocked or replayed, records are kept, and each request
that enforce would have replayed, refused or held is counted on /metrics
(idem_shadow_total{would=...}) and logged with its key."""

import threading

from config_util import ConfigTestCase, counter
from harness import main, wait_for

CONFIG = """
routes:
  - match: {path: /v1/**}
    mode: shadow
    require_key: true
"""


class Shadow(ConfigTestCase):
    def test_shadow_counts_and_blocks_nothing(self):
        up, gw, _ = self.start_config_gateway(CONFIG, admin=True)
        answers = []

        def post(key, body=b'{"a":1}', headers=None):
            h = {"X-Test-Id": key or "nokey"}
            if key:
                h["Idempotency-Key"] = key
            h.update(headers or {})
            r = gw.request("POST", "/v1/orders", body=body, headers=h)
            answers.append(r)
            return r

        post("k1")                      # runs, its answer is kept
        post("k1")                      # enforce: replay
        post("k1", body=b'{"a":2}')     # enforce: 422
        slow = threading.Thread(target=post, args=("k2", b"{}", {"X-Test-Delay-Ms": "1500"}))
        slow.start()
        up.wait_count("k2", 1)
        post("k2", b"{}")               # enforce: 409 (k2 in flight)
        slow.join()
        post(None)                      # enforce: 400 key-required
        post("k3")                      # runs once, nothing to count

        self.assertEqual([r.status for r in answers], [200] * len(answers), self.gw_log())
        self.assertFalse(any(r.replayed for r in answers), answers)
        self.assertEqual(up.count("k1"), 3)
        self.assertEqual(up.count("k2"), 2)
        self.assertEqual(up.count("nokey"), 1)
        self.assertEqual(up.count("k3"), 1)
        m = gw.admin_request("GET", "/metrics").body.decode()
        for would, n in (("replay", 1), ("mismatch", 1), ("conflict", 1), ("bad_key", 1)):
            self.assertEqual(counter(m, "idem_shadow_total", 'would="%s"' % would), n, m)
        for outcome in ("replayed", "mismatch", "conflict", "bad_key"):
            self.assertEqual(counter(m, "idem_requests_total", 'outcome="%s"' % outcome), 0, m)
        # records are kept: the first k1 is completed in the store
        rec = gw.admin_request("GET", "/keys/k1").json()
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["fence"], 1)
        log = gw.stderr()
        self.assertIn("shadow: POST /v1/orders key 'k1': enforce would have replayed", log)
        self.assertIn("key 'k1': enforce would have refused it (422", log)
        self.assertIn("key 'k2': enforce would have held it (409", log)

    def test_shadow_counts_a_body_a_json_fingerprint_refuses(self):
        # enforce answers 400 body-not-json (outcome bad_key) to a body that
        # a json fingerprint cannot read: shadow counts and logs it as such
        up, gw, _ = self.start_config_gateway(
            "routes:\n  - match: {path: /v1/**}\n    mode: shadow\n    fingerprint: json\n",
            admin=True)
        r = gw.request("POST", "/v1/orders", body=b"{not json", key="nj")
        self.assertEqual(r.status, 200, self.gw_log())
        self.assertEqual(up.count("nj"), 1)
        m = gw.admin_request("GET", "/metrics").body.decode()
        self.assertEqual(counter(m, "idem_shadow_total", 'would="bad_key"'), 1, m)
        self.assertEqual(counter(m, "idem_requests_total", 'outcome="bad_key"'), 0, m)
        self.assertIn("key 'nj': enforce would have refused it (400", gw.stderr())

    def test_enforce_elsewhere(self):
        up, gw, _ = self.start_config_gateway(CONFIG)
        for _ in range(2):
            r = gw.request("POST", "/other", body=b"{}", key="e1")
        self.assertTrue(r.replayed, r)
        self.assertEqual(up.count("e1"), 1)


if __name__ == "__main__":
    main()
