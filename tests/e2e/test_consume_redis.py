"""test_consume_redis.py - `idem consume` on Redis Streams, against a real
redis-server (redis_server.py) and a Python handler that counts executions
per key (consume_harness.py): every row of the outcome table
(consume_cases.OutcomeTests), dead letters, SIGTERM, key sources, bad
flags, --ttl, --max-response, --on-store-error open, the record space
shared with serve (--scope too), and a dead consumer's entries taken over
at the speed of the window.
"""

import hashlib
import re
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import Gateway, run_idem, wait_for  # noqa: E402
from consume_cases import STREAM, BrokerCase, OutcomeTests  # noqa: E402
from consume_harness import RedisClient  # noqa: E402
from redis_server import RedisServer  # noqa: E402

GROUP = "billing"


class ConsumeCase(BrokerCase):
    """The Redis Streams side of consume_cases' broker interface."""

    def start_broker(self):
        self.redis = self.broker_server = RedisServer(aof=True).start()
        self.addCleanup(self.redis.cleanup)
        self.r = RedisClient(self.redis.port)

    def from_uri(self, stream=STREAM):
        return "redis://127.0.0.1:%d?stream=%s&group=%s" % (self.redis.port, stream, GROUP)

    def publish(self, entries, stream=STREAM):
        cmds = []
        for e in entries:
            c = ["XADD", stream, "*"]
            for k, v in e.items():
                c += [k, v]
            cmds.append(c)
        for i in range(0, len(cmds), 2000):
            for r in self.r.pipeline(cmds[i:i + 2000]):
                if isinstance(r, Exception):
                    raise r

    def all_settled(self, stream=STREAM):
        try:
            return self.r.pending_and_lag(stream, GROUP) == (0, 0)
        except (RuntimeError, OSError):
            return False

    def pending(self, stream=STREAM):
        return self.r.pending(stream, GROUP)

    def dead_letters(self, stream=STREAM):
        out = []
        for _, f in self.r.entries(stream + ":dead"):
            d = {k: v.decode("utf-8", "replace") for k, v in f.items() if k != "body"}
            d["reason"] = d.pop("idem-reason")
            d["deliveries"] = d.pop("idem-deliveries")
            d["body"] = f.get("body")
            out.append(d)
        return out


