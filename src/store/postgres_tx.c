/*
 * postgres_tx.c - the in-transaction API: one operation as one statement on
 * the caller's own connection, so the record commits or rolls back with the
 * caller's business writes.
 *
 * The statements are the store's (postgres_sql.c), sent unprepared so that
 * they never collide with the caller's prepared statements. The row lock a
 * claim takes is held until the caller's transaction ends: a concurrent
 * claim of the same key waits for it, then sees the committed outcome (or,
 * after a rollback, nothing at all).
 */
#include <string.h>

#include "store/backend.h"
#include "store/postgres.h"

int idem_pg_run(PGconn *conn, const idem_op *op, idem_result *res) {
  if (!res)
    return IDEM_EINVAL;
  memset(res, 0, sizeof *res);
  if (!conn || !op)
    return res->err = IDEM_EINVAL;
  int err = idem_op_validate(op); /* the same rules as idem_store_submit */
  if (err || (err = idem_pg_op_check(op)))
    return res->err = err;
  if (PQstatus(conn) != CONNECTION_OK || PQisnonblocking(conn) ||
      PQpipelineStatus(conn) != PQ_PIPELINE_OFF)
    return res->err = IDEM_EINVAL;
  idem_pg_params p;
  if ((err = idem_pg_params_build(op, &p)))
    return res->err = err;
  const idem_pg_statement *s = &idem_pg_statements[p.stmt];
  /* a claim that met a row newer than its snapshot holds that row's lock
   * now, so its second run reads it (postgres_sql.c) */
  int again = 1;
  for (int tries = 0; again && tries < 3; tries++) {
    PGresult *pg = PQexecParams(conn, s->sql, p.n, s->types, p.values, p.lengths,
                                p.formats, 1);
    again = idem_pg_result_fill(op, pg, res, NULL);
    if (res->err == IDEM_ESTORE && idem_pg_must_retry(pg))
      res->err = IDEM_ERETRY; /* the caller's transaction, not the store, failed */
    PQclear(pg);
  }
  return again ? (res->err = IDEM_ESTORE) : res->err;
}
