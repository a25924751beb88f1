/*
 * postgres_sql.c - the PostgreSQL store's statements, schema and URI.
 *
 * Each operation is one statement, so each transition is atomic on its own
 * and joins the caller's transaction when there is one (postgres_tx.c).
 * Times are Unix milliseconds from the server's clock: statement_timestamp()
 * is fixed for one statement (unlike clock_timestamp()) and, unlike now(),
 * does not go back to the start of a long caller transaction.
 *
 * The claim is the delicate one. INSERT ... ON CONFLICT DO UPDATE WHERE
 * TAKE updates the row only when the claim may take it (a new key, an
 * expired or released record, a lease that ended, a failed record to run
 * again), so a replay, a mismatch or a busy key writes no row version; the
 * conflicting row is locked all the same, until the transaction ends. When
 * nothing was taken the same statement reads the row, in a second branch
 * that runs only then. That read sees the statement's snapshot, which may
 * predate the row the INSERT met: a row committed after the snapshot is
 * missing, or seen in an older version that the claim could have taken.
 * Either way the statement answers "again" (outcome 0) and the claim is
 * sent again: the row is then committed and, in a caller's transaction,
 * still locked by this one. Replaced: a DO UPDATE that always touched the
 * row to record its decision, one row version per replay.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "store/backend.h"
#include "store/postgres.h"
#include "store/uri_options.h"

/* type OIDs (catalog/pg_type_d.h is a server header) */
#define BOOLOID 16
#define BYTEAOID 17
#define INT8OID 20
#define INT2OID 21
#define INT4OID 23
#define TEXTOID 25

#define NOW_MS "(floor(extract(epoch FROM statement_timestamp()) * 1000))::bigint"

#define RECORD_COLS                                                             \
  "scope, key, state, fingerprint, fence, locked_until, expires_at, "           \
  "created_at, updated_at, status, headers, body"
#define R_RECORD_COLS                                                           \
  "r.scope, r.key, r.state, r.fingerprint, r.fence, r.locked_until, "           \
  "r.expires_at, r.created_at, r.updated_at, r.status, r.headers, r.body"
enum { COL_SCOPE, COL_KEY, COL_STATE, COL_FP, COL_FENCE, COL_LOCKED, COL_EXPIRES,
       COL_CREATED, COL_UPDATED, COL_STATUS, COL_HEADERS, COL_BODY, NCOLS };

/* idem_transition's claim(), in terms of the stored row r and the row the
 * claim would insert (excluded: its created_at is now, its locked_until and
 * expires_at are the ones a take writes). The read branch names the claim's
 * fingerprint and now "excluded" too, so that both share these. */
#define LIVE "(r.state <> 0 AND excluded.created_at < r.expires_at)"
#define TAKE                                                                    \
  "(NOT " LIVE " OR (r.fingerprint = excluded.fingerprint AND "                 \
  "((r.state = 3 AND NOT $6) OR "                                               \
  "(r.state = 1 AND excluded.created_at >= r.locked_until))))"
/* what a claim that did not take tells: 0 again, 2 replay, 3 mismatch, 4 busy */
#define REFUSAL                                                                 \
  "CASE WHEN " TAKE " THEN 0 WHEN r.fingerprint <> excluded.fingerprint "       \
  "THEN 3 WHEN r.state = 1 THEN 4 ELSE 2 END"

static const char claim_sql[] =
    "WITH t AS (SELECT " NOW_MS " AS now), "
    "taken AS (INSERT INTO idem_records AS r (scope, key, state, fingerprint, fence, "
    "locked_until, expires_at, created_at, updated_at, status, headers, body, "
    "claim_outcome) "
    "SELECT $1, $2, 1, $3, 1, t.now + $4, greatest(t.now + $5, t.now + $4 + $4), "
    "t.now, t.now, 0, NULL, NULL, 1 FROM t "
    "ON CONFLICT (scope, key) DO UPDATE SET state = 1, "
    "fingerprint = excluded.fingerprint, fence = r.fence + 1, "
    "locked_until = excluded.locked_until, expires_at = excluded.expires_at, "
    "created_at = CASE WHEN " LIVE " THEN r.created_at ELSE excluded.created_at END, "
    "updated_at = excluded.updated_at, status = 0, headers = NULL, body = NULL, "
    "claim_outcome = 1 "
    "WHERE " TAKE " "
    "RETURNING 1, 0::bigint, " RECORD_COLS ") "
    "SELECT * FROM taken "
    "UNION ALL "
    "SELECT " REFUSAL ", r.locked_until - excluded.created_at, " R_RECORD_COLS " "
    "FROM idem_records r, (SELECT $3::bytea AS fingerprint, t.now AS created_at FROM t) excluded "
    "WHERE r.scope = $1 AND r.key = $2 AND NOT EXISTS (SELECT 1 FROM taken)";

