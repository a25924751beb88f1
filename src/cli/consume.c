/* consume.c - `idem consume`: its settings table (settings.h), then the
 * consumer (src/consume/). */
#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "consume/broker.h"
#include "consume/consume.h"
#include "core/settings.h"
#include "core/text.h"
#include "http/config.h"
#include "store/backend.h"

static const char usage[] =
    "usage: idem consume --from BROKER_URI --to http://HOST:PORT/PATH [options]\n"
    "\n"
    "Takes messages from a broker, claims each one's key in the store, POSTs it\n"
    "to the handler with Idempotency-Key and Idempotency-Fence, keeps the\n"
    "handler's answer, and only then acks. A redelivered or republished message\n"
    "is acked without reaching the handler again.\n"
    "\n"
    "brokers:\n"
#if IDEM_WITH_REDIS
    "  redis://[user:pass@]host:port[/db]?stream=NAME&group=NAME[&consumer=NAME]\n"
#endif
    "  amqp://user:pass@host:port/vhost?queue=NAME[&prefetch=N]  (RabbitMQ)\n"
    "  nats://[user:pass@]host:port?stream=NAME&consumer=NAME   (JetStream)\n"
    "\n"
    "options:\n";

static const char usage_end[] =
    "\nDurations: 500ms, 30s, 5m, 24h, 7d. Sizes: 512, 64KiB, 1MiB.\n";

static int refuse(char *err, size_t len, const setting *s, const char *v, const char *what,
                  const char *form) {
  snprintf(err, len, "--%s: '%s' is not %s; use %s", s->name, v, what, form);
  return -1;
}

static int parse_from(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  char why[256];
  if (cs_broker_check(v, why, sizeof why)) {
    snprintf(err, len, "--%s: '%s' is not a broker URI: %s", s->name, v, why);
    return -1;
  }
  ((cs_config *)cfg)->from = v;
  return 0;
}

/* http://HOST[:PORT][/PATH]: plain HTTP, the path is what every message is
 * POSTed to ("/" when none). */
static int parse_to_url(cs_config *c, const char *url) {
  const char *rest;
  if (gw_http_url_parse(url, c->to_host, sizeof c->to_host, &c->to_port, &rest))
    return -1;
  const char *path = *rest ? rest : "/";
  if (*path != '/' || strpbrk(path, " \r\n#") || strlen(path) >= sizeof c->to_path)
    return -1;
  snprintf(c->to_path, sizeof c->to_path, "%s", path);
  gw_addr_format(c->to_host, c->to_port, c->to_authority, sizeof c->to_authority);
  return 0;
}

static int parse_to(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (parse_to_url(cfg, v))
    return refuse(err, len, s, v, "a handler URL",
                  "http://HOST:PORT/PATH (plain HTTP; e.g. http://127.0.0.1:9000/messages)");
  return 0;
}

static int parse_key(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  (void)s;
  return cs_key_source_parse(v, &((cs_config *)cfg)->key, err, len);
}

static int parse_store(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (gw_check_store_uri(s, v, err, len)) /* as serve reads its own */
    return -1;
  ((cs_config *)cfg)->store_uri = v;
  return 0;
}

static int parse_scope(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  /* PostgreSQL keeps scopes as text: other bytes would fail every message */
  if (strlen(v) > 255 || !idem_utf8_text(v))
    return refuse(err, len, s, "...", "a scope",
                  "at most 255 bytes of UTF-8 text with no control character");
  ((cs_config *)cfg)->scope = v;
  return 0;
}

static int parse_mode(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  if (strcmp(v, "closed") && strcmp(v, "open"))
    return refuse(err, len, s, v, "a mode", "closed or open");
  ((cs_config *)cfg)->fail_open = !strcmp(v, "open");
  return 0;
}

static int parse_admin(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  cs_config *c = cfg;
  gw_addr a;
  if (gw_addr_parse(v, &a))
    return refuse(err, len, s, v, "an address", "IP:PORT, [IPv6]:PORT or :PORT (e.g. 127.0.0.1:8082)");
  snprintf(c->admin.host, sizeof c->admin.host, "%s", a.host);
  c->admin.port = a.port;
  c->has_admin = 1;
  return 0;
}

#define FIELD(f) offsetof(cs_config, f)
#define DUR_MAX (100LL * 365 * 24 * 3600 * 1000)

