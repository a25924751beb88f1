"""test_consume_nats.py - `idem consume` on NATS JetStream, against a real
nats-server (nats_server.py, -js on a temp dir) and the counting handler of
consume_harness.py: every row of the outcome table (consume_cases.
OutcomeTests), dead letters on <subject>.dead, SIGTERM, a server down at
start, and a bad URI.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import run_idem  # noqa: E402
from consume_cases import STREAM, BrokerCase, OutcomeTests  # noqa: E402
from nats_server import NatsClient, NatsServer  # noqa: E402

JS_STREAM, CONSUMER = "ORDERS", "billing"


class NatsCase(BrokerCase):
    """The JetStream side of consume_cases' broker interface: stream ORDERS
    on subject "orders". JetStream itself drops a Nats-Msg-Id published again
    within its duplicate window (100 ms at least), so the shared tests key
    messages by a header of their own (Order-Id) to reach idem with their
    duplicates; test_nats_msg_id_is_the_default_key covers Nats-Msg-Id."""

    consumer_args = BrokerCase.consumer_args + ["--key", "header:Order-Id"]
    no_key_reason = "no header 'Order-Id'"

    def start_broker(self):
        self.ns = self.broker_server = NatsServer().start()
        self.addCleanup(self.ns.cleanup)
        self.nc = NatsClient(self.ns.port)
        self.nc.js("STREAM.CREATE." + JS_STREAM, {"name": JS_STREAM, "subjects": [STREAM],
                                                  "storage": "file"})

    def from_uri(self, stream=STREAM):
        return "%s?stream=%s&consumer=%s" % (self.ns.url, JS_STREAM, CONSUMER)

    def publish(self, entries, stream=STREAM):
        msgs = []
        for e in entries:
            hdrs = {("Order-Id" if k == "message_id" else k): v for k, v in e.items() if k != "body"}
            msgs.append((e.get("body", "").encode(), hdrs))
        self.nc.publish_many(stream, msgs)

    def _info(self):
        return self.nc.js("CONSUMER.INFO.%s.%s" % (JS_STREAM, CONSUMER))

    def all_settled(self, stream=STREAM):
        try:
            i = self._info()
        except (RuntimeError, OSError, TimeoutError):
            return False
        return i["num_ack_pending"] == 0 and i["num_pending"] == 0

    def pending(self, stream=STREAM):
        return self._info()["num_ack_pending"]

    def dead_letters(self, stream=STREAM):
        out = []
        for hdrs, body in self.nc.stream_messages(JS_STREAM + "_DEAD"):
            d = {k: v for k, v in hdrs.items() if not k.startswith(":")}
            d["reason"] = d.pop("Idem-Reason")
            d["deliveries"] = d.pop("Idem-Deliveries")
            if "Order-Id" in d:
                d["message_id"] = d.pop("Order-Id")
            d["body"] = body
            out.append(d)
        return out


class Outcomes(NatsCase, OutcomeTests):
    def test_nats_msg_id_is_the_default_key(self):
        self.consumer_args = BrokerCase.consumer_args
        self.consumer()
        self.nc.publish_many(STREAM, [(b"a", {"Nats-Msg-Id": "m-1"}), (b"b", {})])
        self.wait_settled()
        self.assertEqual(self.h.successes("m-1"), 1)
        dead = self.dead_letters()
        self.assertEqual(len(dead), 1)
        self.assertIn("no message id", dead[0]["reason"])
        self.assertEqual(dead[0]["Nats-Msg-Id"], "idem-dead-ORDERS:2")  # deduplicates its retries

    def test_a_setup_that_fails_is_named_and_retried(self):
        # a stream whose subjects take in even idem-dead.<STREAM>: the
        # dead-letter stream cannot be made; and a stream that is not there
        from consume_harness import Consumer
        from harness import finish_process, wait_for
        self.nc.js("STREAM.CREATE.WIDE", {"name": "WIDE", "subjects": ["w.>", "idem-dead.>"],
                                          "storage": "file"})
        cases = [("WIDE", "creating the dead-letter stream 'WIDE_DEAD' for 'idem-dead.WIDE'"),
                 ("NOPE", "stream 'NOPE': ")]
        for stream, words in cases:
            c = Consumer("%s?stream=%s&consumer=c" % (self.ns.url, stream),
                         self.h.url + "/messages", store="memory:", args=self.consumer_args)
            self.addCleanup(finish_process, self, c)
            c.start(wait_connected=False)
            wait_for(lambda: "reconnecting" in c.stderr(), 10, what="a failed setup")
            self.assertIn(words, c.stderr())
            self.assertNotIn(": OK;", c.stderr())
            self.assertTrue(c.alive(), c.stderr())  # it retries, it does not crash
            c.stop()

    def test_a_stream_on_wildcards_keeps_its_dead_letters_out_of_its_way(self):
        # nf.> would take in nf.dead, and nd.in takes in nd.in.dead through
        # its second subject: both get idem-dead.<STREAM>
        from consume_harness import Consumer
        from harness import finish_process, wait_for
        for stream, subjects, publish_to in (("NF", ["nf.>"], "nf.x"),
                                             ("ND", ["nd.in", "nd.in.>"], "nd.in")):
            self.nc.js("STREAM.CREATE." + stream, {"name": stream, "subjects": subjects,
                                                   "storage": "file"})
            c = Consumer("%s?stream=%s&consumer=c" % (self.ns.url, stream),
                         self.h.url + "/messages", store="memory:", args=self.consumer_args)
            self.addCleanup(finish_process, self, c)
            c.start()
            self.nc.publish_many(publish_to, [(b"a", {"Order-Id": stream + "-1"}), (b"b", {})])
            wait_for(lambda: len(self.nc.stream_messages(stream + "_DEAD")) == 1, 20,
                     what="the dead letter of " + stream)
            wait_for(lambda: self.h.successes(stream + "-1") == 1, 20, what=stream + "-1 run")
            info = self.nc.js("STREAM.INFO.%s_DEAD" % stream)
            self.assertEqual(info["config"]["subjects"], ["idem-dead." + stream])
            hdrs, body = self.nc.stream_messages(stream + "_DEAD")[0]
            self.assertIn("no header 'Order-Id'", hdrs["Idem-Reason"])
            self.assertEqual(body, b"b")
            self.assertEqual(c.stop(), 0, c.stderr())

    def test_a_dead_letter_carries_the_servers_headers_renamed(self):
        # Nats-* headers would act on the dead letter's own publish (an
        # expected stream of another name refuses it): they go as Idem-*
        self.consumer()
        self.nc.publish_many(STREAM, [(b"no key", {"Nats-Expected-Stream": JS_STREAM,
                                                   "Nats-Msg-Id": "m-9", "X-Other": "y"})])
        self.wait_settled()
        dead = self.dead_letters()
        self.assertEqual(len(dead), 1, dead)
        self.assertEqual(dead[0].get("Idem-Expected-Stream"), JS_STREAM, dead[0])
        self.assertEqual(dead[0].get("Idem-Msg-Id"), "m-9", dead[0])
        self.assertEqual(dead[0].get("X-Other"), "y", dead[0])
        self.assertNotIn("Nats-Expected-Stream", dead[0])

    def test_a_header_given_twice_keeps_both_values(self):
        # to the handler and into the dead letter, in order; the key is
        # read from the first
        self.consumer()
        self.nc.publish_many(STREAM, [
            (b"keyed", [("Order-Id", "mv-1"), ("Order-Id", "mv-2"), ("X-Tag", "a"), ("X-Tag", "b")]),
            (b"no key", [("X-Tag", "c"), ("X-Tag", "d")])])
        self.wait_settled()
        self.assertEqual(self.h.successes("mv-2"), 0)
        got = self.h.attempts("mv-1")
        self.assertEqual(len(got), 1)
        self.assertEqual([v for k, v in got[0]["header_list"] if k.lower() == "x-idem-header-x-tag"],
                         ["a", "b"], got[0]["header_list"])
        dead = self.nc.stream_messages(JS_STREAM + "_DEAD", every_value=True)
        self.assertEqual(len(dead), 1, dead)
        self.assertEqual(dead[0][0].get("X-Tag"), ["c", "d"], dead[0][0])

    def test_a_consumer_deleted_on_the_server_is_made_again(self):
        from harness import wait_for
        c = self.consumer()
        self.publish([{"message_id": "before", "body": "x"}])
        self.wait_settled()
        self.nc.js("CONSUMER.DELETE.%s.%s" % (JS_STREAM, CONSUMER))
        wait_for(lambda: "is gone; making it again" in c.stderr(), 30, what="the consumer made again")
        self.publish([{"message_id": "after", "body": "y"}])
        wait_for(lambda: self.h.successes("after") == 1, 30, what="a message after it")
        self.wait_settled()
        self.assertEqual(self.h.successes("before"), 1)  # delivered again from the start: a replay

    def test_a_consumer_deleted_with_messages_in_flight_acks_each_once(self):
        # the messages held while the consumer is deleted came through a
        # subscription that is retired: their acks are not sent (to no one,
        # or to the consumer made again under the same name); the new
        # consumer delivers them again, busy until the first run is kept,
        # then a replay, acked once
        from harness import wait_for
        keys = ["k%d" % i for i in range(6)]
        for k in keys:
            self.h.delay[k] = 8.0  # past the 5 s of idle fetches that find the consumer gone
        c = self.consumer("--lock-ttl", "12s", "--handler-timeout", "10s", admin=True)
        self.publish([{"message_id": k, "body": k} for k in keys])
        wait_for(lambda: self.h.active == len(keys), 10, what="every handler running")
        self.nc.js("CONSUMER.DELETE.%s.%s" % (JS_STREAM, CONSUMER))
        wait_for(lambda: "is gone; making it again" in c.stderr(), 30, what="the consumer made again")
        self.assertEqual(self.h.active, len(keys))  # still in flight when it was made again
        self.wait_settled()
        self.assertTrue(c.alive(), c.stderr())
        for k in keys:
            self.assertEqual(self.h.successes(k), 1, k)
            self.assertEqual(len(self.h.attempts(k)), 1, k)
        self.assertEqual(self._info()["ack_floor"]["stream_seq"], len(keys))
        self.assertEqual(c.metric('idem_messages_total{outcome="executed"}'), len(keys))
        self.assertEqual(c.metric('idem_messages_total{outcome="replayed"}'), len(keys))
        self.assertEqual(c.metric("idem_settle_failures_total"), len(keys))  # the first runs' acks

    def test_a_connection_torn_down_with_messages_in_flight_acks_each_once(self):
        # a stream that takes one consumer: another one takes its place while
        # billing is gone, so making billing again fails and the connection
        # is torn down and set up again (until the other one is deleted),
        # with the first deliveries still held
        from consume_harness import Consumer
        from harness import finish_process, wait_for
        self.nc.js("STREAM.CREATE.ONE", {"name": "ONE", "subjects": ["one"], "storage": "file",
                                         "max_consumers": 1})
        keys = ["t%d" % i for i in range(4)]
        for k in keys:
            self.h.delay[k] = 8.0
        c = Consumer("%s?stream=ONE&consumer=%s" % (self.ns.url, CONSUMER),
                     self.h.url + "/messages", store="lmdb:%s/store" % self.tmp,
                     args=self.consumer_args + ["--lock-ttl", "12s", "--handler-timeout", "10s"])
        self.addCleanup(finish_process, self, c)
        c.start()
        self.nc.publish_many("one", [(k.encode(), {"Order-Id": k}) for k in keys])
        wait_for(lambda: self.h.active == len(keys), 10, what="every handler running")
        self.nc.js("CONSUMER.DELETE.ONE." + CONSUMER)
        self.nc.js("CONSUMER.DURABLE.CREATE.ONE.other",
                   {"stream_name": "ONE", "config": {"durable_name": "other", "ack_policy": "explicit"}})
        wait_for(lambda: "reconnecting" in c.stderr(), 30, what="the connection torn down")
        self.assertEqual(self.h.active, len(keys))
        wait_for(lambda: self.h.active == 0, 15, what="the first runs over")
        self.nc.js("CONSUMER.DELETE.ONE.other")

        def settled():
            try:
                i = self.nc.js("CONSUMER.INFO.ONE." + CONSUMER)
            except (RuntimeError, OSError, TimeoutError):
                return False
            return i["num_ack_pending"] == 0 and i["num_pending"] == 0 and \
                i["ack_floor"]["stream_seq"] == len(keys)
        wait_for(settled, 60, interval=0.1, what="every message acked: " + c.stderr()[-2000:])
        self.assertTrue(c.alive(), c.stderr())
        for k in keys:
            self.assertEqual(self.h.successes(k), 1, k)
            self.assertEqual(len(self.h.attempts(k)), 1, k)

    def test_bad_uri_exits_2_naming_the_flag(self):
        for uri in ["nats://127.0.0.1:1?stream=ORDERS", "nats://127.0.0.1:1?consumer=c",
                    "nats://127.0.0.1:1/x?stream=S&consumer=c",
                    "nats://127.0.0.1:1?stream=S&consumer=a.b"]:
            rc, out, err = run_idem(["consume", "--from", uri, "--to", "http://127.0.0.1:1/"])
            self.assertEqual(rc, 2, (uri, err))
            self.assertIn("--from", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
