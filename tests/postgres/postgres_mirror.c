/*
 * postgres_mirror.c - the PostgreSQL statements against idem_transition(),
 * case by case: every stored state (absent, unseen, processing with the
 * lease running or over, completed, failed; live or expired) times every
 * operation (claim with the same or another fingerprint, with and without
 * IDEM_CLAIM_REPLAY_FAILED; complete, fail and release with the current or
 * a stale fence; get). For each, the row is written as the case says, the
 * statement runs (idem_pg_run), and its answer and the row it leaves must
 * be what idem_transition answers and writes.
 *
 * Times are an hour away from the server's clock, so the few milliseconds
 * between reading that clock and running the statement decide nothing;
 * times the statement sets from its clock are compared within a margin.
 *
 * Needs a server: without IDEM_TEST_PG_URI it runs itself again under
 * tests/support/with-postgres.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <libpq-fe.h>

#include "idem/idem.h"
#include "idem/idem_pg.h"

#ifndef IDEM_TEST_SUPPORT
#define IDEM_TEST_SUPPORT "tests/support"
#endif

#define HOUR (3600 * 1000LL)
#define MARGIN 10000 /* ms: statement clock against the clock read before it */

static PGconn *pg;

static int64_t server_now(void) {
  PGresult *r = PQexec(pg, "SELECT (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint");
  assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
  int64_t now = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
  PQclear(r);
  return now;
}

static void exec_ok(const char *sql) {
  PGresult *r = PQexec(pg, sql);
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    fail_msg("%s: %s", sql, PQerrorMessage(pg));
  PQclear(r);
}

static void fp_hex(const uint8_t fp[IDEM_FINGERPRINT_LEN], char out[2 * IDEM_FINGERPRINT_LEN + 1]) {
  for (int i = 0; i < IDEM_FINGERPRINT_LEN; i++)
    sprintf(out + 2 * i, "%02x", fp[i]);
}

static void write_row(const char *key, const idem_record *rec) {
  char sql[1024], fp[2 * IDEM_FINGERPRINT_LEN + 1];
  snprintf(sql, sizeof sql, "DELETE FROM idem_records WHERE scope = 'm' AND key = '%s'", key);
  exec_ok(sql);
  if (!rec)
    return;
  fp_hex(rec->fingerprint, fp);
  snprintf(sql, sizeof sql,
           "INSERT INTO idem_records (scope, key, state, fingerprint, fence, locked_until, "
           "expires_at, created_at, updated_at, status, headers, body) VALUES ('m', '%s', %d, "
           "'\\x%s', %llu, %lld, %lld, %lld, %lld, %d, %s, %s)",
           key, (int)rec->state, fp, (unsigned long long)rec->fence, (long long)rec->locked_until,
           (long long)rec->expires_at, (long long)rec->created_at, (long long)rec->updated_at,
           rec->response.status, rec->response.body ? "'h: v'::bytea" : "NULL",
           rec->response.body ? "'body'::bytea" : "NULL");
  exec_ok(sql);
}

/* The stored row, whatever its state (get hides unseen and expired ones). */
static int read_row(const char *key, idem_record *rec, int *has_body) {
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT state, encode(fingerprint, 'hex'), fence, locked_until, expires_at, "
           "created_at, updated_at, status, body IS NOT NULL FROM idem_records "
           "WHERE scope = 'm' AND key = '%s'",
           key);
  PGresult *r = PQexec(pg, sql);
  assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
  int found = PQntuples(r) == 1;
  if (found) {
    memset(rec, 0, sizeof *rec);
    rec->state = (idem_state)atoi(PQgetvalue(r, 0, 0));
    const char *hex = PQgetvalue(r, 0, 1);
    for (int i = 0; i < IDEM_FINGERPRINT_LEN; i++) {
      unsigned v;
      sscanf(hex + 2 * i, "%2x", &v);
      rec->fingerprint[i] = (uint8_t)v;
    }
    rec->fence = strtoull(PQgetvalue(r, 0, 2), NULL, 10);
    rec->locked_until = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
    rec->expires_at = strtoll(PQgetvalue(r, 0, 4), NULL, 10);
    rec->created_at = strtoll(PQgetvalue(r, 0, 5), NULL, 10);
    rec->updated_at = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
    rec->response.status = atoi(PQgetvalue(r, 0, 7));
    *has_body = !strcmp(PQgetvalue(r, 0, 8), "t");
  }
  PQclear(r);
  return found;
}

