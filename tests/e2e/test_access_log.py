"""--access-log: one JSON line per request with its route, key, scope hash,
outcome, fence, status and latencies; hostile targets and keys stay valid
JSON; an absolute-form target is logged in the origin form sent upstream;
lines buffered in the gateway reach the file by SIGTERM (none lost), also
when --drain-timeout cuts a request still in flight;
SIGUSR1 reopens the path after a move (logrotate); `-` writes to standard
output; a path that cannot be opened stops serve with status 2."""

import json
import os
import signal
import subprocess

from harness import (GatewayTestCase, RawConn, idem_bin, main, request_in_background,
                     wait_for)


def lines(path):
    with open(path, "rb") as f:
        return [json.loads(line) for line in f.read().decode("ascii").splitlines()]


class AccessLog(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()
        self.dir = self.tempdir()
        self.log = os.path.join(self.dir, "access.log")

    def gateway(self, *args, workers=1):
        """One worker unless asked: the lines of one worker are in order."""
        return self.start_gateway(self.up, "--access-log", self.log, "--scope-header",
                                  "X-Tenant", "--workers", str(workers), *args)

    def stop_and_read(self, gw):
        gw.stop()
        return lines(self.log)

    def test_each_outcome_has_its_line(self):
        gw = self.gateway()
        t = {"X-Tenant": "acme"}
        gw.request("POST", "/pay?x=1", body=b'{"n":1}', key="k1", headers=t)   # executed
        gw.request("POST", "/pay?x=1", body=b'{"n":1}', key="k1", headers=t)   # replayed
        gw.request("POST", "/pay?x=1", body=b'{"n":2}', key="k1", headers=t)   # mismatch
        gw.request("GET", "/status")                                          # passthrough
        gw.request("POST", "/pay", body=b"x", key="k" * 300)                   # bad key
        gw.request("POST", "/fail", body=b"x", key="k2",
                   headers={"X-Test-Status": "503"})                          # released
        got = self.stop_and_read(gw)
        self.assertEqual([x["outcome"] for x in got],
                         ["executed", "replayed", "mismatch", "passthrough", "bad_key", "released"],
                         json.dumps(got, indent=1))
        ex, rp, mm, pt, bk, rl = got
        self.assertEqual((ex["method"], ex["target"], ex["key"], ex["status"], ex["fence"]),
                         ("POST", "/pay?x=1", "k1", 200, 1))
        self.assertRegex(ex["scope"], "^[0-9a-f]{64}$")  # the tenant, hashed: never the header
        self.assertEqual(rp["scope"], ex["scope"])
        self.assertEqual((rp["status"], rp["fence"], rp["upstream_ms"]), (200, None, None))
        self.assertEqual(mm["status"], 422)
        self.assertEqual((pt["key"], pt["scope"], pt["fence"]), (None, None, None))
        self.assertEqual(bk["status"], 400)
        self.assertEqual((rl["status"], rl["fence"]), (503, 1))
        for x in got:
            self.assertRegex(x["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertEqual(x["route"], 0)  # no config: the defaults
            self.assertGreaterEqual(x["total_ms"], 0)
        self.assertGreater(ex["upstream_ms"], 0)
        self.assertGreaterEqual(ex["total_ms"], ex["upstream_ms"])

    def test_a_client_that_resets_gets_status_0_and_its_request_is_kept(self):
        import socket
        import struct
        from harness import request_bytes
        gw = self.gateway()
        hdr = {"X-Test-Delay-Ms": "1500"}
        for key, reset in (("gone", True), ("half", False)):
            c = RawConn(gw.port)
            c.send(request_bytes("POST", "/pay", b"x", key=key, headers=hdr))
            self.up.wait_count(key, 1)  # sent upstream: the answer is on its way
            if reset:  # RST: the gateway can tell the client is gone
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
            else:  # FIN: a half-close, which may still want its answer
                c.sock.shutdown(socket.SHUT_WR)
            # the request still ran under its claim and was recorded
            r = wait_for(lambda: (lambda r: r if r.status != 409 else None)(
                gw.request("POST", "/pay", body=b"x", key=key)), 20, 0.1, key)
            self.assertTrue(r.replayed, (key, r))
            if not reset:
                self.assertEqual(c.read_response().status, 200)
                c.close()
        self.assertEqual(self.up.count("gone") + self.up.count("half"), 2)
        got = self.stop_and_read(gw)
        first = {x["key"]: x for x in got if x["outcome"] == "executed"}
        self.assertEqual((first["gone"]["status"], first["gone"]["fence"]), (0, 1), got)
        self.assertEqual(first["half"]["status"], 200, got)

    def test_a_streamed_answer_to_a_reset_client_logs_status_0(self):
        # a request without a key gets its answer streamed: when the client
        # reset before the head went out, nothing was sent, and the status
        # says so as for a keyed one
        import socket
        import struct
        from harness import request_bytes
        gw = self.gateway()
        c = RawConn(gw.port)
        c.send(request_bytes("POST", "/pay", b"x", headers={"X-Test-Delay-Ms": "800",
                                                            "X-Test-Id": "unkeyed"}))
        self.up.wait_count("unkeyed", 1)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
        got = self.stop_and_read(gw)  # SIGTERM: the answer in flight comes first
        line = [x for x in got if x["outcome"] == "passthrough"]
        self.assertEqual(len(line), 1, got)
        self.assertEqual(line[0]["status"], 0, got)

    def test_a_refused_scope_keeps_its_well_formed_key(self):
        # README: key is null "without one (or a malformed one)"; a request
        # refused for its scope header sent twice (400 invalid-scope) had a
        # good key, so its line names it, as body-not-json's does
        gw = self.gateway()
        with RawConn(gw.port) as c:
            c.send(b"POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k1\r\n"
                   b"X-Tenant: a\r\nX-Tenant: b\r\nContent-Length: 0\r\n\r\n")
            self.assertEqual(c.read_response().status, 400)
        gw.request("POST", "/pay", body=b"x", key="k" * 300)  # malformed: null
        got = self.stop_and_read(gw)
        scope, bad = got
        self.assertEqual((scope["key"], scope["scope"], scope["outcome"], scope["status"]),
                         ("k1", None, "bad_key", 400), got)
        self.assertEqual((bad["key"], bad["outcome"]), (None, "bad_key"), got)

    def test_no_answer_head_no_upstream_ms(self):
        from harness import free_port
        gw = self.start_gateway("http://127.0.0.1:%d" % free_port(), "--access-log", self.log,
                                "--workers", "1")
        self.assertEqual(gw.request("POST", "/pay", body=b"x", key="down").status, 502)
        gw.stop()
        gw2 = self.gateway("--upstream-timeout", "1s", "--lock-ttl", "1s")
        r = gw2.request("POST", "/slow", body=b"x", key="late", headers={"X-Test-Hang": "1"})
        self.assertEqual(r.status, 504, self.gw_log())
        got = self.stop_and_read(gw2)  # both gateways' lines, in turn
        down, late = got
        self.assertEqual((down["outcome"], down["upstream_ms"]), ("upstream_error", None), got)
        self.assertEqual(late["upstream_ms"], None, got)

    def test_upstream_ms_ends_at_the_answer_head_for_keyed_requests_too(self):
        # README: upstream_ms is "from sending the request upstream to its
        # answer's head": a kept (buffered) answer whose body comes 1.5 s
        # after its head is timed to the head, as a streamed one is
        gw = self.gateway()
        slow = {"X-Test-Body-Delay-Ms": "1500"}
        self.assertEqual(gw.request("POST", "/keyed", body=b"x", key="bd", headers=slow).status, 200)
        self.assertEqual(gw.request("GET", "/streamed", headers=slow).status, 200)
        got = self.stop_and_read(gw)
        keyed, streamed = got
        for line in (keyed, streamed):
            self.assertLess(line["upstream_ms"], 1000, got)
            self.assertGreaterEqual(line["total_ms"], 1400, got)

    def test_hostile_target_and_key_stay_valid_json(self):
        gw = self.gateway()
        key = 'k"\\}{'
        gw.request("POST", '/a"b\\c?q=%00"}{', body=b"x", key=key)
        c = RawConn(gw.port)
        c.send(b"GET /caf\xc3\xa9/\xff HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.read_response()
        c.close()
        got = self.stop_and_read(gw)  # json.loads of every line: valid JSON
        self.assertEqual(got[0]["target"], '/a"b\\c?q=%00"}{')
        self.assertEqual(got[0]["key"], key)
        self.assertEqual(len(got), 2)

    def test_absolute_form_target_is_logged_in_origin_form(self):
        gw = self.gateway()
        c = RawConn(gw.port)
        c.send(b"GET http://h.example/a?q=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c.read_response()
        c.close()
        got = self.stop_and_read(gw)
        self.assertEqual([(x["method"], x["target"]) for x in got], [("GET", "/a?q=1")])

    def test_route_index_from_the_config_file(self):
        conf = os.path.join(self.dir, "idem.yaml")
        with open(conf, "w") as f:
            f.write("routes:\n  - match: {path: /a/*}\n  - match: {path: /b/*}\n")
        gw = self.gateway("--config", conf)
        gw.request("POST", "/b/1", body=b"x", key="r1")
        gw.request("POST", "/c", body=b"x", key="r2")
        got = self.stop_and_read(gw)
        self.assertEqual([x["route"] for x in got], [2, 0])

    def test_sigterm_writes_every_buffered_line(self):
        gw = self.gateway(workers=2)
        for i in range(300):
            gw.request("POST", "/n", body=b"x", key="n%d" % i)
        got = self.stop_and_read(gw)  # SIGTERM; no second has to pass
        self.assertEqual(sorted(x["key"] for x in got), sorted("n%d" % i for i in range(300)))

    def test_drain_timeout_still_writes_the_lines_of_answered_requests(self):
        # --drain-timeout ends the drain with a request still in flight: the
        # lines of the requests answered before it are written all the same
        gw = self.gateway("--drain-timeout", "300ms")
        gw.request("POST", "/fast", body=b"x", key="answered")
        t, res = request_in_background(gw, "POST", "/slow", body=b"x", key="cut",
                                       headers={"X-Test-Delay-Ms": "5000"})
        self.assertEqual(self.up.wait_count("cut", 1), 1, gw.stderr())
        gw.proc.send_signal(signal.SIGTERM)  # before the 1 s flush timer
        self.assertEqual(gw.wait_exit(10), 0, gw.stderr())
        self.assertIn("--drain-timeout reached", gw.stderr())
        t.join(10)
        self.assertNotIn("r", res)  # cut, never answered
        self.assertEqual([x["key"] for x in lines(self.log)], ["answered"])

    def test_lines_reach_the_file_within_seconds(self):
        gw = self.gateway()
        gw.request("POST", "/soon", body=b"x", key="soon")
        wait_for(lambda: os.path.exists(self.log) and b"soon" in open(self.log, "rb").read(), 5,
                 what="the buffered line flushed by the timer")

    def test_sigusr1_reopens_the_path(self):
        gw = self.gateway()
        gw.request("POST", "/before", body=b"x", key="before")
        wait_for(lambda: b"before" in open(self.log, "rb").read(), 5)
        os.rename(self.log, self.log + ".1")
        os.kill(gw.pid, signal.SIGUSR1)
        wait_for(lambda: os.path.exists(self.log), 5, what="the log opened again")
        gw.request("POST", "/after", body=b"x", key="after")
        got = self.stop_and_read(gw)
        self.assertEqual([x["key"] for x in got], ["after"])
        self.assertEqual([x["key"] for x in lines(self.log + ".1")], ["before"])

    def test_dash_is_standard_output(self):
        gw = self.start_gateway(self.up, "--access-log", "-")
        gw.request("POST", "/o", body=b"x", key="stdout-key")
        gw.stop()
        self.assertIn('"key":"stdout-key"', gw.stderr())  # the harness joins stdout and stderr

    def test_a_path_that_cannot_be_opened_exits_2(self):
        out = subprocess.run([idem_bin(), "serve", "--upstream", self.up.url, "--store", "memory:",
                              "--access-log", os.path.join(self.dir, "no", "such", "dir", "log")],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("--access-log", out.stderr)


if __name__ == "__main__":
    main()
