/*
 * idem_pg.h - the PostgreSQL part of libidem's public API, for C callers who
 * hold their own libpq connection: the schema (idem_pg_migrate) and one
 * operation in the caller's own transaction (idem_pg_run). Installed only
 * when libidem is built with PostgreSQL (-DIDEM_POSTGRES=ON, the default).
 *
 * Pass the PGconn of your own transaction and the record commits or rolls
 * back with your business writes: claim, write, complete, COMMIT; a crash
 * before COMMIT leaves neither. A concurrent claim of the same key waits on
 * the row until your transaction ends, then sees the outcome. For the steps
 * of a saga, derive one key per step ("KEY:STEP"). The connection must be in
 * blocking mode, not in pipeline mode.
 *
 * This header does not include libpq-fe.h (which defines PGconn as struct
 * pg_conn): include it yourself, and build with pkg-config's idem and libpq.
 */
#ifndef IDEM_IDEM_PG_H
#define IDEM_IDEM_PG_H

#include "idem/idem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pg_conn;

/* The schema this libidem uses (tables idem_records and idem_schema). */
#define IDEM_PG_SCHEMA_VERSION 1

/*
 * Create or upgrade the schema on conn (under an advisory lock, so several
 * processes may migrate at once). Outside a transaction it runs in its own;
 * inside one it joins it (DDL is transactional in PostgreSQL). *from_version
 * (may be NULL) gets the version found: 0 when there was none. IDEM_ESCHEMA
 * when the database holds a newer schema; IDEM_ESTORE on other failures.
 * errmsg as for idem_store_open.
 */
IDEM_API int idem_pg_migrate(struct pg_conn *conn, int *from_version,
                             char **errmsg);

/*
 * Run one operation (claim, complete, fail, release, get, delete, list, gc)
 * as one statement on conn, in the caller's transaction if one is open. On
 * return res holds a deep copy (free with idem_result_clear) and the function
 * returns res->err. What the server would refuse is refused before it is
 * sent, leaving the transaction as it was: input idem_store_submit refuses,
 * a scope that is not UTF-8 (IDEM_ESCOPE), an answer over 1023 MiB
 * (IDEM_ETOOBIG). A server error gives IDEM_ESTORE (IDEM_ESCHEMA when the
 * table is missing) and aborts the caller's transaction: roll it back.
 * Under REPEATABLE READ or SERIALIZABLE a concurrent change of the same key
 * is a serialization failure, and two transactions can deadlock on rows:
 * both give IDEM_ERETRY (SQLSTATE 40001, 40P01), which also aborts the
 * transaction: roll it back and run it again from its start.
 */
IDEM_API int idem_pg_run(struct pg_conn *conn, const idem_op *op,
                         idem_result *res);

#ifdef __cplusplus
}
#endif
#endif /* IDEM_IDEM_PG_H */
