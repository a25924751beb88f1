"""test_pg_tx_crash.py - the in-transaction API keeps the record and the
business write together: killed between them and the COMMIT, neither is kept.

Drives examples/pg_exactly_once.c (IDEM_PG_EXAMPLE, set by
tests/cmake/postgres.cmake) against a throwaway PostgreSQL: the test re-runs
itself under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is unset.
"""

import os
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from pg_server import psql, under_postgres  # noqa: E402


def example_bin():
    b = os.environ.get("IDEM_PG_EXAMPLE")
    if b:
        return b
    build = os.environ.get("IDEM_BUILD", os.path.join(SRC, "build"))
    return os.path.join(build, "tests", "pg_exactly_once")


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


class TxCrash(unittest.TestCase):
    uri = None

    @classmethod
    def setUpClass(cls):
        cls.uri = os.environ["IDEM_TEST_PG_URI"]
        cls.bin = example_bin()

    def run_example(self, order, amount=42, stop=None, stdin=None):
        env = dict(os.environ)
        env.pop("IDEM_EXAMPLE_STOP_BEFORE_COMMIT", None)
        if stop:
            env["IDEM_EXAMPLE_STOP_BEFORE_COMMIT"] = stop
        return subprocess.Popen([self.bin, self.uri, order, str(amount)], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def finish(self, p, timeout=30):
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err

    def wait_stopped(self, p, step):
        """Read the example's lines until it stops before the COMMIT of step."""
        seen = []
        for line in p.stdout:
            if line.strip() == "about to commit " + step:
                return
            seen.append(line)
        self.fail("the example did not stop before %s: %r %s" % (step, seen, p.stderr.read()))

    def kill(self, p):
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        for f in (p.stdout, p.stderr, p.stdin):
            f.close()

    def kill_before_commit(self, order, step):
        p = self.run_example(order, stop=step)
        # business row and completion are written, the COMMIT is not sent
        self.wait_stopped(p, step)
        self.kill(p)

    def run_to_the_end(self, order, reserve, charge):
        """Run the example for order to its end: what each step said."""
        rc, out, err = self.finish(self.run_example(order))
        self.assertEqual(rc, 0, err)
        self.assertIn("reserve: " + reserve, out)
        self.assertIn("charge: " + charge, out)

    def ledger(self, order, step):
        return int(psql("SELECT count(*) FROM example_ledger "
                        "WHERE order_id = '%s' AND step = '%s'" % (order, step)))

    def record(self, order, step):
        return psql("SELECT state || ' ' || fence FROM idem_records "
                    "WHERE scope = 'example' AND key = '%s:%s'" % (order, step))

    def wait_backend_gone(self):
        # the killed client's backend rolls back when it notices the socket closed
        wait_for(lambda: psql("SELECT count(*) FROM pg_stat_activity "
                              "WHERE state = 'idle in transaction'") == "0",
                 20, "the killed client's transaction to end")

    def test_kill_between_write_and_commit_keeps_neither(self):
        order = "crash-1"
        self.kill_before_commit(order, "reserve")
        self.wait_backend_gone()
        self.assertEqual(self.ledger(order, "reserve"), 0)
        self.assertEqual(self.record(order, "reserve"), "")
        # the retry runs the step (fence 1: nothing was kept), then the next
        self.run_to_the_end(order, "done", "done")
        self.assertEqual(self.ledger(order, "reserve"), 1)
        self.assertEqual(self.ledger(order, "charge"), 1)
        self.assertEqual(self.record(order, "reserve"), "2 1")
        # and every later run replays without writing
        self.run_to_the_end(order, "already done", "already done")
        self.assertEqual(self.ledger(order, "reserve"), 1)
        self.assertEqual(self.ledger(order, "charge"), 1)

    def test_kill_in_second_step_keeps_the_first(self):
        order = "crash-2"
        self.kill_before_commit(order, "charge")
        self.wait_backend_gone()
        self.assertEqual(self.ledger(order, "reserve"), 1)  # committed before
        self.assertEqual(self.ledger(order, "charge"), 0)
        self.assertEqual(self.record(order, "charge"), "")
        self.run_to_the_end(order, "already done", "done")
        self.assertEqual(self.ledger(order, "charge"), 1)

    def test_concurrent_run_waits_then_runs_after_the_crash(self):
        order = "crash-3"
        first = self.run_example(order, stop="reserve")
        self.wait_stopped(first, "reserve")
        # the second claims the same key: it waits on the first's row lock
        second = self.run_example(order)
        wait_for(lambda: psql("SELECT count(*) FROM pg_stat_activity "
                              "WHERE wait_event_type = 'Lock'") == "1",
                 20, "the second run to wait on the record")
        self.kill(first)
        rc, out, err = self.finish(second)
        self.assertEqual(rc, 0, err)
        self.assertIn("reserve: done", out)
        self.assertEqual(self.ledger(order, "reserve"), 1)
        self.assertEqual(self.ledger(order, "charge"), 1)


if __name__ == "__main__":
    under_postgres(__file__)
    unittest.main(verbosity=2)
