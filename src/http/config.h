/*
 * config.h - everything `idem serve` is told on its command line, parsed and
 * checked. The CLI (src/cli/serve.c) only calls gw_config_parse and gw_run.
 */
#ifndef IDEM_HTTP_CONFIG_H
#define IDEM_HTTP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "http/route.h"

typedef struct {
  char host[256]; /* numeric address, IPv4 or IPv6 (no brackets) */
  int port;
} gw_addr;

typedef struct {
  gw_addr listen;            /* --listen, default 127.0.0.1:8081 */
  char upstream_host[256];   /* --upstream http://HOST:PORT */
  int upstream_port;
  char upstream_authority[300]; /* "HOST:PORT" for a Host header */
  const char *store_uri;     /* --store, default lmdb:./idem-data */
  const char *cache_uri;     /* --cache, default none */
  gw_policy policy;          /* the default route settings: --ttl, --lock-ttl,
                                --methods, --require-key, --wait, --key,
                                --fingerprint, --store-statuses,
                                --replay-headers, --mode (route.h) */
  char scope_header[128];    /* --scope-header, "" for none */
  int fail_open;             /* --on-store-error open */
  uint64_t max_body;         /* --max-body, default 1MiB */
  uint64_t max_response;     /* --max-response, default 8MiB (stored answers) */
  uint64_t max_header;       /* --max-header, default 32KiB */
  int64_t upstream_timeout_ms; /* --upstream-timeout, default 30s */
  int64_t client_timeout_ms; /* --client-timeout, default 10s */
  int64_t idle_timeout_ms;   /* --idle-timeout, default 60s */
  int64_t send_timeout_ms;   /* --send-timeout, default 60s */
  int64_t drain_timeout_ms;  /* --drain-timeout, default 30s */
  int max_conns;             /* --max-conns, per worker, default 4096 */
  const char *spool_dir;     /* --spool DIR, default ./idem-spool; NULL: off */
  const char *access_log;    /* --access-log PATH|-; NULL: off */
  int has_upstream;          /* --upstream was given */
  int has_admin;
  gw_addr admin;             /* --admin-listen */
  int workers;               /* --workers, default: number of cores */
  /* --config FILE: the file, what it said, and the route table built from
   * it and the flags; argv is kept to read the file again on SIGHUP */
  const char *config_file;
  struct cf_doc *doc;
  gw_routes *routes; /* held; never NULL after a successful parse */
  int argc;
  char **argv;
} gw_config;

/* Defaults, before any flag. */
void gw_config_init(gw_config *cfg);

/*
 * Parse argv (argv[0] is the subcommand name): the --config file first,
 * then the flags over it, then the routes over the defaults. Returns 0 when
 * ready to run, 1 when --help was asked (nothing else to do), or -1 with a
 * sentence naming the flag (or "FILE:LINE: key") and the accepted form in
 * err. argv must outlive cfg (a reload reads it again).
 */
int gw_config_parse(gw_config *cfg, int argc, char **argv, char *err,
                    size_t errlen);

/* The same without requiring --upstream (idem config check). */
int gw_config_parse_file_only(gw_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* What gw_config_parse holds (the file's text, the route table). */
void gw_config_free(gw_config *cfg);

/*
 * Read the config file of running again, with the same flags: 0 with the
 * new route table in *out (held), or -1 with err (the file is bad: nothing
 * changes). Settings outside the routes cannot change while serve runs:
 * those the file now sets differently are named in changed ("listen,
 * store"), "" when none.
 */
int gw_config_reload(const gw_config *running, gw_routes **out, char *changed,
                     size_t changed_len, char *err, size_t errlen);

/* A lease shorter than the upstream may take, for the defaults and for
 * every route that sets its own: a warning line on stderr each, after
 * "WHO: " (serve says it at the start and after each reload, `idem config
 * check` as it checks). */
void gw_config_warn_leases(const gw_config *cfg, const gw_routes *t, const char *who);

/* Set one setting by name ("lock-ttl") from text, as the flag would: 0, or
 * -1 with a sentence in err. (A config file's keys go through here.) */
int gw_config_set(gw_config *cfg, const char *name, const char *value, char *err,
                  size_t errlen);

/* Write the usage text of `idem serve --help`. */
void gw_config_usage(FILE *out);

/* Parse "HOST:PORT", "[V6]:PORT" or ":PORT" into a numeric address. */
int gw_addr_parse(const char *text, gw_addr *out);

/* A --store value as serve reads it: not empty, and a well-formed URI of a
 * store this build has (idem_store_uri_check; nothing is opened). 0, or
 * -1 with err naming the flag. consume reads its --store with it too. */
int gw_check_store_uri(const setting *s, const char *v, char *err, size_t len);

/* Split http://HOST[:PORT]... : HOST (brackets dropped) into host, the port
 * (80 when none), and *rest at what follows the authority ("", or from the
 * first '/', '?' or '#'). 0, or -1 when malformed or host does not fit. */
int gw_http_url_parse(const char *url, char *host, size_t hostlen, int *port,
                      const char **rest);

/* Write "HOST:PORT" or "[V6]:PORT". */
void gw_addr_format(const char *host, int port, char *out, size_t len);

/* The port of an IPv4 or IPv6 address, as getsockname gives it (a
 * listener's, when port 0 let the system pick one). */
struct sockaddr_storage;
int gw_sockaddr_port(const struct sockaddr_storage *ss);

#endif