static void near(const char *what, int64_t got, int64_t want, const char *name) {
  if (got < want - MARGIN || got > want + MARGIN)
    fail_msg("%s: %s is %lld, expected about %lld", name, what, (long long)got, (long long)want);
}

static void exact(const char *what, long long got, long long want, const char *name) {
  if (got != want)
    fail_msg("%s: %s is %lld, expected %lld", name, what, got, want);
}

typedef struct {
  const char *name;
  int exists;
  idem_state state;
  int expired;
  int lease_over;
} stored_case;

typedef struct {
  const char *name;
  idem_op_kind kind;
  int other_fp;
  unsigned flags;
  int stale;
} op_case;

static void run_case(const stored_case *sc, const op_case *oc, int n) {
  char key[32], name[160];
  snprintf(key, sizeof key, "case-%d", n);
  snprintf(name, sizeof name, "%s / %s", sc->name, oc->name);
  uint8_t fp_a[IDEM_FINGERPRINT_LEN], fp_b[IDEM_FINGERPRINT_LEN];
  idem_fingerprint("POST", "/", "a", 1, 0, fp_a);
  idem_fingerprint("POST", "/", "b", 1, 0, fp_b);

  int64_t now = server_now();
  idem_record cur = {0};
  cur.scope = "m";
  cur.key = key;
  cur.state = sc->state;
  memcpy(cur.fingerprint, fp_a, sizeof fp_a);
  cur.fence = 5;
  cur.expires_at = sc->expired ? now - HOUR : now + 2 * HOUR;
  cur.locked_until = sc->state == IDEM_STATE_PROCESSING
                         ? (sc->lease_over ? now - 2 * HOUR : now + HOUR)
                         : 0;
  cur.created_at = now - 3 * HOUR;
  cur.updated_at = now - 3 * HOUR;
  if (sc->state == IDEM_STATE_COMPLETED || sc->state == IDEM_STATE_FAILED) {
    cur.response.status = 201;
    cur.response.headers = "h: v";
    cur.response.headers_len = 4;
    cur.response.body = "body";
    cur.response.body_len = 4;
  }
  write_row(key, sc->exists ? &cur : NULL);

  idem_op op = {.kind = oc->kind, .scope = "m", .key = key, .lease_ms = HOUR / 2,
                .ttl_ms = 4 * HOUR, .flags = oc->flags, .fence = oc->stale ? 4 : 5};
  memcpy(op.fingerprint, oc->other_fp ? fp_b : fp_a, sizeof fp_a);
  if (oc->kind == IDEM_OP_COMPLETE || oc->kind == IDEM_OP_FAIL)
    op.response = (idem_response){.status = 299, .body = "new", .body_len = 3};

  idem_record next;
  idem_result want;
  int write = idem_transition(sc->exists ? &cur : NULL, &op, now, &next, &want);
  idem_result got;
  idem_pg_run(pg, &op, &got);

  exact("err", got.err, want.err, name);
  if (!want.err) {
    if (oc->kind == IDEM_OP_CLAIM)
      exact("outcome", got.outcome, want.outcome, name);
    exact("fence", (long long)got.fence, (long long)want.fence, name);
    if (want.outcome == IDEM_BUSY)
      near("retry_after", got.retry_after_ms, want.retry_after_ms, name);
    exact("has record", got.record != NULL, want.record != NULL, name);
    if (want.record) {
      exact("record state", got.record->state, want.record->state, name);
      exact("record fence", (long long)got.record->fence, (long long)want.record->fence, name);
      exact("record status", got.record->response.status, want.record->response.status, name);
      exact("record body", (long long)got.record->response.body_len,
            (long long)want.record->response.body_len, name);
    }
  }
  idem_result_clear(&got);

  idem_record row;
  int has_body = 0;
  int found = read_row(key, &row, &has_body);
  exact("row exists", found, sc->exists || write == IDEM_WRITE_PUT, name);
  if (!found)
    return;
  const idem_record *w = write == IDEM_WRITE_PUT ? &next : &cur;
  exact("row state", row.state, w->state, name);
  exact("row fence", (long long)row.fence, (long long)w->fence, name);
  if (memcmp(row.fingerprint, w->fingerprint, IDEM_FINGERPRINT_LEN))
    fail_msg("%s: row fingerprint differs", name);
  exact("row status", row.response.status, w->response.status, name);
  exact("row has body", has_body, w->response.body != NULL, name);
  /* what the statement set from its own clock: about; what it kept: exact */
  if (write == IDEM_WRITE_PUT) {
    near("row locked_until", row.locked_until, w->locked_until, name);
    near("row expires_at", row.expires_at, w->expires_at, name);
    near("row created_at", row.created_at, w->created_at, name);
    near("row updated_at", row.updated_at, w->updated_at, name);
    if (w->created_at == cur.created_at)
      exact("row created_at kept", row.created_at, cur.created_at, name);
    if (w->expires_at == cur.expires_at)
      exact("row expires_at kept", row.expires_at, cur.expires_at, name);
  } else {
    exact("row locked_until", row.locked_until, cur.locked_until, name);
    exact("row expires_at", row.expires_at, cur.expires_at, name);
    exact("row created_at", row.created_at, cur.created_at, name);
    exact("row updated_at", row.updated_at, cur.updated_at, name);
  }
}

