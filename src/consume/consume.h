/*
 * consume.h - `idem consume`: the engine of `idem serve`, fed by a broker.
 *
 *   broker ──message──► key ──claim──► handler (HTTP POST) ──complete──► ack
 *
 * One event loop. A message is acked only once its record is durable
 * (complete, or the marker in its place), so an ack lost on the way means a
 * redelivery, which replays. The parts:
 *   consume.c   the flow of one message (flow.h)
 *   consume_run.c  start, the loop, and the orderly stop
 *   handler.c   the request to the handler and what of its answer is kept
 *   msg_key.c   where a key comes from (--key)
 *   broker*.c   the brokers, behind broker.h
 *   cs_admin.c  /healthz, /readyz, /metrics
 */
#ifndef IDEM_CONSUME_CONSUME_H
#define IDEM_CONSUME_CONSUME_H

#include <stdint.h>

#include "consume/msg_key.h"

typedef struct {
  char host[256];
  int port;
} cs_addr;

typedef struct {
  const char *from;         /* --from BROKER_URI (required) */
  char to_host[256];        /* --to http://HOST:PORT/PATH (required) */
  int to_port;
  char to_path[1024];
  char to_authority[300];
  const char *store_uri;    /* --store, lmdb:./idem-data */
  cs_key_source key;        /* --key, message-id */
  const char *scope;        /* --scope, "" */
  int64_t ttl_ms;           /* --ttl, 7d */
  int64_t lock_ttl_ms;      /* --lock-ttl, 30s */
  int concurrency;          /* --concurrency, 64 */
  int prefetch;             /* --prefetch, 64 */
  int max_deliveries;       /* --max-deliveries, 5 */
  int64_t retry_delay_ms;   /* --retry-delay, 1s */
  int64_t max_retry_delay_ms; /* --max-retry-delay, 60s */
  int64_t handler_timeout_ms; /* --handler-timeout, 30s */
  uint64_t max_response;    /* --max-response, 8MiB */
  int fail_open;            /* --on-store-error open */
  int has_admin;
  cs_addr admin;            /* --admin-listen */
  int no_store;             /* benchmarks only (IDEM_BENCH_NO_STORE=1): forward
                               and ack, with no record; not a product mode */
} cs_config;

/* Run until SIGTERM or SIGINT; returns the exit code (0 after an orderly
 * stop, 1 when it cannot start). */
int cs_run(const cs_config *cfg);

#endif
