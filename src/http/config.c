/* config.c - `idem serve` settings: one table (settings.h) gives each its
 * flag, form, default, bounds and help; the parsers below turn the values
 * that are not plain durations, sizes or counts into a gw_config. */
#include "http/config.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "core/settings.h"
#include "idem/idem.h"

void gw_addr_format(const char *host, int port, char *out, size_t len) {
  if (strchr(host, ':'))
    snprintf(out, len, "[%s]:%d", host, port);
  else
    snprintf(out, len, "%s:%d", host, port);
}

static int parse_port(const char *s, int allow_zero) {
  if (!*s || strlen(s) > 5)
    return -1;
  int v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p))
      return -1;
    v = v * 10 + (*p - '0');
  }
  if (v > 65535 || (!allow_zero && v == 0))
    return -1;
  return v;
}

int gw_addr_parse(const char *text, gw_addr *out) {
  char host[256];
  const char *colon;
  if (text[0] == '[') {
    const char *end = strchr(text, ']');
    if (!end || end[1] != ':' || (size_t)(end - text - 1) >= sizeof host)
      return -1;
    memcpy(host, text + 1, (size_t)(end - text - 1));
    host[end - text - 1] = 0;
    colon = end + 1;
    struct sockaddr_in6 a6;
    if (uv_ip6_addr(host, 0, &a6))
      return -1;
  } else {
    colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host)
      return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    if (!host[0])
      snprintf(host, sizeof host, "0.0.0.0");
    else if (!strcmp(host, "localhost"))
      snprintf(host, sizeof host, "127.0.0.1");
    struct sockaddr_in a4;
    if (uv_ip4_addr(host, 0, &a4))
      return -1;
  }
  int port = parse_port(colon + 1, 1);
  if (port < 0)
    return -1;
  snprintf(out->host, sizeof out->host, "%s", host);
  out->port = port;
  return 0;
}

int gw_http_url_parse(const char *url, char *host, size_t hostlen, int *port,
                      const char **rest) {
  if (strncmp(url, "http://", 7))
    return -1;
  const char *p = url + 7, *end = p + strcspn(p, "/?#");
  size_t hp_len = (size_t)(end - p);
  if (hp_len == 0 || hp_len >= hostlen || hp_len >= 256 || memchr(p, '@', hp_len))
    return -1;
  char hp[256];
  memcpy(hp, p, hp_len);
  hp[hp_len] = 0;
  char *name = hp, *portp = NULL;
  if (hp[0] == '[') {
    char *close = strchr(hp, ']');
    if (!close || (close[1] && close[1] != ':'))
      return -1;
    *close = 0;
    name = hp + 1;
    portp = close[1] ? close + 2 : NULL;
  } else if ((portp = strchr(hp, ':'))) {
    *portp++ = 0;
  }
  *port = 80;
  if (!*name || (portp && (*port = parse_port(portp, 0)) < 0))
    return -1;
  snprintf(host, hostlen, "%s", name);
  *rest = end;
  return 0;
}

static int parse_upstream(gw_config *cfg, const char *url) {
  const char *rest;
  if (gw_http_url_parse(url, cfg->upstream_host, sizeof cfg->upstream_host,
                        &cfg->upstream_port, &rest))
    return -1;
  if (*rest && strcmp(rest, "/"))
    return -1; /* no path prefix: the client's target goes up as is */
  gw_addr_format(cfg->upstream_host, cfg->upstream_port, cfg->upstream_authority,
                 sizeof cfg->upstream_authority);
  return 0;
}

static int is_token(const char *s) {
  if (!*s)
    return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
      return 0;
  return 1;
}

static int parse_methods(gw_config *cfg, const char *list) {
  int n = 0;
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    const char *s = p, *e = p + len;
    while (s < e && *s == ' ')
      s++;
    while (e > s && e[-1] == ' ')
      e--;
    if (e == s || (size_t)(e - s) >= sizeof cfg->methods[0] || n == GW_MAX_METHODS)
      return -1;
    char m[16];
    memcpy(m, s, (size_t)(e - s));
    m[e - s] = 0;
    for (char *c = m; *c; c++)
      *c = (char)toupper((unsigned char)*c);
    if (!is_token(m))
      return -1;
    memcpy(cfg->methods[n++], m, sizeof m);
    if (!p[len])
      break;
    p += len + 1;
  }
  cfg->nmethods = n;
  return 0;
}

