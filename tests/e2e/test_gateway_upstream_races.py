"""Connection races a real upstream produces (race_upstream.py), with
several clients at once: every client answer is checked against the
request it belongs to and against what a retry replays, and the upstream
counts what it saw per key, so a double run, an answer handed to the wrong
request or an answer lost to a 502 shows."""

import json
import threading

from harness import GatewayTestCase, main
from race_upstream import RaceUpstream


class UpstreamRaces(GatewayTestCase):
    def start_race_upstream(self, **kw):
        up = RaceUpstream(**kw).start()
        self.addCleanup(up.stop)
        return up

    def run_clients(self, gw, tag, clients, per, body=b'{"a":1}', headers=None):
        """clients threads, each sending per keyed POSTs on one keep-alive
        connection; returns {key: (status, body)}."""
        import http.client
        answers, lock = {}, threading.Lock()

        def client(ci):
            c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
            try:
                for i in range(per):
                    k = "%s-%d-%d" % (tag, ci, i)
                    h = {"Idempotency-Key": k, "X-Test-Id": k}
                    h.update(headers or {})
                    c.request("POST", "/o", body=body, headers=h)
                    r = c.getresponse()
                    data = r.read()
                    with lock:
                        answers[k] = (r.status, data)
                    if r.getheader("Connection", "").lower() == "close":
                        c.close()
            finally:
                c.close()

        ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertEqual(len(answers), clients * per, self.gw_log())
        return answers

    def check_answers(self, gw, up, answers, status, body=b'{"a":1}', headers=None):
        """Every request got its own answer with this status, ran once, and
        a retry replays that answer byte for byte."""
        for k, (st, data) in sorted(answers.items()):
            ctx = "key %s: %d %r\n%s" % (k, st, data[:200], self.gw_log())
            self.assertEqual(st, status, ctx)
            doc = json.loads(data)
            self.assertEqual(doc["id"], k, ctx)
            self.assertEqual(doc["exec"], 1, ctx)
            self.assertEqual(up.count(k), 1, ctx)
            h = {"X-Test-Id": k}
            h.update(headers or {})
            r = gw.request("POST", "/o", body=body, key=k, headers=h)
            self.assertEqual((r.status, r.body), (st, data), ctx)
            self.assertTrue(r.replayed, ctx)
            self.assertEqual(up.count(k), 1, ctx)

    def test_early_answer_to_a_body_not_read_is_the_answer(self):
        # The upstream answers 201 after the head and closes with most of a
        # large body unread, so its TCP resets the connection while the
        # gateway is still writing the body. The answer is in: it is the
        # request's answer (kept, replayed), never a 502 that loses it and
        # lets the request run again once the lease ends.
        up = self.start_race_upstream(rcvbuf=16384)
        gw = self.start_gateway(up.url, "--max-body", "8MiB")
        big = b"x" * (4 << 20)
        hdrs = {"X-Test-Early": "201"}
        answers = self.run_clients(gw, "early", 4, 10, body=big, headers=hdrs)
        self.check_answers(gw, up, answers, 201, body=big, headers=hdrs)

    def test_keep_alive_timeout_of_the_upstream_is_kept(self):
        # An upstream that closes connections idle for a few milliseconds and
        # says so (Keep-Alive: timeout=1, in seconds, as Node and Apache send
        # theirs): the gateway must not reuse such a connection, or a keyed
        # request crossing the upstream's close gets a 502 and its key stays
        # locked, though the upstream never saw it.
        up = self.start_race_upstream(idle_close_ms=(1, 5), keep_alive_hint=1)
        gw = self.start_gateway(up.url)
        answers = self.run_clients(gw, "hint", 8, 40)
        self.check_answers(gw, up, answers, 200)

    def test_answers_that_break_keep_alive_are_never_mixed(self):
        # A second, unasked answer after the first, a body longer than its
        # Content-Length, a 100 Continue before the answer, trailers: the
        # connection is not reused with bytes left on it, so no request gets
        # another's answer, and each ran once and replays as first answered.
        up = self.start_race_upstream()
        gw = self.start_gateway(up.url)
        for tag, hdrs in (("extra", {"X-Test-Extra": "1"}), ("long", {"X-Test-Long": "9"}),
                          ("cont", {"X-Test-Continue": "1"}), ("trl", {"X-Test-Trailers": "1"})):
            answers = self.run_clients(gw, tag, 4, 25, headers=hdrs)
            self.check_answers(gw, up, answers, 200, headers=hdrs)

    def test_upstream_that_stops_reading_the_body_times_out_lease_kept(self):
        # The upstream reads the head and no more of an 8 MiB body: the
        # gateway's write stalls, --upstream-timeout ends it with a 504, and
        # the key stays locked (the request may have run): a retry gets 409.
        up = self.start_race_upstream(rcvbuf=8192)
        gw = self.start_gateway(up.url, "--max-body", "16MiB", "--upstream-timeout", "300ms")
        big = b"x" * (8 << 20)
        hdrs = {"X-Test-Stall": "1"}
        results = {}

        def one(i):
            results[i] = gw.request("POST", "/o", body=big, key="stall-%d" % i, headers=hdrs)

        ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        for i in range(4):
            self.assertProblem(results[i], 504, self.gw_log())
            self.assertEqual(up.count("stall-%d" % i), 1)
            r = gw.request("POST", "/o", body=big, key="stall-%d" % i, headers=hdrs)
            self.assertProblem(r, 409, self.gw_log())


if __name__ == "__main__":
    main()
