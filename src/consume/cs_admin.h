/*
 * cs_admin.h - the admin listener of `idem consume` (--admin-listen), on
 * the consumer's loop:
 *   GET /healthz   200 "ok" while the process runs
 *   GET /readyz    200 "ready" when the broker is connected and the store
 *                  answers a read (a probe key nobody uses), else 503
 *                  naming what is missing
 *   GET /metrics   Prometheus text (cs_metrics.h), and the store's own
 *                  counters as serve shows them (http/metrics.h)
 * with serve's admin timeouts and connection limit (http/admin_server.h).
 */
#ifndef IDEM_CONSUME_CS_ADMIN_H
#define IDEM_CONSUME_CS_ADMIN_H

#include <uv.h>

typedef struct cs_admin cs_admin;

struct idem_store;

/* not_ready(arg) gives NULL when ready, else what is missing; inflight(arg)
 * the messages in flight; store(arg) the store whose own counters /metrics
 * adds and that /readyz reads from (NULL: none). */
typedef struct {
  const char *(*not_ready)(void *arg);
  unsigned (*inflight)(void *arg);
  struct idem_store *(*store)(void *arg);
  void *arg;
} cs_admin_hooks;

/* Listen on host:*port (0: the system picks one, written back); NULL with a
 * libuv error in *err when it cannot. */
cs_admin *cs_admin_start(uv_loop_t *loop, const char *host, int *port, const cs_admin_hooks *h,
                         int *err);
/* Stop: the listener and open connections close; done runs after. */
void cs_admin_stop(cs_admin *a, void (*done)(void *), void *arg);

#endif
