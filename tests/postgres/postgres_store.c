/*
 * postgres_store.c - what the PostgreSQL store does beyond the contract:
 * schema checks and migrations, URI options, the in-transaction API, and a
 * server stopped and started under load.
 *
 * Needs a server: without IDEM_TEST_PG_URI it runs itself again under
 * tests/support/with-postgres.sh, which also hands it the scripts that stop
 * and start that server.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include <uv.h>

#include "idem/idem.h"
#include "idem/idem_pg.h"
#include "support/slow_dns.h"
#include "../support/store_test.h"

#ifndef IDEM_TEST_SUPPORT
#define IDEM_TEST_SUPPORT "tests/support"
#endif

static const char *base_uri;
static char uri_buf[4][512];

/* base_uri in a database of its own, so schema tests start from nothing */
static const char *database(const char *name, const char *params) {
  static int next;
  char *u = uri_buf[next++ % 4];
  const char *slash = strrchr(base_uri, '/');
  snprintf(u, 512, "%.*s/%s%s%s", (int)(slash - base_uri), base_uri, name,
           params ? "?" : "", params ? params : "");
  return u;
}

static void quiet(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static void sql(const char *conninfo, const char *text) {
  PGconn *pg = PQconnectdb(conninfo);
  assert_int_equal(PQstatus(pg), CONNECTION_OK);
  PQsetNoticeProcessor(pg, quiet, NULL);
  PGresult *r = PQexec(pg, text);
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    fail_msg("%s: %s", text, PQerrorMessage(pg));
  PQclear(r);
  PQfinish(pg);
}

static void create_database(const char *name) {
  char text[200];
  snprintf(text, sizeof text, "DROP DATABASE IF EXISTS %s", name);
  sql(base_uri, text);
  snprintf(text, sizeof text, "CREATE DATABASE %s", name);
  sql(base_uri, text);
}

static idem_op claim_op(const char *key) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "t", .key = key, .lease_ms = 60000,
                .ttl_ms = 3600000};
  idem_fingerprint("POST", "/", "x", 1, 0, op.fingerprint);
  return op;
}

/* ---- schema ------------------------------------------------------------ */

static void missing_schema_is_refused_with_a_hint(void **state) {
  (void)state;
  create_database("idem_schema_test");
  idem_sync *db = NULL;
  char *msg = NULL;
  assert_int_equal(idem_sync_open(database("idem_schema_test", NULL), &db, &msg), IDEM_ESCHEMA);
  assert_non_null(msg);
  assert_non_null(strstr(msg, "idem migrate"));
  free(msg);
  /* migrate=1 creates it on open */
  assert_int_equal(idem_sync_open(database("idem_schema_test", "migrate=1"), &db, NULL), 0);
  idem_sync_close(db);
  assert_int_equal(idem_sync_open(database("idem_schema_test", NULL), &db, NULL), 0);
  idem_sync_close(db);
}

static void migrate_is_idempotent_and_refuses_newer(void **state) {
  (void)state;
  create_database("idem_migrate_test");
  PGconn *pg = PQconnectdb(database("idem_migrate_test", NULL));
  assert_int_equal(PQstatus(pg), CONNECTION_OK);
  int from = -1;
  char *msg = NULL;
  assert_int_equal(idem_pg_migrate(pg, &from, &msg), 0);
  assert_int_equal(from, 0);
  assert_int_equal(idem_pg_migrate(pg, &from, &msg), 0);
  assert_int_equal(from, IDEM_PG_SCHEMA_VERSION);
  /* a newer idem migrated this database: refuse rather than guess */
  PQclear(PQexec(pg, "INSERT INTO idem_schema (version) VALUES (99)"));
  assert_int_equal(idem_pg_migrate(pg, &from, &msg), IDEM_ESCHEMA);
  assert_int_equal(from, 99);
  assert_non_null(msg);
  free(msg);
  msg = NULL;
  idem_sync *db = NULL;
  assert_int_equal(idem_sync_open(database("idem_migrate_test", NULL), &db, &msg), IDEM_ESCHEMA);
  assert_non_null(strstr(msg, "newer"));
  free(msg);
  PQfinish(pg);
}

