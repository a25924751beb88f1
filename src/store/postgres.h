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
#include "idem/idem_pg.h"
#include "store/lookup.h"

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
 * errmsg is not NULL, a server error's message is left there (malloc'd).
 * Returns 1, *res left empty, for a claim that met a row its statement could
 * not read yet: send it again (postgres_sql.c says why); otherwise 0. */
int idem_pg_result_fill(const idem_op *op, const PGresult *pg, idem_result *res,
                        char **errmsg);

/* The IDEM_E* code for a failed PGresult: IDEM_ESCHEMA when the table is
 * missing (undefined table/column/function), IDEM_ESTORE otherwise. */
int idem_pg_error_code(const PGresult *pg);
/* Whether a failed PGresult is a serialization failure or a deadlock
 * (SQLSTATE 40001, 40P01): the transaction may succeed if run again. */
int idem_pg_must_retry(const PGresult *pg);

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
  int64_t sweep_interval_ms; /* sweep_interval=DUR|off: background gc (5s; 0: off) */
} idem_pg_uri;

int idem_pg_uri_parse(const char *uri, idem_pg_uri *out, char **errmsg);

/* postgres_hosts.c: the hosts of a URI that the store looks up itself
 * (off the loop) before each connection, and what libpq then gets. */
#define IDEM_PG_HOSTS_MAX 8 /* entries of host=pg1,pg2,... taken over */
#define IDEM_PG_ADDRS_MAX 16 /* (host, address) pairs handed to libpq */

typedef struct {
  int n;                         /* 0: libpq looks the hosts up itself */
  char *name[IDEM_PG_HOSTS_MAX]; /* a name or a numeric address */
  char *port[IDEM_PG_HOSTS_MAX]; /* each its own, or all NULL (one port for all) */
  int numeric[IDEM_PG_HOSTS_MAX];
} idem_pg_hosts;

/* What a lookup of one host gave (a numeric host: itself). */
typedef struct {
  int n;
  idem_addr_text addr[IDEM_LOOKUP_MAX];
} idem_pg_found;

/* Comma-separated, one entry per address, as libpq's host, hostaddr and
 * port (ports empty when the URI has one port for all). */
typedef struct {
  char hosts[IDEM_PG_ADDRS_MAX * 256];
  char addrs[IDEM_PG_ADDRS_MAX * INET6_ADDRSTRLEN];
  char ports[IDEM_PG_ADDRS_MAX * 6];
} idem_pg_lists;

/* Fill *out from conninfo's host and port; returns out->n (0: left to
 * libpq, and nothing to free). */
int idem_pg_hosts_parse(const char *conninfo, idem_pg_hosts *out);
void idem_pg_hosts_free(idem_pg_hosts *h);
/* Whether any host is a name (else there is nothing to look up). */
int idem_pg_hosts_looked_up(const idem_pg_hosts *h);
/* The lists for found[0..h->n): the URI's order, addresses in slow after
 * the others; returns how many entries (0: no address at all). */
int idem_pg_hosts_lists(const idem_pg_hosts *h, const idem_pg_found *found,
                        const idem_slow_addrs *slow, idem_pg_lists *out);

/* PostgreSQL takes no message over 1 GiB (its MaxAllocSize), and a
 * complete's Bind carries the answer with the key, scope and the rest:
 * a MiB is left for them. */
#define IDEM_PG_ANSWER_MAX (((size_t)1 << 30) - ((size_t)1 << 20))

/* What PostgreSQL would refuse of op, before it is sent: a scope that is
 * not UTF-8 (a text column: IDEM_ESCOPE), an answer over
 * IDEM_PG_ANSWER_MAX (IDEM_ETOOBIG). 0 when it may go. */
int idem_pg_op_check(const idem_op *op);

/* A malloc'd "prefix: text" with text's trailing newline removed. */
char *idem_pg_message(const char *prefix, const char *text);

/* The server's notices and warnings on pg ("terminating connection due
 * to immediate shutdown") as one stderr line each, "who: postgres: ...",
 * not libpq's raw lines. who must outlive pg. */
void idem_pg_log_notices(PGconn *pg, const char *who);

#endif