/* ---- values that are not durations, sizes or counts ---- */

static int refuse_value(char *err, size_t len, const setting *s, const char *v, const char *what,
                  const char *form) {
  snprintf(err, len, "--%s: '%s' is not %s; use %s", s->name, v, what, form);
  return -1;
}

static int parse_address(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  gw_config *c = cfg;
  int admin = !strcmp(s->name, "admin-listen");
  if (gw_addr_parse(v, admin ? &c->admin : &c->listen))
    return refuse_value(err, len, s, v, "an address",
                  "IP:PORT, [IPv6]:PORT or :PORT (e.g. 127.0.0.1:8081)");
  if (admin)
    c->has_admin = 1;
  return 0;
}

static int parse_upstream_flag(void *cfg, const setting *s, const char *v, char *err,
                               size_t len) {
  if (parse_upstream(cfg, v))
    return refuse_value(err, len, s, v, "an upstream URL",
                  "http://HOST:PORT (plain HTTP, no path; e.g. http://127.0.0.1:9000)");
  ((gw_config *)cfg)->has_upstream = 1;
  return 0;
}

static int parse_store(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (!*v)
    return refuse_value(err, len, s, v, "a store URI",
                  "memory:, lmdb:PATH, redis://HOST:PORT or postgres://...");
  ((gw_config *)cfg)->store_uri = v;
  return 0;
}

static int parse_methods_flag(void *cfg, const setting *s, const char *v, char *err,
                              size_t len) {
  char form[96];
  snprintf(form, sizeof form, "comma-separated method names (e.g. POST,PATCH,PUT), at most %d",
           GW_MAX_METHODS);
  return parse_methods(cfg, v) ? refuse_value(err, len, s, v, "a method list", form) : 0;
}

static int parse_scope_header(void *cfg, const setting *s, const char *v, char *err,
                              size_t len) {
  gw_config *c = cfg;
  if (!is_token(v) || strlen(v) >= sizeof c->scope_header)
    return refuse_value(err, len, s, v, "a header name", "a token such as Authorization or X-Tenant-Id");
  snprintf(c->scope_header, sizeof c->scope_header, "%s", v);
  return 0;
}

static int parse_store_error_mode(void *cfg, const setting *s, const char *v, char *err,
                                  size_t len) {
  gw_config *c = cfg;
  if (strcmp(v, "closed") && strcmp(v, "open"))
    return refuse_value(err, len, s, v, "a mode", "closed or open");
  c->fail_open = !strcmp(v, "open");
  return 0;
}

static int parse_spool(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (!*v)
    return refuse_value(err, len, s, v, "a directory", "a directory, or off");
  ((gw_config *)cfg)->spool_dir = strcmp(v, "off") ? v : NULL;
  return 0;
}

/* ---- the table ---- */

#define FIELD(f) offsetof(gw_config, f)
#define DUR_MAX (100LL * 365 * 24 * 3600 * 1000) /* the store's own bound */
#define SIZE_MAX_BYTES (4LL << 30)

/* Row makers: a row says its name, default and help once. */
#define CUSTOM(name, form, def, parse, help) {name, form, SETTING_CUSTOM, 0, def, 0, 0, parse, help}
#define DURATION(name, field, def, min, help)                                                  \
  {name, "DUR", SETTING_DURATION, FIELD(field), def, min, DUR_MAX, NULL, help}
#define SIZE(name, field, def, min, max, help)                                                 \
  {name, "SIZE", SETTING_SIZE, FIELD(field), def, min, max, NULL, help}
#define COUNT(name, field, def, max, help)                                                     \
  {name, "N", SETTING_COUNT, FIELD(field), def, 1, max, NULL, help}

