"""consume_cases.py - the `idem consume` tests every broker runs, written
once against a small broker interface that each test file provides:

    class RedisCase(BrokerCase):
        def start_broker(self): ...            # the real server, in setUp; sets
                                               # self.broker_server (kill(), start())
        def from_uri(self, stream): ...        # --from
        def publish(self, entries, stream): ...  # entries: dicts of fields;
                                               # "body" is the body, "message_id"
                                               # the broker's message id
        def all_settled(self, stream): ...     # every message acked or dead
        def dead_letters(self, stream): ...    # [{"reason", "body", fields...}]
        def pending(self, stream): ...         # delivered, not yet settled

OutcomeTests holds the rows of the outcome table; LoadTests the 10,000-key
runs (IDEM_CONSUME_LOAD_KEYS=N changes the size).
"""

import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

from harness import finish_process, run_idem, wait_for
from consume_harness import Consumer, Handler, _HandlerServer, _H

STREAM = "orders"
NKEYS = int(os.environ.get("IDEM_CONSUME_LOAD_KEYS", "10000"))


class BrokerCase(unittest.TestCase):
    consumer_args = ["--lock-ttl", "3s", "--retry-delay", "200ms", "--max-retry-delay", "1s",
                     "--handler-timeout", "2s"]

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idem-consume-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.start_broker()
        self.h = Handler().start()
        self.addCleanup(self.h.stop)
        self.consumers = []

    def consumer(self, *args, store=None, admin=False, start=True, stream=STREAM):
        c = Consumer(self.from_uri(stream), self.h.url + "/messages",
                     store=store or "lmdb:%s/store" % self.tmp,
                     args=self.consumer_args + list(args), admin=admin)
        self.consumers.append(c)
        self.addCleanup(finish_process, self, c)
        if start:
            c.start()
        return c

    def stop_broker(self):
        self.broker_server.kill()

    def start_broker_again(self):
        self.broker_server.start()

    def restart_broker(self, outage):
        """SIGKILL the broker, leave it down for outage seconds, start it again."""
        self.broker_server.kill()
        time.sleep(outage)  # the outage (not a wait for a condition)
        self.broker_server.start()

    def wait_settled(self, timeout=60, stream=STREAM):
        wait_for(lambda: self.all_settled(stream), timeout, interval=0.1,
                 what="every message acked: " + "".join(c.stderr()[-2000:] for c in self.consumers))

    def record(self, key):
        rc, out, err = run_idem(["keys", "get", key, "--store", "lmdb:%s/store" % self.tmp])
        self.assertEqual(rc, 0, err)
        return json.loads(out)


