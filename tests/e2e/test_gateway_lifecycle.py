"""Process lifecycle: the ready line, SIGTERM (stop accepting, finish the
request in flight, exit 0), and bad flag values (exit 2, the flag named with
the accepted form)."""

import os
import re
import signal
import socket
import subprocess
import threading
import time

from harness import (GatewayTestCase, Gateway, free_port, idem_bin, main, request_in_background,
                     run_idem, wait_for)

DURATION_FORM = re.compile(r"\d+\s*(ms|s|m|h)\b")
SIZE_FORM = re.compile(r"\d+\s*(KiB|MiB|GiB|B)\b")

BAD_FLAGS = [
    # (flag, value, form regex or None)
    ("--ttl", "forever", DURATION_FORM),
    # a method the request parser answers 400 could never be handled
    ("--methods", "POST,FOO", re.compile("HTTP method names")),
    # a config file that cannot be opened or read is a bad value of its flag
    ("--config", "/nonexistent/idem.yaml", re.compile("No such file or directory")),
    ("--config", "/", re.compile("cannot read it: Is a directory")),
    ("--ttl", "10parsecs", DURATION_FORM),
    ("--lock-ttl", "abc", DURATION_FORM),
    ("--lock-ttl", "-5s", DURATION_FORM),
    ("--wait", "soon", DURATION_FORM),
    ("--upstream-timeout", "30x", DURATION_FORM),
    ("--max-body", "lots", SIZE_FORM),
    ("--max-body", "12XB", SIZE_FORM),
    # zero, or past the range: refused as out of range, naming the range
    ("--ttl", "0s", re.compile(r"out of range; use a duration from 1ms to \d+d")),
    ("--lock-ttl", "99999999999999999999s", re.compile(r"out of range")),
    ("--max-body", "0", re.compile(r"out of range; use a size from 1B to 4GiB")),
    ("--max-header", "0KiB", re.compile(r"out of range; use a size from 1KiB to 1MiB")),
    ("--on-store-error", "maybe", re.compile(r"closed.*open|open.*closed")),
    ("--listen", "not-an-address", None),
    ("--listen", "127.0.0.1:99999", None),
    ("--upstream", "ftp://127.0.0.1:21", None),
    ("--upstream", "127.0.0.1", None),
    ("--admin-listen", "nowhere", None),
]


