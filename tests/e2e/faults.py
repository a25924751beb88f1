"""faults.py - what the fault-injection tests (tests/e2e/test_fault_*.py)
share: a load of clients that each retry their own key until it gets a final
answer, and the checks made afterwards. Stdlib only.

    load = Load(gw.port, clients=6, prefix="r").start()
    ...kill things...
    load.join()
    v = verify_acked(load, up, [gw, gw2])   # replays through each gateway
    v.report("redis")                       # prints the counts
    reruns(load, up)                        # keys executed after their ack

A client takes a fresh key ("PREFIX-THREAD-N"), POSTs /orders/KEY with a
JSON body naming the order, and sends it again until the answer is final:
2xx, or a 4xx the gateway stores (not 408/409/425/429), or the stored 502
upstream-response-not-stored (it will never run again). 503, 409, 502, 504,
other 5xx and connection errors (a gateway that was killed) mean: wait a
short backoff and retry. The final 2xx is the key's *acknowledged* answer,
kept with the time it arrived. After an acknowledgement a client sometimes
sends one of its earlier acknowledged keys again, once, as an at-least-once
broker would, and notes whether the answer was that same answer.

The upstream (upstream.py) names in its body the key, its execution number
and the fence it saw, and logs every execution with its time, so "ran again
after it was acknowledged" is read from its log: an execution of the key
that began after the client had its acknowledged answer, or one with a
fence above the acknowledged one.
"""

import http.client
import json
import random
import re
import threading
import time

from harness import wait_for

RETRY_STATUSES = (408, 409, 425, 429)


def is_final(status):
    """A final answer: 2xx, or a 4xx the gateway stores and replays."""
    return 200 <= status < 300 or (400 <= status < 500 and status not in RETRY_STATUSES)


