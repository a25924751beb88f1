"""test_consume_redis_load.py - `idem consume` on Redis Streams under load
and failures: 10,000 keys, 10% of them published twice, three consumers on
one group, a handler failing 10% of first attempts with 503, and
  - one consumer killed with SIGKILL every 2 s and restarted (lmdb: store);
  - the broker's redis-server killed and restarted mid-run;
  - the store's redis-server (a second one) killed and restarted mid-run.
Each run ends with every entry acked (XPENDING empty, no lag), no dead
letters, and every key having reached the handler as a success; where no
consumer died, exactly once. IDEM_CONSUME_LOAD_KEYS=N changes the size.
"""

import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import wait_for  # noqa: E402
from consume_harness import Consumer  # noqa: E402
from redis_server import RedisServer  # noqa: E402
from test_consume_redis import GROUP, STREAM, ConsumeCase  # noqa: E402

NKEYS = int(os.environ.get("IDEM_CONSUME_LOAD_KEYS", "10000"))
ARGS = ["--max-deliveries", "20", "--concurrency", "32"]


class Load(ConsumeCase):
    def setUp(self):
        super().setUp()
        self.h.fail_first_fraction = 0.10
        rnd = random.Random(13)
        self.keys = ["key-%05d" % i for i in range(NKEYS)]
        twice = set(rnd.sample(self.keys, NKEYS // 10))
        entries = []
        for k in self.keys:
            e = {"message_id": k, "body": '{"order":"%s","amount":%d}' % (k, len(k))}
            entries.append(e)
            if k in twice:
                entries.append(dict(e))
        rnd.shuffle(entries)
        self.entries = entries

    def succeeded(self):
        counts = self.h.success_counts()
        return sum(1 for k in self.keys if counts.get(k, 0) >= 1)

    def run_to_the_end(self, timeout=240):
        wait_for(lambda: self.succeeded() == NKEYS and self.settled(), timeout, interval=0.2,
                 what="every key handled and every entry acked (%d of %d keys)"
                 % (self.succeeded(), NKEYS))

    def check_counts(self, exactly_once=True):
        counts = self.h.success_counts()
        missing = [k for k in self.keys if counts.get(k, 0) == 0]
        self.assertEqual(missing, [], "keys never handled")
        self.assertEqual(self.r.pending(STREAM, GROUP), 0)
        self.assertEqual(self.r.lag(STREAM, GROUP), 0)
        self.assertEqual(self.dead(), [], "nothing should be dead-lettered")
        self.assertEqual(self.r.command("XLEN", STREAM), len(self.entries))
        twice = {k: [a["fence"] for a in self.h.attempts(k) if a["status"] == 200]
                 for k in self.keys if counts[k] > 1}
        for k, fences in twice.items():
            # a second success only ever comes from a takeover: a higher fence
            self.assertEqual(len(set(fences)), len(fences), (k, fences))
        if exactly_once:
            self.assertEqual(twice, {}, "keys that reached the handler twice")
        failed_first = sum(1 for k in self.keys if self.h.attempts(k)[0]["status"] == 503)
        self.assertGreater(failed_first, NKEYS // 20)
        return twice

    def three_consumers(self, store, extra=()):
        return [self.consumer(*(ARGS + list(extra)), store=store) for _ in range(3)]

    def test_sigkill_every_two_seconds(self):
        cs = self.three_consumers("lmdb:%s/store" % self.tmp)
        self.publish(self.entries)
        stop = threading.Event()
        kills = []

        def killer():
            rnd = random.Random(7)
            while not stop.wait(2.0):
                c = rnd.choice(cs)
                c.kill()
                kills.append(time.monotonic())
                c.start()

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        try:
            self.run_to_the_end()
        finally:
            stop.set()
            t.join()
        twice = self.check_counts(exactly_once=False)
        print("\n  %d kills; %d of %d keys ran twice (a consumer killed between the handler's "
              "answer and its durable record: taken over with a higher fence)"
              % (len(kills), len(twice), NKEYS), file=sys.stderr)
        self.assertGreaterEqual(len(kills), 2)
        self.assertLessEqual(len(twice), len(kills) * 32)

    def test_broker_restart_mid_run(self):
        self.three_consumers("lmdb:%s/store" % self.tmp)
        self.publish(self.entries)
        wait_for(lambda: self.succeeded() >= NKEYS // 4, 120, what="a quarter done")
        self.redis.kill()
        time.sleep(1.0)  # the outage (not a wait for a condition)
        self.redis.start()
        self.run_to_the_end()
        self.check_counts(exactly_once=True)
        for c in self.consumers:
            self.assertIn("connected again", c.stderr())

    def test_store_outage_mid_run(self):
        store = RedisServer(aof=True).start()
        self.addCleanup(store.cleanup)
        self.three_consumers(store.uri, extra=["--lock-ttl", "8s"])
        self.publish(self.entries)
        wait_for(lambda: self.succeeded() >= NKEYS // 4, 120, what="a quarter done")
        store.kill()
        time.sleep(1.5)  # the outage (not a wait for a condition)
        store.start()
        self.run_to_the_end()
        self.check_counts(exactly_once=True)
        self.assertTrue(any("store_error" in c.stderr() or "answers again" in c.stderr()
                            for c in self.consumers))


if __name__ == "__main__":
    unittest.main(verbosity=2)
