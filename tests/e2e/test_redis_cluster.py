"""Gateways on a real Redis Cluster (3 primaries, 3 replicas,
cluster-node-timeout 1s, built by redis_cluster.py) through
redis+cluster://:

- two gateways, a storm of concurrent duplicates: every key runs once, and
  `idem keys list` reads them all back, merged from every primary;
- a slot migrated while requests run: a new key of the migrating slot is
  claimed on the target through ASK (it is there before the slot moved),
  and once the slot has moved the gateways' stale maps follow MOVED, and
  replay what the source had stored;
- a primary killed with SIGKILL mid-run: its slots answer 503, the others
  keep answering, and once its replica is promoted the gateways answer 200
  again by themselves;
- with wait_replicas=1, across that failover, no record whose answer was
  acknowledged is lost: every such key replays, none runs a second time;
- every node killed, then started again: 503s meanwhile, then 200s, the
  gateway never restarted.
"""

import json
import threading
import time

from harness import GatewayTestCase, LoadClients, main, run_idem, wait_for
from redis_cluster import RedisCluster, key_slot, record_name


def tagged(tag, n, start=0):
    """n keys of one slot: a record's hash tag ends at the key's first '}',
    so "TAG}-1", "TAG}-2"... all hash as "0:TAG" (record_name)."""
    return ["%s}-%d" % (tag, i) for i in range(start, start + n)]


def slot_of(key):
    return key_slot(record_name(key))


class Writers(LoadClients):
    """Clients sending fresh keys, one request each, noting every answer."""

    def __init__(self, gw, n, prefix):
        super().__init__(n)
        self.gw, self.prefix, self.next = gw, prefix, 0  # prefix "T}": all in T's slot
        self.answers = []  # (time, key, status)

    def run(self, i):
        while not self.stopping.is_set():
            with self.lock:
                key = "%s-%d" % (self.prefix, self.next)
                self.next += 1
            try:
                r = self.gw.request("POST", "/pay", body=b'{"amount": 3}', key=key, timeout=20)
                status = r.status
            except OSError:
                status = 0
            with self.lock:
                self.answers.append((time.monotonic(), key, status))

    def count(self, pred):
        with self.lock:
            return sum(1 for a in self.answers if pred(a))

    def snapshot(self):
        with self.lock:
            return list(self.answers)