static const setting serve_settings[] = {
    CUSTOM("listen", "ADDR:PORT", "127.0.0.1:8081", parse_address, "client listener"),
    CUSTOM("upstream", "URL", NULL, parse_upstream_flag,
           "the API behind the gateway: http://HOST:PORT (required)"),
    CUSTOM("store", "URI", "lmdb:./idem-data", parse_store,
           "memory:, lmdb:PATH, redis://..., postgres://..."),
    DURATION("ttl", ttl_ms, "24h", 1, "how long a completed record is kept"),
    DURATION("lock-ttl", lock_ttl_ms, "30s", 1, "processing lease"),
    CUSTOM("methods", "LIST", "POST,PATCH", parse_methods_flag, "methods with semantics"),
    {"require-key", NULL, SETTING_SWITCH, FIELD(require_key), NULL, 0, 0, NULL,
     "400 when a request of those methods has no key"},
    CUSTOM("scope-header", "NAME", NULL, parse_scope_header,
           "header whose value (SHA-256 hashed) scopes keys"),
    DURATION("wait", wait_ms, "0", 0,
             "wait that long for an in-flight duplicate and\nreplay its answer (0: 409 at once)"),
    CUSTOM("on-store-error", "MODE", "closed", parse_store_error_mode,
           "closed (503) or open (pass through)"),
    SIZE("max-body", max_body, "1MiB", 1, SIZE_MAX_BYTES, "largest request body"),
    SIZE("max-response", max_response, "8MiB", 1, SIZE_MAX_BYTES,
         "largest answer body kept for replay; a bigger\nkeyed answer streams to its first "
         "client and\nretries get a stored 502"),
    SIZE("max-header", max_header, "32KiB", 1024, 1024 * 1024, "largest request head"),
    DURATION("upstream-timeout", upstream_timeout_ms, "30s", 1,
             "deadline to connect and get the whole answer"),
    DURATION("client-timeout", client_timeout_ms, "10s", 1, "deadline to receive one request"),
    DURATION("idle-timeout", idle_timeout_ms, "60s", 1, "keep-alive idle close"),
    DURATION("send-timeout", send_timeout_ms, "60s", 1,
             "close a client that reads nothing of its answer\nfor this long"),
    COUNT("max-conns", max_conns, "4096", 1000000, "client connections per worker"),
    CUSTOM("spool", "DIR|off", "./idem-spool", parse_spool,
           "where answers wait, durable, while the store is\naway (unused on memory:)"),
    DURATION("drain-timeout", drain_timeout_ms, "30s", 1,
             "on SIGTERM, the most time to finish requests in\nflight and empty the spool"),
    CUSTOM("admin-listen", "ADDR:PORT", NULL, parse_address,
           "/healthz, /readyz, /metrics, /keys/KEY (default off)"),
    COUNT("workers", workers, NULL, 64, "event-loop threads (default: number of cores)"),
};

static const setting_table serve_table = {"serve", serve_settings,
                                          sizeof serve_settings / sizeof serve_settings[0]};

void gw_config_init(gw_config *cfg) {
  char err[256];
  memset(cfg, 0, sizeof *cfg);
  if (settings_defaults(&serve_table, cfg, err, sizeof err))
    abort(); /* a default in the table above does not parse: a bug here */
  cfg->has_upstream = 0;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cfg->workers = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
}

int gw_config_parse(gw_config *cfg, int argc, char **argv, char *err, size_t errlen) {
  int rc = settings_parse_argv(&serve_table, cfg, argc, argv, NULL, NULL, err, errlen);
  if (rc)
    return rc;
  if (!cfg->has_upstream) {
    snprintf(err, errlen,
             "--upstream is required; use http://HOST:PORT (e.g. --upstream http://127.0.0.1:9000)");
    return -1;
  }
  return 0;
}

int gw_config_set(gw_config *cfg, const char *name, const char *value, char *err,
                  size_t errlen) {
  return settings_set(&serve_table, cfg, name, value, err, errlen);
}

void gw_config_usage(FILE *out) {
  fputs("usage: idem serve --upstream http://HOST:PORT [options]\n"
        "\n"
        "HTTP reverse proxy that gives an API Idempotency-Key semantics.\n"
        "\n"
        "options:\n",
        out);
  settings_usage(&serve_table, out);
  fputs("\nDurations: 500ms, 30s, 5m, 24h, 7d. Sizes: 512, 64KiB, 1MiB.\n", out);
}