static void statements_mirror_idem_transition(void **state) {
  (void)state;
  static const stored_case stored[] = {
      {"absent", 0, IDEM_STATE_UNSEEN, 0, 0},
      {"released", 1, IDEM_STATE_UNSEEN, 0, 0},
      {"released, expired", 1, IDEM_STATE_UNSEEN, 1, 0},
      {"processing", 1, IDEM_STATE_PROCESSING, 0, 0},
      {"processing, lease over", 1, IDEM_STATE_PROCESSING, 0, 1},
      {"processing, expired", 1, IDEM_STATE_PROCESSING, 1, 1},
      {"completed", 1, IDEM_STATE_COMPLETED, 0, 0},
      {"completed, expired", 1, IDEM_STATE_COMPLETED, 1, 0},
      {"failed", 1, IDEM_STATE_FAILED, 0, 0},
      {"failed, expired", 1, IDEM_STATE_FAILED, 1, 0},
  };
  static const op_case ops[] = {
      {"claim", IDEM_OP_CLAIM, 0, 0, 0},
      {"claim, other fingerprint", IDEM_OP_CLAIM, 1, 0, 0},
      {"claim, replay failed", IDEM_OP_CLAIM, 0, IDEM_CLAIM_REPLAY_FAILED, 0},
      {"claim, other fingerprint, replay failed", IDEM_OP_CLAIM, 1, IDEM_CLAIM_REPLAY_FAILED, 0},
      {"complete", IDEM_OP_COMPLETE, 0, 0, 0},
      {"complete, stale fence", IDEM_OP_COMPLETE, 0, 0, 1},
      {"fail", IDEM_OP_FAIL, 0, 0, 0},
      {"fail, stale fence", IDEM_OP_FAIL, 0, 0, 1},
      {"release", IDEM_OP_RELEASE, 0, 0, 0},
      {"release, stale fence", IDEM_OP_RELEASE, 0, 0, 1},
      {"get", IDEM_OP_GET, 0, 0, 0},
  };
  int n = 0;
  for (size_t s = 0; s < sizeof stored / sizeof stored[0]; s++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      run_case(&stored[s], &ops[o], n++);
  print_message("%d cases agree\n", n);
}

int main(int argc, char **argv) {
  (void)argc;
  const char *uri = getenv("IDEM_TEST_PG_URI");
  if (!uri) {
    const char *script = IDEM_TEST_SUPPORT "/with-postgres.sh";
    execl(script, script, argv[0], (char *)NULL);
    perror(script);
    return 1;
  }
  pg = PQconnectdb(uri);
  if (PQstatus(pg) != CONNECTION_OK) {
    fprintf(stderr, "%s", PQerrorMessage(pg));
    return 1;
  }
  char *msg = NULL;
  if (idem_pg_migrate(pg, NULL, &msg)) {
    fprintf(stderr, "migrate: %s\n", msg ? msg : "failed");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(statements_mirror_idem_transition),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  PQfinish(pg);
  return rc;
}
