"""pg_server.py - the throwaway PostgreSQL of the e2e tests that need one
(tests/e2e/test_pg_*.py). Stdlib only.

    if __name__ == "__main__":
        pg_server.under_postgres(__file__)   # re-run under with-postgres.sh
    pg_server.psql("SELECT 1")               # one value from the test database

tests/support/with-postgres.sh starts the server in a temp dir and hands the
test IDEM_TEST_PG_URI, IDEM_TEST_PG_BIN, IDEM_TEST_PG_START and
IDEM_TEST_PG_STOP; with IDEM_TEST_PG_URI already set (ctest, or a server of
your own) the test runs as it is.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def under_postgres(test_file):
    """Unless IDEM_TEST_PG_URI is set, replace this process by test_file run
    under tests/support/with-postgres.sh (IDEM_SUPPORT overrides the dir)."""
    if os.environ.get("IDEM_TEST_PG_URI"):
        return
    support = os.environ.get("IDEM_SUPPORT", os.path.join(SRC, "tests", "support"))
    script = os.path.join(support, "with-postgres.sh")
    os.execv(script, [script, sys.executable, "-u", os.path.abspath(test_file)] + sys.argv[1:])


def psql(sql, uri=None):
    """One value (or rows joined by newlines) from the test database, or from
    the database at uri."""
    out = subprocess.run(
        [os.path.join(os.environ["IDEM_TEST_PG_BIN"], "psql"), "-X", "-q", "-tA",
         "-v", "ON_ERROR_STOP=1", "-d", uri or os.environ["IDEM_TEST_PG_URI"], "-c", sql],
        check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()
