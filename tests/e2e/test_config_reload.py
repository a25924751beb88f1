"""test_config_reload.py - SIGHUP reads the config file again: a valid one
applies to new requests without dropping connections (a reload under load
fails no request), an invalid one is logged and the running policy stays,
and settings that cannot change live are named in the log."""

import http.client
import os
import signal
import threading

from config_util import ConfigTestCase, counter
from harness import main, wait_for

V1 = """
routes:
  - match: {path: /a}
    require_key: false
    ttl: 1h
"""
V2 = """
routes:
  - match: {path: /a}
    require_key: true
    ttl: 2h
"""


class Reload(ConfigTestCase):
    def reload(self, gw, path, text, expect):
        n = gw.stderr().count(expect)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        os.kill(gw.pid, signal.SIGHUP)
        wait_for(lambda: gw.stderr().count(expect) > n, 10, what=expect)

    def test_reload_applies_and_bad_file_is_kept_out(self):
        up, gw, path = self.start_config_gateway(V1, admin=True)
        self.assertEqual(gw.request("POST", "/a", body=b"{}").status, 200)
        # a keep-alive connection opened before the reload lives on
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
        conn.request("POST", "/a", body=b"{}")
        self.assertEqual(conn.getresponse().read() and 200, 200)
        self.reload(gw, path, V2, "reloaded")
        conn.request("POST", "/a", body=b"{}")
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 400, self.gw_log())
        conn.close()
        pol = gw.admin_request("GET", "/policy").json()
        self.assertEqual(pol["routes"][0]["require_key"], True)
        self.assertEqual(pol["routes"][0]["ttl"], "2h")
        # an invalid file: logged with its line, the running policy stays
        self.reload(gw, path, "routes:\n  - match: {path: /a}\n    ttl: forever\n",
                    "reload refused")
        self.assertIn("%s:3: ttl: 'forever' is not a duration" % path, gw.stderr())
        self.assertEqual(gw.request("POST", "/a", body=b"{}").status, 400)
        self.reload(gw, path, "routes: [\n", "reload refused")
        self.assertEqual(gw.request("POST", "/a", body=b"{}").status, 400)
        self.assertEqual(gw.admin_request("GET", "/policy").json()["routes"][0]["ttl"], "2h")
        m = gw.admin_request("GET", "/metrics").body.decode()
        self.assertEqual(counter(m, "idem_config_reloads_total", 'result="ok"'), 1, m)
        self.assertEqual(counter(m, "idem_config_reloads_total", 'result="failed"'), 2, m)
        # settings that cannot change while serve runs are named, and stay
        self.reload(gw, path, V1 + "workers: 3\nmax_conns: 10\n", "cannot change while serve runs")
        self.assertIn("max_conns, workers changed in %s" % path, gw.stderr())
        self.assertEqual(gw.request("POST", "/a", body=b"{}").status, 200)
        self.assertTrue(gw.alive())

    def test_a_route_lease_shorter_than_the_upstream_timeout_is_warned_of(self):
        short = "routes:\n  - match: {path: /a}\n  - match: {path: /b}\n    lock_ttl: 1s\n"
        warning = ("warning: --upstream-timeout (30000ms) is longer than the lock_ttl of "
                   "route 2 (line 3) (1000ms)")
        up, gw, path = self.start_config_gateway(short)
        self.assertEqual(gw.stderr().count(warning), 1, gw.stderr())
        self.reload(gw, path, V1, "reloaded")
        self.reload(gw, path, short, "reloaded")  # and again after a reload that brings it
        wait_for(lambda: gw.stderr().count(warning) == 2, 10, what="the warning again")
        self.assertNotIn("--lock-ttl (", gw.stderr())  # the defaults' 30s is not shorter

    def test_reload_under_load_fails_nothing(self):
        up, gw, path = self.start_config_gateway(V1, admin=True)
        stop = threading.Event()
        failures, done = [], [0]
        lock = threading.Lock()

        def client(n):
            conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
            i = 0
            while not stop.is_set():
                i += 1
                key = "c%d-%d" % (n, i)
                try:
                    # keyed requests on a route both files keep the same
                    conn.request("POST", "/b", body=b"{}",
                                 headers={"Idempotency-Key": key, "X-Test-Id": key})
                    r = conn.getresponse()
                    r.read()
                    ok = r.status == 200
                except Exception as e:  # noqa: BLE001  a dropped connection is a failure
                    ok = False
                    r = e
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
                with lock:
                    done[0] += 1
                    if not ok:
                        failures.append((key, repr(r)))
            conn.close()

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        try:
            for i in range(20):
                before = done[0]
                wait_for(lambda: done[0] > before + 20, 30, what="requests between reloads")
                self.reload(gw, path, V2 if i % 2 == 0 else V1, "reloaded")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertEqual(failures, [], self.gw_log())
        self.assertGreater(done[0], 400)
        self.assertEqual(gw.stderr().count("reloaded"), 20)


if __name__ == "__main__":
    main()
