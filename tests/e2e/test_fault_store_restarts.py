"""test_fault_store_restarts.py - the store crashes while answers arrive
(issue 16): Redis killed with SIGKILL and restarted ten times under load,
PostgreSQL stopped with `pg_ctl -m immediate` and started ten times under
load. An upstream answer that arrives while the store is away must not be
lost: the gateway makes it durable in its spool (--spool) before the client
gets it, replays it from there, and drains it into the store once the store
answers.

After each run, with the store up: every acknowledged answer (a 2xx a client
got) replays identically through the gateway and through a second, fresh
gateway on the same store (its spool is empty: the first one's drained into
the store), again once every lease of the run has ended, and the upstream's
log shows no execution of a key after its client had its acknowledged
answer. Plus the minimal case: Redis killed while the upstream runs, back
after the client has its 201: an immediate retry replays (not 409), and so
does one after --lock-ttl, with the upstream run once.

Redis runs with appendfsync always; PostgreSQL with fsync on. Runs itself
under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is unset.
"""

import os
import pwd
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402

if __name__ == "__main__":
    pg_server.under_postgres(__file__)

import faults  # noqa: E402
from harness import GatewayTestCase, main, wait_for  # noqa: E402
from redis_server import RedisServer  # noqa: E402

CYCLES = 10
LOCK_TTL = 8.0  # longer than any outage here: no lease of the run ends mid-run
GW_ARGS = ("--workers", "2", "--lock-ttl", "8s", "--upstream-timeout", "4s")


