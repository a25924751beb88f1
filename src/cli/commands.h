/* commands.h - one entry point per subcommand, each in its own file. They
 * return the process exit code: 0 ok, 1 operation failed, 2 usage error. */
#ifndef IDEM_CLI_COMMANDS_H
#define IDEM_CLI_COMMANDS_H

#include "core/settings.h"

int cmd_serve(int argc, char **argv);   /* serve.c: the HTTP gateway */
int cmd_consume(int argc, char **argv); /* consume.c: a broker consumer */
int cmd_keys(int argc, char **argv);    /* keys.c: get, delete, list records */
int cmd_gc(int argc, char **argv);      /* gc.c: one retention pass */
int cmd_migrate(int argc, char **argv); /* migrate.c: create/upgrade a schema */
int cmd_config(int argc, char **argv);  /* config.c: check a serve config file */

/* Print "idem CMD: MESSAGE" and a hint to run --help, return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parse argv by the settings table t into cfg (its defaults first;
 * positional words go to words, or are refused when it is NULL). Returns 0; 1 when --help
 * was printed (usage, the options, usage_end); or 2 after a usage error. */
int cli_parse(const setting_table *t, void *cfg, int argc, char **argv, settings_words *words,
              const char *usage, const char *usage_end);

/* Open an existing store for CMD (keys, gc), printing why not on failure;
 * returns 0, or the exit code: 2 for a malformed URI (a bad --store value,
 * as everywhere), 1 for a store that cannot be opened. An lmdb: path that holds no store is an error
 * here (the URI gets create=no unless it says otherwise): a mistyped path
 * must not look like an empty store. */
struct idem_sync;
int cli_open_existing_store(const char *cmd, const char *uri, struct idem_sync **out);

/* Flush standard output: 0, or 1 after "idem CMD: cannot write the output:
 * REASON" (a full disk, a closed pipe), so that a cut output never exits 0. */
int cli_flush_stdout(const char *cmd);

#endif