class Lifecycle(GatewayTestCase):
    def setUp(self):
        self.up = self.start_upstream()

    def test_ready_line_names_the_address(self):
        gw = self.start_gateway(self.up)
        self.assertIn("idem serve: listening on 127.0.0.1:%d" % gw.port, gw.stderr())

    def test_sigterm_finishes_in_flight_then_exits_0(self):
        gw = self.start_gateway(self.up)
        t, res = request_in_background(gw, "POST", "/slow", body=b"x", key="term",
                                       headers={"X-Test-Delay-Ms": "2000"})
        self.assertEqual(self.up.wait_count("term", 1), 1, self.gw_log())
        gw.proc.send_signal(signal.SIGTERM)

        def refused():
            try:
                socket.create_connection(("127.0.0.1", gw.port), timeout=0.5).close()
                return False
            except OSError:
                return True
        wait_for(refused, 1.5, what="listener closed after SIGTERM")
        self.assertTrue(t.is_alive() or "r" in res)
        t.join(30)
        self.assertIn("r", res, "in-flight request lost on SIGTERM: %r\n%s" % (res, self.gw_log()))
        self.assertEqual(res["r"].status, 200)
        self.assertEqual(res["r"].json()["exec"], 1)
        rc = gw.wait_exit(15)
        self.assertEqual(rc, 0, gw.stderr())

    def test_a_second_signal_during_the_drain_changes_nothing(self):
        # a logrotate's SIGUSR1, a reload's SIGHUP, an impatient supervisor's
        # second SIGTERM: the request in flight still gets its answer, the
        # access log its line, and the exit is 0
        for sig in (signal.SIGUSR1, signal.SIGHUP, signal.SIGTERM):
            log = os.path.join(self.tempdir(), "access.log")
            gw = self.start_gateway(self.up, "--access-log", log)
            key = "second-%d" % sig
            t, res = request_in_background(gw, "POST", "/slow", body=b"x", key=key,
                                           headers={"X-Test-Delay-Ms": "1500"})
            self.assertEqual(self.up.wait_count(key, 1), 1, self.gw_log())
            gw.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: "finishing requests in flight" in gw.stderr(), 10,
                     what="the drain to start")
            gw.proc.send_signal(sig)
            t.join(30)
            self.assertEqual(gw.wait_exit(15), 0, "%s: %s" % (sig.name, gw.stderr()))
            self.assertIn("r", res, "%s: %r\n%s" % (sig.name, res, gw.stderr()))
            self.assertEqual(res["r"].status, 200)
            with open(log) as f:
                self.assertIn('"key":"%s"' % key, f.read(), sig.name)

    def test_sighup_without_config_and_sigusr1_without_access_log_change_nothing(self):
        gw = self.start_gateway(self.up)
        gw.proc.send_signal(signal.SIGHUP)
        gw.proc.send_signal(signal.SIGUSR1)
        wait_for(lambda: "SIGHUP: no --config file to reload; nothing changes" in gw.stderr(), 5,
                 what="the SIGHUP logged")
        self.assertTrue(gw.alive(), gw.stderr())
        self.assertEqual(gw.request("POST", "/a", body=b"x", key="hup").status, 200)
        self.assertEqual(gw.stop(), 0, gw.stderr())

    def test_a_reload_or_logrotate_during_start_up_does_not_kill_it(self):
        # SIGHUP and SIGUSR1 kill by default: serve ignores them from its
        # first step until its loop handles them (a logrotate's SIGUSR1 or a
        # systemd reload that came while it started killed it). The config
        # file is a FIFO, so that serve waits in its start until written.
        d = self.tempdir()
        fifo = os.path.join(d, "idem.yaml")
        os.mkfifo(fifo)
        err = open(os.path.join(d, "stderr"), "w+")
        self.addCleanup(err.close)
        proc = subprocess.Popen([idem_bin(), "serve", "--config", fifo, "--listen", "127.0.0.1:0",
                                 "--store", "lmdb:%s/s" % d], stderr=err)
        self.addCleanup(lambda: proc.poll() is not None or (proc.kill(), proc.wait()))

        def writer():  # opens once serve has the FIFO open to read
            try:
                return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return None
        fd = wait_for(lambda: writer() if proc.poll() is None else -1, 10,
                      what="serve opening its config file")
        self.assertGreaterEqual(fd, 0, open(err.name).read())
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.1)  # their delivery, which is asynchronous (not a wait for a condition)
        os.write(fd, ("upstream: %s\n" % self.up.url).encode())
        os.close(fd)
        wait_for(lambda: proc.poll() is not None or "listening on" in open(err.name).read(), 10,
                 what="serve listening")
        self.assertIsNone(proc.poll(), open(err.name).read())
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(15), 0, open(err.name).read())

    def test_sigterm_in_flight_result_is_stored(self):
        d = self.tempdir()
        gw = self.start_gateway(self.up, store="lmdb:%s/s" % d)
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("r", gw.request(
            "POST", "/st", body=b"x", key="stored-on-term", headers={"X-Test-Delay-Ms": "1000"})),
            daemon=True)
        t.start()
        self.assertEqual(self.up.wait_count("stored-on-term", 1), 1, self.gw_log())
        gw.proc.send_signal(signal.SIGTERM)
        t.join(30)
        self.assertEqual(gw.wait_exit(15), 0, gw.stderr())
        self.assertEqual(res["r"].status, 200)
        gw.start()
        r = gw.request("POST", "/st", body=b"x", key="stored-on-term")
        self.assertTrue(r.replayed, "in-flight answer not stored at SIGTERM: %r" % r)
        self.assertEqual(r.body, res["r"].body)
        self.assertEqual(self.up.count("stored-on-term"), 1)

    def test_sigterm_with_a_waiting_duplicate(self):
        # the first request and a --wait duplicate are both in flight: both
        # are answered (the duplicate with the replay), then exit 0
        gw = self.start_gateway(self.up, "--wait", "10s", admin=True)
        res = {}

        def go(name, delay):
            try:
                res[name] = gw.request("POST", "/w", body=b"x", key="tw",
                                       headers={"X-Test-Delay-Ms": delay})
            except Exception as e:
                res[name] = e
        t1 = threading.Thread(target=go, args=("first", "1500"), daemon=True)
        t1.start()
        self.assertEqual(self.up.wait_count("tw", 1), 1, self.gw_log())
        t2 = threading.Thread(target=go, args=("dup", "0"), daemon=True)
        t2.start()
        # The contract has no signal for "the duplicate is waiting"; this
        # gateway's idem_client_connections gauge shows it (2 connections).
        # Without that gauge, give the duplicate a head start instead.
        def two_clients():
            text = gw.admin_request("GET", "/metrics").body.decode()
            m = re.search(r"(?m)^idem_client_connections (\S+)$", text)
            return (float(m.group(1)) >= 2) if m else None
        if two_clients() is None:
            t2.join(0.3)
        else:
            wait_for(two_clients, 5, what="the duplicate to reach the gateway")
        self.assertTrue(t1.is_alive() and t2.is_alive(), "first finished before SIGTERM")
        gw.proc.send_signal(signal.SIGTERM)
        t1.join(30)
        t2.join(30)
        self.assertEqual(getattr(res.get("first"), "status", res.get("first")), 200, self.gw_log())
        dup = res.get("dup")
        self.assertEqual(getattr(dup, "status", dup), 200, "waiting duplicate lost on SIGTERM\n%s"
                         % self.gw_log())
        self.assertTrue(dup.replayed, dup)
        self.assertEqual(gw.wait_exit(15), 0, gw.stderr())
        self.assertEqual(self.up.count("tw"), 1)

    def test_sigterm_during_a_streamed_download(self):
        # a pass-through answer being streamed when SIGTERM arrives is
        # delivered whole, then the gateway exits 0
        from harness import RawConn, request_bytes
        from upstream import body_bytes
        gw = self.start_gateway(self.up)
        size = 32 * 1024 * 1024
        with RawConn(gw.port, timeout=60) as c:
            c.send(request_bytes("GET", "/dl", headers={"X-Test-Id": "dl",
                                                         "X-Test-Body-Bytes": str(size)}))
            self.assertEqual(self.up.wait_count("dl", 1), 1, self.gw_log())
            head = c.sock.recv(65536)  # the answer has started
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head[:100])
            c.buf = head
            gw.proc.send_signal(signal.SIGTERM)
            r = c.read_response(timeout=60)
        self.assertEqual(r.status, 200)
        self.assertEqual(len(r.body), size, "download cut by SIGTERM")
        self.assertTrue(r.body == body_bytes("dl", 1, size))
        self.assertEqual(gw.wait_exit(15), 0, gw.stderr())

    def test_sigterm_idle_exits_0_promptly(self):
        gw = self.start_gateway(self.up, admin=True)
        # an idle keep-alive connection must not hold the exit up
        s = socket.create_connection(("127.0.0.1", gw.port))
        self.addCleanup(s.close)
        s.sendall(b"GET /idle HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(65536)
        t0 = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        rc = gw.wait_exit(15)
        self.assertEqual(rc, 0, gw.stderr())
        self.assertLess(time.monotonic() - t0, 5, "idle keep-alive held SIGTERM exit")

    def test_sigterm_with_lmdb_exits_0(self):
        d = self.tempdir()
        gw = self.start_gateway(self.up, store="lmdb:%s/s" % d)
        gw.request("POST", "/x", body=b"x", key="k")
        self.assertEqual(gw.stop(), 0, gw.stderr())

    def test_bad_flag_values_exit_2(self):
        for flag, value, form in BAD_FLAGS:
            with self.subTest(flag=flag, value=value):
                args = ["serve", "--listen", "127.0.0.1:%d" % free_port(),
                        "--upstream", self.up.url, "--store", "memory:flags"]
                args += [flag, value]
                rc, out, err = run_idem(args, timeout=15)
                self.assertEqual(rc, 2, "%s %s: exit %d, stderr %r" % (flag, value, rc, err))
                self.assertIn(flag, err, "%s %s: message does not name the flag: %r"
                              % (flag, value, err))
                if form:
                    self.assertRegex(err, form, "%s %s: message lacks the accepted form"
                                     % (flag, value))
                self.assertNotIn("listening on", err)

    def test_unknown_flag_and_missing_value_exit_2(self):
        for args in (["--frobnicate"], ["--ttl"], ["--upstream"]):
            with self.subTest(args=args):
                rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port()]
                                        + args, timeout=15)
                self.assertEqual(rc, 2, "%s: exit %d %r" % (args, rc, err))
                self.assertIn(args[0], err)

    def test_a_flag_is_not_the_value_of_the_one_before(self):
        # "--store --ttl 1s" would otherwise open a store named "--ttl"
        rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port(),
                                 "--upstream", self.up.url, "--store", "--ttl", "1s"], timeout=15)
        self.assertEqual(rc, 2, err)
        self.assertIn("--store needs a value", err)
        self.assertNotIn("listening on", err)

    def test_bad_store_uri_exits_2_and_creates_no_spool(self):
        d = self.tempdir()
        spool = os.path.join(d, "spool")
        rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port(),
                                 "--upstream", self.up.url, "--store", "bogus:x",
                                 "--spool", spool], timeout=15)
        self.assertEqual(rc, 2, err)
        self.assertIn("--store: unknown store URI", err)
        self.assertIn("bogus:x", err)
        self.assertFalse(os.path.exists(spool), "a spool was made for a store that never opened")
        # memory: takes no options: one given is refused, not ignored
        rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port(),
                                 "--upstream", self.up.url, "--store", "memory:x?ttl=1s"],
                                timeout=15)
        self.assertEqual(rc, 2, err)
        self.assertIn("takes no options", err)

    def test_a_spool_that_cannot_be_made_exits_1(self):
        # a spool under a plain file: said, with its path, before listening
        d = self.tempdir()
        open(os.path.join(d, "file"), "w").close()
        spool = os.path.join(d, "file", "spool")
        rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port(),
                                 "--upstream", self.up.url, "--store", "lmdb:%s/data" % d,
                                 "--spool", spool], timeout=15)
        self.assertEqual(rc, 1, err)
        self.assertIn("spool %s: cannot mkdir: Not a directory" % spool, err)

    def test_help_lists_every_flag(self):
        rc, out, err = run_idem(["serve", "--help"], timeout=15)
        self.assertEqual(rc, 0, err)
        for flag in ("--listen", "--upstream", "--store", "--ttl", "--lock-ttl", "--methods",
                     "--require-key", "--scope-header", "--wait", "--on-store-error",
                     "--max-body", "--upstream-timeout", "--admin-listen"):
            self.assertIn(flag, out + err, "--help does not mention %s" % flag)

    def test_missing_upstream_exits_2(self):
        rc, out, err = run_idem(["serve", "--listen", "127.0.0.1:%d" % free_port(),
                                 "--store", "memory:x"], timeout=15)
        self.assertEqual(rc, 2, err)
        self.assertIn("--upstream", err)

    def test_listen_port_in_use_fails(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        self.addCleanup(s.close)
        gw = Gateway(self.up.url, port=s.getsockname()[1])
        self.addCleanup(gw.kill)
        with self.assertRaises(RuntimeError):
            gw.start(timeout=10)
        self.assertNotEqual(gw.proc.returncode, 0)

    def test_memory_store_without_name(self):
        gw = self.start_gateway(self.up, store="memory:")
        gw.request("POST", "/m", body=b"x", key="m")
        self.assertTrue(gw.request("POST", "/m", body=b"x", key="m").replayed)

    def test_good_flag_forms_accepted(self):
        gw = self.start_gateway(self.up, "--ttl", "24h", "--lock-ttl", "500ms", "--wait", "0",
                                "--max-body", "1MiB", "--upstream-timeout", "30s",
                                "--methods", "POST,PATCH,PUT", "--on-store-error", "open",
                                "--scope-header", "X-Tenant", "--require-key")
        r = gw.request("POST", "/ok", body=b"x", key="fine")
        self.assertEqual(r.status, 200, self.gw_log())


if __name__ == "__main__":
    main()
