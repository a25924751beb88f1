/*
 * gc.c - idem gc: delete expired records by hand, in any store.
 *
 * Stores with a background sweeper (LMDB, PostgreSQL, memory) or native
 * expiry (Redis) do this on their own; this is for cron jobs (a PostgreSQL
 * store opened with sweep_interval=off), and for an operator who wants the
 * space back now.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/settings.h"
#include "idem/idem.h"

#define DEFAULT_STORE "lmdb:./idem-data"
#define PASS_CHUNK 10000 /* deletions per operation while a pass runs */

static const char usage[] =
    "usage: idem gc [--store URI] [--limit N]\n"
    "\n"
    "Delete records whose retention has ended: one pass over everything\n"
    "expired now, or at most N records with --limit. Prints {\"deleted\":N}.\n"
    "\n"
    "options:\n";

typedef struct {
  const char *store;
  int limit; /* 0: everything expired */
} gc_args;

static const setting gc_settings[] = {
    {"store", "URI", SETTING_STRING, offsetof(gc_args, store), DEFAULT_STORE, 0, 0, NULL,
     "store to use"},
    {"limit", "N", SETTING_COUNT, offsetof(gc_args, limit), NULL, 1, INT_MAX, NULL,
     "delete at most N records"},
};
static const setting_table gc_table = {"gc", gc_settings, sizeof gc_settings / sizeof gc_settings[0]};

int cmd_gc(int argc, char **argv) {
  gc_args args = {0};
  int rc = cli_parse(&gc_table, &args, argc, argv, NULL, usage, NULL);
  if (rc)
    return rc == 1 ? 0 : rc; /* 1: --help was printed */
  const char *store = args.store;
  size_t limit = (size_t)args.limit;

  idem_sync *sync;
  if ((rc = cli_open_existing_store("gc", store, &sync)) != 0)
    return rc;
  int err = 0;
  size_t deleted = 0;
  for (;;) {
    size_t want = limit ? limit - deleted : PASS_CHUNK;
    idem_op op = {.kind = IDEM_OP_GC, .limit = want < PASS_CHUNK ? want : PASS_CHUNK};
    idem_result res;
    err = idem_sync_run(sync, &op, &res);
    size_t n = err ? 0 : res.count;
    idem_result_clear(&res);
    if (err)
      break;
    deleted += n;
    /* fewer than asked: nothing else has expired */
    if (n < op.limit || (limit && deleted >= limit))
      break;
  }
  idem_sync_close(sync);
  printf("{\"deleted\":%zu}\n", deleted);
  if (err) {
    fprintf(stderr, "idem gc: %s (%s) after deleting %zu records\n", idem_strerror(err), idem_errname(err),
            deleted);
    return 1;
  }
  return cli_flush_stdout("gc");
}
