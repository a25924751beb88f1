"""Robustness: deterministic mutations of valid requests (byte flips,
insertions, cut-offs, duplicated lines) sent to the main and admin
listeners. The gateway must stay up, keep serving, never let a malformed
request through as something else, and (on a -DIDEM_SANITIZE=ON build)
produce no sanitizer report. The seed is fixed so a failure reproduces;
IDEM_E2E_MUTATIONS sets the number of cases (default 400)."""

import os
import random
import socket
import time

from harness import GatewayTestCase, main, rss_kib, wait_for

SEED = 20261122

TEMPLATES = [
    b"POST /orders?x=1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \"order 1\"\r\n"
    b"Content-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"a\": 1}\n",
    b"POST /c HTTP/1.1\r\nHost: x\r\nIdempotency-Key: ck\r\nTransfer-Encoding: chunked\r\n"
    b"X-Before: 1\r\n\r\n3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"GET /items HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
    b"PATCH /items/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: p1\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /s HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\nIdempotency-Key: k\r\n"
    b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
]
ADMIN_TEMPLATES = [
    b"GET /keys/order%201?scope=abcdef0123456789 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"DELETE /keys/k?scope=" + b"f" * 64 + b"&x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
]


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:          # flip a byte
            data[min(i, len(data) - 1)] = rng.randrange(256)
        elif op == 1:                 # insert interesting bytes
            data[i:i] = rng.choice([b"\r\n", b"\n", b" ", b"\t", b":", b"\x00", b"%", b"%0",
                                    b"\"", b"\\", b",", b"0", b"ffffffffffffffff", b"-1",
                                    b"Content-Length: 5\r\n", b"Transfer-Encoding: chunked\r\n",
                                    bytes([rng.randrange(256)]) * rng.randint(1, 300)])
        elif op == 2:                 # cut off
            del data[i:]
        elif op == 3 and data:        # delete a span
            del data[i:i + rng.randint(1, 16)]
        elif op == 4:                 # duplicate a line
            lines = bytes(data).split(b"\r\n")
            j = rng.randrange(len(lines))
            lines.insert(j, lines[j])
            data = bytearray(b"\r\n".join(lines))
        elif op == 5:                 # swap case of a span
            data[i:i + 8] = bytes(data[i:i + 8]).swapcase()
        else:                         # repeat the whole request (pipelining)
            data.extend(bytes(data))
    return bytes(data)


