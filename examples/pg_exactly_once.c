/*
 * pg_exactly_once.c - an order charged exactly once, however often it runs.
 *
 *   pg_exactly_once CONNINFO ORDER AMOUNT
 *
 * The order is a saga of two steps, each in its own transaction under its
 * own key derived from the order's ("ORDER:reserve", "ORDER:charge"). In
 * each transaction the idem record and the business write go together:
 *
 *   BEGIN
 *   claim KEY           -> CLAIMED: we are the one to do it
 *   INSERT the business row
 *   complete KEY        -> the response a retry will get
 *   COMMIT              -> both, or (crash, error, rollback) neither
 *
 * A retry after a crash finds no record and does the step again; a retry
 * after the commit gets the stored response and writes nothing. A run
 * concurrent with another on the same order waits on the record's row lock
 * and then replays. Run it twice and the ledger still has one row per step.
 *
 * For the crash test: with IDEM_EXAMPLE_STOP_BEFORE_COMMIT=STEP it prints
 * "about to commit STEP" and waits for a line on stdin before that COMMIT.
 *
 * Exit status: 0 done (or replayed), 1 failed, 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "idem/idem.h"
#include "idem/idem_pg.h"

static const char ledger_sql[] =
    "CREATE TABLE IF NOT EXISTS example_ledger ("
    "  id bigserial PRIMARY KEY, order_id text NOT NULL, step text NOT NULL,"
    "  amount integer NOT NULL, fence bigint NOT NULL)";

static int exec(PGconn *pg, const char *sql) {
  PGresult *r = PQexec(pg, sql);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  if (!ok)
    fprintf(stderr, "%s: %s", sql, PQerrorMessage(pg));
  PQclear(r);
  return ok ? 0 : -1;
}

/* The business write, in the same transaction as the record. */
static int write_ledger(PGconn *pg, const char *order, const char *step, int amount,
                        uint64_t fence) {
  char amount_s[16], fence_s[24];
  snprintf(amount_s, sizeof amount_s, "%d", amount);
  snprintf(fence_s, sizeof fence_s, "%llu", (unsigned long long)fence);
  const char *params[] = {order, step, amount_s, fence_s};
  PGresult *r = PQexecParams(pg,
                             "INSERT INTO example_ledger (order_id, step, amount, fence) "
                             "VALUES ($1, $2, $3::integer, $4::bigint)",
                             4, NULL, params, NULL, NULL, 0);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  if (!ok)
    fprintf(stderr, "ledger: %s", PQerrorMessage(pg));
  PQclear(r);
  return ok ? 0 : -1;
}

static void wait_if_asked(const char *step) {
  const char *stop = getenv("IDEM_EXAMPLE_STOP_BEFORE_COMMIT");
  if (stop && !strcmp(stop, step)) {
    printf("about to commit %s\n", step);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
      return;
  }
}

/* One saga step: 0 done or replayed, -1 failed. */
static int run_step(PGconn *pg, const char *order, const char *step, int amount) {
  char key[IDEM_KEY_MAX + 1];
  snprintf(key, sizeof key, "%s:%s", order, step);
  char payload[64];
  snprintf(payload, sizeof payload, "%s %d", step, amount);

  idem_op claim = {.kind = IDEM_OP_CLAIM, .scope = "example", .key = key,
                   .lease_ms = 30 * 1000, .ttl_ms = 24 * 3600 * 1000};
  idem_fingerprint("STEP", key, payload, strlen(payload), 0, claim.fingerprint);

  if (exec(pg, "BEGIN"))
    return -1;
  idem_result res;
  int err = idem_pg_run(pg, &claim, &res);
  if (err) {
    fprintf(stderr, "%s: claim: %s\n", key, idem_strerror(err));
    exec(pg, "ROLLBACK");
    return -1;
  }
  if (res.outcome != IDEM_CLAIMED) {
    /* nothing to write: end the transaction and report what is stored */
    exec(pg, "ROLLBACK");
    int rc = -1;
    if (res.outcome == IDEM_REPLAY) {
      printf("%s: already done: %.*s\n", key, (int)res.record->response.body_len,
             res.record->response.body);
      rc = 0;
    } else if (res.outcome == IDEM_MISMATCH) {
      fprintf(stderr, "%s: used before with another amount\n", key);
    } else {
      fprintf(stderr, "%s: busy elsewhere, retry in %lld ms\n", key,
              (long long)res.retry_after_ms);
    }
    idem_result_clear(&res);
    return rc;
  }
  uint64_t fence = res.fence;
  idem_result_clear(&res);

  if (write_ledger(pg, order, step, amount, fence)) {
    exec(pg, "ROLLBACK"); /* the claim goes with it: a retry runs again */
    return -1;
  }
  char body[128];
  snprintf(body, sizeof body, "%s %d for %s (fence %llu)", step, amount, order,
           (unsigned long long)fence);
  idem_op done = {.kind = IDEM_OP_COMPLETE, .scope = "example", .key = key,
                  .fence = fence, .ttl_ms = 24 * 3600 * 1000,
                  .response = {.status = 200, .body = body, .body_len = strlen(body)}};
  if ((err = idem_pg_run(pg, &done, &res))) {
    fprintf(stderr, "%s: complete: %s\n", key, idem_strerror(err));
    exec(pg, "ROLLBACK");
    return -1;
  }
  idem_result_clear(&res);
  wait_if_asked(step);
  if (exec(pg, "COMMIT"))
    return -1;
  printf("%s: done: %s\n", key, body);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: pg_exactly_once CONNINFO ORDER AMOUNT\n");
    return 2;
  }
  const char *order = argv[2];
  int amount = atoi(argv[3]);
  PGconn *pg = PQconnectdb(argv[1]);
  if (PQstatus(pg) != CONNECTION_OK) {
    fprintf(stderr, "connect: %s", PQerrorMessage(pg));
    PQfinish(pg);
    return 1;
  }
  char *msg = NULL;
  int err = idem_pg_migrate(pg, NULL, &msg); /* or: idem migrate --store URI */
  if (err || exec(pg, ledger_sql)) {
    fprintf(stderr, "schema: %s\n", msg ? msg : idem_strerror(err));
    free(msg);
    PQfinish(pg);
    return 1;
  }
  int rc = run_step(pg, order, "reserve", amount) || run_step(pg, order, "charge", amount);
  PQfinish(pg);
  return rc ? 1 : 0;
}
