"""test_fault_gateway_kill.py - the gateway itself dies (issue 16).

- SIGKILL forty times under load on the embedded store, restarted each time
  on the same store and spool: no acknowledged answer is lost or changed,
  none runs again, also once the leases of the killed runs have ended.
- Answers spooled while Redis is away survive a SIGKILL of the gateway:
  restarted once Redis is back, it replays each as acknowledged, drains its
  spool into Redis, and the upstream ran each once.
- SIGTERM while Redis is away: the answers in flight go to the spool and to
  their clients, the process exits 0 (--drain-timeout 6s), the entries are
  kept: replayed by the next start while Redis is still away, drained once
  it is back.
- A spool that cannot be written (its tmpfs is full; not root: a path under
  a regular file) while the store fails at complete: the client gets 503,
  not an answer nothing keeps, and the lease holds (409, no second run).
"""

import os
import signal
import threading
import time

import faults
from harness import GatewayTestCase, main, wait_for
from redis_server import RedisServer

KILLS = 40


class GatewayKill(GatewayTestCase):

    def redis(self):
        rs = RedisServer(aof=True).start()
        self.addCleanup(rs.cleanup)
        self.rs = rs
        return rs

    def ctx(self):
        tail = ("\n--- redis log ---\n" + self.rs.log()[-1500:]) if getattr(self, "rs", None) else ""
        return self.gw_log() + tail

    def in_flight(self, gw, keys, delay_ms=1500):
        """Send a keyed POST per key, each from its own thread; the upstream
        holds each for delay_ms. Returns (threads, results: key -> Response
        or exception)."""
        results = {}

        def client(k):
            try:
                results[k] = gw.request("POST", "/orders/" + k, body=b'{"order": "%s"}' % k.encode(),
                                        key=k, timeout=60,
                                        headers={"X-Test-Delay-Ms": str(delay_ms), "X-Test-Status": "201"})
            except Exception as e:  # noqa: BLE001 - reported by the test
                results[k] = e
        ts = [threading.Thread(target=client, args=(k,), daemon=True) for k in keys]
        for t in ts:
            t.start()
        return ts, results

    def again(self, gw, k, retry=True):
        """k's request again; with retry, past 503s (store reconnecting)."""
        send = lambda: gw.request("POST", "/orders/" + k, body=b'{"order": "%s"}' % k.encode(),  # noqa: E731
                                  key=k, headers={"X-Test-Delay-Ms": "1500", "X-Test-Status": "201"})
        if not retry:
            return send()
        return wait_for(lambda: (lambda r: r if r.status != 503 else None)(send()), 30,
                        interval=0.05, what="an answer other than 503 for %s" % k)

    def test_sigkill_40_times_under_load(self):
        up = self.start_upstream()
        store = "lmdb:%s/store" % self.tempdir()
        # leases of the killed runs end soon, so their clients move on; the
        # upstream answers in under 60 ms, far inside the lease
        args = ("--workers", "2", "--lock-ttl", "1s", "--upstream-timeout", "1s")
        gw = self.start_gateway(up, *args, store=store, admin=True)
        spool = gw.spool_dir
        load = faults.Load(gw.port, clients=6, prefix="kill", delay_ms=(0, 40)).start()
        self.addCleanup(load.join)
        t_up = time.monotonic()
        for i in range(KILLS):
            wait_for(lambda: load.acked_since(t_up) >= 3, 60,
                     what="answers acknowledged before kill %d\n%s" % (i + 1, load.summary()))
            gw.kill()
            gw.restart()
            t_up = time.monotonic()
        self.assertEqual(gw.spool_dir, spool)
        wait_for(lambda: load.acked_since(t_up) >= 10, 60, what="answers after the last restart")
        self.assertTrue(load.join(), "clients hung\n" + self.ctx())
        t_end = time.monotonic()
        v1 = faults.verify_acked(load, [("restarted gateway", gw.port)])
        wait_for(lambda: time.monotonic() > t_end + 1.5, 5, what="the leases of the run to end")
        v2 = faults.verify_acked(load, [("after --lock-ttl", gw.port)])
        rerun = faults.reruns(load, up)
        print("\n  %d kills: %s" % (KILLS, load.summary()))
        print("  " + v1.text("replays"))
        print("  " + v2.text("after --lock-ttl"))
        print("  acknowledged keys run again: %d" % len(rerun))
        detail = ("missing %r\ndifferent %r\nafter lock-ttl %r\nrun again %r\n%s"
                  % (v1.missing[:8], v1.different[:8], v2.failures()[:8], rerun[:8],
                     self.ctx()[-3000:]))
        self.assertGreaterEqual(v1.acked, 3 * KILLS, detail)
        self.assertEqual(len(v1.failures()), 0, "acknowledged answers lost or changed\n" + detail)
        self.assertEqual(len(v2.failures()), 0, detail)
        self.assertEqual(len(rerun), 0, "acknowledged keys executed again\n" + detail)
        self.assertEqual(load.dups_different(), [], detail)

    def test_spooled_answers_survive_sigkill_and_drain_on_start(self):
        rs = self.redis()
        up = self.start_upstream()
        gw = self.start_gateway(up, "--workers", "2", store=rs.uri, admin=True)
        keys = ["spooled-%d" % i for i in range(6)]
        ts, results = self.in_flight(gw, keys)
        for k in keys:  # claimed, and the upstream is at work
            self.assertEqual(up.wait_count(k, 1), 1, self.ctx())
        rs.kill()
        for t in ts:
            t.join(60)
        acked = {k: r for k, r in results.items() if not isinstance(r, Exception) and r.status == 201}
        self.assertEqual(sorted(acked), keys, "%r\n%s" % (results, self.ctx()))
        spooled = faults.metric(gw, "idem_spool_entries")
        gw.kill()  # with the answers in its spool only
        rs.start()
        gw.restart()
        got = {k: self.again(gw, k) for k in keys}
        left = faults.wait_spool_empty(gw, 30)
        drained = faults.metric(gw, "idem_spool_drained_total")
        fresh = self.start_gateway(up, store=rs.uri)  # nothing in its spool
        via_fresh = {k: self.again(fresh, k) for k in keys}
        ok = [k for k in keys if (got[k].status, got[k].replayed, got[k].body) ==
              (201, True, acked[k].body)]
        ok_fresh = [k for k in keys if (via_fresh[k].status, via_fresh[k].replayed, via_fresh[k].body)
                    == (201, True, acked[k].body)]
        runs = {k: up.count(k) for k in keys}
        print("\n  %d acknowledged while Redis was away; idem_spool_entries before the kill %s, "
              "after the restart %s, drained %s; replayed as acknowledged %d, by a fresh gateway %d; "
              "upstream runs %r"
              % (len(acked), faults.fmt(spooled), faults.fmt(left), faults.fmt(drained), len(ok),
                 len(ok_fresh), runs))
        detail = "%r\n%r\n%s" % (got, via_fresh, self.ctx())
        self.assertEqual(ok, keys, "answers lost with the killed gateway\n" + detail)
        self.assertEqual(ok_fresh, keys, "answers not drained into Redis\n" + detail)
        self.assertEqual(runs, {k: 1 for k in keys}, detail)
        self.assertEqual(spooled, len(keys), "idem_spool_entries before the kill\n" + self.ctx())
        self.assertEqual(left, 0, "idem_spool_entries after the restart\n" + self.ctx())

    def test_sigterm_while_redis_is_away_keeps_the_spool(self):
        rs = self.redis()
        up = self.start_upstream()
        gw = self.start_gateway(up, "--workers", "2", "--drain-timeout", "6s",
                                store=rs.uri, admin=True)
        keys = ["term-%d" % i for i in range(4)]
        ts, results = self.in_flight(gw, keys)
        for k in keys:
            self.assertEqual(up.wait_count(k, 1), 1, self.ctx())
        rs.kill()
        gw.proc.send_signal(signal.SIGTERM)  # while the upstream still works on them
        try:
            rc = gw.wait_exit(30)  # --drain-timeout 6s: the 1.5s upstream ends well within it
        except Exception:
            gw.kill()
            self.fail("no exit 30s after SIGTERM with --drain-timeout 6s\n" + self.ctx())
        for t in ts:
            t.join(30)
        self.assertEqual(rc, 0, self.ctx())
        acked = {k: r for k, r in results.items() if not isinstance(r, Exception) and r.status == 201}
        self.assertEqual(sorted(acked), keys, "in-flight answers\n%r\n%s" % (results, self.ctx()))

        # the next start, Redis still away: the entries are there and replay
        gw.start()
        kept = faults.metric(gw, "idem_spool_entries")
        ready = gw.admin_request("GET", "/readyz")
        while_away = {k: self.again(gw, k, retry=False) for k in keys}
        ok_away = [k for k in keys if (while_away[k].status, while_away[k].replayed,
                                        while_away[k].body) == (201, True, acked[k].body)]
        rs.start()
        left = faults.wait_spool_empty(gw, 30)
        after = {k: self.again(gw, k) for k in keys}
        ok_after = [k for k in keys if (after[k].status, after[k].replayed, after[k].body) ==
                    (201, True, acked[k].body)]
        ready_after = wait_for(lambda: (lambda r: r if r.status == 200 else None)(
            gw.admin_request("GET", "/readyz")), 30, what="/readyz 200")
        runs = {k: up.count(k) for k in keys}
        print("\n  SIGTERM: exit %d, %d answers acknowledged; next start with Redis away: "
              "idem_spool_entries %s, replayed from the spool %d; Redis back: entries %s, "
              "replayed %d; upstream runs %r"
              % (rc, len(acked), faults.fmt(kept), len(ok_away), faults.fmt(left), len(ok_after), runs))
        detail = "%r\n%r\n%s" % (while_away, after, self.ctx())
        self.assertEqual(ok_away, keys, "not replayed from the kept spool while Redis is away\n" + detail)
        self.assertEqual(kept, len(keys), "idem_spool_entries at the next start\n" + detail)
        self.assertIn(b"spool: %d answers waiting for the store" % len(keys), ready.body,
                      "/readyz while the spool holds entries: %r" % ready)
        self.assertEqual(ok_after, keys, detail)
        self.assertEqual(runs, {k: 1 for k in keys}, detail)
        self.assertEqual(left, 0, self.ctx())
        self.assertEqual(ready_after.body, b"ready\n")

    def test_unwritable_spool_answers_503_and_keeps_the_lease(self):
        rs = self.redis()
        up = self.start_upstream()
        mnt = faults.mount_tmpfs(self, "1m", skip=False)
        if mnt is not None:
            spool = os.path.join(mnt, "spool")
            gw = self.start_gateway(up, "--workers", "1", "--spool", spool, store=rs.uri, admin=True)
            # the spool is open; now its filesystem has no page left for it
            how = "on a tmpfs filled with %d bytes" % faults.fill(os.path.join(mnt, "filler"))
        else:
            # not root: a spool under a regular file can never be written;
            # a gateway may refuse to start on it, never hand out what it
            # could not keep
            path = os.path.join(self.tempdir(), "file")
            open(path, "w").close()
            how = "under a regular file"
            gw = self.start_gateway(up, "--workers", "1", "--spool", os.path.join(path, "spool"),
                                    store=rs.uri, admin=True, start=False)
            try:
                gw.start()
            except RuntimeError as e:
                self.assertIn("spool", str(e))
                print("\n  serve refused a spool under a regular file: %s" % str(e).strip()[-200:])
                return
        ts, results = self.in_flight(gw, ["nospool"], delay_ms=1000)
        self.assertEqual(up.wait_count("nospool", 1), 1, self.ctx())
        rs.kill()
        ts[0].join(60)
        r = results.get("nospool")
        rs.start()
        print("\n  spool %s; the client got %r; idem_spool_writes_total %s"
              % (how, r, faults.fmt(faults.metric(gw, "idem_spool_writes_total"))))
        self.assertFalse(isinstance(r, Exception), "%r\n%s" % (r, self.ctx()))
        self.assertNotEqual(r.status, 201, "an answer handed out that neither the store nor the "
                            "spool kept\n%r\n%s" % (r, self.ctx()))
        self.assertProblem(r, 503, self.ctx())
        # the lease holds: a retry once Redis is back is busy, not run again
        again = self.again(gw, "nospool")
        self.assertEqual(again.status, 409, "%r\n%s" % (again, self.ctx()))
        self.assertEqual(up.count("nospool"), 1, self.ctx())


if __name__ == "__main__":
    main()
