/* config.c - `idem serve` flags into a gw_config, with clear refusals. */
#include "http/config.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "idem/idem.h"

const char gw_config_usage[] =
    "usage: idem serve --upstream http://HOST:PORT [options]\n"
    "\n"
    "HTTP reverse proxy that gives an API Idempotency-Key semantics.\n"
    "\n"
    "options:\n"
    "  --listen ADDR:PORT        client listener (default 127.0.0.1:8081)\n"
    "  --upstream URL            the API behind the gateway: http://HOST:PORT\n"
    "  --store URI               memory:, lmdb:PATH, redis://..., postgres://...\n"
    "                            (default lmdb:./idem-data)\n"
    "  --ttl DUR                 how long a completed record is kept (default 24h)\n"
    "  --lock-ttl DUR            processing lease (default 30s)\n"
    "  --methods LIST            methods with semantics (default POST,PATCH)\n"
    "  --require-key             400 when a request of those methods has no key\n"
    "  --scope-header NAME       header whose value (SHA-256 hashed) scopes keys\n"
    "  --wait DUR                wait that long for an in-flight duplicate and\n"
    "                            replay its answer (default 0: 409 at once)\n"
    "  --on-store-error MODE     closed (503, default) or open (pass through)\n"
    "  --max-body SIZE           largest request body (default 1MiB)\n"
    "  --max-response SIZE       largest answer body kept for replay (default\n"
    "                            8MiB); a bigger keyed answer streams to its\n"
    "                            first client and retries get a stored 502\n"
    "  --max-header SIZE         largest request head (default 32KiB)\n"
    "  --upstream-timeout DUR    deadline to connect and get the whole answer\n"
    "                            (default 30s)\n"
    "  --client-timeout DUR      deadline to receive one request (default 10s)\n"
    "  --idle-timeout DUR        keep-alive idle close (default 60s)\n"
    "  --send-timeout DUR        close a client that reads nothing of its answer\n"
    "                            for this long (default 60s)\n"
    "  --max-conns N             client connections per worker (default 4096)\n"
    "  --spool DIR|off           where answers wait, durable, while the store is\n"
    "                            away (default ./idem-spool; unused on memory:)\n"
    "  --drain-timeout DUR       on SIGTERM, the most time to finish requests in\n"
    "                            flight and empty the spool (default 30s)\n"
    "  --admin-listen ADDR:PORT  /healthz, /metrics, /keys/KEY (default off)\n"
    "  --workers N               event-loop threads (default: number of cores)\n"
    "\n"
    "Durations: 500ms, 30s, 5m, 24h, 7d. Sizes: 512, 64KiB, 1MiB.\n";

static void set_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

void gw_config_init(gw_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->listen.host, sizeof cfg->listen.host, "127.0.0.1");
  cfg->listen.port = 8081;
  cfg->store_uri = "lmdb:./idem-data";
  cfg->ttl_ms = 24LL * 3600 * 1000;
  cfg->lock_ttl_ms = 30 * 1000;
  snprintf(cfg->methods[0], sizeof cfg->methods[0], "POST");
  snprintf(cfg->methods[1], sizeof cfg->methods[1], "PATCH");
  cfg->nmethods = 2;
  cfg->max_body = 1024 * 1024;
  cfg->max_response = 8 * 1024 * 1024;
  cfg->max_header = 32 * 1024;
  cfg->upstream_timeout_ms = 30 * 1000;
  cfg->client_timeout_ms = 10 * 1000;
  cfg->idle_timeout_ms = 60 * 1000;
  cfg->send_timeout_ms = 60 * 1000;
  cfg->drain_timeout_ms = 30 * 1000;
  cfg->max_conns = 4096;
  cfg->spool_dir = "./idem-spool";
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cfg->workers = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
}

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

