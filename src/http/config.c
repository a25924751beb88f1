/* config.c - `idem serve` settings: one table (settings.h) gives each its
 * flag, form, default, bounds and help; the parsers below turn the values
 * that are not plain durations, sizes or counts into a gw_config. */
#include "http/config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <netinet/in.h>

#include <uv.h>

#include "core/settings.h"
#include "http/config_file.h"
#include "idem/idem.h"
#include "store/backend.h"
#include "store/cache.h"

void gw_addr_format(const char *host, int port, char *out, size_t len) {
  if (strchr(host, ':'))
    snprintf(out, len, "[%s]:%d", host, port);
  else
    snprintf(out, len, "%s:%d", host, port);
}

int gw_sockaddr_port(const struct sockaddr_storage *ss) {
  return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                         : ((const struct sockaddr_in *)ss)->sin_port);
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

int gw_check_store_uri(const setting *s, const char *v, char *err, size_t len) {
  if (!*v)
    return refuse_value(err, len, s, v, "a store URI",
                  "memory:, lmdb:PATH, redis://HOST:PORT, redis+cluster://HOST:PORT,... or postgres://...");
  char *why = NULL;
  if (idem_store_uri_check(v, &why)) { /* found here, a file's error names its line */
    snprintf(err, len, "--%s: %s", s->name, why ? why : "a malformed store URI");
    free(why);
    return -1;
  }
  return 0;
}

static int parse_store(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (gw_check_store_uri(s, v, err, len))
    return -1;
  ((gw_config *)cfg)->store_uri = v;
  return 0;
}

static int parse_cache(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  char *why = NULL;
  if (idem_cache_uri_check(v, &why)) {
    snprintf(err, len, "--%s: %s", s->name, why ? why : "a malformed cache URI");
    free(why);
    return -1;
  }
  ((gw_config *)cfg)->cache_uri = v;
  return 0;
}

