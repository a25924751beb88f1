"""test_consume_redis.py - `idem consume` on Redis Streams, against a real
redis-server (redis_server.py) and a Python handler that counts executions
per key (consume_harness.py): every row of the outcome table, dead letters,
key sources, the record space shared with serve, SIGTERM, and the
10,000-message run with duplicates, a handler failing first attempts, and
consumers killed with SIGKILL; Redis (the broker) and a Redis store
restarted mid-run.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Gateway, run_idem, wait_for  # noqa: E402
from consume_harness import Consumer, Handler, RedisClient  # noqa: E402
from redis_server import RedisServer  # noqa: E402

STREAM, GROUP = "orders", "billing"


class ConsumeCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idem-consume-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.redis = RedisServer(aof=True).start()
        self.addCleanup(self.redis.cleanup)
        self.r = RedisClient(self.redis.port)
        self.h = Handler().start()
        self.addCleanup(self.h.stop)
        self.consumers = []

    def from_uri(self, stream=STREAM, group=GROUP, port=None):
        return "redis://127.0.0.1:%d?stream=%s&group=%s" % (port or self.redis.port, stream, group)

    def consumer(self, *args, store=None, admin=False, start=True, stream=STREAM):
        c = Consumer(self.from_uri(stream), self.h.url + "/messages",
                     store=store or "lmdb:%s/store" % self.tmp,
                     args=["--lock-ttl", "3s", "--retry-delay", "200ms",
                           "--max-retry-delay", "1s", "--handler-timeout", "2s"] + list(args),
                     admin=admin)
        self.consumers.append(c)
        self.addCleanup(self._finish, c)
        if start:
            c.start()
        return c

    def _finish(self, c):
        c.stop()
        rep = c.sanitizer_report()
        if rep:
            self.fail("sanitizer report:\n" + rep)

    def publish(self, entries, stream=STREAM):
        """entries: list of dicts of fields; returns their ids."""
        cmds = []
        for e in entries:
            c = ["XADD", stream, "*"]
            for k, v in e.items():
                c += [k, v]
            cmds.append(c)
        out = []
        for i in range(0, len(cmds), 2000):
            out += self.r.pipeline(cmds[i:i + 2000])
        return out

    def settled(self, stream=STREAM):
        """Every entry delivered and acked (or dead-lettered, which acks)."""
        try:
            return self.r.pending(stream, GROUP) == 0 and self.r.lag(stream, GROUP) == 0
        except RuntimeError:
            return False

    def wait_settled(self, timeout=60, stream=STREAM):
        wait_for(lambda: self.settled(stream), timeout, interval=0.1,
                 what="every entry acked: " + "".join(c.stderr()[-2000:] for c in self.consumers))

    def dead(self, stream=STREAM):
        return self.r.entries(stream + ":dead")


class Outcomes(ConsumeCase):
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
        self.assertEqual(self.dead(), [])
        rc, out, err = run_idem(["keys", "get", "k1", "--store", "lmdb:%s/store" % self.tmp])
        self.assertEqual(rc, 0, err)
        rec = json.loads(out)
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["response"]["status"], 200)

    def test_mismatch_and_missing_key_go_to_dead_letters(self):
        self.consumer()
        self.publish([{"message_id": "k1", "body": "a"}])
        self.wait_settled()
        self.publish([{"message_id": "k1", "body": "b", "trace": "t1"}, {"body": "no key here"}])
        self.wait_settled()
        dead = self.dead()
        self.assertEqual(len(dead), 2, dead)
        reasons = sorted(d[1]["idem-reason"].decode() for d in dead)
        self.assertTrue(any("another body" in r for r in reasons), reasons)
        self.assertTrue(any("no message id" in r for r in reasons), reasons)
        mism = [d[1] for d in dead if b"another body" in d[1]["idem-reason"]][0]
        self.assertEqual(mism["body"], b"b")
        self.assertEqual(mism["trace"], b"t1")
        self.assertEqual(mism["message_id"], b"k1")
        self.assertEqual(len(self.h.attempts("k1")), 1)

    def test_transient_failure_is_retried_with_a_higher_fence(self):
        self.h.fail_first = {"k1"}
        self.h.status = {"k2": 429}
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
        self.assertEqual(self.dead(), [])

    def test_max_deliveries_marks_failed_and_dead_letters(self):
        self.h.fail_always = {"k1"}
        self.consumer("--max-deliveries", "3")
        self.publish([{"message_id": "k1", "body": "x", "trace": "t9"}])
        self.wait_settled()
        self.assertEqual([a["status"] for a in self.h.attempts("k1")], [500, 500, 500])
        dead = self.dead()
        self.assertEqual(len(dead), 1)
        self.assertIn("answered 500 on delivery 3 of 3", dead[0][1]["idem-reason"].decode())
        self.assertEqual(dead[0][1]["trace"], b"t9")
        self.assertEqual(dead[0][1]["idem-deliveries"], b"3")
        rc, out, err = run_idem(["keys", "get", "k1", "--store", "lmdb:%s/store" % self.tmp])
        self.assertEqual(json.loads(out)["state"], "failed")

    def test_unreachable_handler_is_retried(self):
        self.h.stop()  # nothing listens: released, redelivered until it is back
        c = self.consumer("--max-deliveries", "1000", admin=True)
        port = self.h.port
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: 'outcome="retry"} 2' in c.admin_get("/metrics")[1], 20,
                 what="two failed deliveries")
        self.assertEqual(self.r.pending(STREAM, GROUP), 1)
        self.h = Handler()
        from consume_harness import _HandlerServer, _H
        self.h._server = _HandlerServer(("127.0.0.1", port), _H)
        self.h._server.owner = self.h
        self.h.port = port
        threading.Thread(target=self.h._server.serve_forever, daemon=True).start()
        self.addCleanup(self.h.stop)
        self.wait_settled()
        self.assertEqual(self.h.successes("k1"), 1)

    def test_duplicate_in_flight_here_replays_when_the_first_ends(self):
        # one consumer, both copies in one read: the second waits for the
        # first here, not for the lease (60 s) to end
        self.h.delay = {"k1": 0.5}
        c = self.consumer("--lock-ttl", "60s", "--handler-timeout", "10s", admin=True)
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k1", "body": "x"}])
        self.wait_settled(30)
        self.assertEqual(len(self.h.attempts("k1")), 1)
        m = c.admin_get("/metrics")[1]
        self.assertIn('idem_messages_total{outcome="replayed"} 1', m)
        self.assertIn('idem_messages_total{outcome="busy"} 1', m)

    def test_busy_duplicate_waits_then_replays(self):
        self.h.delay = {"k1": 1.0}
        self.consumer()
        self.consumer()
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k1", "body": "x"}])
        self.wait_settled(30)
        self.assertEqual(len(self.h.attempts("k1")), 1)
        self.assertEqual(self.dead(), [])


class Keys(ConsumeCase):
    def test_key_sources(self):
        for src, entries, want in [
            ("header:X-Order", [{"X-Order": "o-1", "body": "a"}, {"x-order": "o-1", "body": "a"}], "o-1"),
            ("json:/order/id", [{"body": '{"order":{"id":"j-7"}}'}, {"body": '{"order": {"id": "j-7"}}'}], None),
            ("body-sha256", [{"body": "same bytes"}, {"body": "same bytes"}], None),
        ]:
            stream = "s-" + src.split(":")[0]
            c = self.consumer("--key", src, stream=stream)
            self.publish(entries, stream=stream)
            self.wait_settled(stream=stream)
            c.stop()
        self.assertEqual(self.h.successes("o-1"), 1)
        # json: the second body differs in bytes: same key, other body: dead letter
        self.assertEqual(self.h.successes("j-7"), 1)
        self.assertEqual(len(self.dead("s-json")), 1)
        import hashlib
        self.assertEqual(self.h.successes(hashlib.sha256(b"same bytes").hexdigest()), 1)

    def test_bad_key_values_go_to_dead_letters(self):
        self.consumer("--key", "json:/id")
        self.publish([{"body": "not json"}, {"body": '{"id": {"a": 1}}'}, {"body": '{"id": ""}'},
                      {"body": '{"other": 1}'}, {"body": '{"id": 42}'}])
        self.wait_settled()
        reasons = sorted(d[1]["idem-reason"].decode() for d in self.dead())
        self.assertEqual(len(reasons), 4, reasons)
        self.assertTrue(any("not JSON" in r for r in reasons), reasons)
        self.assertTrue(any("not a string or a number" in r for r in reasons), reasons)
        self.assertTrue(any("not a valid key" in r for r in reasons), reasons)
        self.assertTrue(any("nothing at /id" in r for r in reasons), reasons)
        self.assertEqual(self.h.successes("42"), 1)

    def test_bad_flags_exit_2_naming_the_flag(self):
        for args, flag in [
            (["--from", "kafka://x", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:1?stream=s", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:1?stream=s&group=g&bogus=1", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:99999?stream=s&group=g", "--to", "http://a:1/"], "--from"),
            (["--from", self.from_uri(), "--to", "https://a:1/"], "--to"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--key", "header:"], "--key"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--key", "json:a"], "--key"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--concurrency", "0"], "--concurrency"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--on-store-error", "x"], "--on-store-error"),
            (["--to", "http://a:1/"], "--from"),
        ]:
            rc, out, err = run_idem(["consume"] + args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(flag, err, args)


class SharedRecords(ConsumeCase):
    def test_serve_and_consume_share_one_record_per_key(self):
        store = "lmdb:%s/shared" % self.tmp
        gw = Gateway(self.h.url, store=store, args=["--spool", "off"]).start()
        self.addCleanup(gw.stop)
        r = gw.request("POST", "/messages", body=b'{"a":1}', headers={"Idempotency-Key": "pay-1"})
        self.assertEqual(r.status, 200)
        self.consumer(store=store)
        self.publish([{"message_id": "pay-1", "body": '{"a":1}'},
                      {"message_id": "pay-2", "body": '{"b":2}'}])
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("pay-1")), 1)  # the message replayed serve's answer
        r = gw.request("POST", "/messages", body=b'{"b":2}', headers={"Idempotency-Key": "pay-2"})
        self.assertTrue(r.replayed)
        self.assertEqual(r.header("X-Handler"), "yes")
        self.assertEqual(len(self.h.attempts("pay-2")), 1)


class Lifecycle(ConsumeCase):
    def test_sigterm_finishes_in_flight_acks_and_exits_0(self):
        for i in range(5):
            self.h.delay["slow-%d" % i] = 1.0
        c = self.consumer()
        self.publish([{"message_id": "slow-%d" % i, "body": "x"} for i in range(5)])
        wait_for(lambda: self.h.total() >= 1 or self.r.pending(STREAM, GROUP) >= 5, 10)
        c.signal(signal.SIGTERM)
        self.assertEqual(c.wait_exit(20), 0, c.stderr())
        self.assertEqual(self.r.pending(STREAM, GROUP), 0, c.stderr())
        for i in range(5):
            self.assertEqual(self.h.successes("slow-%d" % i), 1)

    def test_broker_down_at_start_then_up(self):
        self.redis.kill()
        c = self.consumer(start=False)
        c.start(wait_connected=False)
        time.sleep(0.5)
        self.assertTrue(c.alive())
        self.redis.start()
        wait_for(lambda: "broker connected" in c.stderr(), 15, what="connected")
        self.publish([{"message_id": "k1", "body": "x"}])
        self.wait_settled()
        self.assertEqual(self.h.successes("k1"), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
