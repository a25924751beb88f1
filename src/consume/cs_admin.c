/* cs_admin.c - /healthz, /readyz and /metrics of `idem consume`
 * (cs_admin.h), on the operator listener's server (http/admin_server.h),
 * with serve's default timeouts. */
#include "consume/cs_admin.h"

#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "consume/cs_metrics.h"
#include "http/admin_server.h"
#include "http/metrics.h"
#include "http/msg.h"
#include "idem/idem.h"

struct cs_admin {
  gw_admin_server *server;
  cs_admin_hooks h;
};

/* The store answered the probe: not found is a good answer. */
static void on_probe(idem_store *st, const idem_result *res, void *arg) {
  gw_admin_req *r = arg;
  (void)st;
  if (!res->err || res->err == IDEM_ENOTFOUND) {
    gw_admin_reply(r, 200, "text/plain", "ready\n", 6);
    return;
  }
  gw_buf body = {0};
  gw_buf_printf(&body, "store unavailable: %s\n", idem_strerror(res->err));
  gw_admin_reply(r, 503, "text/plain", body.p, body.len);
  gw_buf_free(&body);
}

/* Ready when nothing is missing and the store answers a read now: a store
 * that went away while no message came is found out here, not at the next
 * claim. */
static void readyz(cs_admin *a, gw_admin_req *r, gw_buf *body) {
  const char *missing = a->h.not_ready(a->h.arg);
  idem_store *st = missing ? NULL : a->h.store(a->h.arg);
  idem_op op = {.kind = IDEM_OP_GET, .key = GW_ADMIN_READY_PROBE_KEY};
  int rc = st ? idem_store_submit(st, &op, on_probe, r) : 0;
  if (st && !rc)
    return;
  gw_buf_printf(body, "%s\n", missing ? missing : rc ? idem_strerror(rc) : "ready");
  gw_admin_reply(r, missing || rc ? 503 : 200, "text/plain", body->p, body->len);
}

static void route(void *arg, gw_admin_req *r) {
  cs_admin *a = arg;
  size_t len;
  const char *t = gw_admin_req_target(r, &len);
  const char *q = memchr(t, '?', len);
  size_t plen = q ? (size_t)(q - t) : len;
  int m = gw_admin_req_method(r);
  gw_buf body = {0};
  if (m != HTTP_GET && m != HTTP_HEAD) {
    gw_admin_reply_problem(r, 405, "method-not-allowed", "Method Not Allowed",
                           "the admin paths take GET");
  } else if (gw_ieq(t, plen, "/healthz")) {
    gw_admin_reply(r, 200, "text/plain", "ok\n", 3);
  } else if (gw_ieq(t, plen, "/readyz")) {
    readyz(a, r, &body);
  } else if (gw_ieq(t, plen, "/metrics")) {
    cs_metrics_render(&body, a->h.inflight(a->h.arg));
    gw_metrics_render_store(&body, a->h.store(a->h.arg));
    gw_admin_reply(r, 200, "text/plain; version=0.0.4", body.p, body.len);
  } else {
    gw_admin_reply_problem(r, 404, "not-found", "Not Found",
                           "admin paths: /healthz, /readyz, /metrics");
  }
  gw_buf_free(&body);
}

cs_admin *cs_admin_start(uv_loop_t *loop, const char *host, int *port, const cs_admin_hooks *h,
                         int *err) {
  cs_admin *a = calloc(1, sizeof *a);
  if (!a) {
    *err = UV_ENOMEM;
    return NULL;
  }
  a->h = *h;
  /* serve's defaults of --client-timeout, --idle-timeout, --send-timeout */
  gw_admin_opts o = {.client_timeout_ms = 10000,
                     .idle_timeout_ms = 60000,
                     .send_timeout_ms = 60000,
                     .route = route,
                     .arg = a};
  a->server = gw_admin_server_listen(loop, host, port, &o, err);
  if (!a->server) {
    free(a);
    return NULL;
  }
  return a;
}

void cs_admin_stop(cs_admin *a, void (*done)(void *), void *arg) {
  gw_admin_server_stop(a->server, done, arg);
  free(a);
}