/* complete and fail: only the holder of the current fence ends processing,
 * while the record is within its retention (idem_transition's finish) */
static const char finish_sql[] =
    "UPDATE idem_records SET state = $5, locked_until = 0, "
    "updated_at = " NOW_MS ", expires_at = " NOW_MS " + $4, "
    "status = $6, headers = $7, body = $8 "
    "WHERE scope = $1 AND key = $2 AND state = 1 AND fence = $3 AND expires_at > " NOW_MS " "
    "RETURNING fence";

/* release keeps the row, stateless, until its retention ends: the fence
 * lives on and the next claim continues from it */
static const char release_sql[] =
    "UPDATE idem_records SET state = 0, locked_until = 0, "
    "updated_at = " NOW_MS ", status = 0, headers = NULL, body = NULL "
    "WHERE scope = $1 AND key = $2 AND state = 1 AND fence = $3 AND expires_at > " NOW_MS " "
    "RETURNING fence";

static const char get_sql[] =
    "SELECT " RECORD_COLS " FROM idem_records "
    "WHERE scope = $1 AND key = $2 AND state <> 0 AND " NOW_MS " < expires_at";

static const char delete_sql[] = "DELETE FROM idem_records WHERE scope = $1 AND key = $2";

/* Live records in the order of the scoped key (scope length, scope, key,
 * bytewise: the columns are COLLATE "C"), after $2 within $1. */
static const char list_sql[] =
    "SELECT " RECORD_COLS " FROM idem_records "
    "WHERE state <> 0 AND " NOW_MS " < expires_at "
    "AND ($1::text IS NULL OR scope = $1) "
    "AND ($2::text IS NULL OR (octet_length(scope), scope, key) > "
    "(octet_length(coalesce($1, '')), coalesce($1, '') COLLATE \"C\", $2 COLLATE \"C\")) "
    "ORDER BY octet_length(scope), scope, key LIMIT $3";

/* One bounded batch by the expiry index. SKIP LOCKED: never waits on a row
 * a claim holds, and FOR UPDATE rechecks the expiry on the latest version,
 * so a record claimed again meanwhile stays. The rows go by their ctid (a
 * TID scan): locked, they cannot move before the DELETE. */
static const char gc_sql[] =
    "DELETE FROM idem_records WHERE ctid = ANY (ARRAY("
    "SELECT ctid FROM idem_records WHERE expires_at <= " NOW_MS
    " ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED))";

static const Oid claim_types[] = {TEXTOID, TEXTOID, BYTEAOID, INT8OID, INT8OID, BOOLOID};
static const Oid finish_types[] = {TEXTOID, TEXTOID, INT8OID, INT8OID,
                                   INT2OID, INT4OID, BYTEAOID, BYTEAOID};
static const Oid key_types[] = {TEXTOID, TEXTOID, INT8OID};
static const Oid list_types[] = {TEXTOID, TEXTOID, INT8OID};
static const Oid gc_types[] = {INT8OID};

const idem_pg_statement idem_pg_statements[IDEM_PG_NSTMT] = {
    [IDEM_PG_CLAIM] = {"idem_claim_v2", claim_sql, 6, claim_types},
    [IDEM_PG_FINISH] = {"idem_finish_v1", finish_sql, 8, finish_types},
    [IDEM_PG_RELEASE] = {"idem_release_v1", release_sql, 3, key_types},
    [IDEM_PG_GET] = {"idem_get_v1", get_sql, 2, key_types},
    [IDEM_PG_DELETE] = {"idem_delete_v1", delete_sql, 2, key_types},
    [IDEM_PG_LIST] = {"idem_list_v1", list_sql, 3, list_types},
    [IDEM_PG_GC] = {"idem_gc_v1", gc_sql, 1, gc_types},
};

