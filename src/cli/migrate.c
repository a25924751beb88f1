/* migrate.c - `idem migrate --store URI`: create or upgrade a store's schema.
 *
 * Only PostgreSQL has a schema; other stores need nothing and are only
 * checked to open and answer. Exit 0: the schema is current (or --check: it already
 * was); 1: it could not be migrated (or --check: it needs a migration);
 * 2: usage. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/settings.h"
#include "idem/idem.h"
#if IDEM_WITH_POSTGRES
#include "store/postgres.h"
#endif

static const char usage[] =
    "usage: idem migrate --store URI [--check]\n"
    "\n"
    "Create or upgrade the schema of a store (PostgreSQL: the tables\n"
    "idem_records and idem_schema). Safe to run again and from several\n"
    "processes at once. Other stores have no schema.\n"
    "\n"
    "options:\n";

typedef struct {
  const char *store;
  int check;
} migrate_args;

static const setting migrate_settings[] = {
    {"store", "URI", SETTING_STRING, offsetof(migrate_args, store), NULL, 0, 0, NULL,
     "the store, e.g. postgres://user@host:5432/db (required)"},
    {"check", NULL, SETTING_SWITCH, offsetof(migrate_args, check), NULL, 0, 0, NULL,
     "change nothing: exit 0 when current, 1 when not"},
};
static const setting_table migrate_table = {"migrate", migrate_settings,
                                            sizeof migrate_settings / sizeof migrate_settings[0]};

/* Any store but PostgreSQL (or any store at all, in a build without
 * PostgreSQL, where opening a postgres:// URI says that this build has none).
 * A network store opens without a word to its server, so one read says it
 * answers: a Redis that is down, or refuses us, is a failure (1), as for
 * keys and gc, not "nothing to migrate". */
static int other_store(const char *uri) {
  idem_sync *sync;
  int rc = cli_open_existing_store("migrate", uri, &sync); /* never creates one */
  if (rc)
    return rc;
  idem_op op = {.kind = IDEM_OP_GET, .key = "idem-migrate-probe"};
  idem_result res;
  int err = idem_sync_run(sync, &op, &res);
  idem_result_clear(&res);
  idem_sync_close(sync);
  if (err && err != IDEM_ENOTFOUND) {
    fprintf(stderr, "idem migrate: store '%s': %s (%s)\n", uri, idem_strerror(err),
            idem_errname(err));
    return 1;
  }
  printf("%.*s stores have no schema: nothing to migrate\n", (int)strcspn(uri, ":"), uri);
  return 0;
}

#if IDEM_WITH_POSTGRES
static int is_postgres(const char *uri) {
  return !strncmp(uri, "postgres://", 11) || !strncmp(uri, "postgresql://", 13);
}

static int postgres(const char *uri, int check) {
  idem_pg_uri u;
  char *msg = NULL;
  int err = idem_pg_uri_parse(uri, &u, &msg);
  if (err) {
    fprintf(stderr, "idem migrate: --store '%s': %s\n", uri, msg ? msg : idem_strerror(err));
    free(msg);
    return 2;
  }
  PGconn *pg = PQconnectdb(u.conninfo);
  free(u.conninfo);
  if (pg)
    idem_pg_log_notices(pg, "idem migrate");
  int status = 1, version = 0;
  if (!pg || PQstatus(pg) != CONNECTION_OK) {
    msg = idem_pg_message("postgres", pg ? PQerrorMessage(pg) : "out of memory");
    fprintf(stderr, "idem migrate: %s\n", msg ? msg : "cannot connect");
  } else if (check) {
    err = idem_pg_schema_version(pg, &version, &msg);
    if (!err)
      err = idem_pg_schema_check(version, &msg);
    if (!err) {
      printf("schema is current (version %d)\n", version);
      status = 0;
    } else {
      fprintf(stderr, "idem migrate: %s\n", msg ? msg : idem_strerror(err));
    }
  } else if ((err = idem_pg_migrate(pg, &version, &msg))) {
    fprintf(stderr, "idem migrate: %s (%s)\n", msg ? msg : idem_strerror(err),
            idem_errname(err));
  } else {
    if (version == IDEM_PG_SCHEMA_VERSION)
      printf("schema is current (version %d): nothing to do\n", version);
    else if (version == 0)
      printf("schema created (version %d)\n", IDEM_PG_SCHEMA_VERSION);
    else
      printf("schema upgraded from version %d to %d\n", version, IDEM_PG_SCHEMA_VERSION);
    status = 0;
  }
  free(msg);
  PQfinish(pg);
  return status;
}
#endif

int cmd_migrate(int argc, char **argv) {
  migrate_args args = {0};
  int rc = cli_parse(&migrate_table, &args, argc, argv, NULL, usage,
                     "\nexit status: 0 done, 1 failed (or --check: migration needed), 2 usage\n");
  if (rc)
    return rc == 1 ? 0 : rc; /* 1: --help was printed */
  const char *uri = args.store;
  int check = args.check;
  if (!uri || !*uri)
    return cli_usage_error("migrate", "--store URI is required");
#if IDEM_WITH_POSTGRES
  if (is_postgres(uri))
    return postgres(uri, check);
#else
  (void)check; /* only PostgreSQL has a schema */
#endif
  return other_store(uri);
}