static int parse_config_path(void *cfg, const setting *s, const char *v, char *err,
                             size_t len) {
  gw_config *c = cfg;
  if (!*v)
    return refuse_value(err, len, s, v, "a file", "the path of a YAML file");
  if (c->config_file && strcmp(c->config_file, v)) {
    snprintf(err, len, "--config is given twice ('%s' and '%s')", c->config_file, v);
    return -1;
  }
  c->config_file = v;
  return 0;
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

static int parse_access_log(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (!*v)
    return refuse_value(err, len, s, v, "a file", "a file, - (standard output), or off");
  ((gw_config *)cfg)->access_log = strcmp(v, "off") ? v : NULL;
  return 0;
}

/* ---- the table ---- */

#define FIELD(f) offsetof(gw_config, f)
#define DUR_MAX GW_DUR_MAX
#define SIZE_MAX_BYTES (4LL << 30)
#define RESPONSE_MAX_BYTES ((long long)IDEM_RESPONSE_PART_MAX) /* what a store keeps */

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
    CUSTOM("store", "URI", "lmdb:./idem-data", parse_store, IDEM_STORE_HELP),
#if IDEM_WITH_REDIS
    CUSTOM("cache", "URI", NULL, parse_cache,
           "memory:SIZE[?ttl=DUR] (this process) or redis://...\n(shared): replays answered "
           "from it (default none)"),
#else
    CUSTOM("cache", "URI", NULL, parse_cache,
           "memory:SIZE[?ttl=DUR]: replays answered from it\n(default none)"),
#endif
    CUSTOM("config", "FILE", NULL, parse_config_path,
           "YAML file: these settings (with _ for -), defaults:\nand routes: (flags override it; "
           "SIGHUP reloads it)"),
    /* the default route settings (route.h): --ttl, --lock-ttl, --methods, ... */
    GW_POLICY_ROWS(FIELD(policy)),
    CUSTOM("scope-header", "NAME", NULL, parse_scope_header,
           "header whose value (SHA-256 hashed) scopes keys"),
    CUSTOM("on-store-error", "MODE", "closed", parse_store_error_mode,
           "closed (503) or open (pass through)"),
    SIZE("max-body", max_body, "1MiB", 1, SIZE_MAX_BYTES, "largest request body"),
    SIZE("max-response", max_response, "8MiB", 1, RESPONSE_MAX_BYTES,
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
    CUSTOM("access-log", "PATH|-", NULL, parse_access_log,
           "one JSON line per request, to PATH or - (standard\noutput); SIGUSR1 reopens it (default off)"),
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

/* The value of --config in argv (the file is read before the other flags,
 * which override it), or NULL; a malformed one is left to the flag parser. */
static const char *config_arg(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--"))
      break;
    if (!strncmp(argv[i], "--config=", 9))
      return argv[i] + 9;
    if (!strcmp(argv[i], "--config") && i + 1 < argc && strncmp(argv[i + 1], "--", 2))
      return argv[i + 1];
  }
  return NULL;
}

/* The file's top-level and defaults: settings into cfg. A file that cannot
 * be read is a bad --config value for serve, which names the flag as for
 * any (`idem config check FILE` has no such flag). */
static int apply_file(gw_config *cfg, const char *file, int name_flag, char *err,
                      size_t errlen) {
  int rc = cf_load(file, &serve_table, &gw_policy_table, &cfg->doc, err, errlen);
  if (rc == CF_UNREADABLE && name_flag) {
    char why[512];
    snprintf(why, sizeof why, "%s", err);
    snprintf(err, errlen, "--config: %s", why);
  }
  if (rc)
    return -1;
  cfg->config_file = file;
  for (int i = 0; i < cfg->doc->ntop; i++) {
    const cf_item *it = &cfg->doc->top[i];
    char msg[512];
    if (settings_set(&serve_table, cfg, it->name, it->value, msg, sizeof msg)) {
      cf_item_error(file, it, msg, err, errlen);
      return -1;
    }
  }
  return 0;
}

/* One route of the file over the defaults. */
static int build_route(const gw_config *cfg, const cf_route *cr, gw_route *r, char *err,
                       size_t errlen) {
  const char *file = cfg->config_file;
  r->line = cr->line;
  r->policy = cfg->policy;
  if (cr->path) {
    snprintf(r->path, sizeof r->path, "%s", cr->path);
    gw_glob_upper_escapes(r->path); /* as a request's path is read */
    char normal[sizeof r->path];
    if (gw_glob_reachable(r->path, normal, sizeof normal)) {
      cf_error(err, errlen, file, cr->match_line, "match: path '%s' can never match: a request's "
               "path is matched as '%s' (slashes merged, \\ read as /, dot-segments and ;parameters "
               "removed, %%XX of a letter, digit or -._~ decoded); write that", cr->path, normal);
      return -1;
    }
  }
  if (cr->methods && gw_parse_method_list(cr->methods, r->methods, GW_MAX_METHODS, &r->nmethods)) {
    /* a long list is cut short, so that the reason still fits in err */
    cf_error(err, errlen, file, cr->match_line, "match: methods: '%.64s%s' is not a method "
             "list; use method names (e.g. [POST, PUT]), at most %d", cr->methods,
             strlen(cr->methods) > 64 ? "..." : "", GW_MAX_METHODS);
    return -1;
  }
  for (int k = 0; k < cr->n; k++) {
    char msg[512];
    if (settings_set(&gw_policy_table, &r->policy, cr->items[k].name, cr->items[k].value, msg,
                     sizeof msg)) {
      cf_item_error(file, &cr->items[k], msg, err, errlen);
      return -1;
    }
  }
  return 0;
}

/* The route table: the file's routes, each over the defaults (the file's
 * defaults: and top-level route settings, then the flags). */
static int build_routes(gw_config *cfg, char *err, size_t errlen) {
  int n = cfg->doc ? cfg->doc->nroutes : 0;
  gw_routes *t = gw_routes_new(n);
  if (!t) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  snprintf(t->source, sizeof t->source, "%s", cfg->config_file ? cfg->config_file : "");
  t->defaults.policy = cfg->policy;
  for (int i = 0; i < n; i++) {
    t->routes[i].index = i + 1;
    if (build_route(cfg, &cfg->doc->routes[i], &t->routes[i], err, errlen)) {
      gw_routes_release(t);
      return -1;
    }
  }
  cfg->routes = t;
  return 0;
}

static int load(gw_config *cfg, int argc, char **argv, int need_upstream, char *err,
                size_t errlen) {
  cfg->argc = argc;
  cfg->argv = argv;
  const char *file = config_arg(argc, argv);
  if (file && apply_file(cfg, file, need_upstream, err, errlen))
    return -1;
  int rc = settings_parse_argv(&serve_table, cfg, argc, argv, NULL, NULL, err, errlen);
  if (rc)
    return rc;
  if (need_upstream && !cfg->has_upstream) {
    snprintf(err, errlen,
             "--upstream is required; use http://HOST:PORT (e.g. --upstream http://127.0.0.1:9000)"
             "%s", cfg->config_file ? ", or upstream: in the config file" : "");
    return -1;
  }
  return build_routes(cfg, err, errlen);
}

/* Whether argv sets the flag name (it overrides the file either way). */
static int flag_given(const gw_config *cfg, const char *name) {
  size_t n = strlen(name);
  for (int i = 1; i < cfg->argc; i++) {
    const char *a = cfg->argv[i];
    if (!strcmp(a, "--"))
      break;
    if (!strncmp(a, "--", 2) && !strncmp(a + 2, name, n) && (!a[2 + n] || a[2 + n] == '='))
      return 1;
  }
  return 0;
}

/* Whether serve can open path as its access log, which gw_run opens (and
 * creates): the file takes writes, or its directory a new file. Nothing
 * is created. 0, or -1 with errno as open() would set it. */
static int access_log_openable(const char *path) {
  struct stat st;
  if (!stat(path, &st))
    return S_ISDIR(st.st_mode) ? (errno = EISDIR, -1) : access(path, W_OK);
  if (errno != ENOENT)
    return -1;
  char dir[4096];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
  return access(dir[0] ? dir : "/", W_OK | X_OK);
}

/* The access log, checked when the config is read (not on a reload: the
 * log stays open, its path cannot change live), so that `idem config
 * check` refuses what serve would, and a path from the file is named by
 * its line. 0, or -1 with err. */
static int check_access_log(const gw_config *cfg, char *err, size_t errlen) {
  const char *path = cfg->access_log;
  if (!path || !strcmp(path, "-") || !access_log_openable(path))
    return 0;
  char msg[512];
  snprintf(msg, sizeof msg, "--access-log: cannot open '%s': %s", path, strerror(errno));
  const cf_item *it = flag_given(cfg, "access-log") ? NULL : cf_top(cfg->doc, "access-log");
  if (it)
    cf_item_error(cfg->config_file, it, msg, err, errlen);
  else
    snprintf(err, errlen, "%s", msg);
  return -1;
}

int gw_config_parse(gw_config *cfg, int argc, char **argv, char *err, size_t errlen) {
  int rc = load(cfg, argc, argv, 1, err, errlen);
  return rc ? rc : check_access_log(cfg, err, errlen);
}

int gw_config_parse_file_only(gw_config *cfg, int argc, char **argv, char *err, size_t errlen) {
  int rc = load(cfg, argc, argv, 0, err, errlen);
  return rc ? rc : check_access_log(cfg, err, errlen);
}

void gw_config_free(gw_config *cfg) {
  cf_free(cfg->doc);
  cfg->doc = NULL;
  gw_routes_release(cfg->routes);
  cfg->routes = NULL;
}

int gw_config_reload(const gw_config *running, gw_routes **out, char *changed,
                     size_t changed_len, char *err, size_t errlen) {
  gw_config next;
  gw_config_init(&next);
  if (load(&next, running->argc, running->argv, 1, err, errlen)) {
    gw_config_free(&next);
    return -1;
  }
  size_t used = 0;
  changed[0] = 0;
  for (size_t i = 0; i < serve_table.n; i++) {
    const char *name = serve_table.rows[i].name;
    if (settings_find(&gw_policy_table, name) || !strcmp(name, "config") ||
        flag_given(running, name))
      continue; /* routes change live; flags override the file anyway */
    const cf_item *a = cf_top(running->doc, name), *b = cf_top(next.doc, name);
    const char *key = b ? b->key : a ? a->key : name; /* as the file spells it */
    if ((a || b) && (!a || !b || strcmp(a->value, b->value)) && used + strlen(key) + 3 < changed_len)
      used += (size_t)snprintf(changed + used, changed_len - used, "%s%s", used ? ", " : "", key);
  }
  *out = next.routes;
  next.routes = NULL;
  gw_config_free(&next);
  return 0;
}

void gw_config_warn_leases(const gw_config *cfg, const gw_routes *t, const char *who) {
  for (int i = 0; i <= t->n; i++) {
    const gw_route *r = i < t->n ? &t->routes[i] : &t->defaults;
    if (r->policy.mode == GW_MODE_OFF || cfg->upstream_timeout_ms <= r->policy.lock_ttl_ms)
      continue;
    if (i < t->n && r->policy.lock_ttl_ms == t->defaults.policy.lock_ttl_ms &&
        t->defaults.policy.mode != GW_MODE_OFF)
      continue; /* the defaults' own line says it */
    char where[64] = "--lock-ttl";
    if (i < t->n)
      snprintf(where, sizeof where, "the lock_ttl of route %d (line %d)", r->index, r->line);
    fprintf(stderr,
            "%s: warning: --upstream-timeout (%lldms) is longer than %s "
            "(%lldms): a request still running when its lease ends can be taken over "
            "and run again\n",
            who, (long long)cfg->upstream_timeout_ms, where, (long long)r->policy.lock_ttl_ms);
  }
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