/* ---- parameters -------------------------------------------------------- */

static void put_be(char *buf, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; i--, v >>= 8)
    buf[i] = (char)(v & 0xff);
}

static void text(idem_pg_params *p, const char *s) {
  p->values[p->n] = s;
  p->lengths[p->n] = 0;
  p->formats[p->n] = 0;
  p->n++;
}

static void bytes(idem_pg_params *p, const void *data, size_t len) {
  p->values[p->n] = len ? data : "";
  p->lengths[p->n] = (int)len;
  p->formats[p->n] = 1;
  p->n++;
}

/* an empty response part is stored as NULL, as the memory store keeps it */
static void bytes_or_null(idem_pg_params *p, const void *data, size_t len) {
  if (len) {
    bytes(p, data, len);
  } else {
    p->values[p->n] = NULL;
    p->formats[p->n] = 1;
    p->n++;
  }
}

static void integer(idem_pg_params *p, int64_t v, int size) {
  put_be(p->buf[p->n], (uint64_t)v, size);
  bytes(p, p->buf[p->n], (size_t)size);
}

/* A LIMIT for op->limit: 0 is the default page; SIZE_MAX (everything, as
 * `idem keys list` asks across scopes) must not wrap to a negative bigint,
 * which PostgreSQL refuses. */
static int64_t sql_limit(size_t limit) {
  if (!limit)
    return 1000;
  return limit > (size_t)INT64_MAX ? INT64_MAX : (int64_t)limit;
}

/* Whether s is UTF-8, as a text column takes it. */
static int pg_text_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
  while (p < end) {
    size_t n = *p < 0x80 ? 1 : idem_utf8_seq_len(p, (size_t)(end - p));
    if (!n)
      return 0;
    p += n;
  }
  return 1;
}

int idem_pg_op_check(const idem_op *op) {
  if (op->scope && !pg_text_ok(op->scope))
    return IDEM_ESCOPE;
  return idem_op_answer_fits(op, IDEM_PG_ANSWER_MAX) ? 0 : IDEM_ETOOBIG;
}

int idem_pg_params_build(const idem_op *op, idem_pg_params *p) {
  memset(p, 0, sizeof *p);
  const char *scope = op->scope ? op->scope : "";
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    p->stmt = IDEM_PG_CLAIM;
    text(p, scope);
    text(p, op->key);
    bytes(p, op->fingerprint, IDEM_FINGERPRINT_LEN);
    integer(p, op->lease_ms, 8);
    integer(p, op->ttl_ms, 8);
    integer(p, (op->flags & IDEM_CLAIM_REPLAY_FAILED) ? 1 : 0, 1);
    return 0;
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
    p->stmt = IDEM_PG_FINISH;
    text(p, scope);
    text(p, op->key);
    integer(p, (int64_t)op->fence, 8);
    integer(p, op->ttl_ms, 8);
    integer(p, op->kind == IDEM_OP_COMPLETE ? IDEM_STATE_COMPLETED : IDEM_STATE_FAILED, 2);
    integer(p, op->response.status, 4);
    bytes_or_null(p, op->response.headers, op->response.headers_len);
    bytes_or_null(p, op->response.body, op->response.body_len);
    return 0;
  case IDEM_OP_RELEASE:
    p->stmt = IDEM_PG_RELEASE;
    text(p, scope);
    text(p, op->key);
    integer(p, (int64_t)op->fence, 8);
    return 0;
  case IDEM_OP_GET:
  case IDEM_OP_DELETE:
    p->stmt = op->kind == IDEM_OP_GET ? IDEM_PG_GET : IDEM_PG_DELETE;
    text(p, scope);
    text(p, op->key);
    return 0;
  case IDEM_OP_LIST:
    p->stmt = IDEM_PG_LIST;
    text(p, op->scope); /* NULL: every scope */
    text(p, op->key);   /* NULL: from the start */
    integer(p, sql_limit(op->limit), 8);
    return 0;
  case IDEM_OP_GC:
    p->stmt = IDEM_PG_GC;
    integer(p, sql_limit(op->limit), 8);
    return 0;
  }
  return IDEM_EINVAL;
}

/* ---- results ----------------------------------------------------------- */

