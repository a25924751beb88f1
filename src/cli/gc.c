/*
 * gc.c - idem gc: delete expired records by hand, in any store.
 *
 * Stores with a background sweeper (LMDB) or native expiry (Redis) do this
 * on their own; this is for cron jobs, for stores without one, and for an
 * operator who wants the space back now.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "idem/idem.h"

#define DEFAULT_STORE "lmdb:./idem-data"
#define PASS_CHUNK 10000 /* deletions per operation while a pass runs */

static const char usage[] =
    "usage: idem gc [--store URI] [--limit N]\n"
    "\n"
    "Delete records whose retention has ended: one pass over everything\n"
    "expired now, or at most N records with --limit. Prints {\"deleted\":N}.\n"
    "\n"
    "options:\n"
    "  --store URI   store to use (default " DEFAULT_STORE ")\n"
    "  --limit N     delete at most N records\n"
    "  -h, --help    this text\n";

int cmd_gc(int argc, char **argv) {
  const char *store = DEFAULT_STORE, *limit_text = NULL;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      fputs(usage, stdout);
      return 0;
    }
    const char **dst = !strncmp(arg, "--store", 7) ? &store : !strncmp(arg, "--limit", 7) ? &limit_text : NULL;
    if (dst && arg[7] == '=') {
      *dst = arg + 8;
    } else if (dst && arg[7] == '\0') {
      if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
        return cli_usage_error("gc", "%s needs a value", arg);
      *dst = argv[++i];
    } else if (arg[0] == '-') {
      return cli_usage_error("gc", "unknown option '%s'", arg);
    } else {
      return cli_usage_error("gc", "unexpected argument '%s'", arg);
    }
  }
  size_t limit = 0; /* 0: everything expired */
  if (limit_text) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(limit_text, &end, 10);
    if (errno || end == limit_text || *end || limit_text[0] == '-' || n == 0 || n > SIZE_MAX)
      return cli_usage_error("gc", "--limit '%s': want a positive number", limit_text);
    limit = (size_t)n;
  }

  idem_sync *sync;
  if (cli_open_existing_store("gc", store, &sync))
    return 1;
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
  return fflush(stdout) ? 1 : 0;
}