class Outcomes(ConsumeCase, OutcomeTests):
    def test_parked_duplicate_whose_wait_runs_out_is_settled_once(self):
        # the handler outlives the lease: the duplicate parked behind it
        # claims when the lease ends (a takeover), and the first one's end
        # must not wake it a second time
        # the takeover comes about 4 s before the answer: a machine that
        # stalls for less than that cannot let the first run finish first
        self.h.delay = {"k1": 5.0}
        c = self.consumer("--lock-ttl", "1s", "--handler-timeout", "8s")
        self.publish([{"message_id": "k1", "body": "x"}, {"message_id": "k1", "body": "x"}])
        self.wait_settled(30)
        self.assertTrue(c.alive(), c.stderr())
        why = "%r\n%s" % ([(a["fence"], a["status"]) for a in self.h.attempts("k1")],
                           c.stderr()[-3000:])
        # the takeover runs it again with fence 2; on a loaded machine the
        # first answer may be kept before the duplicate gets the key, which
        # then replays it (seen twice in full-suite runs): either way each
        # run has its own fence and both messages are settled once
        # A third run is a third delivery: the broker hands an entry out
        # again once it has been idle past the lease (documented: a handler
        # that outlives its lease can run beside a takeover), seen once on
        # a loaded machine. What must never happen is one delivery run twice.
        attempts = self.h.attempts("k1")
        fences = [a["fence"] for a in attempts]
        self.assertEqual(fences, [str(i + 1) for i in range(len(fences))], why)
        self.assertIn(len(fences), (1, 2, 3), why)
        deliveries = [(a["headers"].get("X-Idem-Message-Id"), a["headers"].get("X-Idem-Deliveries"))
                      for a in attempts]
        self.assertEqual(len(set(deliveries)), len(deliveries), "a delivery ran twice: %r\n%s"
                         % (deliveries, why))
        if len(fences) == 3:
            self.assertTrue(any(int(n) > 1 for _, n in deliveries), "%r\n%s" % (deliveries, why))
        self.assertEqual(self.h.successes("k1"), len(fences), why)

    def test_a_complete_refused_by_a_short_store_outage_is_tried_again_within_the_lease(self):
        # the store goes away as the handler answers, 2.5 s into a 4 s lease,
        # for 0.3 s. --retry-delay 2s would put the next try past the lease:
        # it is tried before the lease ends instead, so the answer is kept
        # and the message runs once (not again after the lease, fence 2)
        from redis_server import RedisServer
        store = RedisServer(aof=True).start()
        self.addCleanup(store.cleanup)
        self.h.delay = {"k1": 2.5}
        self.consumer("--lock-ttl", "4s", "--handler-timeout", "3s", "--retry-delay", "2s",
                      "--max-retry-delay", "2s", store=store.uri)
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: self.h.active >= 1, 20, what="the handler running")
        time.sleep(2.4)  # the outage starts as the handler answers (not a wait for a condition)
        store.kill()
        time.sleep(0.3)  # the outage
        store.start()
        self.wait_settled(30)
        time.sleep(5)  # a second run would come after the lease
        self.assertEqual([a["fence"] for a in self.h.attempts("k1")], ["1"])

    def test_readyz_asks_the_store_with_no_message_coming(self):
        from redis_server import RedisServer
        store = RedisServer().start()
        self.addCleanup(store.cleanup)
        c = self.consumer(store=store.uri, admin=True)
        wait_for(lambda: c.admin_get("/readyz")[0] == 200, 15, what="ready")
        store.kill()
        wait_for(lambda: c.admin_get("/readyz")[0] == 503, 15, what="503 with the store away")
        self.assertIn("store unavailable", c.admin_get("/readyz")[1])
        store.start()
        wait_for(lambda: c.admin_get("/readyz")[0] == 200, 30, what="ready again")

    def test_dead_letter_and_ack_are_one_step(self):
        self.consumer()
        self.publish([{"body": "no key"}])
        self.wait_settled()
        dead = self.r.entries(STREAM + ":dead")
        self.assertEqual(len(dead), 1)
        self.assertEqual(dead[0][1]["idem-id"].decode(), self.r.entries(STREAM)[0][0])


class Takeover(ConsumeCase):
    def test_a_dead_consumers_entries_are_taken_over_a_window_at_a_time(self):
        # a consumer read 100 entries and died: an idle consumer takes them
        # over with XAUTOCLAIM while its blocking XREADGROUP holds the whole
        # window. One entry a tick (500 ms at --lock-ttl 5s) would take 50 s;
        # a window at a time, about --lock-ttl. Never more than the window
        # (4 + 4) in flight, the takeover's share included.
        keys = ["to-%d" % i for i in range(100)]
        for k in keys:
            self.h.delay[k] = 0.01
        self.publish([{"message_id": k, "body": "x"} for k in keys])
        self.r.command("XGROUP", "CREATE", STREAM, GROUP, "0")
        self.r.command("XREADGROUP", "GROUP", GROUP, "dead", "COUNT", "100", "STREAMS", STREAM, ">")
        self.assertEqual(self.pending(), 100)
        c = self.consumer("--lock-ttl", "5s", "--handler-timeout", "2s", "--concurrency", "4",
                          "--prefetch", "4", admin=True)
        seen = []
        deadline = time.monotonic() + 25  # generous: twice as fast as a page a tick suffices
        while sum(self.h.successes(k) for k in keys) < len(keys):
            self.assertLess(time.monotonic(), deadline, "%d of 100 taken over in 25 s: %s" % (
                sum(self.h.successes(k) for k in keys), c.stderr()[-2000:]))
            seen.append(c.metric("idem_messages_in_flight"))
            time.sleep(0.01)  # a sampling interval, not a wait for a condition
        self.wait_settled()
        self.assertLessEqual(max(seen), 8, "window 4 + 4, in flight up to %d" % max(seen))
        for k in keys:
            self.assertEqual(self.h.successes(k), 1, k)
            self.assertEqual(self.h.attempts(k)[0]["headers"]["X-Idem-Deliveries"], "2", k)
        self.assertEqual(self.dead_letters(), [])