static int64_t get_int(const PGresult *pg, int row, int col) {
  const unsigned char *v = (const unsigned char *)PQgetvalue(pg, row, col);
  int len = PQgetlength(pg, row, col);
  if (PQgetisnull(pg, row, col) || len <= 0 || len > 8)
    return 0;
  uint64_t u = (v[0] & 0x80) ? ~(uint64_t)0 : 0; /* sign-extend */
  for (int i = 0; i < len; i++)
    u = (u << 8) | v[i];
  return (int64_t)u;
}

/* Point rec into the row (no copy): valid while pg is. */
static int decode_record(const PGresult *pg, int row, int base, idem_record *rec) {
  if (PQnfields(pg) < base + NCOLS ||
      PQgetlength(pg, row, base + COL_FP) != IDEM_FINGERPRINT_LEN)
    return IDEM_ECORRUPT;
  memset(rec, 0, sizeof *rec);
  rec->scope = PQgetvalue(pg, row, base + COL_SCOPE);
  rec->key = PQgetvalue(pg, row, base + COL_KEY);
  int64_t state = get_int(pg, row, base + COL_STATE);
  if (state < IDEM_STATE_UNSEEN || state > IDEM_STATE_FAILED)
    return IDEM_ECORRUPT;
  rec->state = (idem_state)state;
  memcpy(rec->fingerprint, PQgetvalue(pg, row, base + COL_FP), IDEM_FINGERPRINT_LEN);
  rec->fence = (uint64_t)get_int(pg, row, base + COL_FENCE);
  rec->locked_until = get_int(pg, row, base + COL_LOCKED);
  rec->expires_at = get_int(pg, row, base + COL_EXPIRES);
  rec->created_at = get_int(pg, row, base + COL_CREATED);
  rec->updated_at = get_int(pg, row, base + COL_UPDATED);
  rec->response.status = (int)get_int(pg, row, base + COL_STATUS);
  if (!PQgetisnull(pg, row, base + COL_HEADERS)) {
    rec->response.headers = PQgetvalue(pg, row, base + COL_HEADERS);
    rec->response.headers_len = (size_t)PQgetlength(pg, row, base + COL_HEADERS);
  }
  if (!PQgetisnull(pg, row, base + COL_BODY)) {
    rec->response.body = PQgetvalue(pg, row, base + COL_BODY);
    rec->response.body_len = (size_t)PQgetlength(pg, row, base + COL_BODY);
  }
  return 0;
}

int idem_pg_error_code(const PGresult *pg) {
  const char *state = pg ? PQresultErrorField(pg, PG_DIAG_SQLSTATE) : NULL;
  if (state && (!strcmp(state, "42P01") || !strcmp(state, "42703") ||
                !strcmp(state, "42883")))
    return IDEM_ESCHEMA;
  return IDEM_ESTORE;
}

int idem_pg_must_retry(const PGresult *pg) {
  const char *state = pg ? PQresultErrorField(pg, PG_DIAG_SQLSTATE) : NULL;
  return state && (!strcmp(state, "40001") || !strcmp(state, "40P01"));
}

/* A claim's row: the outcome, the lease's time left, the record. 0 rows or
 * outcome 0: the row was not in the statement's snapshot (CLAIM_AGAIN). */
#define CLAIM_AGAIN 1

static int fill_claim(const PGresult *pg, idem_result *res) {
  if (PQntuples(pg) == 0)
    return CLAIM_AGAIN;
  if (PQntuples(pg) != 1)
    return IDEM_ESTORE;
  idem_record rec;
  int err = decode_record(pg, 0, 2, &rec);
  if (err)
    return err;
  int64_t outcome = get_int(pg, 0, 0);
  res->fence = rec.fence;
  switch (outcome) {
  case 0:
    return CLAIM_AGAIN;
  case 1:
    res->outcome = IDEM_CLAIMED;
    return 0;
  case 2:
  case 3:
    res->outcome = outcome == 2 ? IDEM_REPLAY : IDEM_MISMATCH;
    return idem_result_set_record(res, &rec, rec.scope, rec.key);
  case 4:
    res->outcome = IDEM_BUSY;
    res->retry_after_ms = get_int(pg, 0, 1);
    if (res->retry_after_ms < 1)
      res->retry_after_ms = 1;
    return 0;
  }
  return IDEM_ECORRUPT;
}