def request(port, method, target, body=b"", headers=None, timeout=20.0):
    """One request on a fresh connection: (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        conn.close()


def header(headers, name, default=None):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return default


class Key:
    """One key of the load: what was sent and what the client got."""

    def __init__(self, key, body, extra):
        self.key = key
        self.body = body          # the request body
        self.extra = extra        # X-Test-* headers for the upstream
        self.attempts = []        # (time, status or "error: ...")
        self.ack = None           # (time, status, headers, body) of the final 2xx
        self.final = None         # status of the final answer (2xx or stored 4xx)

    def headers(self):
        h = {"Idempotency-Key": self.key, "X-Test-Id": self.key, "Content-Type": "application/json"}
        h.update(self.extra)
        return h


class Load:
    """clients threads sending keyed POSTs to 127.0.0.1:port until join()."""

    def __init__(self, port, clients=6, prefix="k", status=201, delay_ms=(5, 60),
                 body_bytes=None, dup_rate=0.25, seed=16):
        self.port = port
        self.prefix = prefix
        self.status = status
        self.delay_ms = delay_ms
        self.body_bytes = body_bytes
        self.dup_rate = dup_rate
        self.seed = seed
        self.lock = threading.Lock()
        self.keys = {}            # key -> Key
        self.order = []           # keys in the order they were taken
        self.acks = []            # (time, key) in the order acknowledged
        self.dups = []            # (key, status, same answer?)
        self.log = []             # (time, key, status or "error")
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(clients)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout=60):
        """Stop the clients (a key still unanswered stays pending); True
        when every thread ended."""
        self.stopping.set()
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)

    # ---- what the clients saw -------------------------------------------
    def acked(self):
        """Keys with an acknowledged (2xx) answer, in acknowledgement order."""
        with self.lock:
            return [self.keys[k] for _, k in self.acks]

    def n_acked(self):
        with self.lock:
            return len(self.acks)

    def acked_since(self, t):
        with self.lock:
            return sum(1 for ta, _ in self.acks if ta >= t)

    def since(self, t, pred=lambda s: True):
        """How many answers (or errors) arrived at or after t and match pred."""
        with self.lock:
            return sum(1 for e in self.log if e[0] >= t and pred(e[2]))

    def pending(self):
        with self.lock:
            return [k for k in self.order if self.keys[k].final is None]

    def summary(self):
        with self.lock:
            dup_same = sum(1 for d in self.dups if d[2])
            dup_diff = [d for d in self.dups if d[2] is False]
            return ("%d keys, %d acknowledged, %d pending; answers %s; duplicates sent "
                    "%d: %d same answer, %d different, %d busy (409)"
                    % (len(self.order), len(self.acks),
                       sum(1 for k in self.order if self.keys[k].final is None),
                       dict(sorted(self._statuses_locked().items(), key=str)),
                       len(self.dups), dup_same, len(dup_diff),
                       sum(1 for d in self.dups if d[1] == 409)))

    def _statuses_locked(self):
        out = {}
        for e in self.log:
            s = e[2] if isinstance(e[2], int) else "error"
            out[s] = out.get(s, 0) + 1
        return out

    def dups_different(self):
        """Duplicates answered with a final status but not the acknowledged
        answer: (key, status)."""
        with self.lock:
            return [(d[0], d[1]) for d in self.dups if d[2] is False]

    # ---- the clients ------------------------------------------------------
    def _new_key(self, tid, n, rnd):
        key = "%s-%d-%d" % (self.prefix, tid, n)
        body = json.dumps({"order": key, "sku": rnd.randrange(1000), "qty": 1}).encode()
        extra = {"X-Test-Status": str(self.status),
                 "X-Test-Delay-Ms": str(rnd.randint(*self.delay_ms))}
        if self.body_bytes:
            extra["X-Test-Body-Bytes"] = str(self.body_bytes)
        k = Key(key, body, extra)
        with self.lock:
            self.keys[key] = k
            self.order.append(key)
        return k

    def _send(self, k):
        try:
            st, hs, body = request(self.port, "POST", "/orders/" + k.key, k.body, k.headers())
        except (OSError, http.client.HTTPException) as e:
            with self.lock:
                self.log.append((time.monotonic(), k.key, "error: %r" % e))
                k.attempts.append((time.monotonic(), "error"))
            return None
        t = time.monotonic()
        with self.lock:
            self.log.append((t, k.key, st))
            k.attempts.append((t, st))
        return t, st, hs, body

    def _run(self, tid):
        rnd = random.Random("%s/%d/%d" % (self.prefix, self.seed, tid))
        mine = []  # my acknowledged keys
        n = 0
        while not self.stopping.is_set():
            k = self._new_key(tid, n, rnd)
            n += 1
            while not self.stopping.is_set():
                got = self._send(k)
                if got is not None and (is_final(got[1]) or is_not_stored_marker(*got[1:])):
                    t, st, hs, body = got
                    with self.lock:
                        k.final = st
                        if 200 <= st < 300:
                            k.ack = got
                            self.acks.append((t, k.key))
                    if 200 <= st < 300:
                        mine.append(k)
                    break
                # a client honouring Retry-After, in short: the tests are bounded
                busy = got is not None and got[1] == 409
                self.stopping.wait(rnd.uniform(0.05, 0.2) if busy else rnd.uniform(0.02, 0.08))
            if mine and not self.stopping.is_set() and rnd.random() < self.dup_rate:
                d = rnd.choice(mine)
                got = self._send(d)
                if got is not None:
                    same = None  # not final: says nothing
                    if is_final(got[1]):
                        same = got[1] == d.ack[1] and got[3] == d.ack[3]
                    with self.lock:
                        self.dups.append((d.key, got[1], same))


# ---- checks ------------------------------------------------------------------

def replay(port, k, timeout=30.0):
    """Send k's request again until the answer is not a transient one (503,
    504, a 502 other than the stored not-stored marker, a connection error):
    a store client still reconnecting, a gateway still starting. 409 is
    returned: a replay must not be busy. Returns (status, headers, body),
    or None when timeout passes (at least one attempt is made)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            st, hs, body = request(port, "POST", "/orders/" + k.key, k.body, k.headers())
            if st not in (502, 503, 504) or is_not_stored_marker(st, hs, body):
                return st, hs, body
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def is_not_stored_marker(st, hs, body):
    """The stored 502 that says the answer ran but was not kept."""
    if st != 502:
        return False
    try:
        return json.loads(body.decode()).get("type") == "urn:idem:problem:upstream-response-not-stored"
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


class Verdict:
    """The outcome of verify_acked: lists of (key, gateway label, detail)."""

    def __init__(self):
        self.acked = 0
        self.identical = 0
        self.markers = []     # stored 502 upstream-response-not-stored (allowed where said)
        self.missing = []     # 409 or no answer: neither stored nor spooled
        self.different = []   # another status or body than acknowledged

    def failures(self):
        return self.missing + self.different

    def text(self, label):
        return ("%s: %d acknowledged, %d replays identical, %d stored 502 markers, "
                "%d missing (busy or no answer), %d different"
                % (label, self.acked, self.identical, len(self.markers), len(self.missing),
                   len(self.different)))


