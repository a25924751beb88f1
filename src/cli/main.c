/* main.c - the idem binary: dispatch to a subcommand, and what subcommands share. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/settings.h"
#include "idem/idem.h"

static const char usage[] =
    "usage: idem <command> [options]\n"
    "\n"
    "Makes the effect of a retried request or redelivered message happen once.\n"
    "\n"
    "commands:\n"
    "  serve     HTTP reverse-proxy gateway with Idempotency-Key semantics\n"
    "  consume   broker consumer: a message's effect once, then ack\n"
    "  keys      inspect records: get, delete, list\n"
    "  gc        delete expired records (one pass)\n"
    "  migrate   create or upgrade a store's schema (PostgreSQL)\n"
    "  config    check a serve config file, or print its OpenAPI fragment\n"
    "  version   print the version\n"
    "\n"
    "Run 'idem <command> --help' for a command's options.\n";

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
} commands[] = {
    {"serve", cmd_serve},
    {"consume", cmd_consume},
    {"keys", cmd_keys},
    {"gc", cmd_gc},
    {"migrate", cmd_migrate},
    {"config", cmd_config},
};

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "idem %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun 'idem %s --help' for usage.\n", cmd);
  return 2;
}

int cli_parse(const setting_table *t, void *cfg, int argc, char **argv, settings_words *words,
              const char *usage, const char *usage_end) {
  char err[256];
  int rc = settings_defaults(t, cfg, err, sizeof err);
  if (!rc)
    rc = settings_parse_argv(t, cfg, argc, argv, words ? settings_take_word : NULL, words, err,
                             sizeof err);
  if (rc == 1) {
    fputs(usage, stdout);
    settings_usage(t, stdout);
    fputs(usage_end ? usage_end : "", stdout);
    return 1;
  }
  return rc ? cli_usage_error(t->command, "%s", err) : 0;
}

int cli_open_existing_store(const char *cmd, const char *uri, idem_sync **out) {
  char *errmsg = NULL, *own = NULL;
  const char *open_uri = uri, *query = strchr(uri, '?');
  if (!strncmp(uri, "lmdb:", 5) && !(query && strstr(query, "create="))) {
    if (asprintf(&own, "%s%screate=no", uri, query ? "&" : "?") < 0) {
      fprintf(stderr, "idem %s: out of memory\n", cmd);
      return 1;
    }
    open_uri = own;
  }
  int err = idem_sync_open(open_uri, out, &errmsg);
  free(own);
  if (err) {
    fprintf(stderr, "idem %s: %s'%s': %s\n", cmd, err == IDEM_EURI ? "--store " : "cannot open store ",
            uri, errmsg ? errmsg : idem_strerror(err));
    free(errmsg);
    return err == IDEM_EURI ? 2 : 1;
  }
  return 0;
}

int cli_flush_stdout(const char *cmd) {
  if (!fflush(stdout) && !ferror(stdout))
    return 0;
  fprintf(stderr, "idem %s: cannot write the output: %s\n", cmd, strerror(errno));
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage, stderr);
    return 2;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
    fputs(usage, stdout);
    return 0;
  }
  if (!strcmp(name, "version") || !strcmp(name, "--version")) {
    printf("idem %s\n", IDEM_VERSION_STRING);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(name, commands[i].name))
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "idem: unknown command '%s'\n\n%s", name, usage);
  return 2;
}
