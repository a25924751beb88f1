/*
 * postgres.h - what the PostgreSQL store's files share: the statements and
 * their parameters (postgres_sql.c), the async store on the libuv loop
 * (postgres.c), the in-transaction API (postgres_tx.c) and `idem migrate`.
 *
 * One statement per operation, on the server's clock. The statements mirror
 * idem_transition() in core/transition.c line by line; the contract suite
 * holds them to it.
 */
#ifndef IDEM_STORE_POSTGRES_H
#define IDEM_STORE_POSTGRES_H

#include <libpq-fe.h>

#include "idem/idem.h"

/* The statements, in the order postgres_sql.c defines them. */
typedef enum {
  IDEM_PG_CLAIM,
  IDEM_PG_FINISH,  /* complete and fail */
  IDEM_PG_RELEASE,
  IDEM_PG_GET,
  IDEM_PG_DELETE,
  IDEM_PG_LIST,
  IDEM_PG_GC,
  IDEM_PG_NSTMT
} idem_pg_stmt;

#define IDEM_PG_MAX_PARAMS 8

typedef struct {
  const char *name;     /* prepared statement name */
  const char *sql;
  int nparams;
  const Oid *types;
} idem_pg_statement;

extern const idem_pg_statement idem_pg_statements[IDEM_PG_NSTMT];

/* The parameters of one operation, pointing into op and buf. */
typedef struct {
  idem_pg_stmt stmt;
  int n;
  const char *values[IDEM_PG_MAX_PARAMS];
  int lengths[IDEM_PG_MAX_PARAMS];
  int formats[IDEM_PG_MAX_PARAMS];
  char buf[IDEM_PG_MAX_PARAMS][8]; /* big-endian integers */
} idem_pg_params;

/* Fill p for op (already validated). IDEM_EINVAL for an unknown kind. */
int idem_pg_params_build(const idem_op *op, idem_pg_params *p);

/* Turn the PGresult of op's statement into *res (err set on failure). When
 * errmsg is not NULL, a server error's message is left there (malloc'd). */
void idem_pg_result_fill(const idem_op *op, const PGresult *pg, idem_result *res,
                         char **errmsg);

/* The IDEM_E* code for a failed PGresult: IDEM_ESCHEMA when the table is
 * missing (undefined table/column/function), IDEM_ESTORE otherwise. */
int idem_pg_error_code(const PGresult *pg);

/* The schema version a connection sees (0: no schema), blocking. */
int idem_pg_schema_version(PGconn *conn, int *version, char **errmsg);
/* The query behind idem_pg_schema_version, for pipelined checks. */
extern const char idem_pg_version_sql[];
/* IDEM_ESCHEMA with a sentence telling what to run, unless version is
 * IDEM_PG_SCHEMA_VERSION. */
int idem_pg_schema_check(int version, char **errmsg);

/* Store URI options that libpq must not see, removed from the URI. */
typedef struct {
  char *conninfo; /* the libpq URI, malloc'd */
  int migrate;    /* migrate=1: run the migrations on open */
  int pool;       /* pool=N: connections (1..64, default 2) */
  int batch;      /* batch=N: most operations per transaction (1..1024, default 64) */
  int64_t timeout_ms; /* timeout=DUR: no answer that long fails a connection (10s) */
} idem_pg_uri;

int idem_pg_uri_parse(const char *uri, idem_pg_uri *out, char **errmsg);

/* A malloc'd "prefix: text" with text's trailing newline removed. */
char *idem_pg_message(const char *prefix, const char *text);

#endif