def pg_stop_immediate():
    """`pg_ctl -m immediate stop` on the with-postgres.sh server: no
    shutdown checkpoint, connections cut, crash recovery at the next start."""
    data = os.path.join(os.path.dirname(os.environ["IDEM_TEST_PG_STOP"]), "data")
    argv = [os.path.join(os.environ["IDEM_TEST_PG_BIN"], "pg_ctl"), "-D", data,
            "-m", "immediate", "-w", "-t", "60", "stop"]
    if os.geteuid() == 0:  # pg_ctl refuses root: run it as the cluster's owner
        argv = ["runuser", "-u", pwd.getpwuid(os.stat(data).st_uid).pw_name, "--"] + argv
    subprocess.run(argv, check=True, timeout=90, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def pg_start():
    subprocess.run([os.environ["IDEM_TEST_PG_START"]], check=True, timeout=90)


class StoreRestarts(GatewayTestCase):

    def restarts_under_load(self, store, stop_store, start_store, label, ctx):
        up = self.start_upstream()
        gw = self.start_gateway(up, *GW_ARGS, store=store, admin=True)
        load = faults.Load(gw.port, clients=6, prefix=label).start()
        self.addCleanup(load.join)
        t_back = time.monotonic()
        for i in range(CYCLES):
            wait_for(lambda: load.acked_since(t_back) >= 10, 60,
                     what="10 answers acknowledged before outage %d" % (i + 1))
            t_down = time.monotonic()
            stop_store()
            # the outage is seen by the clients (503s or refused retries)
            wait_for(lambda: load.since(t_down, lambda s: s not in (200, 201)) >= 3, 30,
                     what="the clients to see outage %d" % (i + 1))
            start_store()
            t_back = time.monotonic()
        wait_for(lambda: load.acked_since(t_back) >= 10, 60, what="answers after the last restart")
        self.assertTrue(load.join(), "clients hung\n" + ctx())
        t_end = time.monotonic()

        left = faults.wait_spool_empty(gw, 30)
        writes = faults.metric(gw, "idem_spool_writes_total")
        drained = faults.metric(gw, "idem_spool_drained_total")
        complete_fail = faults.metric(gw, "idem_store_complete_failures_total")
        fresh = self.start_gateway(up, *GW_ARGS, store=store, admin=True)
        v1 = faults.verify_acked(load, [("gateway", gw.port), ("fresh gateway", fresh.port)])
        # once every lease of the run has ended, a key whose answer is
        # missing from the store would be taken over and run again
        wait_for(lambda: time.monotonic() > t_end + LOCK_TTL + 0.5, LOCK_TTL + 5,
                 what="the leases of the run to end")
        v2 = faults.verify_acked(load, [("fresh gateway after --lock-ttl", fresh.port)])
        rerun = faults.reruns(load, up)
        dups = load.dups_different()
        print("\n  %s, %d restarts: %s" % (label, CYCLES, load.summary()))
        print("  spooled (idem_spool_writes_total) %s, drained %s, left %s; "
              "idem_store_complete_failures_total %s"
              % (faults.fmt(writes), faults.fmt(drained), faults.fmt(left), faults.fmt(complete_fail)))
        print("  " + v1.text("replays"))
        print("  " + v2.text("after --lock-ttl"))
        print("  acknowledged keys run again: %d; duplicates answered otherwise: %d"
              % (len(rerun), len(dups)))
        detail = ("missing %r\ndifferent %r\nafter lock-ttl %r\nrun again %r\nduplicates %r\n%s"
                  % (v1.missing[:8], v1.different[:8], v2.failures()[:8], rerun[:8], dups[:8], ctx()))
        self.assertGreater(v1.acked, 10 * CYCLES, detail)
        self.assertEqual(len(v1.failures()), 0, "acknowledged answers not replayed as they were "
                         "acknowledged (%s)\n%s" % (v1.text("replays"), detail))
        self.assertEqual(len(v2.failures()), 0, "after --lock-ttl: " + detail)
        self.assertEqual(len(rerun), 0, "acknowledged keys executed again\n" + detail)
        self.assertEqual(len(dups), 0, "duplicates answered otherwise\n" + detail)
        self.assertEqual(left, 0, "idem_spool_entries after the run (None: not exported)\n" + ctx())

    def test_redis_sigkill_and_restart_under_load(self):
        redis = RedisServer(aof=True).start()
        self.addCleanup(redis.cleanup)
        self.restarts_under_load(redis.uri, redis.kill, redis.start, "redis",
                                 lambda: self.gw_log() + "\n--- redis log ---\n" + redis.log())

    def test_postgres_immediate_stop_and_start_under_load(self):
        if not os.environ.get("IDEM_TEST_PG_STOP") or not os.environ.get("IDEM_TEST_PG_START"):
            self.skipTest("needs tests/support/with-postgres.sh (IDEM_TEST_PG_STOP/START)")
        down = [False]

        def stop():
            down[0] = True
            pg_stop_immediate()

        def start():
            pg_start()
            down[0] = False
        # a failure mid-outage leaves the server up for the tests after this one
        self.addCleanup(lambda: down[0] and pg_start())
        uri = os.environ["IDEM_TEST_PG_URI"] + "?migrate=1"
        self.restarts_under_load(uri, stop, start, "pg", self.gw_log)

    def test_redis_killed_while_the_upstream_runs(self):
        # the minimal case of the issue: the upstream takes 1.5 s, Redis dies
        # once the request has been claimed, and is back once the client has
        # its answer
        redis = RedisServer(aof=True).start()
        self.addCleanup(redis.cleanup)
        up = self.start_upstream()
        gw = self.start_gateway(up, "--lock-ttl", "3s", "--upstream-timeout", "2500ms",
                                store=redis.uri, admin=True)
        key, body = "minimal", b'{"order": "minimal"}'
        hdrs = {"X-Test-Delay-Ms": "1500", "X-Test-Status": "201"}
        got = {}

        def client():
            got["r"] = gw.request("POST", "/orders", body=body, key=key, headers=hdrs, timeout=30)
        t = threading.Thread(target=client, daemon=True)
        t0 = time.monotonic()
        t.start()
        self.assertEqual(up.wait_count(key, 1), 1, self.gw_log())
        redis.kill()
        t.join(30)
        redis.start()
        ctx = lambda: self.gw_log() + "\n--- redis log ---\n" + redis.log()  # noqa: E731
        first = got.get("r")
        self.assertIsNotNone(first, "no answer\n" + ctx())
        self.assertEqual(first.status, 201, "%r\n%s" % (first, ctx()))
        self.assertFalse(first.replayed)
        spooled = faults.metric(gw, "idem_spool_entries")

        def retry():
            # a store client still reconnecting answers 503: retry past it
            r = wait_for(lambda: (lambda r: r if r.status != 503 else None)(
                gw.request("POST", "/orders", body=body, key=key, headers=hdrs)), 20,
                interval=0.05, what="an answer other than 503")
            return r
        r = retry()
        print("\n  minimal: the client got %d; idem_spool_entries then %s; an immediate retry got "
              "%d (replayed %s)" % (first.status, faults.fmt(spooled), r.status, r.replayed))
        self.assertNotEqual(r.status, 409, "an immediate retry is busy: the answer the client "
                            "got was neither spooled nor stored\n%r\n%s" % (r, ctx()))
        self.assertEqual((r.status, r.replayed, r.body), (201, True, first.body), ctx())
        wait_for(lambda: time.monotonic() > t0 + 3.5, 10, what="--lock-ttl to pass")
        r = retry()
        self.assertEqual((r.status, r.replayed, r.body), (201, True, first.body),
                         "after --lock-ttl (upstream ran %d times)\n%s" % (up.count(key), ctx()))
        self.assertEqual(up.count(key), 1, ctx())
        # and the answer is in the store itself now, not only in the spool
        rec = wait_for(lambda: (lambda r: r.json() if r.status == 200 and
                                r.json().get("state") == "completed" else None)(
            gw.admin_request("GET", "/keys/" + key)), 20, what="the record completed in Redis")
        self.assertEqual(rec.get("fence"), 1, rec)
        self.assertEqual(faults.wait_spool_empty(gw, 20), 0, ctx())


if __name__ == "__main__":
    main()