class Robustness(GatewayTestCase):
    def _blast(self, port, templates, n, rng, deadline):
        sent = 0
        for _ in range(n):
            if time.monotonic() > deadline:
                break
            payload = mutate(rng, rng.choice(templates))
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError as e:
                self.fail("gateway stopped accepting after %d mutated requests: %r\n%s"
                          % (sent, e, self.gw_log()))
            try:
                s.settimeout(1.0)
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:
                pass
            finally:
                s.close()
            sent += 1
        return sent

    def test_mutated_requests(self):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--scope-header", "X-Tenant", "--max-body", "4KiB", admin=True)
        n = int(os.environ.get("IDEM_E2E_MUTATIONS", "400"))
        rng = random.Random(SEED)
        deadline = time.monotonic() + 120
        sent = self._blast(gw.port, TEMPLATES, n, rng, deadline)
        sent += self._blast(gw.admin_port, ADMIN_TEMPLATES, n // 4, rng, deadline)
        self.assertTrue(gw.alive(), "gateway died after %d mutated requests:\n%s"
                        % (sent, gw.stderr()[-6000:]))
        # still serving, and still deduplicating
        r1 = gw.request("POST", "/after", body=b"x", key="after-fuzz")
        r2 = gw.request("POST", "/after", body=b"x", key="after-fuzz")
        self.assertEqual(r1.status, 200, self.gw_log())
        self.assertTrue(r2.replayed, r2)
        self.assertEqual(gw.admin_request("GET", "/healthz").status, 200)
        # nothing that reached the upstream carries a NUL or a broken name
        for r in up.requests():
            for k, v in r["headers"]:
                self.assertNotIn("\x00", k + v, "NUL forwarded: %r" % (r["headers"],))
                self.assertNotRegex(k, r"[\s:]", "bad field name forwarded: %r" % (r["headers"],))


class SteadyMemory(GatewayTestCase):
    def test_no_growth_on_paths_that_store_nothing(self):
        # replays, pass-through, 422 and 400 keep no state: after a warm-up,
        # 4000 more of each must not grow the gateway's resident memory
        from harness import RawConn, request_bytes
        up = self.start_upstream()
        gw = self.start_gateway(up)
        with open("/proc/%d/maps" % gw.pid) as f:
            if any(s in f.read() for s in ("libasan", "libtsan")):
                self.skipTest("a sanitizer's quarantine holds freed memory: RSS is no measure")
        self.assertEqual(gw.request("POST", "/r", body=b"x", key="rep").status, 200, self.gw_log())
        conns = [RawConn(gw.port) for _ in range(4)]
        self.addCleanup(lambda: [c.close() for c in conns])
        reqs = {
            "replay": request_bytes("POST", "/r", b"x", key="rep"),
            "pass-through": request_bytes("GET", "/g", headers={"X-Test-Id": "g"}),
            "422": request_bytes("POST", "/r", b"other", key="rep"),
            "400": request_bytes("POST", "/r", b"x", key="bad key"),
        }

        def burst(n, raw):
            for i in range(n):
                c = conns[i % len(conns)]
                c.send(raw)
                c.read_response()
        growth = {}
        for name, raw in reqs.items():
            burst(1000, raw)
            before = rss_kib(gw.pid)
            burst(4000, raw)
            growth[name] = rss_kib(gw.pid) - before
        self.assertTrue(all(g < 2048 for g in growth.values()),
                        "resident memory grew (KiB): %s" % growth)


class FdExhaustion(GatewayTestCase):
    def _cpu_seconds(self, pid):
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def test_out_of_file_descriptors_recovers(self):
        # More clients than the gateway has descriptors: it must neither die
        # nor spin on accept, and must serve again once they leave.
        import resource
        up = self.start_upstream()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 1024:
            self.skipTest("needs RLIMIT_NOFILE >= 1024 for the clients")
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
        try:
            gw = self.start_gateway(up)  # inherits the limit of 128
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        socks = []
        try:
            for _ in range(300):
                try:  # past the backlog a connect may time out or be reset
                    socks.append(socket.create_connection(("127.0.0.1", gw.port), timeout=2))
                except OSError:
                    pass
            # hold the clients 4s, measuring the gateway's CPU per 0.5s
            # window (a measurement, not a wait for a condition); idle
            # clients cost nothing, so the last 2s must be near idle
            windows = []
            for _ in range(8):
                t0 = self._cpu_seconds(gw.pid)
                time.sleep(0.5)
                windows.append(self._cpu_seconds(gw.pid) - t0)
            spin = None
            if min(windows[4:]) >= 0.1:
                spin = ("gateway spins while out of descriptors: CPU seconds per 0.5s window %s"
                        % ["%.2f" % w for w in windows])
            self.assertTrue(gw.alive(), gw.stderr())
        finally:
            for s in socks:
                s.close()

        def serves():
            try:
                return gw.request("POST", "/fd", body=b"x", key="fd", timeout=3)
            except OSError:
                return None
        try:
            r = wait_for(serves, 15, 0.1, "the gateway to serve again")
        except TimeoutError:
            r = None
        problems = [p for p in (spin, None if r else
                                "gateway does not serve 15s after the clients left") if p]
        self.assertFalse(problems, "\n".join(problems) + "\n" + self.gw_log())
        self.assertEqual(r.status, 200, self.gw_log())


if __name__ == "__main__":
    main()