static int fill(const idem_op *op, const PGresult *pg, idem_result *res) {
  idem_record rec;
  int err;
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    return fill_claim(pg, res);
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
  case IDEM_OP_RELEASE:
    if (PQntuples(pg) != 1)
      return IDEM_ESTALE;
    res->fence = (uint64_t)get_int(pg, 0, 0);
    return 0;
  case IDEM_OP_GET:
    if (PQntuples(pg) != 1)
      return IDEM_ENOTFOUND;
    if ((err = decode_record(pg, 0, 0, &rec)))
      return err;
    res->fence = rec.fence;
    return idem_result_set_record(res, &rec, rec.scope, rec.key);
  case IDEM_OP_DELETE:
  case IDEM_OP_GC:
    res->count = (size_t)strtoull(PQcmdTuples((PGresult *)pg), NULL, 10);
    return op->kind == IDEM_OP_DELETE && res->count == 0 ? IDEM_ENOTFOUND : 0;
  case IDEM_OP_LIST:
    for (int i = 0; i < PQntuples(pg); i++) {
      if ((err = decode_record(pg, i, 0, &rec)) ||
          (err = idem_result_add_record(res, &rec, rec.scope, rec.key)))
        return err;
    }
    return 0;
  }
  return IDEM_EINVAL;
}

int idem_pg_result_fill(const idem_op *op, const PGresult *pg, idem_result *res,
                        char **errmsg) {
  memset(res, 0, sizeof *res);
  ExecStatusType st = pg ? PQresultStatus(pg) : PGRES_FATAL_ERROR;
  int err;
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
    err = fill(op, pg, res);
  } else {
    err = idem_pg_error_code(pg);
    if (errmsg && pg)
      *errmsg = idem_pg_message("postgres", PQresultErrorMessage(pg));
  }
  if (err) {
    idem_result_clear(res);
    memset(res, 0, sizeof *res);
    if (err == CLAIM_AGAIN)
      return 1;
    res->err = err;
  }
  return 0;
}

/* ---- schema ------------------------------------------------------------ */

/* Migration N takes the schema from version N-1 to N. Each runs in the
 * migrating transaction; add new ones at the end, never edit old ones. */
static const char *const migrations[IDEM_PG_SCHEMA_VERSION + 1] = {
    [1] = "CREATE TABLE IF NOT EXISTS idem_schema ("
          "  version integer PRIMARY KEY,"
          "  migrated_at timestamptz NOT NULL DEFAULT now());"
          "CREATE TABLE IF NOT EXISTS idem_records ("
          "  scope text COLLATE \"C\" NOT NULL,"
          "  key text COLLATE \"C\" NOT NULL,"
          "  state smallint NOT NULL,"           /* idem_state */
          "  fingerprint bytea NOT NULL,"        /* SHA-256 */
          "  fence bigint NOT NULL,"
          "  locked_until bigint NOT NULL,"      /* Unix ms, server clock */
          "  expires_at bigint NOT NULL,"
          "  created_at bigint NOT NULL,"
          "  updated_at bigint NOT NULL,"
          "  status integer NOT NULL DEFAULT 0," /* stored response */
          "  headers bytea,"
          "  body bytea,"
          "  claim_outcome smallint NOT NULL DEFAULT 0," /* last claim's idem_outcome */
          "  PRIMARY KEY (scope, key)"
          ") WITH (fillfactor = 80);"
          "CREATE INDEX IF NOT EXISTS idem_records_expires_at ON idem_records (expires_at);",
};

const char idem_pg_version_sql[] = "SELECT coalesce(max(version), 0) FROM idem_schema";

static void log_notice(void *who, const char *text) {
  char *m = idem_pg_message("postgres", text);
  fprintf(stderr, "%s: %s\n", (const char *)who, m ? m : "postgres: a notice");
  free(m);
}

void idem_pg_log_notices(PGconn *pg, const char *who) {
  PQsetNoticeProcessor(pg, log_notice, (void *)who);
}

char *idem_pg_message(const char *prefix, const char *text) {
  char *m = idem_join(prefix, ": ", text ? text : "");
  if (!m)
    return NULL;
  /* libpq's messages end in a newline and may continue on tab-led lines:
   * make one line of it */
  size_t len = 0;
  for (char *p = m; *p; p++) {
    char ch = (*p == '\n' || *p == '\t') ? ' ' : *p;
    if (ch != ' ' || (len && m[len - 1] != ' '))
      m[len++] = ch;
  }
  while (len && m[len - 1] == ' ')
    len--;
  m[len] = '\0';
  return m;
}

