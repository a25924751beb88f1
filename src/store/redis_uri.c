/*
 * redis_uri.c - redis:// URIs and the names of records in Redis. Pure
 * parsing, no I/O, so that the unit tests and the fuzzers reach all of it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "idem/idem.h"
#include "store/redis.h"
#include "store/uri_options.h"

static int fail(char **why, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(char **why, const char *fmt, ...) {
  if (why != NULL) {
    va_list ap;
    char buf[256];
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    *why = strdup(buf);
  }
  return IDEM_EURI;
}

/* Percent-decode s[0..n) into a malloc'd string. NUL bytes are refused: they
 * cannot travel through AUTH as C strings. *out is NULL on error. */
static int pct_decode(const char *s, size_t n, char **out) {
  char *d = malloc(n + 1);
  *out = NULL;
  if (d == NULL) return IDEM_ENOMEM;
  if (idem_pct_decode(s, n, d, n + 1, IDEM_PCT_NO_NUL) < 0) {
    free(d);
    return IDEM_EURI;
  }
  *out = d;
  return 0;
}

static int parse_int(const char *s, size_t n, long max, long *out) {
  long v = 0;
  if (n == 0 || n > 10) return -1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v > max) return -1;
  *out = v;
  return 0;
}

void idem_redis_uri_clear(idem_redis_uri *u) {
  free(u->user);
  free(u->password);
  free(u->host);
  free(u->prefix);
  for (size_t i = 0; i < u->nseeds; i++)
    free(u->seeds[i].host);
  free(u->seeds);
  memset(u, 0, sizeof *u);
}

static int parse_option(idem_redis_uri *u, const idem_uri_option *o, char **why) {
  char *val;
  int rc;
  if (o->value == NULL)
    return fail(why, "option \"%.*s\" needs a value", (int)o->text_len, o->text);
  rc = pct_decode(o->value, strlen(o->value), &val);
  if (rc == IDEM_ENOMEM) return rc;
  if (rc != 0)
    return fail(why, "bad percent-escape in option \"%.*s\"", (int)o->text_len, o->text);
  if (strcmp(o->name, "wait_replicas") == 0) {
    long n = 0;
    rc = parse_int(val, strlen(val), 100, &n) != 0
             ? fail(why, "option wait_replicas: \"%s\" is not a number of replicas (0 to 100)", val)
             : 0;
    u->wait_replicas = (int)n;
    free(val);
    return rc;
  }
  if (strcmp(o->name, "timeout") == 0 || strcmp(o->name, "connect_timeout") == 0 ||
      strcmp(o->name, "wait_timeout") == 0) {
    int64_t ms;
    if (idem_parse_duration(val, &ms) != 0) {
      rc = fail(why, "option %s: \"%s\" is not a duration such as 500ms or 5s", o->name, val);
      free(val);
      return rc;
    }
    if (strcmp(o->name, "timeout") == 0)
      u->timeout_ms = ms;
    else if (strcmp(o->name, "wait_timeout") == 0)
      u->wait_timeout_ms = ms;
    else
      u->connect_timeout_ms = ms;
    free(val);
    return 0;
  }
  if (strcmp(o->name, "prefix") == 0) {
    if (val[0] == '\0' || strpbrk(val, "{}") != NULL) {
      free(val);
      return fail(why, "option prefix must be non-empty and hold no braces");
    }
    free(u->prefix);
    u->prefix = val;
    return 0;
  }
  free(val);
  return fail(why, "unknown option \"%s\" (known: timeout, connect_timeout, prefix, "
                   "wait_replicas, wait_timeout)", o->name);
}

static int parse_options(idem_redis_uri *u, const char *query, char **why) {
  idem_uri_options o;
  int rc = idem_uri_options_parse(query, &o);
  const char *twice = rc ? NULL : idem_uri_options_repeated(&o);
  if (twice)
    rc = fail(why, "option \"%s\" given twice", twice);
  for (size_t i = 0; i < o.n && rc == 0; i++)
    rc = parse_option(u, &o.items[i], why);
  idem_uri_options_free(&o);
  return rc;
}

