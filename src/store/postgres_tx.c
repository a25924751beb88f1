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

#include "store/postgres.h"

static int valid_key(const char *key) { return key && idem_key_valid(key, strlen(key)); }

static int validate(const idem_op *op) {
  if (op->scope && strlen(op->scope) > IDEM_SCOPE_MAX)
    return IDEM_ESCOPE;
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    return op->lease_ms > 0 && op->ttl_ms > 0 ? 0 : IDEM_EINVAL;
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    if (op->response.status != 0 && (op->response.status < 100 || op->response.status > 999))
      return IDEM_EINVAL;
    if ((!op->response.headers && op->response.headers_len) ||
        (!op->response.body && op->response.body_len) ||
        op->response.headers_len > (1u << 30) || op->response.body_len > (1u << 30))
      return IDEM_EINVAL;
    return op->fence > 0 && op->ttl_ms > 0 ? 0 : IDEM_EINVAL;
  case IDEM_OP_RELEASE:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    return op->fence > 0 ? 0 : IDEM_EINVAL;
  case IDEM_OP_GET:
  case IDEM_OP_DELETE:
    return valid_key(op->key) ? 0 : IDEM_EKEY;
  case IDEM_OP_LIST:
    return !op->key || valid_key(op->key) ? 0 : IDEM_EKEY;
  case IDEM_OP_GC:
    return 0;
  }
  return IDEM_EINVAL;
}

int idem_pg_run(PGconn *conn, const idem_op *op, idem_result *res) {
  if (!res)
    return IDEM_EINVAL;
  memset(res, 0, sizeof *res);
  if (!conn || !op)
    return res->err = IDEM_EINVAL;
  int err = validate(op);
  if (err)
    return res->err = err;
  if (PQstatus(conn) != CONNECTION_OK || PQisnonblocking(conn) ||
      PQpipelineStatus(conn) != PQ_PIPELINE_OFF)
    return res->err = IDEM_EINVAL;
  idem_pg_params p;
  if ((err = idem_pg_params_build(op, &p)))
    return res->err = err;
  const idem_pg_statement *s = &idem_pg_statements[p.stmt];
  PGresult *pg = PQexecParams(conn, s->sql, p.n, s->types, p.values, p.lengths,
                              p.formats, 1);
  idem_pg_result_fill(op, pg, res, NULL);
  PQclear(pg);
  return res->err;
}
