"""test_pg_outage.py - idem serve on PostgreSQL while the server goes away:
stopped under load the gateway answers 503 (fail closed, at once, with
Retry-After), started again it recovers by itself, and no key runs twice.

Runs itself under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is
unset; that script hands over IDEM_TEST_PG_STOP and IDEM_TEST_PG_START.
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402

if __name__ == "__main__":
    pg_server.under_postgres(__file__)

from harness import GatewayTestCase, LoadClients, main, wait_for  # noqa: E402


class Load(LoadClients):
    """Clients sending POSTs with fresh keys until stopped; every answer is
    kept with its time."""

    def __init__(self, gw, clients=4):
        super().__init__(clients)
        self.gw = gw
        self.results = []  # (t, key, status, retry_after)

    def run(self, i):
        n = 0
        while not self.stopping.is_set():
            n += 1
            key = "load-%d-%d" % (i, n)
            try:
                r = self.gw.request("POST", "/orders", body=b"{}", key=key, timeout=15)
                item = (time.monotonic(), key, r.status, r.header("Retry-After"))
            except OSError as e:
                item = (time.monotonic(), key, "error: %s" % e, None)
            with self.lock:
                self.results.append(item)

    def since(self, t0, status=None):
        with self.lock:
            return [r for r in self.results if r[0] >= t0 and (status is None or r[2] == status)]


class PostgresOutage(GatewayTestCase):

    def test_stop_and_start_under_load(self):
        uri = os.environ["IDEM_TEST_PG_URI"] + "?migrate=1"
        up = self.start_upstream()
        gw = self.start_gateway(up, store=uri, admin=True)
        load = Load(gw).start()
        self.addCleanup(load.stop)
        try:
            t0 = time.monotonic()
            wait_for(lambda: len(load.since(t0, 200)) >= 20, 20, what="requests served before the outage")

            subprocess.run([os.environ["IDEM_TEST_PG_STOP"]], check=True, timeout=60)
            t_down = time.monotonic()
            wait_for(lambda: len(load.since(t_down, 503)) >= 20, 20, what="503s while the store is down")
            # down: answered at once, fail closed, with a hint when to retry
            t_check = time.monotonic()
            wait_for(lambda: len(load.since(t_check)) >= 20, 20, what="answers while down")
            down = load.since(t_check)
            for _, key, status, retry_after in down:
                self.assertEqual(status, 503, "%s answered %s while down\n%s" % (key, status, self.gw_log()))
                self.assertTrue(retry_after, "503 without Retry-After for %s" % key)
            # and a load balancer asking /readyz is told so
            wait_for(lambda: gw.admin_request("GET", "/readyz").status == 503, 20,
                     what="/readyz 503 while the store is down")

            subprocess.run([os.environ["IDEM_TEST_PG_START"]], check=True, timeout=60)
            t_up = time.monotonic()
            wait_for(lambda: len(load.since(t_up, 200)) >= 20, 30, what="recovery after the restart")
            wait_for(lambda: gw.admin_request("GET", "/readyz").status == 200, 30,
                     what="/readyz 200 after the restart")
            t_recovered = min(r[0] for r in load.since(t_up, 200))
        finally:
            load.stop()

        statuses = {r[2] for r in load.results}
        self.assertTrue(statuses <= {200, 503}, "unexpected answers %s\n%s" % (statuses, self.gw_log()))
        # no key ran twice: fresh keys, and none was retried within its lease
        counted = [r[1] for r in load.results]
        twice = [k for k in counted if up.count(k) > 1]
        self.assertEqual(twice, [])
        print("recovered %.2fs after the server was back; %d requests, %d 503"
              % (t_recovered - t_up, len(load.results), len(load.since(0, 503))))

        # a client retrying its 503s now gets each executed at most once
        failed = [r[1] for r in load.results if r[2] == 503][:20]
        for key in failed:
            # each gateway worker has its own connections, back on its own
            # backoff (at most 2s): a retry may still meet one that is not
            r = wait_for(lambda: (lambda r: r if r.status != 503 else None)(
                gw.request("POST", "/orders", body=b"{}", key=key)), 10,
                interval=0.05, what="a retry of %s past the 503s" % key)
            # 409: the claim was taken before the outage cut the answer; its
            # lease still runs, so the retry waits rather than runs it again
            self.assertIn(r.status, (200, 409), "%s: %r" % (key, r))
            self.assertLessEqual(up.count(key), 1, key)
        health = gw.admin_request("GET", "/healthz")
        self.assertEqual(health.status, 200, repr(health))


if __name__ == "__main__":
    main()