/* [user:]password@ before the host, from p up to auth_end (the '@'). */
static int parse_userinfo(idem_redis_uri *out, const char *p, const char *auth_end,
                          char **why) {
  int rc;
  const char *colon = memchr(p, ':', (size_t)(auth_end - p));
  if (colon == NULL) {
    /* "redis://secret@host": a bare word is the password (as redis-cli). */
    rc = pct_decode(p, (size_t)(auth_end - p), &out->password);
  } else {
    rc = colon > p ? pct_decode(p, (size_t)(colon - p), &out->user) : 0;
    if (rc == 0)
      rc = pct_decode(colon + 1, (size_t)(auth_end - colon - 1), &out->password);
  }
  if (rc == IDEM_ENOMEM) return rc;
  if (rc != 0) return fail(why, "bad percent-escape in the user or password");
  if (out->password != NULL && out->password[0] == '\0' && out->user == NULL) {
    free(out->password);
    out->password = NULL;
  }
  return 0;
}

/* host[:port] from p up to path; an IPv6 host is in brackets. */
static int parse_host_port(idem_redis_node *out, const char *p, const char *path, char **why) {
  const char *host_end;
  if (p < path && *p == '[') {
    const char *rb = memchr(p, ']', (size_t)(path - p));
    if (rb == NULL || rb == p + 1)
      return fail(why, "unterminated or empty IPv6 address in brackets");
    out->host = strndup(p + 1, (size_t)(rb - p - 1));
    host_end = rb + 1;
    if (host_end < path && *host_end != ':')
      return fail(why, "junk after the IPv6 address");
  } else {
    host_end = memchr(p, ':', (size_t)(path - p));
    if (host_end == NULL) host_end = path;
    if (host_end == p)
      return fail(why, "no host in the Redis URI");
    out->host = strndup(p, (size_t)(host_end - p));
  }
  if (out->host == NULL) return IDEM_ENOMEM;
  if (host_end < path) { /* ':' port */
    long port;
    if (parse_int(host_end + 1, (size_t)(path - host_end - 1), 65535, &port) != 0 ||
        port == 0)
      return fail(why, "port \"%.*s\" is not a number from 1 to 65535",
                  (int)(path - host_end - 1), host_end + 1);
    out->port = (int)port;
  }
  return 0;
}

/* host:port[,host:port...] from p up to path: the seeds of a Cluster. */
static int parse_seeds(idem_redis_uri *out, const char *p, const char *path, char **why) {
  size_t n = 1;
  for (const char *q = p; q < path; q++)
    n += *q == ',';
  if ((out->seeds = calloc(n, sizeof *out->seeds)) == NULL) return IDEM_ENOMEM;
  while (out->nseeds < n) {
    const char *comma = memchr(p, ',', (size_t)(path - p));
    const char *end = comma ? comma : path;
    idem_redis_node *node = &out->seeds[out->nseeds++];
    node->port = IDEM_REDIS_DEFAULT_PORT;
    int rc = parse_host_port(node, p, end, why);
    if (rc) return rc;
    p = end + 1;
  }
  out->port = out->seeds[0].port;
  return (out->host = strdup(out->seeds[0].host)) ? 0 : IDEM_ENOMEM;
}