static int exec_ok(PGconn *conn, const char *sql, PGresult **out, char **errmsg) {
  PGresult *r = PQexec(conn, sql);
  ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
    if (out)
      *out = r;
    else
      PQclear(r);
    return 0;
  }
  int err = r ? idem_pg_error_code(r) : IDEM_ESTORE;
  if (errmsg && !*errmsg)
    *errmsg = idem_pg_message("postgres", r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
  PQclear(r);
  return err == IDEM_ESCHEMA ? IDEM_ESTORE : err;
}

int idem_pg_schema_version(PGconn *conn, int *version, char **errmsg) {
  PGresult *r = NULL;
  *version = 0;
  int err = exec_ok(conn, "SELECT to_regclass('idem_schema') IS NOT NULL", &r, errmsg);
  if (err)
    return err;
  int exists = PQntuples(r) == 1 && !strcmp(PQgetvalue(r, 0, 0), "t");
  PQclear(r);
  if (!exists)
    return 0;
  if ((err = exec_ok(conn, idem_pg_version_sql, &r, errmsg)))
    return err;
  *version = PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return 0;
}

int idem_pg_schema_check(int version, char **errmsg) {
  if (version == IDEM_PG_SCHEMA_VERSION)
    return 0;
  char text[300];
  if (version == 0)
    snprintf(text, sizeof text,
             "the database has no idem schema: run 'idem migrate --store URI' "
             "(or add migrate=1 to the store URI)");
  else if (version < IDEM_PG_SCHEMA_VERSION)
    snprintf(text, sizeof text,
             "the idem schema is at version %d, this idem needs %d: run 'idem "
             "migrate --store URI' (or add migrate=1 to the store URI)",
             version, IDEM_PG_SCHEMA_VERSION);
  else
    snprintf(text, sizeof text,
             "the idem schema is at version %d, newer than this idem knows (%d): "
             "upgrade idem",
             version, IDEM_PG_SCHEMA_VERSION);
  if (errmsg)
    *errmsg = idem_pg_message("postgres", text);
  return IDEM_ESCHEMA;
}

/* "idem" in ASCII: the advisory lock that serializes migrations */
#define MIGRATE_LOCK "SELECT pg_advisory_xact_lock(1768187245)"

int idem_pg_migrate(PGconn *conn, int *from_version, char **errmsg) {
  if (errmsg)
    *errmsg = NULL;
  if (from_version)
    *from_version = 0;
  if (!conn || PQstatus(conn) != CONNECTION_OK)
    return IDEM_EINVAL;
  PGTransactionStatusType ts = PQtransactionStatus(conn);
  if (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS) {
    if (errmsg)
      *errmsg = idem_pg_message("postgres", "the connection is busy or its transaction failed");
    return IDEM_EINVAL;
  }
  int own = ts == PQTRANS_IDLE;
  int err, version = 0;
  if (own && (err = exec_ok(conn, "BEGIN", NULL, errmsg)))
    return err;
  /* tables a lost idem_schema row left behind: CREATE ... IF NOT EXISTS
   * would print libpq's NOTICEs on stderr (a caller's own transaction keeps
   * its settings) */
  if (own && (err = exec_ok(conn, "SET LOCAL client_min_messages = warning", NULL, errmsg)))
    goto fail;
  if ((err = exec_ok(conn, MIGRATE_LOCK, NULL, errmsg)) ||
      (err = idem_pg_schema_version(conn, &version, errmsg)))
    goto fail;
  if (from_version)
    *from_version = version;
  if (version > IDEM_PG_SCHEMA_VERSION) {
    err = idem_pg_schema_check(version, errmsg);
    goto fail;
  }
  for (int v = version + 1; v <= IDEM_PG_SCHEMA_VERSION; v++) {
    char insert[100];
    snprintf(insert, sizeof insert, "INSERT INTO idem_schema (version) VALUES (%d)", v);
    if ((err = exec_ok(conn, migrations[v], NULL, errmsg)) ||
        (err = exec_ok(conn, insert, NULL, errmsg)))
      goto fail;
  }
  if (own && (err = exec_ok(conn, "COMMIT", NULL, errmsg)))
    return err;
  return 0;
fail:
  if (own)
    PQclear(PQexec(conn, "ROLLBACK"));
  return err;
}

