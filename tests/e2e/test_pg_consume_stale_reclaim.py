"""test_pg_consume_stale_reclaim.py - `idem consume` (NATS JetStream) on a
PostgreSQL store that refuses one kind of write: a claim at fence 3 or more.

The first run of a message outlasts its lease; the broker hands the message
out again, that run fails (503) and releases the key; then the first run's
answer comes back stale, and the consumer asks for the key again to keep it
(consume.c, reclaim). Here that claim fails, as a store that fails at that
moment would. The message must then stay unacked (no answer is kept, and the
effect was done), and once the store takes writes again it must end with
one kept answer, under a higher fence.

Runs itself under tests/support/with-postgres.sh when IDEM_TEST_PG_URI is
unset.
"""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pg_server  # noqa: E402

if __name__ == "__main__":
    pg_server.under_postgres(__file__)

from harness import run_idem, wait_for  # noqa: E402
from test_consume_nats import NatsCase  # noqa: E402

REFUSE = """
CREATE OR REPLACE FUNCTION idem_test_refuse() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'idem test: claims at fence 3 refused'; END $$ LANGUAGE plpgsql;
CREATE TRIGGER idem_test_refuse BEFORE INSERT OR UPDATE ON idem_records
  FOR EACH ROW WHEN (NEW.fence >= 3) EXECUTE FUNCTION idem_test_refuse();
"""
ALLOW = "DROP TRIGGER idem_test_refuse ON idem_records; DROP FUNCTION idem_test_refuse();"


class StaleReclaimRefused(NatsCase):
    def setUp(self):
        super().setUp()
        self.uri = os.environ["IDEM_TEST_PG_URI"]
        rc, _, err = run_idem(["migrate", "--store", self.uri])
        self.assertEqual(rc, 0, err)
        pg_server.psql("DELETE FROM idem_records")
        pg_server.psql(REFUSE)
        self.addCleanup(pg_server.psql, "DROP TRIGGER IF EXISTS idem_test_refuse ON idem_records")

    def pg_record(self, key):
        """The record as `idem keys get` shows it; None for none (a released
        key reads as no record)."""
        rc, out, err = run_idem(["keys", "get", key, "--store", self.uri])
        if rc == 1 and "no such record" in err:
            return None
        self.assertEqual(rc, 0, err)
        return json.loads(out)

    def test_a_stale_answer_whose_claim_fails_is_not_acked(self):
        self.h.script = {"k1": [(200, 5.0), (503, 0), (200, 0)]}
        c = self.consumer("--lock-ttl", "2s", "--handler-timeout", "8s", "--max-deliveries", "10",
                          "--retry-delay", "1s", "--max-retry-delay", "1s", store=self.uri)
        self.publish([{"message_id": "k1", "body": "x"}])
        wait_for(lambda: "came back after its lease and could not be kept" in c.stderr(), 40,
                 what="the stale answer's claim to be given up: " + c.stderr()[-2000:])
        self.assertFalse(self.all_settled(), "acked with no answer kept")
        self.assertEqual(self.dead_letters(), [])
        self.assertIsNone(self.pg_record("k1"))  # released by the 503, nothing kept since
        pg_server.psql(ALLOW)
        self.wait_settled(60)
        rec = self.pg_record("k1")
        self.assertEqual(rec["state"], "completed", (rec, self.h.attempts("k1")))
        self.assertEqual(rec["response"]["status"], 200, rec)
        self.assertEqual(rec["fence"], 3, rec)
        # the first run's effect was done but not kept: it runs again, later
        # and under a higher fence, as after a consumer killed mid-run
        # (the harness logs attempts as they answer: the first one answers second)
        self.assertEqual(sorted((a["fence"], a["status"]) for a in self.h.attempts("k1")),
                         [("1", 200), ("2", 503), ("3", 200)])
        self.assertEqual(self.dead_letters(), [])


if __name__ == "__main__":
    unittest.main()