class DeliveryCounts(ConsumeCase):
    """--max-deliveries counts Redis's deliveries, but no more than the
    times the key was claimed: a redelivery that found the key busy on
    another consumer (postponed, then taken again with XAUTOCLAIM, which
    counts it) never reached the handler."""

    def publish_postponed_seven_times(self, key):
        """An entry whose counter is as seven postponements would leave it
        (XCLAIM RETRYCOUNT), its key never claimed."""
        self.publish([{"message_id": key, "body": "x"}])
        self.r.command("XGROUP", "CREATE", STREAM, GROUP, "0")
        self.r.command("XREADGROUP", "GROUP", GROUP, "gone", "COUNT", "1", "STREAMS", STREAM, ">")
        [(eid, _)] = self.r.entries(STREAM)
        self.r.command("XCLAIM", STREAM, GROUP, "gone", "0", eid, "IDLE", "60000",
                       "RETRYCOUNT", "7", "JUSTID")

    def test_redeliveries_that_never_claimed_the_key_do_not_count(self):
        # seven postponements, its key never claimed: it still runs
        self.publish_postponed_seven_times("postponed")
        self.consumer("--max-deliveries", "3")
        self.wait_settled()
        self.assertEqual(self.h.successes("postponed"), 1)
        self.assertEqual(self.h.attempts("postponed")[0]["headers"]["X-Idem-Deliveries"], "8")
        self.assertEqual(self.dead_letters(), [])

    def test_the_backoff_counts_deliveries_as_max_deliveries_does(self):
        # seven postponements, then a 503: the retry comes after
        # --retry-delay (its key claimed once), not 2^7 times it (12.8 s)
        self.h.script["postponed"] = [(503, 0)]
        self.publish_postponed_seven_times("postponed")
        self.consumer("--lock-ttl", "30s", "--retry-delay", "100ms", "--max-retry-delay", "60s")
        wait_for(lambda: self.h.successes("postponed") == 1, 8, what="the retry, soon")
        self.assertEqual(len(self.h.attempts("postponed")), 2)

    def test_a_key_claimed_more_times_than_max_deliveries_is_dead_lettered_unrun(self):
        # each consumer that took the entry claimed its key and was killed
        # while the handler ran; the one after --max-deliveries such claims
        # marks the key failed and dead-letters the entry, handler not called
        self.h.script["killed"] = [(200, 30), (200, 30)]
        self.publish([{"message_id": "killed", "body": "x"}])
        for n in (1, 2):
            c = self.consumer("--lock-ttl", "2s", "--max-deliveries", "2")
            wait_for(lambda: self.h.arrivals("killed") == n, 20,
                     what="delivery %d at the handler: %s" % (n, c.stderr()[-2000:]))
            c.kill()
        self.consumer("--lock-ttl", "2s", "--max-deliveries", "2")
        self.wait_settled()
        self.assertEqual(self.h.arrivals("killed"), 2)
        [dead] = self.dead_letters()
        self.assertIn("delivered 3 times, more than --max-deliveries 2", dead["reason"])
        self.assertEqual(self.record("killed")["state"], "failed")