static int parse_upstream(gw_config *cfg, const char *url) {
  const char *p = url;
  if (strncmp(p, "http://", 7))
    return -1;
  p += 7;
  const char *end = p + strcspn(p, "/?#");
  if (*end && strcmp(end, "/"))
    return -1; /* no path prefix: the client's target goes up as is */
  size_t hp_len = (size_t)(end - p);
  if (hp_len == 0 || hp_len >= sizeof cfg->upstream_host || memchr(p, '@', hp_len))
    return -1;
  char hp[256];
  memcpy(hp, p, hp_len);
  hp[hp_len] = 0;
  char *host = hp, *port = NULL;
  if (hp[0] == '[') {
    char *close = strchr(hp, ']');
    if (!close)
      return -1;
    *close = 0;
    host = hp + 1;
    if (close[1] == ':')
      port = close + 2;
    else if (close[1])
      return -1;
  } else {
    char *c = strchr(hp, ':');
    if (c) {
      *c = 0;
      port = c + 1;
    }
  }
  if (!*host)
    return -1;
  int portn = 80;
  if (port && (portn = parse_port(port, 0)) < 0)
    return -1;
  snprintf(cfg->upstream_host, sizeof cfg->upstream_host, "%s", host);
  cfg->upstream_port = portn;
  gw_addr_format(host, portn, cfg->upstream_authority,
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

static int parse_dur(const char *flag, const char *v, int64_t *out, int allow_zero,
                     char *err, size_t errlen) {
  if (allow_zero && !strcmp(v, "0")) {
    *out = 0;
    return 0;
  }
  if (idem_parse_duration(v, out)) {
    set_err(err, errlen,
            "%s: '%s' is not a duration; use a number and a unit: ms, s, m, "
            "h or d (e.g. 500ms, 30s, 24h)%s",
            flag, v, allow_zero ? ", or 0" : "");
    return -1;
  }
  return 0;
}

static int parse_sz(const char *flag, const char *v, uint64_t *out, char *err,
                    size_t errlen) {
  if (idem_parse_size(v, out) || *out == 0 || *out > (1ull << 32)) {
    set_err(err, errlen,
            "%s: '%s' is not a size; use bytes or a unit such as KiB, MiB "
            "(e.g. 64KiB, 1MiB), at most 4GiB",
            flag, v);
    return -1;
  }
  return 0;
}

int gw_config_parse(gw_config *cfg, int argc, char **argv, char *err,
                    size_t errlen) {
  int have_upstream = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h"))
      return 1;
    if (strncmp(arg, "--", 2)) {
      set_err(err, errlen, "unexpected argument '%s'", arg);
      return -1;
    }
    char name[64];
    const char *val = NULL;
    const char *eq = strchr(arg, '=');
    size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
    if (nlen >= sizeof name) {
      set_err(err, errlen, "unknown option '%s'", arg);
      return -1;
    }
    memcpy(name, arg, nlen);
    name[nlen] = 0;
    if (!strcmp(name, "--require-key")) {
      if (eq) {
        set_err(err, errlen, "--require-key takes no value");
        return -1;
      }
      cfg->require_key = 1;
      continue;
    }
    static const char *const valued[] = {
        "--listen", "--upstream", "--store", "--ttl", "--lock-ttl", "--methods",
        "--scope-header", "--wait", "--on-store-error", "--max-body",
        "--max-response", "--max-header", "--upstream-timeout",
        "--client-timeout", "--idle-timeout", "--admin-listen", "--workers",
        "--send-timeout", "--drain-timeout", "--max-conns", "--spool"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
      if (!strcmp(name, valued[k]))
        known = 1;
    if (!known) {
      set_err(err, errlen, "unknown option '%s'", name);
      return -1;
    }
    if (eq)
      val = eq + 1;
    else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
      val = argv[++i];
    else {
      /* "--store --ttl 1s" is a forgotten value, not a store named --ttl */
      set_err(err, errlen, "%s needs a value%s%s%s", name, i + 1 < argc ? "; got the flag '" : "",
              i + 1 < argc ? argv[i + 1] : "",
              i + 1 < argc ? "' (write --flag=VALUE for a value that starts with --)" : "");
      return -1;
    }

    if (!strcmp(name, "--listen") || !strcmp(name, "--admin-listen")) {
      gw_addr *a = !strcmp(name, "--listen") ? &cfg->listen : &cfg->admin;
      if (gw_addr_parse(val, a)) {
        set_err(err, errlen,
                "%s: '%s' is not an address; use IP:PORT, [IPv6]:PORT or :PORT "
                "(e.g. 127.0.0.1:8081)",
                name, val);
        return -1;
      }
      if (a == &cfg->admin)
        cfg->has_admin = 1;
    } else if (!strcmp(name, "--upstream")) {
      if (parse_upstream(cfg, val)) {
        set_err(err, errlen,
                "--upstream: '%s' is not an upstream URL; use http://HOST:PORT "
                "(plain HTTP, no path; e.g. http://127.0.0.1:9000)",
                val);
        return -1;
      }
      have_upstream = 1;
    } else if (!strcmp(name, "--store")) {
      if (!*val) {
        set_err(err, errlen,
                "--store: empty URI; use memory:, lmdb:PATH, redis://HOST:PORT "
                "or postgres://...");
        return -1;
      }
      cfg->store_uri = val;
    } else if (!strcmp(name, "--ttl")) {
      if (parse_dur(name, val, &cfg->ttl_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--lock-ttl")) {
      if (parse_dur(name, val, &cfg->lock_ttl_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--wait")) {
      if (parse_dur(name, val, &cfg->wait_ms, 1, err, errlen))
        return -1;
    } else if (!strcmp(name, "--upstream-timeout")) {
      if (parse_dur(name, val, &cfg->upstream_timeout_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--client-timeout")) {
      if (parse_dur(name, val, &cfg->client_timeout_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--idle-timeout")) {
      if (parse_dur(name, val, &cfg->idle_timeout_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--methods")) {
      if (parse_methods(cfg, val)) {
        set_err(err, errlen,
                "--methods: '%s' is not a method list; use comma-separated "
                "method names (e.g. POST,PATCH,PUT), at most %d",
                val, GW_MAX_METHODS);
        return -1;
      }
    } else if (!strcmp(name, "--scope-header")) {
      if (!is_token(val) || strlen(val) >= sizeof cfg->scope_header) {
        set_err(err, errlen,
                "--scope-header: '%s' is not a header name; use a token such "
                "as Authorization or X-Tenant-Id",
                val);
        return -1;
      }
      snprintf(cfg->scope_header, sizeof cfg->scope_header, "%s", val);
    } else if (!strcmp(name, "--on-store-error")) {
      if (!strcmp(val, "closed"))
        cfg->fail_open = 0;
      else if (!strcmp(val, "open"))
        cfg->fail_open = 1;
      else {
        set_err(err, errlen,
                "--on-store-error: '%s' is not a mode; use closed or open", val);
        return -1;
      }
    } else if (!strcmp(name, "--max-body")) {
      if (parse_sz(name, val, &cfg->max_body, err, errlen))
        return -1;
    } else if (!strcmp(name, "--max-response")) {
      if (parse_sz(name, val, &cfg->max_response, err, errlen))
        return -1;
    } else if (!strcmp(name, "--max-header")) {
      if (parse_sz(name, val, &cfg->max_header, err, errlen))
        return -1;
      if (cfg->max_header < 1024 || cfg->max_header > 1024 * 1024) {
        set_err(err, errlen,
                "--max-header: '%s' is out of range; use a size from 1KiB to "
                "1MiB (e.g. 32KiB)",
                val);
        return -1;
      }
    } else if (!strcmp(name, "--send-timeout")) {
      if (parse_dur(name, val, &cfg->send_timeout_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--drain-timeout")) {
      if (parse_dur(name, val, &cfg->drain_timeout_ms, 0, err, errlen))
        return -1;
    } else if (!strcmp(name, "--spool")) {
      if (!*val) {
        set_err(err, errlen, "--spool: empty path; use a directory or off");
        return -1;
      }
      cfg->spool_dir = strcmp(val, "off") ? val : NULL;
    } else if (!strcmp(name, "--workers") || !strcmp(name, "--max-conns")) {
      int workers = !strcmp(name, "--workers");
      long most = workers ? 64 : 1000000;
      char *end;
      long n = strtol(val, &end, 10);
      if (!*val || *end || n < 1 || n > most) {
        set_err(err, errlen, "%s: '%s' is not a %s; use a number from 1 to %ld", name, val,
                workers ? "worker count" : "connection count", most);
        return -1;
      }
      *(workers ? &cfg->workers : &cfg->max_conns) = (int)n;
    }
  }
  if (!have_upstream) {
    set_err(err, errlen,
            "--upstream is required; use http://HOST:PORT (e.g. "
            "--upstream http://127.0.0.1:9000)");
    return -1;
  }
  return 0;
}
