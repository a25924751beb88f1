"""test_consume_amqp.py - `idem consume` on RabbitMQ, against a real
rabbitmq-server (rabbitmq_server.py: its own node, ports and epmd, one per
test class) and the counting handler of consume_harness.py: every row of the
outcome table (consume_cases.OutcomeTests), dead letters in NAME.dead, the
answer published to reply_to (also on replay), SIGTERM, a bad URI.
"""

import itertools
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import finish_process, run_idem, wait_for  # noqa: E402
from consume_harness import Consumer  # noqa: E402
from consume_cases import STREAM, BrokerCase, OutcomeTests  # noqa: E402
from rabbitmq_server import AmqpClient, RabbitServer, Typed  # noqa: E402

_queues = itertools.count()


class AmqpCase(BrokerCase):
    """The RabbitMQ side of consume_cases' broker interface: one server per
    class, a fresh queue per test (the STREAM name of the shared tests maps
    to it)."""

    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = RabbitServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.server.cleanup()

    def start_broker(self):
        self.broker_server = self.server
        self.queue = "orders-%d" % next(_queues)
        self._dead = []
        if not self.server.alive():
            self.server.start()
        c = AmqpClient(self.server.port)
        c.declare(self.queue)
        c.close()

    def from_uri(self, stream=STREAM):
        return "%s?queue=%s" % (self.server.url, self.queue)

    def publish(self, entries, stream=STREAM):
        msgs = []
        for e in entries:
            props = {"headers": {k: v for k, v in e.items()
                                 if k not in ("body", "message_id", "content-type")}}
            if "message_id" in e:
                props["message_id"] = e["message_id"]
            if "content-type" in e:
                props["content_type"] = e["content-type"]
            msgs.append((e.get("body", ""), props))
        c = AmqpClient(self.server.port)
        try:
            c.publish_many(self.queue, msgs)
        finally:
            c.close()

    def all_settled(self, stream=STREAM):
        try:
            return self.server.queue_counts(self.queue) == (0, 0)
        except (RuntimeError, OSError):
            return False

    def pending(self, stream=STREAM):
        return self.server.queue_counts(self.queue)[1]

    def dead_letters(self, stream=STREAM):
        c = AmqpClient(self.server.port)
        try:
            got = c.get_all(self.queue + ".dead")
        finally:
            c.close()
        for props, body in got:  # taken off the queue: kept here
            d = {k: str(v) for k, v in props.get("headers", {}).items()}
            d["reason"] = d.pop("x-idem-reason")
            d["deliveries"] = d.pop("x-idem-deliveries")
            if "message_id" in props:
                d["message_id"] = props["message_id"]
            d["body"] = body
            self._dead.append(d)
        return list(self._dead)