/* ---- URI ---------------------------------------------------------------- */

static int parse_flag(const char *v, size_t n, int *out) {
  if ((n == 1 && *v == '1') || (n == 4 && !strncmp(v, "true", 4)) ||
      (n == 3 && !strncmp(v, "yes", 3)))
    *out = 1;
  else if ((n == 1 && *v == '0') || (n == 5 && !strncmp(v, "false", 5)) ||
           (n == 2 && !strncmp(v, "no", 2)))
    *out = 0;
  else
    return -1;
  return 0;
}

/* A whole number of at most digits characters, from min to max. */
static int parse_bounded(const char *v, size_t digits, long min, long max, int *out) {
  size_t n = strlen(v);
  char *stop;
  if (n == 0 || n > digits)
    return -1;
  long x = strtol(v, &stop, 10);
  if (*stop || x < min || x > max)
    return -1;
  *out = (int)x;
  return 0;
}

/* One of the store's own options (consumed: libpq never sees it). Sets
 * *bad to what the option takes when its value is wrong. */
static int own_option(const idem_uri_option *o, idem_pg_uri *out, const char **bad) {
  const char *v = o->value ? o->value : "";
  size_t vlen = strlen(v);
  if (!strcmp(o->name, "migrate")) {
    if (parse_flag(v, vlen, &out->migrate))
      *bad = "migrate= takes 1 or 0 (or yes/no, true/false)";
  } else if (!strcmp(o->name, "pool")) {
    if (parse_bounded(v, 2, 1, 64, &out->pool))
      *bad = "pool= takes a number of connections from 1 to 64";
  } else if (!strcmp(o->name, "batch")) {
    if (parse_bounded(v, 4, 1, 1024, &out->batch))
      *bad = "batch= takes a number of operations per transaction from 1 to 1024";
  } else if (!strcmp(o->name, "timeout")) {
    if (vlen > 31 || idem_parse_duration(v, &out->timeout_ms))
      *bad = "timeout= takes a duration such as 500ms, 10s or 1m";
  } else if (!strcmp(o->name, "sweep_interval")) {
    if (!strcmp(v, "off"))
      out->sweep_interval_ms = 0;
    else if (vlen > 31 || idem_parse_duration(v, &out->sweep_interval_ms))
      *bad = "sweep_interval= takes a duration such as 5s or 1m, or off";
  } else {
    return 0;
  }
  return 1;
}

/* A port list as libpq takes it ("5432" or "5432,5433", empty for the
 * default): libpq itself looks at it only when it connects. */
static int bad_ports(const char *v) {
  for (const char *p = v; *p;) {
    size_t n = strspn(p, "0123456789");
    long port = n && n <= 5 ? strtol(p, NULL, 10) : 0;
    if ((n && (port < 1 || port > 65535)) || (p[n] && p[n] != ','))
      return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

/* libpq's integer options: what it refuses only when it connects is an int,
 * optionally signed, with blanks around it allowed. */
static int is_int_option(const char *keyword) {
  static const char *const ints[] = {"connect_timeout", "keepalives", "keepalives_idle",
                                     "keepalives_interval", "keepalives_count",
                                     "tcp_user_timeout"};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (!strcmp(keyword, ints[i]))
      return 1;
  return 0;
}

static int bad_int(const char *v) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  while (*end == ' ' || *end == '\t')
    end++;
  return end == v || *end || errno || n < INT_MIN || n > INT_MAX;
}

static int bad_choice(const char *v, const char *const *choices, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v, choices[i]))
      return 0;
  return 1;
}

static const char *const ssl_modes[] = {"disable", "allow", "prefer", "require", "verify-ca",
                                        "verify-full"};
static const char *const session_attrs[] = {"any", "read-write", "read-only", "primary",
                                            "standby", "prefer-standby"};
static const char *const gss_modes[] = {"disable", "prefer", "require"};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The option o of a conninfo as libpq will refuse it when it connects, as a
 * sentence (in text, when it names the option); NULL when it takes it. */
