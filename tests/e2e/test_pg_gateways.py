"""test_pg_gateways.py - idem serve on PostgreSQL: the schema gate at start,
and three gateways on one database executing each key once.

Runs itself under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is
unset (a throwaway server in a temp dir).
"""

import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402

if __name__ == "__main__":
    pg_server.under_postgres(__file__)

from harness import GatewayTestCase, main, run_idem  # noqa: E402
from pg_server import psql  # noqa: E402


def fresh_database(name):
    psql("DROP DATABASE IF EXISTS %s" % name)
    psql("CREATE DATABASE %s" % name)
    base = os.environ["IDEM_TEST_PG_URI"]
    return base[:base.rindex("/") + 1] + name


class PostgresGateways(GatewayTestCase):

    def test_missing_schema_refuses_to_start_until_migrated(self):
        uri = fresh_database("idem_gate")
        up = self.start_upstream()
        gw = self.start_gateway(up, store=uri, start=False)
        with self.assertRaises(RuntimeError) as cm:
            gw.start()
        self.assertIn("idem migrate", str(cm.exception))
        rc, out, err = run_idem(["migrate", "--store", uri])
        self.assertEqual(rc, 0, err)
        self.assertIn("schema created", out)
        rc, out, err = run_idem(["migrate", "--store", uri, "--check"])
        self.assertEqual(rc, 0, err)
        gw.start()
        resp = gw.request("POST", "/pay", body=b"{}", key="after-migrate")
        self.assertEqual(resp.status, 200, self.gw_log())

    def test_older_schema_is_refused_too(self):
        uri = fresh_database("idem_old")
        self.assertEqual(run_idem(["migrate", "--store", uri])[0], 0)
        psql("DELETE FROM idem_schema", uri)  # as if migrated by nothing yet
        self.assertEqual(run_idem(["migrate", "--store", uri, "--check"])[0], 1)
        gw = self.start_gateway(self.start_upstream(), store=uri, start=False)
        with self.assertRaises(RuntimeError) as cm:
            gw.start()
        self.assertIn("idem migrate", str(cm.exception))
        # told to migrate: migrate=1 in the URI, over the tables left behind
        gw.store = uri + "?migrate=1"
        gw.start()
        self.assertNotIn("NOTICE", gw.stderr())
        # migrate over the tables left behind says nothing of them
        psql("DELETE FROM idem_schema", uri)
        rc, out, err = run_idem(["migrate", "--store", uri])
        self.assertEqual(rc, 0, err)
        self.assertNotIn("NOTICE", err)

    def test_server_notices_are_logged_on_one_line(self):
        # a WARNING from the database (here a trigger of the operator's) is
        # libpq's notice: the gateway logs it, one line, naming postgres
        uri = fresh_database("idem_notice")
        self.assertEqual(run_idem(["migrate", "--store", uri])[0], 0)
        psql("CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
             "RAISE WARNING 'audit: claimed %', NEW.key USING DETAIL = E'two\\nlines'; "
             "RETURN NEW; END $$; CREATE TRIGGER audit BEFORE INSERT ON idem_records "
             "FOR EACH ROW EXECUTE FUNCTION audit()", uri)
        gw = self.start_gateway(self.start_upstream(), store=uri)
        self.assertEqual(gw.request("POST", "/pay", body=b"{}", key="noticed-1").status, 200,
                         self.gw_log())
        lines = [ln for ln in gw.stderr().splitlines() if "audit: claimed noticed-1" in ln]
        self.assertEqual(len(lines), 1, self.gw_log())
        self.assertTrue(lines[0].startswith("idem: postgres: WARNING:"), gw.stderr())

    def test_keys_list_without_a_limit_or_scope(self):
        # across every scope, with no --limit, list asks for everything at
        # once: a LIMIT that must not wrap to a negative number
        uri = fresh_database("idem_keys")
        self.assertEqual(run_idem(["migrate", "--store", uri])[0], 0)
        gw = self.start_gateway(self.start_upstream(), store=uri)
        for k in ("pg-b", "pg-a", "pg-c"):
            self.assertEqual(gw.request("POST", "/pay", body=b"{}", key=k).status, 200)
        for args in ([], ["pg-a"], ["--limit", "2"]):
            rc, out, err = run_idem(["keys", "list", "--store", uri] + args)
            self.assertEqual(rc, 0, (args, err))
            want = {(): ["pg-a", "pg-b", "pg-c"], ("pg-a",): ["pg-b", "pg-c"],
                    ("--limit", "2"): ["pg-a", "pg-b"]}[tuple(args)]
            self.assertEqual([json.loads(line)["key"] for line in out.splitlines()], want, args)

    def test_three_gateways_execute_each_key_once(self):
        uri = fresh_database("idem_three")
        up = self.start_upstream()
        # all three migrate on start, at once: the advisory lock serializes them
        gws = [self.start_gateway(up, "--wait", "10s", store=uri + "?migrate=1", start=False)
               for _ in range(3)]
        starters = [threading.Thread(target=g.start) for g in gws]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        for g in gws:
            self.assertTrue(g.alive(), self.gw_log())

        keys = ["order-%d" % i for i in range(20)]
        results = []
        lock = threading.Lock()

        def send(gw, key):
            # a slow upstream, so the duplicates overlap the first
            r = gw.request("POST", "/orders", body=b'{"n":1}', key=key,
                           headers={"X-Test-Delay-Ms": "150"})
            with lock:
                results.append((key, r))

        threads = [threading.Thread(target=send, args=(g, k))
                   for k in keys for g in gws for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        self.assertEqual(len(results), len(threads))
        for key in keys:
            self.assertEqual(up.count(key), 1, "key %s executed %d times\n%s"
                             % (key, up.count(key), self.gw_log()))
        execs = {}
        for key, r in results:
            self.assertEqual(r.status, 200, "%s: %r\n%s" % (key, r, self.gw_log()))
            execs.setdefault(key, set()).add(r.json()["exec"])
        for key, seen in execs.items():
            self.assertEqual(seen, {1}, key)  # everyone got the one execution
        # and every gateway replays it afterwards
        for g in gws:
            r = g.request("POST", "/orders", body=b'{"n":1}', key=keys[0])
            self.assertEqual(r.status, 200)
            self.assertTrue(r.replayed, repr(r))
        self.assertEqual(int(psql("SELECT count(*) FROM idem_records WHERE state = 2", uri)),
                         len(keys))


if __name__ == "__main__":
    main()
