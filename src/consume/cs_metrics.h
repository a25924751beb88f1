/*
 * cs_metrics.h - counters of `idem consume` (one loop: plain integers),
 * rendered by its admin listener in the Prometheus text format.
 */
#ifndef IDEM_CONSUME_CS_METRICS_H
#define IDEM_CONSUME_CS_METRICS_H

#include <stdint.h>

#include "http/msg.h"

#define CS_OUTCOMES(X)                                                         \
  X(EXECUTED, "executed")       /* handler ran, answer kept, acked */          \
  X(REPLAYED, "replayed")       /* already completed: acked, handler not called */ \
  X(RETRY, "retry")             /* handler failed: released, redelivered later */ \
  X(BUSY, "busy")               /* another consumer holds the lease */         \
  X(MISMATCH, "mismatch")       /* same key, other body: dead-lettered */      \
  X(NO_KEY, "no_key")           /* no usable key: dead-lettered */             \
  X(DEAD, "dead_lettered")      /* failed --max-deliveries times */            \
  X(STORE_ERROR, "store_error") /* store unavailable: not acked */             \
  X(BYPASS, "store_bypass")     /* store unavailable, delivered without a record */ \
  X(FORWARDED, "forwarded")     /* benchmark forwarder: no store */

typedef enum {
#define CS_OUTCOME_ENUM(name, text) CS_OUT_##name,
  CS_OUTCOMES(CS_OUTCOME_ENUM)
#undef CS_OUTCOME_ENUM
  CS_OUT_COUNT
} cs_outcome;

typedef enum { CS_HIST_MESSAGE, CS_HIST_HANDLER, CS_HIST_CLAIM, CS_HIST_COMPLETE, CS_HIST_COUNT } cs_hist;

void cs_metrics_outcome(cs_outcome o);
void cs_metrics_observe(cs_hist h, uint64_t micros);
void cs_metrics_settle_failed(void);
int cs_metrics_render(gw_buf *out, unsigned inflight);

#endif