class Consumers(ConsumeCase):
    def consumer_names(self):
        return sorted(dict(zip(c[::2], c[1::2]))[b"name"].decode()
                      for c in self.r.command("XINFO", "CONSUMERS", STREAM, GROUP))

    def test_restarts_do_not_pile_up_consumers_in_the_group(self):
        # each process is a consumer of its own (HOST-PID): one that exits with
        # nothing pending leaves the group, so restarts add none for good
        for i in range(3):
            self.publish([{"message_id": "r-%d" % i, "body": "x"}])
            c = self.consumer()
            self.wait_settled()
            self.assertEqual(c.stop(), 0, c.stderr())
            self.assertEqual(self.consumer_names(), [], c.stderr())
        # one that leaves an entry pending (its redelivery is due later) stays,
        # so that another consumer takes that entry over
        self.h.status["later"] = 503
        self.publish([{"message_id": "later", "body": "x"}])
        c = self.consumer("--retry-delay", "20s", "--max-retry-delay", "20s", "--lock-ttl", "30s",
                          admin=True)
        wait_for(lambda: self.h.attempts("later"), 10, what="the handler asked")
        wait_for(lambda: c.metric('idem_messages_total{outcome="retry"}') == 1, 10,
                 what="the retry settled")
        self.assertEqual(c.stop(), 0, c.stderr())
        self.assertEqual(len(self.consumer_names()), 1)
        self.assertEqual(self.pending(), 1)


    def test_consumers_killed_are_removed_once_nothing_is_pending(self):
        # "ghost" was killed with nothing pending, "holder" with an entry
        # pending: a live consumer removes each once it has nothing pending
        # and has been idle over --lock-ttl (holder's entry taken over
        # first). Live consumers removed while quiet (Redis 7.0 cannot tell
        # them apart) come back with their next entry and lose nothing.
        self.publish([{"message_id": "held", "body": "x"}])
        self.r.command("XGROUP", "CREATE", STREAM, GROUP, "0")
        self.r.command("XGROUP", "CREATECONSUMER", STREAM, GROUP, "ghost")
        self.r.command("XREADGROUP", "GROUP", GROUP, "holder", "COUNT", "1", "STREAMS", STREAM, ">")
        live = [self.consumer("--lock-ttl", "1s", store="lmdb:%s/store%d" % (self.tmp, i))
                for i in range(2)]
        wait_for(lambda: not {"ghost", "holder"} & set(self.consumer_names()), 15,
                 what="ghost and holder removed: %s" % self.consumer_names())
        self.wait_settled()
        self.assertEqual(self.h.successes("held"), 1)
        keys = ["after-%d" % i for i in range(40)]
        self.publish([{"message_id": k, "body": "x"} for k in keys])
        self.wait_settled()
        for k in keys:
            self.assertEqual(self.h.successes(k), 1, k)
        for c in live:
            self.assertEqual(c.stop(), 0, c.stderr())
        self.assertEqual(self.consumer_names(), [])

