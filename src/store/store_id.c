/* store_id.c - what names a store: the records a URI reaches, whatever
 * its spelling (see store_id.h). */
#include "store/store_id.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if IDEM_WITH_REDIS
#include "store/redis.h"
#endif

/*
 * What names a store: its URI less the user and password, with an lmdb:
 * path made absolute, and of its options (?...) only those
 * that choose which records it holds: a Redis prefix=; PostgreSQL's dbname,
 * host, hostaddr, port, service and options (a search_path). A restart with
 * a larger map_size (the cure for a full map), another pool= or a rotated
 * password still finds and drains what the last run spooled; another host,
 * database, prefix or directory does not.
 */
static const char *const naming_options[] = {"prefix",   "dbname",  "host",   "hostaddr",
                                             "port",     "service", "options"};

static int names_the_store(const char *opt, size_t len) {
  for (size_t i = 0; i < sizeof naming_options / sizeof naming_options[0]; i++)
    if (strlen(naming_options[i]) == len && !memcmp(opt, naming_options[i], len))
      return 1;
  return 0;
}

/* Append to out (holding *used bytes of len) the options of query that name
 * the store, in their order: "?dbname=x&port=5433". */
static void append_naming_options(const char *query, char *out, size_t len, size_t *used) {
  char sep = '?';
  while (*query) {
    size_t opt_len = strcspn(query, "&"), name_len = strcspn(query, "=&");
    if (name_len < opt_len && names_the_store(query, name_len) && *used < len) {
      int w = snprintf(out + *used, len - *used, "%c%.*s", sep, (int)opt_len, query);
      *used += w > 0 ? (size_t)w : 0;
      sep = '&';
    }
    query += opt_len + (query[opt_len] == '&');
  }
}

/* The identity of uri as written (the form of entries spooled before
 * store_identity read a URI's meaning): kept to adopt those entries. */
void idem_store_written_identity(const char *uri, char *out, size_t len) {
  size_t n = strcspn(uri, "?"), used;
  const char *scheme_end = strstr(uri, "://");
  if (!strncmp(uri, "lmdb:", 5)) {
    char path[4096], real[PATH_MAX];
    snprintf(path, sizeof path, "%.*s", (int)(n - 5), uri + 5);
    snprintf(out, len, "lmdb:%s", realpath(path, real) ? real : path);
    return;
  }
  if (scheme_end && (size_t)(scheme_end - uri) < n) {
    const char *auth = scheme_end + 3;
    size_t auth_len = strcspn(auth, "/?");
    const char *at = memchr(auth, '@', auth_len);
    const char *host = at ? at + 1 : auth;
    snprintf(out, len, "%.*s%.*s", (int)(auth - uri), uri, (int)(uri + n - host), host);
  } else {
    snprintf(out, len, "%.*s", (int)n, uri);
  }
  used = strlen(out);
  if (uri[n] == '?')
    append_naming_options(uri + n + 1, out, len, &used);
}

#if IDEM_WITH_REDIS
/* A redis:// URI as what names its records: "redis://HOST:PORT/DB", the
 * host in lower case, with "?prefix=P" unless the default: "redis://h",
 * "redis://h:6379/" and "redis://H:6379/0?prefix=idem" are one store. 0,
 * or -1 when the URI does not parse (its written form stands then). */
static int redis_identity(const char *uri, char *out, size_t len) {
  idem_redis_uri u;
  if (idem_redis_uri_parse(uri, &u, NULL))
    return -1;
  for (char *c = u.host; *c; c++)
    *c = (char)tolower((unsigned char)*c);
  int v6 = strchr(u.host, ':') != NULL;
  int prefixed = u.prefix && strcmp(u.prefix, "idem");
  snprintf(out, len, "redis://%s%s%s:%d/%d%s%s", v6 ? "[" : "", u.host, v6 ? "]" : "", u.port,
           u.db, prefixed ? "?prefix=" : "", prefixed ? u.prefix : "");
  idem_redis_uri_clear(&u);
  return 0;
}
#endif

/* What names a store: its written identity, in one spelling per store:
 * postgresql:// as postgres://, a redis:// URI by what it means (above).
 * Two spellings the README calls one store must drain each other's
 * entries: a restart with "redis://h/0" for "redis://h" that left an
 * answer stranded let its request run again once the lease ended. */
void idem_store_identity(const char *uri, char *out, size_t len) {
  if (!strncmp(uri, "postgresql://", 13)) {
    char alias[4200];
    snprintf(alias, sizeof alias, "postgres://%s", uri + 13);
    idem_store_written_identity(alias, out, len);
    return;
  }
#if IDEM_WITH_REDIS
  if (!strncmp(uri, "redis://", 8) && !redis_identity(uri, out, len))
    return;
#endif
  idem_store_written_identity(uri, out, len);
}