static int parse_uri(const char *uri, int cluster, idem_redis_uri *out, char **why) {
  const char *p, *end, *auth_end, *path, *query;
  const char *scheme = cluster ? "redis+cluster://" : "redis://";
  int rc;
  if (uri == NULL) return fail(why, "no URI");
  if (strncmp(uri, "rediss://", 9) == 0)
    return fail(why, "rediss:// (TLS) is not supported; use redis:// behind a TLS tunnel");
  if (strncmp(uri, scheme, strlen(scheme)) != 0)
    return fail(why, "a Redis%s URI starts with %s", cluster ? " Cluster" : "", scheme);
  out->port = IDEM_REDIS_DEFAULT_PORT;
  out->timeout_ms = IDEM_REDIS_COMMAND_TIMEOUT_MS;
  out->connect_timeout_ms = IDEM_REDIS_CONNECT_TIMEOUT_MS;
  out->wait_timeout_ms = IDEM_REDIS_WAIT_TIMEOUT_MS;

  p = uri + strlen(scheme);
  end = p + strlen(p);
  query = memchr(p, '?', (size_t)(end - p));
  if (query == NULL) query = end;
  path = memchr(p, '/', (size_t)(query - p));
  if (path == NULL) path = query;

  /* userinfo: the last '@' before the path, so a password may hold '@' only
   * percent-encoded, as RFC 3986 wants, but we are lenient about it. */
  auth_end = NULL;
  for (const char *q = p; q < path; q++)
    if (*q == '@') auth_end = q;
  if (auth_end != NULL) {
    if ((rc = parse_userinfo(out, p, auth_end, why)) != 0) return rc;
    p = auth_end + 1;
  }
  if (cluster) {
    if ((rc = parse_seeds(out, p, path, why)) != 0) return rc;
  } else {
    idem_redis_node node = {.port = IDEM_REDIS_DEFAULT_PORT};
    rc = parse_host_port(&node, p, path, why);
    out->host = node.host;
    out->port = node.port;
    if (rc) return rc;
  }

  /* /db */
  if (cluster && path < query && !(path + 1 == query || (path + 2 == query && path[1] == '0')))
    return fail(why, "a Redis Cluster has database 0 only: no /db in a redis+cluster:// URI");
  if (path < query && path + 1 < query) {
    long db;
    if (parse_int(path + 1, (size_t)(query - path - 1), 1000000, &db) != 0)
      return fail(why, "database \"%.*s\" is not a non-negative number",
                  (int)(query - path - 1), path + 1);
    out->db = (int)db;
  }
  /* ?a=b&c=d */
  if (query < end && (rc = parse_options(out, query + 1, why)) != 0) return rc;
  if (out->wait_replicas > 0 && out->wait_timeout_ms >= out->timeout_ms)
    return fail(why, "wait_timeout must be shorter than timeout (each command's deadline)");
  if (out->prefix == NULL && (out->prefix = strdup("idem")) == NULL) return IDEM_ENOMEM;
  return 0;
}

static int parse_any(const char *uri, int cluster, idem_redis_uri *out, char **why) {
  memset(out, 0, sizeof *out);
  if (why != NULL) *why = NULL;
  int rc = parse_uri(uri, cluster, out, why);
  if (rc != 0) idem_redis_uri_clear(out);
  return rc;
}

int idem_redis_uri_parse(const char *uri, idem_redis_uri *out, char **why) {
  return parse_any(uri, 0, out, why);
}

int idem_redis_cluster_uri_parse(const char *uri, idem_redis_uri *out, char **why) {
  return parse_any(uri, 1, out, why);
}

static int dup_or_null(const char *s, char **out) {
  *out = s ? strdup(s) : NULL;
  return s && !*out ? -1 : 0;
}

int idem_redis_uri_for_node(const idem_redis_uri *src, const char *host, int port,
                            idem_redis_uri *dst) {
  *dst = *src;
  dst->seeds = NULL;
  dst->nseeds = 0;
  dst->port = port;
  if (dup_or_null(src->user, &dst->user) | dup_or_null(src->password, &dst->password) |
      dup_or_null(host, &dst->host) | dup_or_null(src->prefix, &dst->prefix)) {
    idem_redis_uri_clear(dst);
    return IDEM_ENOMEM;
  }
  return 0;
}