class Leases(ConsumeCase):
    def test_a_complete_after_failed_claims_is_tried_again(self):
        # the claim failed while the store was away (its backoff grew); the
        # complete that fails later must start its own backoff, not give up
        # at once and let the handler run again after the lease
        store = RedisServer(aof=True).start()  # a restart keeps the claim
        self.addCleanup(store.cleanup)
        # 4 s of the lease left at the complete: less than the 6.4 s backoff
        # six failed claims built, time enough for a fresh one
        self.h.delay = {"K1": 6.0}
        c = self.consumer("--lock-ttl", "10s", "--handler-timeout", "8s", "--retry-delay",
                          "100ms", "--max-retry-delay", "60s", store=store.uri, admin=True)
        store.kill()
        self.publish([{"message_id": "K1", "body": "x"}])
        wait_for(lambda: c.metric('idem_messages_total{outcome="store_error"}') >= 6, 30,
                 what="six failed claims")
        store.start()
        wait_for(lambda: self.h.active == 1, 20, what="K1 at the handler")
        store.kill()
        wait_for(lambda: self.h.successes("K1") == 1, 30, what="K1's answer")
        time.sleep(0.5)  # the outage (not a wait for a condition): the complete fails in it
        store.start()
        self.wait_settled(30)
        self.assertEqual([a["fence"] for a in self.h.attempts("K1")], ["1"])


    def test_a_handler_timeout_past_the_lease_is_warned_of(self):
        # as serve warns of --upstream-timeout: a handler still running when
        # its lease ends can be taken over and run again
        warned = self.consumer("--lock-ttl", "2s", "--handler-timeout", "3s")
        wait_for(lambda: "warning: --handler-timeout (3000ms) is longer than --lock-ttl (2000ms)"
                 in warned.stderr(), 10, what="the warning")
        warned.stop()
        quiet = self.consumer("--lock-ttl", "3s", "--handler-timeout", "3s")
        self.publish([{"message_id": "w1", "body": "x"}])
        self.wait_settled(30)
        self.assertNotIn("warning", quiet.stderr())


    def test_admin_port_0_says_the_port_it_got(self):
        # as serve's ready line: the port the system picked, which answers
        c = self.consumer("--admin-listen", "127.0.0.1:0")
        m = re.search(r"admin listening on 127\.0\.0\.1:(\d+)", c.stderr())
        self.assertTrue(m, c.stderr())
        self.assertNotEqual(int(m.group(1)), 0, c.stderr())
        c.admin_port = int(m.group(1))
        self.assertEqual(c.admin_get("/healthz")[0], 200)


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
        self.assertEqual(len(self.dead_letters("s-json")), 1)
        self.assertEqual(self.h.successes(hashlib.sha256(b"same bytes").hexdigest()), 1)

    def test_bad_key_values_go_to_dead_letters(self):
        self.consumer("--key", "json:/id")
        self.publish([{"body": "not json"}, {"body": '{"id": {"a": 1}}'}, {"body": '{"id": ""}'},
                      {"body": '{"other": 1}'}, {"body": '{"id": 42}'}])
        self.wait_settled()
        reasons = sorted(d["reason"] for d in self.dead_letters())
        self.assertEqual(len(reasons), 4, reasons)
        self.assertTrue(any("not JSON" in r for r in reasons), reasons)
        self.assertTrue(any("not a string or a number" in r for r in reasons), reasons)
        self.assertTrue(any("not a valid key" in r for r in reasons), reasons)
        self.assertTrue(any("nothing at /id" in r for r in reasons), reasons)
        self.assertEqual(self.h.successes("42"), 1)

    def test_a_message_id_holding_a_nul_is_no_key(self):
        # "nul\0A" and "nul\0B" are two ids, neither a valid key: read up
        # to the NUL they were one key, "nul", and the second was acked as
        # a replay of the first, never run. A field whose name only starts
        # with message_id is not the message id either
        self.consumer()
        self.publish([{"message_id": b"nul\x00A", "body": "same"},
                      {"message_id": b"nul\x00B", "body": "same"},
                      {"message_id": "nul", "body": "same"},
                      {b"message_id\x00x": "solo", "body": "x"}])
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("nul")), 1)
        self.assertEqual(self.h.attempts("solo"), [])
        reasons = sorted(d["reason"] for d in self.dead_letters())
        self.assertEqual(len(reasons), 3, reasons)
        self.assertEqual(sum("not a valid key" in r for r in reasons), 2, reasons)
        self.assertEqual(sum("no message id" in r for r in reasons), 1, reasons)

    def test_a_field_name_holding_a_nul_is_not_passed_on(self):
        # "trace\0x" is no header name: read up to the NUL it reached the
        # handler as X-Idem-Header-trace, and --key header:trace found it
        self.consumer("--key", "header:trace", stream="nul-names")
        self.publish([{"message_id": "n-1", b"trace\x00x": "t-1", "trace": "t-2", "body": "x"},
                      {b"trace\x00y": "t-3", "body": "y"}], stream="nul-names")
        self.wait_settled(stream="nul-names")
        self.assertEqual(self.h.attempts("t-1"), [])
        got = self.h.attempts("t-2")
        self.assertEqual(len(got), 1)
        self.assertEqual([v for k, v in got[0]["header_list"] if k.lower() == "x-idem-header-trace"],
                         ["t-2"], got[0]["header_list"])
        self.assertEqual(self.h.attempts("t-3"), [])
        dead = self.dead_letters("nul-names")
        self.assertEqual(len(dead), 1, dead)
        self.assertIn("no header 'trace'", dead[0]["reason"])

    def test_a_field_given_twice_counts_as_its_first(self):
        # as body does and as --key header:NAME finds it: the last
        # message_id was the key while the first was the header
        self.consumer()
        for r in self.r.pipeline([["XADD", STREAM, "*", "message_id", "first", "body", "x",
                                   "message_id", "second", "body", "y"]]):
            if isinstance(r, Exception):
                raise r
        self.wait_settled()
        self.assertEqual(self.dead_letters(), [])
        got = self.h.attempts("first")
        self.assertEqual(len(got), 1)
        self.assertEqual(self.h.attempts("second"), [])
        self.assertEqual(got[0]["body"], b"x")

    def test_bad_flags_exit_2_naming_the_flag(self):
        for args, flag in [
            (["--from", "kafka://x", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:1?stream=s", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:1?stream=s&group=g&bogus=1", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:99999?stream=s&group=g", "--to", "http://a:1/"], "--from"),
            (["--from", "redis://h:1?stream=s&group=g&consumer=", "--to", "http://a:1/"], "--from"),
            (["--from", self.from_uri(), "--to", "https://a:1/"], "--to"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--key", "header:"], "--key"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--key", "json:a"], "--key"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--concurrency", "0"], "--concurrency"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--on-store-error", "x"], "--on-store-error"),
            # a scope PostgreSQL could not keep as text: refused, not failed per message
            (["--from", self.from_uri(), "--to", "http://a:1/", "--scope", "t\udcff"], "--scope"),
            (["--from", self.from_uri(), "--to", "http://a:1/", "--scope", "a\tb"], "--scope"),
            (["--to", "http://a:1/"], "--from"),
            (["--from", self.from_uri(), "--to", "http://127.0.0.1:1/", "--store", "bogus:x"], "--store"),
            (["--from", self.from_uri(), "--to", "http://127.0.0.1:1/", "--store", "lmdb:"], "--store"),
        ]:
            rc, out, err = run_idem(["consume"] + args)
            self.assertEqual(rc, 2, (args, err))
            self.assertIn(flag, err, args)