def verify_acked(load, gateways, markers_ok=False, timeout=30.0):
    """Replay every acknowledged key through each (label, port) in gateways:
    the same status and body, marked Idempotent-Replayed (or, with
    markers_ok, the stored 502 upstream-response-not-stored)."""
    v = Verdict()
    acked = load.acked()
    v.acked = len(acked)
    deadline = time.monotonic() + timeout
    for k in acked:
        for label, port in gateways:
            # past the deadline, one attempt each: the counts still come out
            got = replay(port, k, max(0.0, deadline - time.monotonic()))
            if got is None:
                v.missing.append((k.key, label, "no answer but 502/503/504"))
                continue
            st, hs, body = got
            replayed = (header(hs, "Idempotent-Replayed") or "").lower() == "true"
            if st == 409:
                v.missing.append((k.key, label, "409 busy: %r" % body[:160]))
            elif markers_ok and is_not_stored_marker(st, hs, body):
                v.markers.append((k.key, label, ""))
            elif st != k.ack[1] or body != k.ack[3] or not replayed:
                v.different.append((k.key, label, "acked %d %r, now %d replayed=%s %r"
                                    % (k.ack[1], k.ack[3][:100], st, replayed, body[:100])))
            else:
                v.identical += 1
    return v


def reruns(load, up):
    """Acknowledged keys the upstream executed again: [(key, detail)]. An
    execution counts when it began after the client had its acknowledged
    answer, or carried a fence above the acknowledged execution's."""
    out = []
    for k in load.acked():
        execs = up.requests(k.key)
        try:
            n = int(header(k.ack[2], "X-Upstream-Exec"))
            fence = int(execs[n - 1]["fence"])
        except (TypeError, ValueError, IndexError):
            out.append((k.key, "acknowledged answer names no execution of the upstream's: %r"
                        % (k.ack[2],)))
            continue
        later = [i + 1 for i, r in enumerate(execs)
                 if r["time"] > k.ack[0] or int(r["fence"] or 0) > fence]
        if later:
            out.append((k.key, "acknowledged exec %d fence %d at %.3f; executions %s with fences %s"
                        % (n, fence, k.ack[0], later, [execs[i - 1]["fence"] for i in later])))
    return out


def metric(gw, name):
    """The value of an unlabelled metric on gw's /metrics, or None when the
    gateway does not export it (or does not answer)."""
    try:
        r = gw.admin_request("GET", "/metrics", timeout=5)
    except OSError:
        return None
    m = re.search(r"(?m)^%s(?:\{\})? ([0-9.eE+-]+)$" % re.escape(name), r.body.decode("utf-8", "replace"))
    return float(m.group(1)) if m else None


def wait_spool_empty(gw, timeout=30.0):
    """Wait until gw's idem_spool_entries is 0. Returns 0, None when the
    gateway exports no such gauge (a binary without the spool), or the
    last value seen after timeout: the caller asserts, after its key checks
    have printed their counts."""
    last = [None]

    def empty():
        last[0] = metric(gw, "idem_spool_entries")
        return last[0] is None or last[0] == 0
    try:
        wait_for(empty, timeout, interval=0.1, what="idem_spool_entries 0")
    except TimeoutError:
        pass
    return last[0]


def fmt(v):
    return "n/a (no such metric)" if v is None else "%d" % v


# ---- a small filesystem that fills up ------------------------------------------

def mount_tmpfs(test, size, skip=True):
    """Mount a tmpfs of size (e.g. "4m") on a new temp dir; unmounted (by
    path) and removed at the test's cleanup. When not root or when mount is
    refused (a container without CAP_SYS_ADMIN): skips the test saying why,
    or with skip=False returns None."""
    import os
    import shutil
    import subprocess
    import tempfile
    if os.geteuid() != 0:
        if not skip:
            return None
        test.skipTest("needs root to mount a small tmpfs (mount -t tmpfs)")
    d = tempfile.mkdtemp(prefix="idem-e2e-tmpfs-")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", d],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if p.returncode != 0:
        os.rmdir(d)
        if not skip:
            return None
        test.skipTest("mount -t tmpfs refused: %s" % p.stdout.decode(errors="replace").strip())

    def unmount():
        # lazily, in case a process still holds a file there; by path only
        subprocess.run(["umount", "-l", d], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)
        shutil.rmtree(d, True)
    test.addCleanup(unmount)
    return d


def fill(path, chunk=65536):
    """Write zeros into the file path until the filesystem refuses (ENOSPC);
    returns the bytes written."""
    import errno
    import os
    n = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        buf = b"\0" * chunk
        while True:
            try:
                w = os.write(fd, buf)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    if len(buf) > 1:  # the last pages too
                        buf = buf[:len(buf) // 2]
                        continue
                    return n
                raise
            n += w
    finally:
        os.close(fd)
