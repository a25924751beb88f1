"""test_pg_spool_reclaim.py - an answer that waited in the spool through an
outage longer than its record's retention is kept under the fence the drain
claims for it, even when the store fails again between that claim and the
complete: the next drain round completes it under that fence, instead of
finding the key held by its own claim and dropping the answer that the
client already has.

Runs itself under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is
unset. The second failure is a trigger that refuses, while the test wants,
the complete of the key under a fence of 2 or more (the drain's claim).
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402

if __name__ == "__main__":
    pg_server.under_postgres(__file__)

from harness import GatewayTestCase, main, run_idem, wait_for  # noqa: E402

KEY = "spooled-reclaim"


def spool_entries(gw):
    m = re.search(r"^idem_spool_entries (\d+)", gw.admin_request("GET", "/metrics").body.decode(), re.M)
    return int(m.group(1)) if m else -1


class SpoolReclaim(GatewayTestCase):

    def migrated_store(self):
        uri = os.environ["IDEM_TEST_PG_URI"]
        rc, out, err = run_idem(["migrate", "--store", uri])
        self.assertEqual(rc, 0, err)
        return uri

    def spooled_answer(self, gw, up, key):
        """key's request through gw, with PostgreSQL stopped while the upstream
        runs it: the answer goes to gw's spool. Returns that answer and when
        the store went down (time.monotonic())."""
        answer = {}
        t = threading.Thread(target=lambda: answer.setdefault("r", gw.request(
            "POST", "/pay", body=b"{}", key=key, headers={"X-Test-Delay-Ms": "800"}, timeout=30)))
        t.start()
        wait_for(lambda: up.count(key) == 1, 10, what="the request at the upstream")
        subprocess.run([os.environ["IDEM_TEST_PG_STOP"]], check=True, timeout=60)
        t_down = time.monotonic()
        t.join(30)
        r = answer["r"]
        self.assertEqual(r.status, 200, "%r\n%s" % (r, self.gw_log()))
        return r, t_down

    def test_a_reclaimed_entry_survives_a_failed_complete(self):
        uri = self.migrated_store()
        pg_server.psql("DROP TABLE IF EXISTS blip; CREATE TABLE blip(on_ boolean); INSERT INTO blip VALUES (true);")
        pg_server.psql("CREATE OR REPLACE FUNCTION blip() RETURNS trigger LANGUAGE plpgsql AS $$ "
                       "BEGIN IF (SELECT on_ FROM blip) THEN RAISE EXCEPTION 'store blip'; END IF; "
                       "RETURN NEW; END $$;")
        pg_server.psql("CREATE TRIGGER blip BEFORE UPDATE ON idem_records FOR EACH ROW WHEN "
                       "(NEW.key = '%s' AND NEW.state <> 1 AND NEW.fence >= 2) EXECUTE FUNCTION blip();" % KEY)
        self.addCleanup(pg_server.psql, "DROP TRIGGER IF EXISTS blip ON idem_records")
        up = self.start_upstream()
        # a processing record is kept max(ttl, 2 leases): 3s here; no background
        # sweep, so the expired record stays and the drain's claim counts on (fence 2)
        gw = self.start_gateway(up, "--lock-ttl", "1s", "--ttl", "3s", "--upstream-timeout", "1s",
                                "--workers", "1", store=uri + "?timeout=1s&sweep_interval=off",
                                admin=True)
        r1, t_down = self.spooled_answer(gw, up, KEY)
        self.assertEqual(spool_entries(gw), 1, self.gw_log())
        # away past the processing record's retention: the drain's complete is stale,
        # its claim takes the key again (fence 2) and that complete fails once more
        time.sleep(max(0.0, 4.0 - (time.monotonic() - t_down)))
        subprocess.run([os.environ["IDEM_TEST_PG_START"]], check=True, timeout=60)
        wait_for(lambda: pg_server.psql("SELECT fence FROM idem_records WHERE key = '%s'" % KEY) == "2",
                 15, what="the drain's claim of the key (fence 2)")
        time.sleep(1.0)  # a few drain rounds while the complete fails
        pg_server.psql("UPDATE blip SET on_ = false")  # the store is well again
        wait_for(lambda: spool_entries(gw) == 0, 15, what="the spool drained")
        r2 = gw.request("POST", "/pay", body=b"{}", key=KEY, timeout=10)
        self.assertEqual(r2.status, 200, "the answer the client got was lost: %r\n%s" % (r2, self.gw_log()))
        self.assertTrue(r2.replayed, repr(r2))
        self.assertEqual(r2.body, r1.body)
        self.assertEqual(up.count(KEY), 1)
        self.assertEqual(pg_server.psql("SELECT state, fence FROM idem_records WHERE key = '%s'" % KEY), "2|2")

    def test_a_spooled_answer_another_gateway_ran_again_is_dropped_with_a_line(self):
        """The window the README admits: the store away past the lease, another
        gateway takes the key and keeps its answer before this one drains. The
        entry then meets a replay of that other run's answer: dropped, and said."""
        uri = self.migrated_store()
        key = "spooled-rerun"
        up = self.start_upstream()
        flags = ("--lock-ttl", "1s", "--upstream-timeout", "1s", "--workers", "1")
        gw1 = self.start_gateway(up, *flags, store=uri + "?timeout=1s", admin=True)
        gw2 = self.start_gateway(up, *flags, store=uri + "?timeout=1s", admin=True)
        r1, _ = self.spooled_answer(gw1, up, key)
        gw1.signal(signal.SIGSTOP)  # paused: it cannot drain before gw2 runs the key again
        self.addCleanup(lambda: gw1.alive() and gw1.signal(signal.SIGCONT))
        time.sleep(1.5)
        subprocess.run([os.environ["IDEM_TEST_PG_START"]], check=True, timeout=60)
        r2 = wait_for(lambda: (lambda r: r if r.status == 200 else None)(
            gw2.request("POST", "/pay", body=b"{}", key=key, timeout=10)), 20, interval=0.1,
            what="the key run again at gw2")
        self.assertEqual(up.count(key), 2)
        self.assertNotEqual(r2.body, r1.body)
        gw1.signal(signal.SIGCONT)
        wait_for(lambda: spool_entries(gw1) == 0, 20, what="gw1's spool drained")
        wait_for(lambda: "another request ran it again (fence 2)" in gw1.stderr(), 5,
                 what="the dropped entry said on stderr:\n" + gw1.stderr()[-2000:])

    def test_a_spooled_answer_waits_while_another_request_holds_the_key(self):
        """Another gateway holds the key when this one drains (it took the key
        over after the lease and is still running it): the entry waits, and
        once that run releases the key (a 500) this answer is kept, so a
        retry anywhere replays the answer the first client got."""
        uri = self.migrated_store()
        key = "spooled-busy"
        up = self.start_upstream()
        gw1 = self.start_gateway(up, "--lock-ttl", "1s", "--upstream-timeout", "1s",
                                 "--workers", "1", store=uri + "?timeout=1s", admin=True)
        gw2 = self.start_gateway(up, "--lock-ttl", "10s", "--upstream-timeout", "8s",
                                 "--workers", "1", store=uri + "?timeout=1s", admin=True)
        r1, _ = self.spooled_answer(gw1, up, key)
        gw1.signal(signal.SIGSTOP)  # it cannot drain before gw2 holds the key
        self.addCleanup(lambda: gw1.alive() and gw1.signal(signal.SIGCONT))
        subprocess.run([os.environ["IDEM_TEST_PG_START"]], check=True, timeout=60)
        second = {}

        def run_at_gw2():  # a takeover once the lease is over; it fails and releases
            while True:
                r = gw2.request("POST", "/pay", body=b"{}", key=key, timeout=30,
                                headers={"X-Test-Delay-Ms": "3000", "X-Test-Status": "500"})
                if r.status not in (409, 503):
                    second["r"] = r
                    return
                time.sleep(0.1)
        t2 = threading.Thread(target=run_at_gw2)
        t2.start()
        wait_for(lambda: up.count(key) == 2, 20, what="gw2 running the key")
        gw1.signal(signal.SIGCONT)  # drains while gw2 holds the key
        t2.join(30)
        self.assertEqual(second["r"].status, 500, self.gw_log())
        wait_for(lambda: spool_entries(gw1) == 0, 20, what="gw1's spool drained")
        r3 = gw2.request("POST", "/pay", body=b"{}", key=key, timeout=10)
        self.assertTrue(r3.replayed, "%r\n%s" % (r3, gw1.stderr()[-2000:]))
        self.assertEqual(r3.body, r1.body)
        self.assertEqual(up.count(key), 2)


if __name__ == "__main__":
    main()