class RedisClusterGateways(GatewayTestCase):
    def setUp(self):
        self.cluster = RedisCluster().start()
        self.addCleanup(self.cluster.cleanup)
        self.up = self.start_upstream()

    def ctx(self):
        logs = "".join("\n--- node %d log ---\n%s" % (n.port, n.log()[-800:])
                       for n in self.cluster.nodes)
        return self.gw_log() + logs

    def gateway(self, uri=None, *args):
        return self.start_gateway(self.up, "--workers", "2", *args,
                                  store=uri or self.cluster.uri)

    def test_duplicate_storm_over_two_gateways_runs_each_key_once(self):
        gws = [self.gateway(None, "--wait", "10s") for _ in range(2)]
        keys = ["storm-%d" % i for i in range(30)]
        # every primary gets keys
        self.assertEqual(len({self.cluster.primary_of(slot_of(k)).port for k in keys}), 3)
        results, lock = {}, threading.Lock()
        start = threading.Barrier(len(keys) * 6)

        def run(gw, key):
            start.wait(30)
            try:
                r = gw.request("POST", "/pay", body=b'{"amount": 5}', key=key,
                               headers={"X-Test-Delay-Ms": "200"})
            except Exception as e:  # reported with its key
                r = e
            with lock:
                results.setdefault(key, []).append(r)

        threads = [threading.Thread(target=run, args=(gw, k), daemon=True)
                   for k in keys for gw in gws for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for key in keys:
            rs = results[key]
            ctx = "key %s: %r\n%s" % (key, rs, self.ctx())
            self.assertEqual(self.up.count(key), 1, ctx)
            self.assertEqual([getattr(r, "status", r) for r in rs], [200] * 6, ctx)
            self.assertEqual(sum(1 for r in rs if not r.replayed), 1, ctx)
        # idem keys reads them back from every primary, in key order
        code, out, err = run_idem(["keys", "list", "--store", self.cluster.uri, "--limit", "100"])
        self.assertEqual(code, 0, err)
        listed = [json.loads(line) for line in out.splitlines() if line.strip()]
        self.assertEqual([r["key"] for r in listed], sorted(keys))
        self.assertEqual({r["state"] for r in listed}, {"completed"})
        code, out, err = run_idem(["keys", "list", "storm-5", "--store", self.cluster.uri,
                                   "--limit", "3"])
        self.assertEqual([json.loads(line)["key"] for line in out.splitlines()],
                         sorted(keys)[sorted(keys).index("storm-5") + 1:][:3])

    def test_slot_migrated_mid_run_follows_ask_then_moved(self):
        c = self.cluster
        slot = slot_of(tagged("mig", 1)[0])
        src = c.primary_of(slot)
        dst = next(p for p in (c.primary_of(s) for s in (0, 8000, 16383)) if p is not src)
        before, during = tagged("mig", 20), tagged("mig", 20, start=20)
        gws = [self.gateway() for _ in range(2)]
        for i, k in enumerate(before):
            self.assertEqual(gws[i % 2].request("POST", "/pay", body=b"{}", key=k).status, 200,
                             self.ctx())

        c.migrate_begin(slot, src, dst)
        # new keys while the slot is MIGRATING: not on the source, so it
        # answers ASK and the claim and complete run on the target
        for i, k in enumerate(during[:10]):
            r = gws[i % 2].request("POST", "/pay", body=b"{}", key=k)
            self.assertEqual(r.status, 200, self.ctx())
            self.assertEqual(dst.asking("EXISTS", record_name(k)), 1,
                             "%s not on the importing node: ASK not followed\n%s" % (k, self.ctx()))
            with self.assertRaisesRegex(RuntimeError, "^ASK "):  # the source has no such key
                src.command("EXISTS", record_name(k))
        # keys already on the source replay from it
        for k in before[:5]:
            r = gws[0].request("POST", "/pay", body=b"{}", key=k)
            self.assertEqual((r.status, r.replayed), (200, True), self.ctx())

        # the keys move while clients keep sending keys of that slot
        load = Writers(gws[1], 4, "mig}-load").start()
        self.addCleanup(load.stop)
        c.migrate_keys(slot, src, dst)
        c.migrate_end(slot, dst, target_first=False)  # the window of MOVED back and forth
        self.assertEqual(src.command("CLUSTER", "COUNTKEYSINSLOT", slot), 0)
        # the gateways still map the slot to the source: MOVED, then the target
        for i, k in enumerate(before + during[:10]):
            r = gws[i % 2].request("POST", "/pay", body=b"{}", key=k)
            self.assertEqual((r.status, r.replayed), (200, True), "%s\n%s" % (k, self.ctx()))
        for i, k in enumerate(during[10:]):
            self.assertEqual(gws[i % 2].request("POST", "/pay", body=b"{}", key=k).status, 200)
        self.assertTrue(load.stop(), "clients hung\n" + self.ctx())
        for k in before + during:
            self.assertEqual(self.up.count(k), 1, "%s ran %d times\n%s" % (k, self.up.count(k), self.ctx()))
        answers = load.snapshot()
        self.assertGreater(len(answers), 0)
        self.assertEqual({a[2] for a in answers}, {200}, self.ctx())

    def kill_a_primary(self, loads, victim_slot):
        """SIGKILL the primary of victim_slot under load; returns (victim, promoted, t_kill)."""
        c = self.cluster
        victim = c.primary_of(victim_slot)
        ok = lambda a: a[2] == 200  # noqa: E731
        wait_for(lambda: sum(l.count(ok) for l in loads) >= 60, 30, what="answers before the kill")
        c.kill(victim)
        t_kill = time.monotonic()
        promoted = c.wait_promoted(victim_slot, victim)
        return victim, promoted, t_kill

    def test_primary_killed_its_replica_promoted_gateways_recover(self):
        gws = [self.gateway() for _ in range(2)]
        loads = [Writers(gw, 3, "fo%d" % i).start() for i, gw in enumerate(gws)]
        for load in loads:
            self.addCleanup(load.stop)
        victim, promoted, t_kill = self.kill_a_primary(loads, slot_of(tagged("fo-after", 1)[0]))
        self.assertIsNot(promoted, victim)
        # the victim's slots were 503 for a while; the others kept going
        t_promoted = time.monotonic()
        for load in loads:
            wait_for(lambda: load.count(lambda a: a[0] > t_promoted + 0.5 and a[2] == 200) >= 50, 30,
                     what="200s after the promotion")
        # keys of the victim's slots answer 200 again on both, without a restart
        for i, gw in enumerate(gws):
            for k in tagged("fo-after", 5, start=5 * i):
                wait_for(lambda: gw.request("POST", "/pay", body=b"{}", key=k).status == 200, 20,
                         what="the failed-over slot back")
                self.assertEqual(self.up.count(k), 1)
        self.assertTrue(all([load.stop() for load in loads]), "clients hung\n" + self.ctx())
        answers = [a for load in loads for a in load.snapshot()]
        statuses = {a[2] for a in answers}
        self.assertTrue(statuses <= {200, 503}, "%r\n%s" % (statuses, self.ctx()))
        self.assertIn(503, statuses, "the kill was never seen\n" + self.ctx())
        for a in answers:
            if a[2] == 200:
                self.assertEqual(self.up.count(a[1]), 1, a)
        print("\n  %d answers: %d x 200, %d x 503; promoted %.1fs after the kill"
              % (len(answers), sum(a[2] == 200 for a in answers),
                 sum(a[2] == 503 for a in answers), t_promoted - t_kill))

    def test_an_idle_gateway_learns_a_failover_before_its_next_request(self):
        # no request reaches the victim's slots between the kill and the
        # promotion: the lost connections alone make each worker ask for the
        # map again (every few 100ms while a primary is away), so the first
        # requests after the promotion already go to the new primary
        gw = self.gateway(None, "--workers", "2")
        keys = tagged("idle-fo", 6)
        victim_slot = slot_of(keys[0])
        for k in tagged("idle-warm", 10):
            self.assertEqual(gw.request("POST", "/pay", body=b"{}", key=k).status, 200)
        c = self.cluster
        victim = c.primary_of(victim_slot)
        c.kill(victim)
        c.wait_promoted(victim_slot, victim)
        time.sleep(2)  # idle (not a wait for a condition): the map is re-asked meanwhile
        statuses = [gw.request("POST", "/pay", body=b"{}", key=k).status for k in keys]
        self.assertEqual(statuses, [200] * len(keys), self.ctx())

    def test_wait_replicas_loses_no_acknowledged_record_across_failover(self):
        uri = self.cluster.uri + "?wait_replicas=1&wait_timeout=500ms"
        gw = self.gateway(uri)
        load = Writers(gw, 6, "wr").start()
        self.addCleanup(load.stop)
        victim, promoted, _ = self.kill_a_primary([load], 0)
        # the killed node comes back as the new primary's replica: WAIT can
        # be satisfied on its slots again
        self.cluster.restart(victim)
        t_back = time.monotonic()
        wait_for(lambda: load.count(lambda a: a[0] > t_back and a[2] == 200) >= 60, 60,
                 what="200s after the old primary rejoined")
        self.assertTrue(load.stop(), "clients hung\n" + self.ctx())
        acked = [a[1] for a in load.snapshot() if a[2] == 200]
        victim_slots = [k for k in acked if self.cluster.primary_of(slot_of(k)) is promoted]
        self.assertGreater(len(victim_slots), 10, "no acknowledged key on the failed-over slots")
        lost = []
        for k in acked:
            r = gw.request("POST", "/pay", body=b'{"amount": 3}', key=k)
            if r.status != 200 or not r.replayed or self.up.count(k) != 1:
                lost.append((k, r.status, r.replayed, self.up.count(k)))
        print("\n  %d acknowledged records (%d on the failed-over primary's slots), %d lost"
              % (len(acked), len(victim_slots), len(lost)))
        self.assertEqual(lost, [], self.ctx())

    def test_whole_cluster_killed_and_restarted_gateway_recovers_by_itself(self):
        gw = self.gateway()
        load = Writers(gw, 4, "all").start()
        self.addCleanup(load.stop)
        wait_for(lambda: load.count(lambda a: a[2] == 200) >= 40, 30, what="answers before the outage")
        for n in self.cluster.nodes:
            n.kill()
        t_down = time.monotonic()
        # every slot fails fast: 503s, not hung requests
        wait_for(lambda: load.count(lambda a: a[0] > t_down + 0.5 and a[2] == 503) >= 40, 30,
                 what="503s with every node down")
        # same ports, dirs and nodes.conf: the cluster forms again
        for n in self.cluster.nodes:
            n.start()
        self.cluster.wait_ok()
        t_up = time.monotonic()
        wait_for(lambda: load.count(lambda a: a[0] > t_up and a[2] == 200) >= 40, 60,
                 what="200s after the cluster came back, without a gateway restart")
        self.assertTrue(load.stop(), "clients hung\n" + self.ctx())
        answers = load.snapshot()
        self.assertTrue({a[2] for a in answers} <= {200, 503}, self.ctx())
        for a in answers:
            if a[2] == 200:
                self.assertEqual(self.up.count(a[1]), 1, a)


if __name__ == "__main__":
    main()