static const setting consume_settings[] = {
    {"from", "URI", SETTING_CUSTOM, 0, NULL, 0, 0, parse_from, "the broker (required; see above)"},
    {"to", "URL", SETTING_CUSTOM, 0, NULL, 0, 0, parse_to,
     "the handler: http://HOST:PORT/PATH (required)"},
    {"store", "URI", SETTING_CUSTOM, 0, "lmdb:./idem-data", 0, 0, parse_store, IDEM_STORE_HELP},
    {"key", "SOURCE", SETTING_CUSTOM, 0, "message-id", 0, 0, parse_key,
     "message-id, header:NAME, json:/POINTER or body-sha256"},
    {"scope", "NAME", SETTING_CUSTOM, 0, NULL, 0, 0, parse_scope,
     "record scope (default none; the same store and scope\nas a serve share one record per key)"},
    {"ttl", "DUR", SETTING_DURATION, FIELD(ttl_ms), "7d", 1, DUR_MAX, NULL,
     "how long a completed record is kept"},
    {"lock-ttl", "DUR", SETTING_DURATION, FIELD(lock_ttl_ms), "30s", 1, DUR_MAX, NULL,
     "processing lease; a message idle this long with a\nconsumer is taken over"},
    {"concurrency", "N", SETTING_COUNT, FIELD(concurrency), "64", 1, 100000, NULL,
     "messages in flight at once"},
    {"prefetch", "N", SETTING_COUNT, FIELD(prefetch), "64", 0, 100000, NULL,
     "messages fetched ahead, waiting for a free slot"},
    {"max-deliveries", "N", SETTING_COUNT, FIELD(max_deliveries), "5", 1, 1000000, NULL,
     "handler failures before the key is marked failed\nand the message dead-lettered"},
    {"retry-delay", "DUR", SETTING_DURATION, FIELD(retry_delay_ms), "1s", 1, DUR_MAX, NULL,
     "first redelivery delay after a failure (doubles)"},
    {"max-retry-delay", "DUR", SETTING_DURATION, FIELD(max_retry_delay_ms), "60s", 1, DUR_MAX,
     NULL, "longest redelivery delay"},
    {"handler-timeout", "DUR", SETTING_DURATION, FIELD(handler_timeout_ms), "30s", 1, DUR_MAX,
     NULL, "deadline to connect and get the whole answer"},
    {"max-response", "SIZE", SETTING_SIZE, FIELD(max_response), "8MiB", 1,
     (long long)IDEM_RESPONSE_PART_MAX, NULL, "largest answer kept; a bigger one keeps a 502 marker"},
    {"on-store-error", "MODE", SETTING_CUSTOM, 0, "closed", 0, 0, parse_mode,
     "closed (wait, not acked) or open (deliver with no record)"},
    {"admin-listen", "ADDR:PORT", SETTING_CUSTOM, 0, NULL, 0, 0, parse_admin,
     "/healthz, /readyz, /metrics (default off)"},
};

static const setting_table consume_table = {
    "consume", consume_settings, sizeof consume_settings / sizeof consume_settings[0]};

int cmd_consume(int argc, char **argv) {
  static cs_config cfg; /* lives as long as the consumer */
  memset(&cfg, 0, sizeof cfg);
  int rc = cli_parse(&consume_table, &cfg, argc, argv, NULL, usage, usage_end);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (!cfg.scope)
    cfg.scope = "";
  if (!cfg.from)
    return cli_usage_error("consume", "--from is required; use e.g. "
                                      "nats://127.0.0.1:4222?stream=ORDERS&consumer=billing");
  if (!cfg.to_host[0])
    return cli_usage_error("consume", "--to is required; use http://HOST:PORT/PATH");
  if (cfg.max_retry_delay_ms < cfg.retry_delay_ms)
    return cli_usage_error("consume", "--max-retry-delay is shorter than --retry-delay");
  if (cfg.handler_timeout_ms > cfg.lock_ttl_ms)
    fprintf(stderr,
            "idem consume: warning: --handler-timeout (%lldms) is longer than --lock-ttl "
            "(%lldms): a message still at its handler when its lease ends can be taken over "
            "and run again\n",
            (long long)cfg.handler_timeout_ms, (long long)cfg.lock_ttl_ms);
  const char *bench = getenv("IDEM_BENCH_NO_STORE");
  cfg.no_store = bench && !strcmp(bench, "1");
  return cs_run(&cfg);
}