class OutcomeTests:
    no_key_reason = "no message id"
    # whether the broker hands a message held past --lock-ttl to another
    # delivery (Redis's reclaim, NATS's AckWait); RabbitMQ does not
    takes_over_silent_consumers = True
    def test_runs_once_replays_and_acks(self):
        self.consumer()
        self.publish([{"message_id": "k1", "body": '{"amount":5}', "content-type": "application/json",
                       "tenant": "acme"}])
        self.wait_settled()
        self.assertEqual(self.h.successes("k1"), 1)
        a = self.h.attempts("k1")[0]
        self.assertEqual(a["fence"], "1")
        self.assertEqual(a["path"], "/messages")
        self.assertEqual(a["body"], b'{"amount":5}')
        self.assertEqual(a["headers"]["Content-Type"], "application/json")
        self.assertEqual(a["headers"]["X-Idem-Header-tenant"], "acme")
        self.assertEqual(a["headers"]["X-Idem-Deliveries"], "1")
        # republished with the same key and body: acked, the handler is not called
        self.publish([{"message_id": "k1", "body": '{"amount":5}'}])
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("k1")), 1)
        self.assertEqual(self.dead_letters(), [])
        rec = self.record("k1")
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["response"]["status"], 200)

    def test_mismatch_and_missing_key_go_to_dead_letters(self):
        self.consumer()
        self.publish([{"message_id": "k1", "body": "a"}])
        self.wait_settled()
        self.publish([{"message_id": "k1", "body": "b", "trace": "t1"}, {"body": "no key here"}])
        self.wait_settled()
        dead = self.dead_letters()
        self.assertEqual(len(dead), 2, dead)
        reasons = [d["reason"] for d in dead]
        self.assertTrue(any("another body" in r for r in reasons), reasons)
        self.assertTrue(any(self.no_key_reason in r for r in reasons), reasons)
        mism = [d for d in dead if "another body" in d["reason"]][0]
        self.assertEqual(mism["body"], b"b")
        self.assertEqual(mism["trace"], "t1")
        self.assertEqual(mism["message_id"], "k1")
        self.assertEqual(len(self.h.attempts("k1")), 1)

    def test_transient_failure_is_retried_with_a_higher_fence(self):
        self.h.fail_first = {"k1"}
        c = self.consumer(admin=True)
        self.publish([{"message_id": "k1", "body": "x"}])
        self.wait_settled()
        self.assertEqual([a["status"] for a in self.h.attempts("k1")], [503, 200])
        self.assertEqual([a["fence"] for a in self.h.attempts("k1")], ["1", "2"])
        self.assertEqual(self.h.attempts("k1")[1]["headers"]["X-Idem-Deliveries"], "2")
        status, metrics = c.admin_get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn('idem_messages_total{outcome="retry"} 1', metrics)
        self.assertIn('idem_messages_total{outcome="executed"} 1', metrics)
        # the lmdb: store's own counters, as serve shows them: the claim,
        # the release, the second claim and the complete were durable writes
        written = [l for l in metrics.splitlines() if l.startswith("idem_lmdb_ops_written_total ")]
        self.assertEqual(len(written), 1, metrics)
        self.assertGreaterEqual(int(written[0].split()[1]), 4)
        self.assertEqual(c.admin_get("/readyz")[0], 200)
        self.assertEqual(c.admin_get("/healthz"), (200, "ok\n"))

    def test_deterministic_4xx_is_kept(self):
        self.h.status = {"k1": 400, "k2": 422}
        self.consumer()
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k2", "body": "y"}])
        self.wait_settled()
        self.publish([{"message_id": "k1", "body": "x"}])
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("k1")), 1)
        self.assertEqual(len(self.h.attempts("k2")), 1)
        self.assertEqual(self.dead_letters(), [])

    def test_max_deliveries_marks_failed_and_dead_letters(self):
        self.h.fail_always = {"k1"}
        self.consumer("--max-deliveries", "3")
        self.publish([{"message_id": "k1", "body": "x", "trace": "t9"}])
        self.wait_settled()
        self.assertEqual([a["status"] for a in self.h.attempts("k1")], [500, 500, 500])
        dead = self.dead_letters()
        self.assertEqual(len(dead), 1)
        self.assertIn("answered 500 on delivery 3 of 3", dead[0]["reason"])
        self.assertEqual(dead[0]["trace"], "t9")
        self.assertEqual(dead[0]["deliveries"], "3")
        self.assertEqual(self.record("k1")["state"], "failed")

    def test_unreachable_handler_is_retried(self):
        self.h.stop()  # nothing listens: released, redelivered until it is back
        c = self.consumer("--max-deliveries", "1000", admin=True)
        port = self.h.port
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: c.metric('idem_messages_total{outcome="retry"}') >= 2, 20,
                 what="two failed deliveries")
        self.h = Handler()
        self.h._server = _HandlerServer(("127.0.0.1", port), _H)
        self.h._server.owner = self.h
        self.h.port = port
        threading.Thread(target=self.h._server.serve_forever, daemon=True).start()
        self.addCleanup(self.h.stop)
        self.wait_settled()
        self.assertEqual(self.h.successes("k1"), 1)

    def test_duplicate_in_flight_here_replays_when_the_first_ends(self):
        # one consumer, both copies fetched at once: the second waits for the
        # first here, not for the lease (60 s) to end
        self.h.delay = {"k1": 0.5}
        c = self.consumer("--lock-ttl", "60s", "--handler-timeout", "10s", admin=True)
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k1", "body": "x"}])
        self.wait_settled(30)
        self.assertEqual(len(self.h.attempts("k1")), 1)
        m = c.admin_get("/metrics")[1]
        self.assertIn('idem_messages_total{outcome="replayed"} 1', m)

    def test_store_outage_holds_the_message_without_counting_deliveries(self):
        # held here through five takeover times (--lock-ttl 1s): the broker
        # must neither hand it out again nor count deliveries towards
        # --max-deliveries 2, or it would end dead-lettered (or run twice)
        from redis_server import RedisServer
        store = RedisServer().start()
        self.addCleanup(store.cleanup)
        c = self.consumer("--lock-ttl", "1s", "--handler-timeout", "1s", "--max-deliveries", "2",
                          "--retry-delay", "1s", "--max-retry-delay", "4s",
                          store=store.uri, admin=True)
        store.kill()
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: c.metric('idem_messages_total{outcome="store_error"}') >= 1, 20,
                 what="the claim to fail while the store is down")
        time.sleep(5)  # the outage (not a wait for a condition)
        store.start()
        self.wait_settled(30)
        self.assertEqual([a["status"] for a in self.h.attempts("k1")], [200])
        self.assertEqual(self.h.attempts("k1")[0]["headers"].get("X-Idem-Deliveries"), "1")
        self.assertEqual(self.dead_letters(), [])
        self.assertEqual(c.metric('idem_messages_total{outcome="executed"}'), 1)

    def test_a_stale_answer_is_kept_when_the_key_is_free_again(self):
        # the first run outlasts its lease (--lock-ttl 2s, the handler takes
        # 5 s), so the broker hands the same message out again; that run
        # fails (503) and releases the key. The first run's answer then comes
        # back stale, and its ack settles the message: so it is kept under a
        # new claim, not dropped (the effect was done, and no run comes after)
        if not self.takes_over_silent_consumers:
            self.skipTest("the broker hands no message held here to another delivery")
        self.h.script = {"k1": [(200, 5.0), (503, 0)]}
        self.consumer("--lock-ttl", "2s", "--handler-timeout", "8s", "--max-deliveries", "10",
                      "--retry-delay", "2s", "--max-retry-delay", "2s")
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: len(self.h.attempts("k1")) >= 2, 30, what="the first run's stale answer")
        self.wait_settled(60)
        rec = self.record("k1")
        self.assertEqual(rec["state"], "completed", (rec, self.h.attempts("k1")))
        self.assertEqual(rec["response"]["status"], 200, rec)
        self.assertGreaterEqual(rec["fence"], 3, rec)  # claimed after the takeover's release
        self.assertEqual([a["status"] for a in self.h.attempts("k1")], [503, 200])
        self.assertEqual(self.dead_letters(), [])

    def test_a_stale_answer_is_not_acked_while_the_takeover_still_runs(self):
        # the first run outlasts its lease (2 s; it takes 3 s) and the broker
        # hands the message out again; that run is still at the handler when
        # the first answer comes back stale, so the re-claim finds the key
        # busy. An ack then would settle the message with no answer kept;
        # the takeover then fails (503) and releases the key: the message
        # must not be gone with the first run's effect done and no record
        if not self.takes_over_silent_consumers:
            self.skipTest("the broker hands no message held here to another delivery")
        self.h.script = {"k1": [(200, 3.0), (503, 2.0)]}
        self.consumer("--lock-ttl", "2s", "--handler-timeout", "8s", "--max-deliveries", "10",
                      "--retry-delay", "2s", "--max-retry-delay", "2s")
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: len(self.h.attempts("k1")) >= 2, 30, what="the takeover")
        self.wait_settled(60)
        rec = self.record("k1")
        self.assertEqual(rec["state"], "completed", (rec, self.h.attempts("k1")))
        self.assertEqual(rec["response"]["status"], 200, rec)
        fences = [a["fence"] for a in self.h.attempts("k1") if a["status"] == 200]
        self.assertEqual(len(set(fences)), len(fences), fences)
        self.assertEqual(self.dead_letters(), [])

    def test_a_job_that_waited_for_a_slot_never_runs_past_its_lease(self):
        # b waits 1.9 s for one of the two slots: 2.1 s of its 4 s lease
        # are left, less than --handler-timeout 3500ms, which its 3 s handler
        # keeps to; on that lease the broker could hand b out again mid-run.
        # It lets that lease end and runs once, on the next
        self.h.delay = {"a": 1.9, "a2": 1.9, "b": 3.0}
        self.consumer("--lock-ttl", "4s", "--handler-timeout", "3500ms", "--concurrency", "2",
                      "--prefetch", "1")
        self.publish([{"message_id": "a", "body": "x"}, {"message_id": "a2", "body": "x"},
                      {"message_id": "b", "body": "y"}])
        self.wait_settled(60)
        # once, and on the next lease (fence 2), not on the short one
        self.assertEqual([a["fence"] for a in self.h.attempts("b")], ["2"])
        self.assertEqual(self.h.successes("a") + self.h.successes("a2"), 2)
        self.assertEqual(self.dead_letters(), [])

    def test_busy_duplicate_on_another_consumer_waits_then_replays(self):
        self.h.delay = {"k1": 1.0}
        self.consumer()
        self.consumer()
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k1", "body": "x"}])
        self.wait_settled(30)
        self.assertEqual(len(self.h.attempts("k1")), 1)
        self.assertEqual(self.dead_letters(), [])

    def test_sigterm_finishes_in_flight_acks_and_exits_0(self):
        for i in range(5):
            self.h.delay["slow-%d" % i] = 1.0
        c = self.consumer()
        self.publish([{"message_id": "slow-%d" % i, "body": "x"} for i in range(5)])
        wait_for(lambda: self.h.total() >= 1, 10)
        c.signal(signal.SIGTERM)
        self.assertEqual(c.wait_exit(20), 0, c.stderr())
        self.assertEqual(self.pending(), 0, c.stderr())
        for i in range(5):
            self.assertLessEqual(len(self.h.attempts("slow-%d" % i)), 1)
        # what it did not fetch is still there for the next consumer
        self.consumer()
        self.wait_settled()
        for i in range(5):
            self.assertEqual(self.h.successes("slow-%d" % i), 1)

    def test_prefetch_fetches_ahead_but_runs_at_most_concurrency(self):
        keys = ["pf-%d" % i for i in range(6)]
        for k in keys:
            self.h.delay[k] = 5.0  # the window for the checks below
        c = self.consumer("--concurrency", "2", "--prefetch", "3", "--handler-timeout", "10s",
                          "--lock-ttl", "20s", admin=True)
        self.publish([{"message_id": k, "body": "x"} for k in keys])
        # 2 at the handler and 3 fetched ahead: five taken (each claimed as
        # it is taken) before the first answer, and not the sixth. (Read
        # from the consumer, not the broker: rabbitmqctl can take longer
        # than the first answer on a busy machine.)
        claims = 'idem_store_latency_seconds_count{op="claim"}'
        wait_for(lambda: c.metric(claims) >= 5, 10, interval=0.05, what="5 messages taken")
        self.assertEqual(c.metric(claims), 5)
        self.assertEqual(sum(self.h.successes(k) for k in keys), 0)
        self.wait_settled()
        self.assertEqual(self.h.max_active, 2)
        for k in keys:
            self.assertEqual(self.h.successes(k), 1)

    def test_a_message_that_waited_past_its_lease_runs_once(self):
        # claimed when taken, then waiting for a slot longer than half its
        # lease: its handler must not run on a lease that has ended while a
        # copy (the broker's, once the message idles past --lock-ttl) takes
        # the key over: it claims again after its lease, and runs once
        keys = ["wait-%d" % i for i in range(12)]
        for k in keys:
            self.h.delay[k] = 0.3
        c = self.consumer("--concurrency", "2", "--prefetch", "8", "--lock-ttl", "1s",
                          "--handler-timeout", "1s", admin=True)
        self.publish([{"message_id": k, "body": "x"} for k in keys])
        self.wait_settled(60)
        # a copy may still be in flight when the broker shows nothing pending
        wait_for(lambda: c.metric("idem_messages_in_flight") == 0, 30, what="nothing in flight")
        time.sleep(1.5)  # past --lock-ttl: a copy still to come would be taken by now
        for k in keys:
            self.assertEqual([a["status"] for a in self.h.attempts(k)], [200],
                             (k, [a["fence"] for a in self.h.attempts(k)]))
        self.assertEqual(self.dead_letters(), [])

    def test_messages_in_flight_never_pass_the_window(self):
        keys = ["win-%d" % i for i in range(300)]
        for k in keys:
            self.h.delay[k] = 0.01
        c = self.consumer("--concurrency", "4", "--prefetch", "4", admin=True)
        self.publish([{"message_id": k, "body": "x"} for k in keys])
        seen = []
        deadline = time.monotonic() + 60
        while sum(self.h.successes(k) for k in keys) < len(keys):
            self.assertLess(time.monotonic(), deadline, "not all handled in 60 s")
            seen.append(c.metric("idem_messages_in_flight"))
            time.sleep(0.01)  # a sampling interval, not a wait for a condition
        self.assertLessEqual(max(seen), 8, "window 4 + 4, in flight up to %d" % max(seen))
        self.wait_settled()

    def test_claims_take_no_handler_slot(self):
        # a claim takes no --concurrency slot: the message fetched ahead is
        # claimed while the other one holds the only slot, not after it
        self.h.delay["slot-a"] = self.h.delay["slot-b"] = 5.0
        c = self.consumer("--concurrency", "1", "--prefetch", "1", "--handler-timeout", "10s",
                          admin=True)
        self.publish([{"message_id": "slot-a", "body": "a"}, {"message_id": "slot-b", "body": "b"}])
        claims = 'idem_store_latency_seconds_count{op="claim"}'
        wait_for(lambda: c.metric(claims) >= 2, 10, interval=0.05, what="both messages claimed")
        self.assertEqual(c.metric(claims), 2)
        self.assertEqual(self.h.successes("slot-a") + self.h.successes("slot-b"), 0)
        self.wait_settled()
        self.assertEqual(self.h.max_active, 1)
        self.assertEqual(self.h.successes("slot-a"), 1)
        self.assertEqual(self.h.successes("slot-b"), 1)

    def test_broker_down_at_start_then_up(self):
        self.stop_broker()
        c = self.consumer(start=False)
        c.start(wait_connected=False)
        wait_for(lambda: "reconnecting" in c.stderr(), 10, what="a failed connection")
        self.assertTrue(c.alive())
        self.start_broker_again()
        wait_for(lambda: "broker connected" in c.stderr(), 15, what="connected")
        self.publish([{"message_id": "k1", "body": "x"}])
        self.wait_settled()
        self.assertEqual(self.h.successes("k1"), 1)


