"""Under load, answers never cross: 16 client threads on keep-alive
connections send a mix of keyed POSTs (each key sent many times, from many
threads), keyless POSTs and GETs. Every answer must belong to its own
request (the upstream echoes the id and target), every key runs exactly
once, and every replay of a key carries the same body. Bounded: 3200
requests or 60 s. Run on memory: and lmdb: stores."""

import random
import threading
import time

from harness import GatewayTestCase, RawConn, main, request_bytes

THREADS = 16
PER_THREAD = 200
KEYS = 150


class Load(GatewayTestCase):
    def _run(self, store):
        up = self.start_upstream()
        gw = self.start_gateway(up, "--wait", "10s", store=store)
        errors = []
        answers = {}  # key -> set of bodies
        lock = threading.Lock()
        deadline = time.monotonic() + 60

        def client(tid):
            rng = random.Random(tid)
            c = None
            try:
                for n in range(PER_THREAD):
                    if time.monotonic() > deadline:
                        return
                    if c is None:
                        c = RawConn(gw.port, timeout=30)
                    kind = rng.random()
                    if kind < 0.7:
                        k = "load-%d" % rng.randrange(KEYS)
                        req = request_bytes("POST", "/k/" + k, b"body-" + k.encode(), key=k,
                                            headers={"X-Test-Delay-Ms": str(rng.choice((0, 0, 5, 20)))})
                        want_id, want_target = k, "/k/" + k
                    elif kind < 0.85:
                        rid = "nokey-%d-%d" % (tid, n)
                        req = request_bytes("POST", "/n/" + rid, b"x" * rng.randrange(2000),
                                            headers={"X-Test-Id": rid})
                        want_id, want_target = rid, "/n/" + rid
                    else:
                        rid = "get-%d-%d" % (tid, n)
                        req = request_bytes("GET", "/g/" + rid, headers={"X-Test-Id": rid,
                                                                          "X-Test-Chunked": "1"})
                        want_id, want_target = rid, "/g/" + rid
                    c.send(req)
                    r = c.read_response(timeout=30)
                    if r.status != 200:
                        errors.append("%s: status %d %r" % (want_id, r.status, r.body[:200]))
                        continue
                    doc = r.json()
                    if doc["id"] != want_id or doc["target"] != want_target:
                        errors.append("crossed answer: asked %s %s, got %s %s"
                                      % (want_id, want_target, doc["id"], doc["target"]))
                    if want_id.startswith("load-"):
                        with lock:
                            answers.setdefault(want_id, set()).add(r.body)
                    if rng.random() < 0.05:
                        c.close()
                        c = None
            except Exception as e:
                errors.append("thread %d: %r" % (tid, e))
            finally:
                if c:
                    c.close()

        ts = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(90)
        self.assertEqual(errors[:10], [], "%d errors\n%s" % (len(errors), self.gw_log()))
        ran_twice = {k: up.count(k) for k in answers if up.count(k) != 1}
        self.assertEqual(ran_twice, {}, "keys executed other than once")
        differing = [k for k, bodies in answers.items() if len(bodies) != 1]
        self.assertEqual(differing, [], "keys answered with different bodies")
        self.assertGreater(len(answers), KEYS // 2)

    def test_load_memory(self):
        self._run("memory:load")

    def test_load_lmdb(self):
        self._run("lmdb:%s/store" % self.tempdir())


if __name__ == "__main__":
    main()