class HandlerRequest(ConsumeCase):
    def test_a_handler_refusing_the_headers_is_retried_then_dead_lettered(self):
        # 120 fields make 120 X-Idem-Header-* headers, past what Python's
        # http.server takes (100): it answers 431 before its application
        # sees the message. That is not the handler's answer to keep: the
        # message is retried, then dead-lettered with the key failed
        self.consumer("--max-deliveries", "2", "--retry-delay", "10ms")
        entry = {"message_id": "wide", "body": "x"}
        entry.update({"f%03d" % i: "v" for i in range(120)})
        self.publish([entry])
        self.wait_settled()
        dead = self.dead_letters()
        self.assertEqual(len(dead), 1, dead)
        self.assertIn("431", dead[0]["reason"])
        self.assertEqual(self.record("wide")["state"], "failed")

    def test_an_empty_type_or_a_value_no_server_takes_is_not_sent(self):
        # "Content-Type: " is no type: application/octet-stream; a value with
        # a control character makes a strict server (Go, Node) answer 400,
        # kept as if the handler had refused the message: not passed on
        self.consumer()
        self.publish([{"message_id": "k1", "body": "x", "content-type": "", "ok": "a\tb c",
                       "bell": "a\x07b", "del": "a\x7fb"}])
        self.wait_settled()
        sent = self.h.attempts("k1")[0]["headers"]
        self.assertEqual(sent["Content-Type"], "application/octet-stream", sent)
        self.assertEqual(sent.get("X-Idem-Header-ok"), "a\tb c", sent)
        self.assertNotIn("X-Idem-Header-bell", sent)
        self.assertNotIn("X-Idem-Header-del", sent)


class Credentials(ConsumeCase):
    def test_a_password_alone_authenticates_as_for_the_store(self):
        # ":pass@" and a bare "pass@" are the default user's password, as
        # the Redis store and redis-cli read them (not AUTH "" pass)
        self.redis.command("CONFIG", "SET", "requirepass", "s3cret")
        self.r = RedisClient(self.redis.port, password="s3cret")
        for i, auth in enumerate([":s3cret@", "s3cret@", "default:s3cret@"]):
            stream = "auth-%d" % i
            uri = "redis://%s127.0.0.1:%d?stream=%s&group=%s" % (auth, self.redis.port, stream, GROUP)
            c = self.consumer(stream=stream, start=False)
            c.from_uri = uri
            c.start()
            self.publish([{"message_id": "a-%d" % i, "body": "x"}], stream=stream)
            self.wait_settled(stream=stream)
            self.assertEqual(self.h.successes("a-%d" % i), 1, c.stderr())
            c.stop()

    def test_a_user_with_an_empty_password_authenticates_as_that_user(self):
        # "user:@" names an ACL user (one made with nopass): AUTH user "", as
        # the Redis store sends it; no AUTH at all would act as `default`
        self.redis.command("ACL", "SETUSER", "worker", "on", "nopass", "~*", "&*", "+@all")
        self.redis.command("ACL", "SETUSER", "default", "off")
        self.r = RedisClient(self.redis.port, user="worker")
        c = self.consumer(start=False)
        c.from_uri = "redis://worker:@127.0.0.1:%d?stream=%s&group=%s" % (
            self.redis.port, STREAM, GROUP)
        c.start()
        self.publish([{"message_id": "u-1", "body": "x"}])
        self.wait_settled()
        self.assertEqual(self.h.successes("u-1"), 1, c.stderr())