class Outcomes(AmqpCase, OutcomeTests):
    takes_over_silent_consumers = False

    def test_a_dead_letter_keeps_every_property_and_header(self):
        # so that it can be sent again from NAME.dead as it came; and the
        # handler gets numbers of every kind as decimal text
        headers = {"s": "x", "n": 5, "d": 1.25, "f": Typed("f", 1.5), "flag": True,
                   "nested": {"a": "b"}, "list": ["x", 2], "nothing": None,
                   "ts": Typed("T", 1700000001)}
        props = {"content_type": "application/json", "content_encoding": "gzip", "priority": 3,
                 "correlation_id": "corr-1", "expiration": "600000", "timestamp": 1700000000,
                 "type": "order.created", "user_id": "guest", "app_id": "shop",
                 "headers": headers}
        self.consumer()
        c = AmqpClient(self.server.port)
        try:
            c.publish_many(self.queue, [("no key", props),
                                        ("keyed", {"message_id": "fk", "headers": headers})])
        finally:
            c.close()
        self.wait_settled()
        c = AmqpClient(self.server.port)
        try:
            got = c.get_all(self.queue + ".dead")
        finally:
            c.close()
        self.assertEqual(len(got), 1, got)
        p, body = got[0]
        for name, value in props.items():
            if name not in ("expiration", "headers"):
                self.assertEqual(p.get(name), value, (name, p))
        self.assertEqual(p.get("delivery_mode"), 2, p)
        self.assertNotIn("expiration", p)  # a dead letter stays to be looked at
        for name, value in headers.items():
            self.assertEqual(p["headers"].get(name, "missing"), value, (name, p["headers"]))
        self.assertIn("no message id", p["headers"]["x-idem-reason"])
        sent = {k.lower(): v for k, v in self.h.attempts("fk")[0]["headers"].items()}
        for name, text in (("s", "x"), ("n", "5"), ("d", "1.25"), ("f", "1.5"), ("flag", "true"),
                           ("ts", "1700000001")):
            self.assertEqual(sent.get("x-idem-header-" + name), text, (name, sent))

    def test_numbers_reach_the_handler_as_the_decimal_text_they_were_written_as(self):
        # a float as the shortest text that is the same value, not every
        # digit of the binary one (0.1, not 0.10000000000000001); a decimal
        # with its point where it says, not dropped
        headers = {"d": 0.1, "d2": 2.675, "big": 1e20, "f": Typed("f", 0.1),
                   "price": Typed("D", (2, 12345)), "tiny": Typed("D", (3, 5)),
                   "whole": Typed("D", (0, 42)), "cents": Typed("D", (2, 12))}
        self.consumer()
        self.publish([{"message_id": "nk", "body": "x", **headers}])
        self.wait_settled()
        sent = {k.lower(): v for k, v in self.h.attempts("nk")[0]["headers"].items()}
        for name, text in (("d", "0.1"), ("d2", "2.675"), ("big", "1e+20"), ("f", "0.1"),
                           ("price", "123.45"), ("tiny", "0.005"), ("whole", "42"),
                           ("cents", "0.12")):
            self.assertEqual(sent.get("x-idem-header-" + name), text, (name, sent))

    def test_a_header_name_holding_a_nul_is_not_passed_on(self):
        # read up to the NUL, "trace\0x" passed for "trace": to the handler
        # and to --key header:trace; its dead letter keeps it as it came
        self.consumer("--key", "header:trace")
        self.publish([{"body": "x", "trace\x00x": "t-1", "trace": "t-2"},
                      {"body": "y", "trace\x00y": "t-3"}])
        self.wait_settled()
        self.assertEqual(self.h.attempts("t-1"), [])
        got = self.h.attempts("t-2")
        self.assertEqual(len(got), 1)
        self.assertEqual([v for k, v in got[0]["header_list"] if k.lower() == "x-idem-header-trace"],
                         ["t-2"], got[0]["header_list"])
        dead = self.dead_letters()
        self.assertEqual(len(dead), 1, dead)
        self.assertIn("no header 'trace'", dead[0]["reason"])
        self.assertEqual(dead[0].get("trace\x00y"), "t-3", dead[0])

    def test_a_refused_login_names_the_servers_reason(self):
        # RabbitMQ's connection.close says why (403, 530): that is logged,
        # not "server error", and the consumer keeps trying
        bad = [("guest:wrong@", "/", "login: server said 403 ACCESS_REFUSED"),
               ("", "/nope", "login: server said 530 NOT_ALLOWED - vhost nope not found")]
        for cred, vhost, words in bad:
            uri = "amqp://%s127.0.0.1:%d%s?queue=%s" % (cred, self.server.port, vhost, self.queue)
            c = Consumer(uri, self.h.url + "/messages", store="memory:", args=self.consumer_args)
            self.addCleanup(finish_process, self, c)
            c.start(wait_connected=False)
            wait_for(lambda: words in c.stderr(), 20, what="%s in: %s" % (words, c.stderr()))
            self.assertEqual(c.stop(), 0, c.stderr())

    def test_a_queue_declared_with_arguments_is_used_as_it_is(self):
        # a quorum queue, declared by its owner: idem declares it passively
        # (its own declare, without the arguments, would be refused)
        self.queue = "quorum-%d" % next(_queues)
        c = AmqpClient(self.server.port)
        try:
            c.declare(self.queue, {"x-queue-type": "quorum"})
        finally:
            c.close()
        self.consumer()
        self.publish([{"message_id": "q1", "body": "x"}, {"body": "no key"}])
        self.wait_settled()
        self.assertEqual(self.h.successes("q1"), 1)
        self.assertEqual(len(self.dead_letters()), 1)  # NAME.dead made by idem, durable

    def test_a_refused_dead_letter_waits_unacked_and_goes_once_there_is_room(self):
        # NAME.dead holds one message and refuses more (reject-publish): the
        # dead letter is tried again with a backoff, the original unacked,
        # not nacked and redelivered as fast as the loop turns
        dead = self.queue + ".dead"
        c = AmqpClient(self.server.port)
        try:
            c.declare(dead, {"x-max-length": 1, "x-overflow": "reject-publish"})
            c.publish_many(dead, [("filler", {})])
        finally:
            c.close()
        con = self.consumer(admin=True)
        self.publish([{"body": "no key"}])
        wait_for(lambda: "was refused" in con.stderr(), 20, what="the refusal logged")
        time.sleep(2)  # refused again and again meanwhile (not a wait for a condition)
        self.assertEqual(con.stderr().count("was refused"), 1, con.stderr())
        status, metrics = con.admin_get("/metrics")
        self.assertIn('idem_messages_total{outcome="no_key"} 1\n', metrics)
        self.assertEqual(self.server.queue_counts(self.queue), (0, 1))  # held, unacked
        c = AmqpClient(self.server.port)
        try:
            self.assertEqual([b for _, b in c.get_all(dead)], [b"filler"])  # room again
        finally:
            c.close()
        self.wait_settled()
        got = self.dead_letters()
        self.assertEqual(len(got), 1, got)
        self.assertIn("no message id", got[0]["reason"])

    def test_a_consumer_killed_mid_run_costs_one_delivery(self):
        # RabbitMQ requeues the original at once, while the dead consumer's
        # lease still holds: the copy made for that busy key must not count
        # a delivery of its own, or --max-deliveries 2 dead-letters it
        self.h.delay = {"k1": 1.5}
        args = ("--lock-ttl", "3s", "--max-deliveries", "2", "--retry-delay", "200ms",
                "--max-retry-delay", "1s")
        first = self.consumer(*args)
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: self.h.active >= 1, 20, what="the handler running")
        first.kill()
        self.consumer(*args)
        wait_for(lambda: self.h.successes("k1") >= 2, 30, what="the run after the lease")
        self.wait_settled(30)
        self.assertEqual(self.dead_letters(), [])
        self.assertEqual([a["headers"].get("X-Idem-Deliveries") for a in self.h.attempts("k1")],
                         ["1", "2"])

    def test_a_redriven_dead_letter_counts_its_deliveries_anew(self):
        # sent back from NAME.dead as it is: its x-idem-deliveries is the
        # count that dead-lettered it, not one to go on from; and a count
        # that is not a plain number counts nothing
        self.consumer("--max-deliveries", "2")
        self.publish([{"message_id": "redriven", "body": "x", "x-idem-reason": "earlier",
                       "x-idem-deliveries": "3"},
                      {"message_id": "odd", "body": "y", "x-idem-deliveries": "1e3"}])
        self.wait_settled()
        self.assertEqual(self.dead_letters(), [])
        self.assertEqual(self.h.attempts("redriven")[0]["headers"]["X-Idem-Deliveries"], "1")
        self.assertEqual(self.h.successes("odd"), 1)

    def test_a_forged_count_does_not_wrap_back_to_zero(self):
        # a producer's x-idem-deliveries of 999999: this delivery counts as
        # its fence (1), and the retry's copy carries 1000000, seven digits.
        # Read back as 0, the count would start over and the handler would
        # run once more than --max-deliveries
        self.h.fail_always = {"forged"}
        self.consumer("--max-deliveries", "3", "--retry-delay", "100ms",
                      "--max-retry-delay", "100ms")
        self.publish([{"message_id": "forged", "body": "x", "x-idem-deliveries": "999999"}])
        wait_for(lambda: len(self.dead_letters()) == 1, 30, what="the dead letter")
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("forged")), 3)

    def test_a_due_time_further_ahead_than_idem_puts_off_is_not_held(self):
        # x-idem-due an hour ahead is no due time of idem's (at most the
        # larger of --max-retry-delay and --lock-ttl, plus a minute for
        # clocks): taken at once, not held unacked for an hour
        due = lambda s: str(int((time.time() + s) * 1000))  # noqa: E731
        self.consumer("--max-retry-delay", "2s", "--lock-ttl", "2s")
        self.publish([{"message_id": "far", "body": "x", "x-idem-due": due(3600)},
                      {"message_id": "near", "body": "y", "x-idem-due": due(4)}])
        wait_for(lambda: self.h.successes("far") == 1, 10, what="the far-ahead copy run")
        self.assertEqual(self.h.attempts("near"), [], "a due time within reach was not held")
        self.wait_settled(30)
        self.assertEqual(self.h.successes("near"), 1)
        self.assertEqual(self.dead_letters(), [])

    def test_answer_goes_to_reply_to_also_on_replay(self):
        c = AmqpClient(self.server.port)
        c.declare("replies-" + self.queue)
        self.consumer()
        msgs = [("x", {"message_id": "k1", "reply_to": "replies-" + self.queue,
                       "correlation_id": "c-%d" % i}) for i in range(2)]
        c.publish_many(self.queue, msgs[:1])
        self.wait_settled()
        c.publish_many(self.queue, msgs[1:])
        self.wait_settled()
        replies = c.get_all("replies-" + self.queue)
        c.close()
        self.assertEqual(len(self.h.attempts("k1")), 1)
        self.assertEqual([r[0]["correlation_id"] for r in replies], ["c-0", "c-1"])
        self.assertEqual([r[0]["headers"]["x-idem-replayed"] for r in replies], ["false", "true"])
        self.assertEqual({r[0]["headers"]["x-idem-status"] for r in replies}, {"200"})
        self.assertEqual(replies[0][1], replies[1][1])
        self.assertIn(b'"key":"k1"', replies[0][1])

    def test_a_stale_answer_that_replays_still_answers_reply_to(self):
        # the first message runs past its lease; its duplicate, parked here,
        # claims when the lease ends and is answered first. The first's answer
        # comes back stale and finds the key completed: that kept answer goes
        # to its reply_to too (as on any replay), not an ack with no answer
        c = AmqpClient(self.server.port)
        c.declare("replies-" + self.queue)
        self.h.script = {"k1": [(200, 3.0), (200, 0)]}
        self.consumer("--lock-ttl", "2s", "--handler-timeout", "8s")
        c.publish_many(self.queue, [("x", {"message_id": "k1", "reply_to": "replies-" + self.queue,
                                           "correlation_id": "c-%d" % i}) for i in range(2)])
        self.wait_settled(40)
        replies = []
        wait_for(lambda: replies.extend(c.get_all("replies-" + self.queue)) or len(replies) >= 2,
                 10, what="both answers")
        c.close()
        self.assertEqual(sorted(r[0]["correlation_id"] for r in replies), ["c-0", "c-1"])
        self.assertEqual({r[0]["headers"]["x-idem-status"] for r in replies}, {"200"})

    def test_sigterm_cancels_the_consumer_and_what_comes_after_counts_no_delivery(self):
        # two run, two wait on the server (--prefetch 0). On SIGTERM the
        # consumer is cancelled: an ack of the drain must not bring the next
        # message here to be nacked back flagged redelivered, a delivery
        # counted that never ran (with --max-deliveries 1, dead-lettered
        # unrun by the next consumer)
        self.h.delay = {"slow": 3.0, "mid": 0.3}
        args = ("--concurrency", "2", "--prefetch", "0", "--lock-ttl", "10s",
                "--max-deliveries", "1", "--handler-timeout", "6s")
        c = self.consumer(*args)
        self.publish([{"message_id": k, "body": "x"} for k in ("slow", "mid", "m3", "m4")])
        wait_for(lambda: self.h.active == 2, 10, what="two at the handler")
        c.signal(signal.SIGTERM)
        self.assertEqual(c.wait_exit(20), 0, c.stderr())
        self.assertEqual(sorted(self.h.keys()), ["mid", "slow"])
        wait_for(lambda: self.server.queue_counts(self.queue) == (2, 0), 10,
                 what="m3 and m4 back in the queue")
        self.consumer(*args)
        self.wait_settled()
        self.assertEqual(self.dead_letters(), [])
        for k in ("m3", "m4"):
            self.assertEqual([(a["status"], a["headers"].get("X-Idem-Deliveries"))
                              for a in self.h.attempts(k)], [(200, "1")], k)

    def test_sigterm_settles_a_postponed_retry_at_once_and_its_delay_holds(self):
        # a later waits unacked here for its delay; a stop does not wait for
        # it: the copy goes back at once with x-idem-due, and the consumer
        # that gets it holds it until then; the delivery count goes on
        self.h.fail_first = {"k"}
        args = ("--retry-delay", "6s", "--max-retry-delay", "6s", "--lock-ttl", "20s",
                "--max-deliveries", "2")
        c = self.consumer(*args, admin=True)
        self.publish([{"message_id": "k", "body": "x"}])
        wait_for(lambda: len(self.h.attempts("k")) == 1, 10, what="the first attempt")
        failed_at = time.time()
        wait_for(lambda: c.metric('idem_messages_total{outcome="retry"}') == 1, 10,
                 what="the retry")
        t0 = time.time()
        c.signal(signal.SIGTERM)
        self.assertEqual(c.wait_exit(20), 0, c.stderr())
        self.assertLess(time.time() - t0, 3.0, "a stop waits for the retry delay")
        wait_for(lambda: self.server.queue_counts(self.queue) == (1, 0), 10,
                 what="the copy in the queue")
        self.consumer(*args)
        wait_for(lambda: self.h.successes("k") == 1, 30, what="the retry")
        self.assertGreater(time.time() - failed_at, 5.0, "the delay was not kept")
        self.wait_settled()
        self.assertEqual(self.dead_letters(), [])
        self.assertEqual([a["headers"].get("X-Idem-Deliveries") for a in self.h.attempts("k")],
                         ["1", "2"])

    def test_a_copy_that_does_not_fit_a_frame_is_that_messages_failure(self):
        # headers that nearly fill a frame (131072 bytes): idem's headers
        # added, the dead letter or the retry's copy no longer fits. Not a
        # broken connection (reconnecting, all over again, forever): the
        # dead letter goes without the message's own headers, the retry
        # goes to the dead letters
        def near_full(mid, slack):
            # frame header and end, class to flags, delivery_mode, the
            # message_id, then the table: its length, "big", the kind, the length
            n = 131072 - slack - (8 + 14 + 1 + (1 + len(mid) if mid else 0) + 4 + 4 + 1 + 4)
            p = {"headers": {"big": "y\n" + "y" * (n - 2)}}  # two lines: not sent to the handler
            if mid:
                p["message_id"] = mid
            return p
        self.h.fail_first = {"big-retry"}
        self.h.delay = {"other": 1.0}
        c = self.consumer()
        cl = AmqpClient(self.server.port)
        try:
            cl.publish_many(self.queue, [("o", {"message_id": "other"}),
                                         ("no key", near_full(None, 60)),
                                         ("r", near_full("big-retry", 10))])
        finally:
            cl.close()
        self.wait_settled()
        self.assertNotIn("reconnecting", c.stderr())
        self.assertEqual(self.h.successes("other"), 1)
        self.assertEqual([a["status"] for a in self.h.attempts("big-retry")], [503])
        got = sorted(self.dead_letters(), key=lambda d: d.get("message_id", ""))
        self.assertEqual([d.get("message_id") for d in got], [None, "big-retry"], got)
        self.assertEqual([d["body"] for d in got], [b"no key", b"r"])
        for d in got:
            self.assertIn("its own headers left out", d["reason"])
            self.assertNotIn("big", d)
        self.assertIn("no message id", got[0]["reason"])
        self.assertIn("copy for a retry", got[1]["reason"])
        self.assertEqual(got[1]["deliveries"], "1")

    def test_bad_uri_exits_2_naming_the_flag(self):
        for uri in ["amqp://g:g@127.0.0.1:1/%2f", "amqp://g:g@127.0.0.1:1/?queue=q&prefetch=0",
                    "amqp://g:g@127.0.0.1:1/?queue=q&x=1", "amqp://g:g@127.0.0.1:99999/?queue=q"]:
            rc, out, err = run_idem(["consume", "--from", uri, "--to", "http://127.0.0.1:1/"])
            self.assertEqual(rc, 2, (uri, err))
            self.assertIn("--from", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