class LoadTests:
    """10,000 keys, 10% published twice, three consumers, a handler failing
    10% of first attempts with 503."""

    load_args = ["--max-deliveries", "20", "--concurrency", "32"]
    load_key_field = "message_id"  # where the key travels, and the flags that read it there
    load_key_args = []

    def make_entries(self, key_field="message_id"):
        self.h.fail_first_fraction = 0.10
        rnd = random.Random(13)
        self.keys = ["key-%05d" % i for i in range(NKEYS)]
        twice = set(rnd.sample(self.keys, NKEYS // 10))
        entries = []
        for k in self.keys:
            e = {key_field: k, "body": '{"order":"%s","amount":%d}' % (k, len(k))}
            entries.append(e)
            if k in twice:
                entries.append(dict(e))
        rnd.shuffle(entries)
        self.entries = entries

    def succeeded(self):
        counts = self.h.success_counts()
        return sum(1 for k in self.keys if counts.get(k, 0) >= 1)

    def run_to_the_end(self, timeout=300):
        wait_for(lambda: self.succeeded() == NKEYS and self.all_settled(STREAM), timeout,
                 interval=0.2, what="every key handled and every message acked (%d of %d keys)"
                 % (self.succeeded(), NKEYS))

    def check_counts(self, exactly_once=True):
        counts = self.h.success_counts()
        self.assertEqual([k for k in self.keys if counts.get(k, 0) == 0], [], "keys never handled")
        self.assertTrue(self.all_settled(STREAM))
        self.assertEqual(self.pending(), 0)
        self.assertEqual(self.dead_letters(), [], "nothing should be dead-lettered")
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
        return [self.consumer(*(self.load_args + list(extra)), store=store) for _ in range(3)]

    def test_load_sigkill_every_two_seconds(self):
        self.make_entries(self.load_key_field)
        cs = self.three_consumers("lmdb:%s/store" % self.tmp, self.load_key_args)
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

    def test_load_broker_restart_mid_run(self):
        self.make_entries(self.load_key_field)
        self.three_consumers("lmdb:%s/store" % self.tmp, self.load_key_args)
        self.publish(self.entries)
        wait_for(lambda: self.succeeded() >= NKEYS // 4, 120, what="a quarter done")
        self.restart_broker(outage=1.0)
        self.run_to_the_end()
        self.check_counts(exactly_once=True)

    def test_load_store_outage_mid_run(self):
        from redis_server import RedisServer
        self.make_entries(self.load_key_field)
        store = RedisServer(aof=True).start()
        self.addCleanup(store.cleanup)
        self.three_consumers(store.uri, ["--lock-ttl", "8s"] + list(self.load_key_args))
        self.publish(self.entries)
        wait_for(lambda: self.succeeded() >= NKEYS // 4, 120, what="a quarter done")
        store.kill()
        time.sleep(1.5)  # the outage (not a wait for a condition)
        store.start()
        self.run_to_the_end()
        self.check_counts(exactly_once=True)
        self.assertTrue(any("answers again" in c.stderr() for c in self.consumers))