static void uri_options_are_checked(void **state) {
  (void)state;
  idem_sync *db = NULL;
  char *msg = NULL;
  const char *bad[] = {"pool=0", "migrate=maybe", "timeout=soon", "batch=0",
                       "sweep_interval=soon"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(idem_sync_open(database("idem_test", bad[i]), &db, &msg), IDEM_EURI);
    free(msg);
    msg = NULL;
  }
  /* libpq's own options pass through, ours are taken out */
  assert_int_equal(
      idem_sync_open(database("idem_test", "connect_timeout=5&pool=3&batch=8&timeout=30s&migrate=1"
                                           "&sweep_interval=off"),
                     &db, &msg), 0);
  idem_sync_close(db);
  /* unreachable server: a clear IDEM_ESTORE */
  assert_int_equal(idem_sync_open("postgres://127.0.0.1:1/x", &db, &msg), IDEM_ESTORE);
  assert_non_null(msg);
  free(msg);
}

/* ---- in-transaction API ------------------------------------------------- */

static void rolled_back_claim_leaves_nothing(void **state) {
  (void)state;
  PGconn *pg = PQconnectdb(base_uri);
  assert_int_equal(PQstatus(pg), CONNECTION_OK);
  idem_op op = claim_op("tx-1");
  idem_result res;
  PQclear(PQexec(pg, "BEGIN"));
  assert_int_equal(idem_pg_run(pg, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  assert_int_equal(res.fence, 1);
  PQclear(PQexec(pg, "ROLLBACK"));
  idem_op get = {.kind = IDEM_OP_GET, .scope = "t", .key = "tx-1"};
  assert_int_equal(idem_pg_run(pg, &get, &res), IDEM_ENOTFOUND);
  /* committed: claim, complete, then a replay */
  PQclear(PQexec(pg, "BEGIN"));
  assert_int_equal(idem_pg_run(pg, &op, &res), 0);
  assert_int_equal(res.fence, 1);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "t", .key = "tx-1", .fence = 1,
                  .ttl_ms = 60000, .response = {.status = 201, .body = "ok", .body_len = 2}};
  assert_int_equal(idem_pg_run(pg, &done, &res), 0);
  PQclear(PQexec(pg, "COMMIT"));
  assert_int_equal(idem_pg_run(pg, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->response.status, 201);
  assert_memory_equal(res.record->response.body, "ok", 2);
  idem_result_clear(&res);
  /* invalid input never reaches the server, nor aborts the transaction:
   * a key, a scope that is not UTF-8, an answer over 1023 MiB (an address
   * only: refused before a byte of it is read) */
  PQclear(PQexec(pg, "BEGIN"));
  op.key = "";
  assert_int_equal(idem_pg_run(pg, &op, &res), IDEM_EKEY);
  op = claim_op("tx-2");
  op.scope = "t\xff";
  assert_int_equal(idem_pg_run(pg, &op, &res), IDEM_ESCOPE);
  done.response.body = (const char *)(uintptr_t)0x10000;
  done.response.body_len = ((size_t)1 << 30) - ((size_t)1 << 20) + 1;
  assert_int_equal(idem_pg_run(pg, &done, &res), IDEM_ETOOBIG);
  assert_int_equal(PQtransactionStatus(pg), PQTRANS_INTRANS);
  PQclear(PQexec(pg, "ROLLBACK"));
  PQfinish(pg);
}

/* Under REPEATABLE READ, a complete of a row another transaction completed
 * since this one's snapshot is a serialization failure: IDEM_ERETRY, so the
 * caller knows to run its transaction again, not that the store failed. */
static void serialization_failure_says_retry(void **state) {
  (void)state;
  PGconn *a = PQconnectdb(base_uri), *b = PQconnectdb(base_uri);
  assert_int_equal(PQstatus(a), CONNECTION_OK);
  assert_int_equal(PQstatus(b), CONNECTION_OK);
  idem_op op = claim_op("rr-1");
  idem_result res;
  assert_int_equal(idem_pg_run(b, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  PQclear(PQexec(a, "BEGIN ISOLATION LEVEL REPEATABLE READ"));
  idem_op get = {.kind = IDEM_OP_GET, .scope = "t", .key = "rr-1"};
  assert_int_equal(idem_pg_run(a, &get, &res), 0); /* the snapshot: claimed */
  idem_result_clear(&res);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "t", .key = "rr-1", .fence = 1,
                  .ttl_ms = 60000, .response = {.status = 200, .body = "b", .body_len = 1}};
  assert_int_equal(idem_pg_run(b, &done, &res), 0);
  done.response.body = "a";
  assert_int_equal(idem_pg_run(a, &done, &res), IDEM_ERETRY);
  assert_int_equal(PQtransactionStatus(a), PQTRANS_INERROR);
  PQclear(PQexec(a, "ROLLBACK"));
  /* run again, the transaction sees the answer b kept */
  assert_int_equal(idem_pg_run(a, &get, &res), 0);
  assert_int_equal(res.record->state, IDEM_STATE_COMPLETED);
  assert_memory_equal(res.record->response.body, "b", 1);
  idem_result_clear(&res);
  PQfinish(a);
  PQfinish(b);
}

/* ---- outage ------------------------------------------------------------- */

typedef struct {
  int done, ok, estore, other;
} tally;

static void count(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  tally *t = arg;
  t->done++;
  if (res->err == 0)
    t->ok++;
  else if (res->err == IDEM_ESTORE)
    t->estore++;
  else
    t->other++;
}

static void run_until(uv_loop_t *loop, int *flag, int target, int64_t deadline_ms) {
  int64_t deadline = idem_now_ms() + deadline_ms;
  while (*flag < target) {
    assert_true(idem_now_ms() < deadline);
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

/* ---- claims that do not take write nothing -------------------------------- */

/* The row's version of (scope "t", key): its ctid and xmin, which any new
 * row version (even a HOT update) changes and a row lock does not. */
static void row_version(PGconn *pg, const char *key, char *out, size_t size) {
  const char *params[] = {key};
  PGresult *r = PQexecParams(pg, "SELECT ctid::text || '/' || xmin::text FROM idem_records "
                                 "WHERE scope = 't' AND key = $1",
                             1, NULL, params, NULL, NULL, 0);
  assert_int_equal(PQntuples(r), 1);
  snprintf(out, size, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
}

static int sync_claim(idem_sync *db, idem_op *op) {
  idem_result res;
  assert_int_equal(idem_sync_run(db, op, &res), 0);
  int outcome = (int)res.outcome;
  idem_result_clear(&res);
  return outcome;
}

/* A replay, a mismatch and a busy answer leave the row as it was: no new
 * row version per retry (issue: a replay writes nothing). */
static void refused_claims_write_no_row_version(void **state) {
  (void)state;
  const char *uri = database("idem_test", NULL);
  PGconn *pg = PQconnectdb(uri);
  idem_sync *db;
  assert_int_equal(idem_sync_open(uri, &db, NULL), 0);
  idem_op done_op = claim_op("quiet-done"), busy_op = claim_op("quiet-busy");
  idem_result res;
  assert_int_equal(sync_claim(db, &done_op), IDEM_CLAIMED);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "t", .key = "quiet-done", .fence = 1,
                  .ttl_ms = 60000, .response = {.status = 201, .body = "ok", .body_len = 2}};
  assert_int_equal(idem_sync_run(db, &done, &res), 0);
  assert_int_equal(sync_claim(db, &busy_op), IDEM_CLAIMED);
  char before_done[64], before_busy[64], after[64];
  row_version(pg, "quiet-done", before_done, sizeof before_done);
  row_version(pg, "quiet-busy", before_busy, sizeof before_busy);
  idem_op other = claim_op("quiet-done");
  other.fingerprint[0] ^= 1;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(sync_claim(db, &done_op), IDEM_REPLAY);
    assert_int_equal(sync_claim(db, &other), IDEM_MISMATCH);
    assert_int_equal(sync_claim(db, &busy_op), IDEM_BUSY);
  }
  row_version(pg, "quiet-done", after, sizeof after);
  assert_string_equal(after, before_done);
  row_version(pg, "quiet-busy", after, sizeof after);
  assert_string_equal(after, before_busy);
  /* a claim that takes does write: the check above could fail */
  idem_op release = {.kind = IDEM_OP_RELEASE, .scope = "t", .key = "quiet-busy", .fence = 1};
  assert_int_equal(idem_sync_run(db, &release, &res), 0);
  assert_int_equal(sync_claim(db, &busy_op), IDEM_CLAIMED);
  row_version(pg, "quiet-busy", after, sizeof after);
  assert_string_not_equal(after, before_busy);
  idem_sync_close(db);
  PQfinish(pg);
}

static int lock_waiters(PGconn *pg) {
  PGresult *r = PQexec(pg, "SELECT count(*) FROM pg_locks WHERE NOT granted");
  int n = atoi(PQgetvalue(r, 0, 0));
  PQclear(r);
  return n;
}

typedef struct {
  const char *uri;
  idem_result res;
  int err;
} tx_claim;

static void *claim_in_transaction(void *arg) {
  tx_claim *c = arg;
  PGconn *pg = PQconnectdb(c->uri);
  idem_op op = claim_op("late-row-tx");
  PQclear(PQexec(pg, "BEGIN"));
  c->err = idem_pg_run(pg, &op, &c->res);
  PQclear(PQexec(pg, "COMMIT"));
  PQfinish(pg);
  return NULL;
}

/* The row a claim waits for is committed after the claim's snapshot was
 * taken, so the statement cannot read it; the claim goes again and answers
 * BUSY (the holder's lease), never an error or a second claim. Both paths:
 * the store's batches, and idem_pg_run in a caller's transaction. */
static void claim_waiting_on_a_newer_row_reads_it(void **state) {
  (void)state;
  const char *uri = database("idem_test", NULL);
  PGconn *holder = PQconnectdb(uri), *watch = PQconnectdb(uri);
  idem_result res;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, database("idem_test", "pool=1"), &store, NULL), 0);

  idem_op op = claim_op("late-row");
  PQclear(PQexec(holder, "BEGIN"));
  assert_int_equal(idem_pg_run(holder, &op, &res), 0);
  tally t = {0};
  assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
  int64_t deadline = idem_now_ms() + 10000;
  while (lock_waiters(watch) < 1) { /* the store's claim waits on the row */
    assert_true(idem_now_ms() < deadline);
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  PQclear(PQexec(holder, "COMMIT"));
  run_until(&loop, &t.done, 1, 10000);
  assert_int_equal(t.ok, 1);
  idem_sync *db;
  assert_int_equal(idem_sync_open(uri, &db, NULL), 0);
  assert_int_equal(sync_claim(db, &op), IDEM_BUSY);
  idem_sync_close(db);

  op = claim_op("late-row-tx");
  PQclear(PQexec(holder, "BEGIN"));
  assert_int_equal(idem_pg_run(holder, &op, &res), 0);
  tx_claim c = {.uri = uri};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, claim_in_transaction, &c), 0);
  while (lock_waiters(watch) < 1) {
    assert_true(idem_now_ms() < deadline + 10000);
    usleep(1000);
  }
  PQclear(PQexec(holder, "COMMIT"));
  pthread_join(thread, NULL);
  assert_int_equal(c.err, 0);
  assert_int_equal(c.res.outcome, IDEM_BUSY);
  assert_int_equal(c.res.fence, 1);
  PQfinish(holder);
  PQfinish(watch);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

static long rows_in_scope(PGconn *pg, const char *scope) {
  const char *params[] = {scope};
  PGresult *r = PQexecParams(pg, "SELECT count(*) FROM idem_records WHERE scope = $1", 1, NULL,
                             params, NULL, NULL, 0);
  assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
  long n = atol(PQgetvalue(r, 0, 0));
  PQclear(r);
  return n;
}

/* A store left running deletes what has expired by itself, as the LMDB
 * sweeper does (before: rows stayed until `idem gc`, and a gateway's table
 * grew by every key it ever saw). Counted: only the live record is left. */
static void expired_records_are_swept_in_the_background(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  /* the default sweep_interval, 5s: the option alone would pass before */
  assert_int_equal(idem_store_open(&loop, database("idem_test", NULL), &store, NULL), 0);
  tally t = {0};
  char key[32];
  for (int i = 0; i <= 20; i++) {
    snprintf(key, sizeof key, i < 20 ? "expiring-%d" : "kept", i);
    idem_op op = claim_op(key);
    op.scope = "sweep";
    if (i < 20)
      op.lease_ms = op.ttl_ms = 1; /* kept one lease past the lease: 2 ms */
    assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
  }
  run_until(&loop, &t.done, 21, 10000);
  assert_int_equal(t.ok, 21);
  PGconn *pg = PQconnectdb(database("idem_test", NULL));
  assert_int_equal(PQstatus(pg), CONNECTION_OK);
  int64_t deadline = idem_now_ms() + 15000;
  while (rows_in_scope(pg, "sweep") > 1) {
    assert_true(idem_now_ms() < deadline);
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  assert_int_equal(rows_in_scope(pg, "sweep"), 1);
  PQfinish(pg);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* Operations of one loop turn share a transaction; one failing statement
 * rolls it back, and the others are sent again, one per transaction. */
static void one_bad_operation_does_not_take_its_batch_with_it(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, database("idem_test", "pool=1"), &store, NULL), 0);
  /* one key the server refuses (a trigger of the test's raises for it) */
  sql(base_uri, "CREATE FUNCTION idem_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN IF NEW.key = 'batch-refused' THEN RAISE EXCEPTION 'refused'; END IF; "
                "RETURN NEW; END $$");
  sql(base_uri, "CREATE TRIGGER idem_test_refuse BEFORE INSERT OR UPDATE ON idem_records "
                "FOR EACH ROW EXECUTE FUNCTION idem_test_refuse()");
  tally t = {0};
  char keys[10][32];
  for (int i = 0; i < 10; i++) {
    snprintf(keys[i], sizeof keys[i], "batch-%d", i);
    idem_op op = claim_op(keys[i]);
    assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
    if (i == 5) {
      op.key = "batch-refused";
      assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
    }
  }
  run_until(&loop, &t.done, 11, 10000);
  sql(base_uri, "DROP TRIGGER idem_test_refuse ON idem_records; DROP FUNCTION idem_test_refuse()");
  assert_int_equal(t.ok, 10);
  assert_int_equal(t.estore, 1);
  /* a scope the server would refuse (not UTF-8, for a text column) is
   * refused before it is sent, as the scope it is: IDEM_ESCOPE */
  idem_op bad = claim_op("batch-bad-scope");
  bad.scope = "bad \xff scope";
  tally u = {0};
  assert_int_equal(idem_store_submit(store, &bad, count, &u), 0);
  run_until(&loop, &u.done, 1, 10000);
  assert_int_equal(u.other, 1);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

static int backend_pid(const char *application) {
  PGconn *pg = PQconnectdb(base_uri);
  char q[200];
  snprintf(q, sizeof q, "SELECT pid FROM pg_stat_activity WHERE application_name = '%s'",
           application);
  PGresult *r = PQexec(pg, q);
  int pid = PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  PQfinish(pg);
  return pid;
}

/* A server that stops answering fails what waits on it after timeout=. */
static void hung_server_times_out(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop,
                                   database("idem_test", "pool=1&timeout=300ms&application_name=idem_hang"),
                                   &store, NULL), 0);
  tally t = {0};
  idem_op op = claim_op("hang-1");
  assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
  run_until(&loop, &t.done, 1, 10000);
  assert_int_equal(t.ok, 1);
  int pid = backend_pid("idem_hang");
  assert_true(pid > 0);
  assert_int_equal(kill(pid, SIGSTOP), 0);
  int64_t t0 = idem_now_ms();
  op = claim_op("hang-2");
  assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
  run_until(&loop, &t.done, 2, 10000);
  kill(pid, SIGCONT);
  assert_int_equal(t.estore, 1);
  assert_true(idem_now_ms() - t0 < 5000);
  /* and it comes back on a new connection */
  int64_t deadline = idem_now_ms() + 10000;
  while (t.ok < 2) {
    assert_true(idem_now_ms() < deadline);
    int before = t.done;
    assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
    run_until(&loop, &t.done, before + 1, 10000);
    usleep(20 * 1000);
  }
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* A key locked by someone's open transaction fails after lock_timeout; the
 * operations batched with it go again on their own and succeed. */
static void row_lock_held_elsewhere_fails_only_its_key(void **state) {
  (void)state;
  PGconn *holder = PQconnectdb(base_uri);
  idem_result res;
  idem_op locked = claim_op("locked-1");
  PQclear(PQexec(holder, "BEGIN"));
  assert_int_equal(idem_pg_run(holder, &locked, &res), 0);
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(
      idem_store_open(&loop, database("idem_test", "pool=1&options=-c%20lock_timeout%3D200"),
                      &store, NULL), 0);
  tally t = {0};
  idem_op a = claim_op("free-1"), b = claim_op("free-2");
  assert_int_equal(idem_store_submit(store, &a, count, &t), 0);
  assert_int_equal(idem_store_submit(store, &locked, count, &t), 0);
  assert_int_equal(idem_store_submit(store, &b, count, &t), 0);
  run_until(&loop, &t.done, 3, 10000);
  assert_int_equal(t.ok, 2);
  assert_int_equal(t.estore, 1);
  PQclear(PQexec(holder, "ROLLBACK"));
  PQfinish(holder);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* A store at base_uri's server, named HOST instead of 127.0.0.1, with the
 * URI parameters PARAMS (the test skips when base_uri names no 127.0.0.1). */
/* A store on loop (initialised here) at base_uri's server named host. */
static idem_store *open_at_host(uv_loop_t *loop, const char *host, const char *params) {
  const char *at = strstr(base_uri, "@127.0.0.1:");
  if (!at)
    skip();
  uv_loop_init(loop);
  char uri[512];
  snprintf(uri, sizeof uri, "%.*s@%s:%s?%s", (int)(at - base_uri), base_uri, host,
           at + strlen("@127.0.0.1:"), params);
  idem_store *store;
  assert_int_equal(idem_store_open(loop, uri, &store, NULL), 0);
  return store;
}

/* The port of base_uri's server at 127.0.0.1 (the test skips when base_uri
 * names no 127.0.0.1). */
static int server_port(void) {
  const char *at = strstr(base_uri, "@127.0.0.1:");
  if (!at)
    skip();
  return atoi(at + strlen("@127.0.0.1:"));
}

/* Cut every server connection opened with this application_name. */
static void cut_connections(const char *application) {
  char q[200];
  snprintf(q, sizeof q, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = '%s'", application);
  sql(base_uri, q);
}

/* After its connections were cut: claim fresh keys (PREFIX-N) one at a
 * time until one fails (the cut is seen) and a later one succeeds (the
 * store is back), within 15 s. */
static void claim_until_back(uv_loop_t *loop, idem_store *store, const char *prefix) {
  int64_t deadline = idem_now_ms() + 15000;
  int lost = 0;
  for (int i = 0;; i++) {
    tally t = {0};
    char key[32];
    snprintf(key, sizeof key, "%s-%d", prefix, i);
    idem_op op = claim_op(key);
    assert_int_equal(idem_store_submit(store, &op, count, &t), 0);
    run_until(loop, &t.done, 1, 10000);
    lost += t.estore;
    if (t.ok && lost)
      return;
    assert_true(idem_now_ms() < deadline);
    usleep(20 * 1000);
  }
}

/* Reconnections to a server named by host name look it up on the thread
 * pool: a slow DNS server (support/slow_dns.c) must not stall the loop
 * (opening still connects once, blocking, before the loop serves anything). */
static void reconnect_looks_the_host_up_off_the_loop(void **state) {
  (void)state;
  uv_loop_t loop;
  /* pool=1: a second connection could still be connecting when the cut
   * comes, survive it and answer without a reconnection */
  idem_store *store = open_at_host(&loop, "localhost", "pool=1&application_name=idem-dns");
  slow_dns_watch(pthread_self());
  cut_connections("idem-dns");
  claim_until_back(&loop, store, "dns");
  assert_true(slow_dns_lookups() >= 1); /* it came back by name */
  slow_dns_stop();
  assert_int_equal(slow_dns_lookups_on_loop(), 0);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* Several hosts (a primary and its standby, in one URI): each name is
 * looked up off the loop too, and each address paired with its host's
 * port. The first host, idem-test-two-addrs, has a silent address then
 * the server's; the second, localhost, the server's. */
static void several_hosts_are_looked_up_off_the_loop(void **state) {
  (void)state;
  int port = server_port();
  char hosts[128];
  snprintf(hosts, sizeof hosts, "idem-test-two-addrs:%d,localhost", port);
  uv_loop_t loop;
  idem_store *store = open_at_host(&loop, hosts,
                                   "pool=1&timeout=500ms&application_name=idem-hosts");
  int silent = slow_dns_silent_first(port);
  assert_true(silent >= 0);
  slow_dns_watch(pthread_self());
  cut_connections("idem-hosts");
  claim_until_back(&loop, store, "hosts");
  assert_true(slow_dns_lookups() >= 1); /* localhost too */
  slow_dns_stop();
  assert_int_equal(slow_dns_lookups_on_loop(), 0);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
  close(silent);
}

/* Closing while a connection's lookup is still out (pool=2: the second
 * connection starts with one; slow_dns makes it take 300 ms): the close
 * waits for it. ASan sees any use of the freed store by the late lookup. */
static void closing_while_the_name_is_looked_up(void **state) {
  (void)state;
  slow_dns_watch(pthread_self());
  uv_loop_t loop;
  idem_store *store = open_at_host(&loop, "localhost", "pool=2");
  assert_int_equal(close_store_and_loop(&loop, store), 0);
  assert_int_equal(slow_dns_lookups(), 2); /* open's own, and the second's */
  slow_dns_stop();
}

/* A DNS server slower (1.5 s) than timeout= (0.5 s): the lookup of an
 * attempt that timed out answers the next one, so the store comes back,
 * and lookups never pile up on the thread pool. */
static void lookup_slower_than_the_timeout(void **state) {
  (void)state;
  uv_loop_t loop;
  idem_store *store =
      open_at_host(&loop, "localhost", "pool=1&timeout=500ms&application_name=idem-slow");
  slow_dns_watch(pthread_self());
  slow_dns_delay(1500);
  cut_connections("idem-slow");
  claim_until_back(&loop, store, "slow");
  slow_dns_stop();
  assert_int_equal(slow_dns_most_at_once(), 1);
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* A name with several addresses: a reconnection tries them in order, as
 * libpq does for a name it looks up itself (support/slow_dns.c: the first,
 * 127.0.0.2, refuses). */
static void reconnect_tries_every_address_of_the_name(void **state) {
  (void)state;
  uv_loop_t loop;
  idem_store *store =
      open_at_host(&loop, "idem-test-two-addrs", "pool=1&application_name=idem-two");
  cut_connections("idem-two");
  claim_until_back(&loop, store, "two");
  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

/* The name's first address (127.0.0.2) now takes connections and never
 * answers: the reconnection there times out, and the next one starts with
 * the second address, where the server is. Before, every attempt began
 * with the silent one, so the store never came back. */
static void address_that_timed_out_is_tried_last(void **state) {
  (void)state;
  int port = server_port();
  uv_loop_t loop;
  idem_store *store = open_at_host(&loop, "idem-test-two-addrs",
                                   "pool=1&timeout=500ms&application_name=idem-silent");
  int silent = slow_dns_silent_first(port);
  assert_true(silent >= 0);
  cut_connections("idem-silent");
  claim_until_back(&loop, store, "silent");
  assert_int_equal(close_store_and_loop(&loop, store), 0);
  close(silent);
}

static void server_stop_and_start_fails_fast_then_recovers(void **state) {
  (void)state;
  const char *stop = getenv("IDEM_TEST_PG_STOP"), *start = getenv("IDEM_TEST_PG_START");
  if (!stop || !start)
    skip();
  uv_loop_t loop;
  uv_loop_init(&loop);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, database("idem_test", "pool=2"), &store, NULL), 0);
  enum { N = 100 };
  char keys[N][32];
  tally before = {0};
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "outage-%d", i);
    idem_op op = claim_op(keys[i]);
    assert_int_equal(idem_store_submit(store, &op, count, &before), 0);
  }
  run_until(&loop, &before.done, N, 10000);
  assert_int_equal(before.ok, N);

  /* load in flight while the server goes away */
  tally during = {0};
  for (int i = 0; i < N; i++) {
    idem_op op = claim_op(keys[i]);
    assert_int_equal(idem_store_submit(store, &op, count, &during), 0);
  }
  assert_int_equal(system(stop), 0);
  run_until(&loop, &during.done, N, 10000); /* every one answered, none hangs */
  assert_int_equal(during.other, 0);

  /* down: every new operation fails at once */
  tally down = {0};
  int64_t t0 = idem_now_ms();
  for (int i = 0; i < 10; i++) {
    idem_op op = claim_op(keys[i]);
    assert_int_equal(idem_store_submit(store, &op, count, &down), 0);
  }
  run_until(&loop, &down.done, 10, 5000);
  assert_int_equal(down.estore, 10);
  assert_true(idem_now_ms() - t0 < 2000);

  /* back: the store reconnects by itself, and nothing acknowledged is lost */
  assert_int_equal(system(start), 0);
  int64_t deadline = idem_now_ms() + 15000;
  tally after = {0};
  for (;;) {
    tally one = {0};
    idem_op op = claim_op(keys[0]);
    assert_int_equal(idem_store_submit(store, &op, count, &one), 0);
    run_until(&loop, &one.done, 1, 5000);
    if (one.ok) {
      after.ok++;
      break;
    }
    assert_true(idem_now_ms() < deadline);
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(20 * 1000);
  }
  idem_result res;
  idem_sync *db;
  assert_int_equal(idem_sync_open(database("idem_test", NULL), &db, NULL), 0);
  idem_op get = {.kind = IDEM_OP_GET, .scope = "t", .key = keys[N - 1]};
  assert_int_equal(idem_sync_run(db, &get, &res), 0);
  assert_int_equal(res.record->state, IDEM_STATE_PROCESSING);
  assert_int_equal(res.record->fence, 1); /* never taken over: lease still on */
  idem_result_clear(&res);
  idem_sync_close(db);

  assert_int_equal(close_store_and_loop(&loop, store), 0);
}

int main(int argc, char **argv) {
  (void)argc;
  base_uri = getenv("IDEM_TEST_PG_URI");
  if (!base_uri) {
    const char *script = IDEM_TEST_SUPPORT "/with-postgres.sh";
    execl(script, script, argv[0], (char *)NULL);
    perror(script);
    return 1;
  }
  const char *migrated = database("idem_test", "migrate=1");
  idem_sync *db;
  if (idem_sync_open(migrated, &db, NULL) == 0)
    idem_sync_close(db);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(missing_schema_is_refused_with_a_hint),
      cmocka_unit_test(migrate_is_idempotent_and_refuses_newer),
      cmocka_unit_test(uri_options_are_checked),
      cmocka_unit_test(rolled_back_claim_leaves_nothing),
      cmocka_unit_test(serialization_failure_says_retry),
      cmocka_unit_test(refused_claims_write_no_row_version),
      cmocka_unit_test(claim_waiting_on_a_newer_row_reads_it),
      cmocka_unit_test(one_bad_operation_does_not_take_its_batch_with_it),
      cmocka_unit_test(expired_records_are_swept_in_the_background),
      cmocka_unit_test(hung_server_times_out),
      cmocka_unit_test(row_lock_held_elsewhere_fails_only_its_key),
      cmocka_unit_test(reconnect_looks_the_host_up_off_the_loop),
      cmocka_unit_test(reconnect_tries_every_address_of_the_name),
      cmocka_unit_test(address_that_timed_out_is_tried_last),
      cmocka_unit_test(several_hosts_are_looked_up_off_the_loop),
      cmocka_unit_test(closing_while_the_name_is_looked_up),
      cmocka_unit_test(lookup_slower_than_the_timeout),
      cmocka_unit_test(server_stop_and_start_fails_fast_then_recovers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