class StoreAtStart(ConsumeCase):
    def test_an_embedded_store_that_cannot_be_opened_exits_1(self):
        # as serve: it will not heal, and every message would wait on it
        # unacked for ever behind a consumer that says "broker connected"
        blocker = os.path.join(self.tmp, "a-file")
        open(blocker, "w").close()
        store = "lmdb:%s/store" % blocker
        rc, out, err = run_idem(["consume", "--from", self.from_uri(), "--to", self.h.url + "/m",
                                 "--store", store], timeout=15)
        self.assertEqual(rc, 1, err)
        self.assertIn(store, err)
        self.assertIn("Not a directory", err)


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

    def test_a_scope_shares_one_tenants_records_with_a_serve_scope_header(self):
        # serve's scope is the SHA-256 hex of --scope-header's value: a
        # consumer given that hash shares the tenant's records, one
        # without --scope does not
        store = "lmdb:%s/shared" % self.tmp
        gw = Gateway(self.h.url, store=store,
                     args=["--spool", "off", "--scope-header", "X-Tenant"]).start()
        self.addCleanup(gw.stop)
        r = gw.request("POST", "/messages", body=b"x",
                       headers={"Idempotency-Key": "t-1", "X-Tenant": "acme"})
        self.assertEqual(r.status, 200)
        tenant = hashlib.sha256(b"acme").hexdigest()
        self.consumer("--scope", tenant, store=store, stream="scoped")
        self.publish([{"message_id": "t-1", "body": "x"}], stream="scoped")
        self.wait_settled(stream="scoped")
        self.assertEqual(len(self.h.attempts("t-1")), 1)  # replayed the tenant's answer
        self.consumer(store=store, stream="unscoped")
        self.publish([{"message_id": "t-1", "body": "x"}], stream="unscoped")
        self.wait_settled(stream="unscoped")
        self.assertEqual(len(self.h.attempts("t-1")), 2)  # another record space


class Flags(ConsumeCase):
    def test_ttl_is_how_long_a_record_is_kept(self):
        self.consumer("--ttl", "2h")
        self.publish([{"message_id": "ttl-1", "body": "x"}])
        self.wait_settled()
        rec = self.record("ttl-1")
        self.assertEqual(rec["state"], "completed")
        self.assertAlmostEqual(rec["expires_at_ms"] - rec["updated_at_ms"], 2 * 3600 * 1000, delta=1000)

    def test_ttl_defaults_to_7d(self):
        self.consumer()
        self.publish([{"message_id": "ttl-7", "body": "x"}])
        self.wait_settled()
        rec = self.record("ttl-7")
        self.assertAlmostEqual(rec["expires_at_ms"] - rec["updated_at_ms"], 7 * 86400 * 1000, delta=1000)

    def test_an_answer_over_max_response_keeps_the_502_marker_and_acks(self):
        self.consumer("--max-response", "8B")
        self.publish([{"message_id": "big-1", "body": "x"}, {"message_id": "big-1", "body": "x"}])
        self.wait_settled()
        self.assertEqual(len(self.h.attempts("big-1")), 1)  # the second replays the marker
        rec = self.record("big-1")
        self.assertEqual(rec["state"], "completed")
        self.assertEqual(rec["response"]["status"], 502)
        self.assertEqual(self.dead_letters(), [])

    def test_a_5xx_over_max_response_is_retried_not_kept(self):
        # a status that is not kept (5xx) is retried whatever its size, as
        # serve releases the key; only a kept status gets the marker
        self.h.script["big-5xx"] = [(503, 0)]
        self.consumer("--max-response", "8B")
        self.publish([{"message_id": "big-5xx", "body": "x"}])
        self.wait_settled()
        self.assertEqual([a["status"] for a in self.h.attempts("big-5xx")], [503, 200])
        rec = self.record("big-5xx")
        self.assertEqual((rec["state"], rec["fence"]), ("completed", 2))
        self.assertEqual(self.dead_letters(), [])

    def test_on_store_error_open_delivers_without_a_record(self):
        c = self.consumer("--on-store-error", "open", store="redis://127.0.0.1:1", admin=True)
        self.publish([{"message_id": "open-1", "body": "x"}])
        self.wait_settled()
        got = self.h.attempts("open-1")
        self.assertEqual(len(got), 1)
        self.assertNotIn("Idempotency-Fence", got[0]["headers"])  # no record, no fence
        self.assertEqual(c.metric('idem_messages_total{outcome="store_bypass"}'), 1)
        self.assertEqual(self.dead_letters(), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
