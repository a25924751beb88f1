/*
 * metrics.h - process-wide counters shared by every worker thread (relaxed
 * atomics: no locks on the request path), rendered by the admin listener in
 * the Prometheus text format.
 */
#ifndef IDEM_HTTP_METRICS_H
#define IDEM_HTTP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "http/msg.h"

#define GW_OUTCOMES(X)                                                        \
  X(PASSTHROUGH, "passthrough")   /* no semantics or no key: forwarded */     \
  X(EXECUTED, "executed")         /* claimed, ran upstream, response stored */\
  X(RELEASED, "released")         /* claimed, ran, status released the key */ \
  X(REPLAYED, "replayed")         /* stored response replayed */              \
  X(MISMATCH, "mismatch")         /* 422 */                                   \
  X(CONFLICT, "conflict")         /* 409 in-flight duplicate */               \
  X(BAD_KEY, "bad_key")           /* 400 malformed or missing key */          \
  X(STORE_ERROR, "store_error")   /* 503 fail closed */                       \
  X(STORE_BYPASS, "store_bypass") /* store failed, passed through (open) */   \
  X(UPSTREAM_ERROR, "upstream_error")     /* 502 */                           \
  X(UPSTREAM_TIMEOUT, "upstream_timeout") /* 504 */                           \
  X(BAD_REQUEST, "bad_request")   /* 400 framing, connection closed */        \
  X(TOO_LARGE, "too_large")       /* 413 */                                   \
  X(HEADER_TOO_LARGE, "header_too_large") /* 431 */                           \
  X(CLIENT_TIMEOUT, "client_timeout")     /* 408 */

typedef enum {
#define GW_OUTCOME_ENUM(name, text) GW_OUT_##name,
  GW_OUTCOMES(GW_OUTCOME_ENUM)
#undef GW_OUTCOME_ENUM
  GW_OUT_COUNT
} gw_outcome;

typedef enum { GW_HIST_CLAIM, GW_HIST_COMPLETE, GW_HIST_RELEASE, GW_HIST_UPSTREAM, GW_HIST_COUNT } gw_hist;

void gw_metrics_outcome(gw_outcome o);
/* Its name on /metrics and in the access log ("executed"). */
const char *gw_metrics_outcome_name(gw_outcome o);
/* Record one latency observation in seconds-based buckets. */
void gw_metrics_observe(gw_hist h, uint64_t micros);
void gw_metrics_leases(int delta);      /* leases this process holds */
void gw_metrics_connections(int delta); /* open client connections */
void gw_metrics_complete_failed(void);  /* complete refused or failed */
void gw_metrics_release_failed(void);
/* The spool (spool.c): entries waiting, entries written, entries drained. */
void gw_metrics_spool_depth(size_t n);
size_t gw_metrics_spool_depth_get(void);
void gw_metrics_spool_write(void);
void gw_metrics_spool_drained(void);

/* mode: shadow (route.h): what enforce would have done instead of letting
 * the request through. */
#define GW_SHADOWS(X)                                                         \
  X(REPLAY, "replay")     /* a stored answer would have been replayed */      \
  X(MISMATCH, "mismatch") /* 422: the key with another request */             \
  X(CONFLICT, "conflict") /* 409: the key in flight */                         \
  X(BAD_KEY, "bad_key")   /* 400: a malformed key, or none where required */

typedef enum {
#define GW_SHADOW_ENUM(name, text) GW_SHADOW_##name,
  GW_SHADOWS(GW_SHADOW_ENUM)
#undef GW_SHADOW_ENUM
  GW_SHADOW_COUNT
} gw_shadow;

void gw_metrics_shadow(gw_shadow s);
const char *gw_shadow_name(gw_shadow s);
/* SIGHUP reloads of the config file: applied (ok) or refused. */
void gw_metrics_reload(int ok);

/* Append the Prometheus exposition text. */
int gw_metrics_render(gw_buf *out);

/* Render the counters of an lmdb: store (process-wide, shared by every
 * handle on its path) after the gateway's own; nothing for other stores. */
struct idem_store;
int gw_metrics_render_store(gw_buf *out, const struct idem_store *store);

#endif