static const char *bad_libpq_option(const PQconninfoOption *o, char *text, size_t len) {
  if (!strcmp(o->keyword, "port") && bad_ports(o->val))
    return "the port must be a number from 1 to 65535";
  if (!strcmp(o->keyword, "sslmode") && bad_choice(o->val, ssl_modes, COUNT(ssl_modes)))
    return "sslmode= takes disable, allow, prefer, require, verify-ca or verify-full";
  if (is_int_option(o->keyword) && bad_int(o->val)) {
    snprintf(text, len, "%s= takes a whole number", o->keyword);
    return text;
  }
  if (!strcmp(o->keyword, "target_session_attrs") &&
      bad_choice(o->val, session_attrs, COUNT(session_attrs)))
    return "target_session_attrs= takes any, read-write, read-only, primary, standby or "
           "prefer-standby";
  if (!strcmp(o->keyword, "gssencmode") && bad_choice(o->val, gss_modes, COUNT(gss_modes)))
    return "gssencmode= takes disable, prefer or require";
  return NULL;
}

/* What libpq would refuse in the URI (its syntax, a port, a mode, a number),
 * as a message; NULL when it takes it. Found here, it is a malformed --store
 * (exit 2) rather than a failure to connect. */
static char *conninfo_problem(const char *info) {
  char *perr = NULL, *msg = NULL;
  PQconninfoOption *opts = PQconninfoParse(info, &perr);
  if (!opts) {
    msg = idem_pg_message("postgres", perr ? perr : "out of memory");
    PQfreemem(perr);
    return msg;
  }
  for (PQconninfoOption *o = opts; o->keyword && !msg; o++) {
    char text[120];
    const char *why = o->val ? bad_libpq_option(o, text, sizeof text) : NULL;
    if (why)
      msg = idem_pg_message("postgres", why);
  }
  PQconninfoFree(opts);
  return msg;
}

/* Append "?text" (the first option) or "&text" to info[0..*n). */
static void append_option(char *info, size_t *n, size_t base, const char *text, size_t len) {
  char sep = *n == base ? '?' : '&';
  info[(*n)++] = sep;
  memcpy(info + *n, text, len);
  *n += len;
}

int idem_pg_uri_parse(const char *uri, idem_pg_uri *out, char **errmsg) {
  memset(out, 0, sizeof *out);
  out->pool = 2;
  out->batch = 64;
  out->timeout_ms = 10000;
  out->sweep_interval_ms = 5000;
  if (strncmp(uri, "postgres://", 11) && strncmp(uri, "postgresql://", 13)) {
    if (errmsg)
      *errmsg = idem_pg_message("postgres", "the store URI must start with postgres:// or postgresql://");
    return IDEM_EURI;
  }
  /* libpq waits for the OS (minutes) on a host that does not answer */
  static const char ct[] = "connect_timeout=10";
  size_t len = strlen(uri);
  const char *q = strchr(uri, '?');
  size_t base = q ? (size_t)(q - uri) : len, n = base;
  char *info = malloc(len + sizeof ct + 1);
  idem_uri_options o;
  if (!info || idem_uri_options_parse(q ? q + 1 : "", &o)) {
    free(info);
    return IDEM_ENOMEM;
  }
  memcpy(info, uri, base);
  const char *bad = NULL, *twice = idem_uri_options_repeated(&o);
  char twice_msg[160];
  if (twice) { /* libpq would take the last: refused, as for every store */
    snprintf(twice_msg, sizeof twice_msg, "option %.100s= given twice", twice);
    bad = twice_msg;
  }
  int has_connect_timeout = 0;
  for (size_t i = 0; i < o.n && !bad; i++) {
    if (own_option(&o.items[i], out, &bad))
      continue;
    has_connect_timeout |= !strcmp(o.items[i].name, "connect_timeout");
    append_option(info, &n, base, o.items[i].text, o.items[i].text_len);
  }
  idem_uri_options_free(&o);
  if (!has_connect_timeout)
    append_option(info, &n, base, ct, sizeof ct - 1);
  info[n] = '\0';
  if (bad) {
    free(info);
    if (errmsg)
      *errmsg = idem_pg_message("postgres", bad);
    return IDEM_EURI;
  }
  char *problem = conninfo_problem(info);
  if (problem) {
    free(info);
    if (errmsg)
      *errmsg = problem;
    else
      free(problem);
    return IDEM_EURI;
  }
  out->conninfo = info;
  return 0;
}
