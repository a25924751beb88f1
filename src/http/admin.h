/*
 * admin.h - the operator listener (--admin-listen), on the main thread's
 * loop with its own store handle:
 *   GET /healthz             200 "ok"
 *   GET /metrics             Prometheus text (metrics.h)
 *   GET /keys/KEY?scope=S    the record as JSON, 404 when there is none
 *   DELETE /keys/KEY?scope=S remove the record (204, 404)
 * KEY is percent-encoded; S is the stored scope (the SHA-256 hex of the
 * --scope-header value), empty by default.
 */
#ifndef IDEM_HTTP_ADMIN_H
#define IDEM_HTTP_ADMIN_H

#include <uv.h>

#include "http/config.h"
#include "idem/idem.h"

typedef struct gw_admin gw_admin;

/* Serve on an already bound and listening socket fd. */
gw_admin *gw_admin_start(uv_loop_t *loop, const gw_config *cfg, int fd);
/* Stop accepting, close open connections and the store; done runs after. */
void gw_admin_stop(gw_admin *a, void (*done)(void *), void *arg);

#endif