char *idem_redis_key(const char *prefix, const char *scope, const char *key,
                     size_t *len) {
  size_t slen = scope != NULL ? strlen(scope) : 0;
  size_t plen = strlen(prefix), klen = strlen(key);
  size_t cap = plen + slen + klen + 16;
  char *out = malloc(cap);
  int head;
  if (out == NULL) return NULL;
  head = snprintf(out, cap, "%s:{%zu:", prefix, slen);
  memcpy(out + head, scope != NULL ? scope : "", slen);
  out[head + slen] = ':';
  memcpy(out + head + slen + 1, key, klen);
  out[head + slen + 1 + klen] = '}';
  out[head + slen + 2 + klen] = '\0';
  *len = (size_t)head + slen + klen + 2;
  return out;
}

int idem_redis_key_split(const char *prefix, char *buf, size_t len,
                         const char **scope, const char **key) {
  size_t plen = strlen(prefix), slen = 0, i;
  char *s;
  if (len < plen + 6 || memcmp(buf, prefix, plen) != 0 || buf[plen] != ':' ||
      buf[plen + 1] != '{' || buf[len - 1] != '}')
    return -1;
  i = plen + 2;
  if (buf[i] < '0' || buf[i] > '9') return -1;
  while (i < len && buf[i] >= '0' && buf[i] <= '9') {
    slen = slen * 10 + (size_t)(buf[i] - '0');
    if (slen > IDEM_SCOPE_MAX) return -1;
    i++;
  }
  if (i >= len || buf[i] != ':') return -1;
  s = buf + i + 1;
  /* scope, ':', key of at least one byte, '}' */
  if ((size_t)(s - buf) + slen + 3 > len || s[slen] != ':') return -1;
  s[slen] = '\0';
  buf[len - 1] = '\0';
  *scope = s;
  *key = s + slen + 1;
  if (memchr(*scope, '\0', slen) != NULL) return -1;
  return idem_key_valid(*key, strlen(*key)) ? 0 : -1;
}

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the Cluster's. */
static unsigned crc16(const unsigned char *p, size_t len) {
  unsigned crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (unsigned)p[i] << 8;
    for (int bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

unsigned idem_redis_slot(const char *name, size_t len) {
  /* the hash tag: from the first '{' to the next '}', when not empty */
  const char *open = memchr(name, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open + 1 - name);
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) {
      name = open + 1;
      len = (size_t)(close - name);
    }
  }
  return crc16((const unsigned char *)name, len) % IDEM_REDIS_SLOTS;
}

int idem_redis_redirect_parse(const char *reply, unsigned *slot, char *host,
                              size_t host_size, int *port) {
  const char *p = strchr(reply, ' ');
  if (!p || (strncmp(reply, "MOVED ", 6) && strncmp(reply, "ASK ", 4)) || p[1] < '0' || p[1] > '9')
    return -1;
  char *end;
  unsigned long s = strtoul(p + 1, &end, 10);
  if (s >= IDEM_REDIS_SLOTS || *end != ' ')
    return -1;
  const char *addr = end + 1, *colon = strrchr(addr, ':');
  if (!colon || colon[1] < '0' || colon[1] > '9' || (size_t)(colon - addr) >= host_size)
    return -1;
  long pt = strtol(colon + 1, &end, 10);
  if (pt <= 0 || pt > 65535 || *end != '\0')
    return -1;
  memcpy(host, addr, (size_t)(colon - addr));
  host[colon - addr] = '\0';
  *slot = (unsigned)s;
  *port = (int)pt;
  return 0;
}

static char *glob_escape(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strchr("*?[]\\", s[i]) != NULL) *d++ = '\\';
    *d++ = s[i];
  }
  return d;
}

char *idem_redis_match(const char *prefix, const char *scope) {
  size_t plen = strlen(prefix), slen = scope != NULL ? strlen(scope) : 0;
  char *out = malloc(2 * (plen + slen) + 32), *d;
  if (out == NULL) return NULL;
  d = glob_escape(out, prefix, plen);
  if (scope == NULL) {
    memcpy(d, ":{*", 4);
    return out;
  }
  d += sprintf(d, ":{%zu:", slen);
  d = glob_escape(d, scope, slen);
  memcpy(d, ":*", 3);
  return out;
}
