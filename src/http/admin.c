/* admin.c - health, metrics and key inspection for operators (admin.h). */
#include "http/admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>
#include <openssl/evp.h>

#include "core/text.h"
#include "http/admin_server.h"
#include "http/metrics.h"
#include "http/msg.h"
#include "http/policy.h"
#include "http/route_dump.h"
#include "http/store_handle.h"

/* A request's own part of its connection: the key and scope it names. */
typedef struct {
  gw_admin *a;
  char key[IDEM_KEY_MAX + 1];
  char scope[IDEM_SCOPE_MAX + 1];
} admin_req;

struct gw_admin {
  uv_loop_t *loop;
  const gw_config *cfg;
  gw_admin_server *server;
  idem_store *store;
  uint64_t store_retry_at;
  void (*done)(void *); /* gw_admin_stop's */
  void *done_arg;
};

static idem_store *admin_store(gw_admin *a) {
  gw_store_reopen(a->loop, a->cfg->store_uri, a->cfg->cache_uri, "admin ", &a->store,
                  &a->store_retry_at);
  return a->store;
}

static void json_record(gw_buf *o, const idem_record *r) {
  char fp[2 * IDEM_FINGERPRINT_LEN + 1];
  idem_hex_encode(r->fingerprint, IDEM_FINGERPRINT_LEN, fp);
  gw_buf_puts(o, "{\"scope\":");
  policy_json_string(o, r->scope ? r->scope : "", r->scope ? strlen(r->scope) : 0);
  gw_buf_puts(o, ",\"key\":");
  policy_json_string(o, r->key ? r->key : "", r->key ? strlen(r->key) : 0);
  gw_buf_printf(o,
                ",\"state\":\"%s\",\"fence\":%" PRIu64
                ",\"fingerprint\":\"%s\",\"locked_until\":%" PRId64
                ",\"expires_at\":%" PRId64 ",\"created_at\":%" PRId64
                ",\"updated_at\":%" PRId64,
                idem_state_name(r->state), r->fence, fp, r->locked_until,
                r->expires_at, r->created_at, r->updated_at);
  if (r->response.status) {
    gw_buf_printf(o, ",\"response\":{\"status\":%d,\"headers\":",
                  r->response.status);
    policy_json_string(o, r->response.headers ? r->response.headers : "",
                       r->response.headers_len);
    gw_buf_printf(o, ",\"body_bytes\":%zu,\"body_base64\":\"", r->response.body_len);
    size_t enc = 4 * ((r->response.body_len + 2) / 3) + 1;
    if (!gw_buf_reserve(o, enc)) {
      int n = EVP_EncodeBlock((unsigned char *)o->p + o->len,
                              (const unsigned char *)r->response.body,
                              (int)r->response.body_len);
      if (n > 0)
        o->len += (size_t)n;
    }
    gw_buf_puts(o, "\"}");
  }
  gw_buf_puts(o, "}\n");
}

static void on_store(idem_store *st, const idem_result *res, void *arg) {
  gw_admin_req *r = arg;
  admin_req *q = gw_admin_req_data(r);
  (void)st;
  int is_get = gw_admin_req_method(r) == HTTP_GET;
  if (res->err == IDEM_ENOTFOUND || (!res->err && !is_get && res->count == 0) ||
      (!res->err && is_get && !res->record)) {
    gw_admin_reply_problem(r, 404, "no-record", "No record", "no record for this key and scope");
  } else if (res->err && !is_get) {
    /* a delete goes to the store only once a shared cache dropped its
     * copy: say that either may be the one away, and log it (an error) */
    gw_admin *a = q->a;
    int shared = a->cfg->cache_uri && !strncmp(a->cfg->cache_uri, "redis://", 8);
    char detail[300];
    snprintf(detail, sizeof detail, "%s%s; nothing was deleted: try again", idem_strerror(res->err),
             shared ? " (the store, or the shared cache, which must drop its copy first)" : "");
    fprintf(stderr, "idem serve: admin: delete of key '%s' failed: %s\n", q->key, detail);
    gw_admin_reply_problem(r, 503, "store-unavailable", "Store unavailable", detail);
  } else if (res->err) {
    gw_admin_reply_problem(r, 503, "store-unavailable", "Store unavailable",
                           idem_strerror(res->err));
  } else if (is_get) {
    gw_buf b = {0};
    idem_record rec = *res->record;
    rec.scope = q->scope;
    rec.key = q->key;
    json_record(&b, &rec);
    gw_admin_reply(r, 200, "application/json", b.p, b.len);
    gw_buf_free(&b);
  } else {
    gw_admin_reply(r, 204, "text/plain", "", 0);
  }
}

/* /readyz: the store answered a read of a key nobody uses (not found is a
 * good answer); anything else means this gateway cannot serve keyed
 * requests, so a load balancer should send them elsewhere. */
static void on_ready(idem_store *st, const idem_result *res, void *arg) {
  gw_admin_req *r = arg;
  (void)st;
  size_t spooled = gw_metrics_spool_depth_get();
  char body[96];
  int len = spooled ? snprintf(body, sizeof body, "ready\nspool: %zu answers waiting for the store\n",
                               spooled)
                    : snprintf(body, sizeof body, "ready\n");
  if (!res->err || res->err == IDEM_ENOTFOUND)
    gw_admin_reply(r, 200, "text/plain", body, (size_t)len);
  else {
    char detail[160];
    if (spooled)
      snprintf(detail, sizeof detail, "%s; spool: %zu answers waiting for the store",
               idem_strerror(res->err), spooled);
    else
      snprintf(detail, sizeof detail, "%s", idem_strerror(res->err));
    gw_admin_reply_problem(r, 503, "store-unavailable", "Store unavailable", detail);
  }
}

/* Submit op to the admin's store handle, answered by cb; 503 when the store
 * cannot take it. */
static void submit_admin_op(gw_admin_req *r, const idem_op *op, idem_cb cb) {
  gw_admin *a = ((admin_req *)gw_admin_req_data(r))->a;
  idem_store *st = admin_store(a);
  if (!st) {
    gw_admin_reply_problem(r, 503, "store-unavailable", "Store unavailable",
                           "the store could not be opened");
    return;
  }
  int rc = idem_store_submit(st, op, cb, r);
  if (rc) {
    gw_admin_reply_problem(r, 503, "store-unavailable", "Store unavailable", idem_strerror(rc));
  }
}

/* /keys/KEY?scope=S: GET or DELETE the record. */
static void route_key(gw_admin_req *r, const char *u, size_t plen, const char *q, size_t ulen) {
  admin_req *k = gw_admin_req_data(r);
  /* a path segment: '+' is a plus (RFC 3986), not a space as in a query */
  int klen = idem_pct_decode(u + 6, plen - 6, k->key, sizeof k->key, 0);
  if (klen <= 0 || !idem_key_valid(k->key, (size_t)klen)) {
    gw_admin_reply_problem(r, 400, "invalid-key", "Invalid key",
                           "the key must be 1 to 255 printable ASCII characters, "
                           "percent-encoded in the path");
    return;
  }
  k->scope[0] = 0;
  /* the query: name=value pairs split by '&'; only scope is read */
  const char *qp = q ? q + 1 : u + ulen, *qend = u + ulen;
  while (qp < qend) {
    const char *amp = memchr(qp, '&', (size_t)(qend - qp));
    const char *pend = amp ? amp : qend;
    if (pend - qp >= 6 && !memcmp(qp, "scope=", 6) &&
        idem_pct_decode(qp + 6, (size_t)(pend - qp - 6), k->scope, sizeof k->scope,
                        IDEM_PCT_PLUS_SPACE) < 0) {
      gw_admin_reply_problem(r, 400, "invalid-scope", "Invalid scope",
                             "the scope must be at most 255 bytes, percent-encoded");
      return;
    }
    qp = pend + 1;
  }
  idem_op op = {0};
  op.kind = gw_admin_req_method(r) == HTTP_GET ? IDEM_OP_GET : IDEM_OP_DELETE;
  op.scope = k->scope;
  op.key = k->key;
  submit_admin_op(r, &op, on_store);
}

/* /policy: the routes in force, as JSON (route_dump.h). */
static void route_policy(gw_admin_req *r) {
  gw_routes *t = gw_routes_current();
  gw_buf b = {0};
  if (!t || gw_routes_json(t, &b))
    gw_admin_reply_problem(r, 503, "out-of-memory", "Service Unavailable", "out of memory");
  else
    gw_admin_reply(r, 200, "application/json", b.p, b.len);
  gw_buf_free(&b);
  gw_routes_release(t);
}

static void route(void *arg, gw_admin_req *r) {
  gw_admin *a = arg;
  ((admin_req *)gw_admin_req_data(r))->a = a;
  size_t ulen;
  const char *u = gw_admin_req_target(r, &ulen);
  const char *q = memchr(u, '?', ulen);
  size_t plen = q ? (size_t)(q - u) : ulen;
  int m = gw_admin_req_method(r);
  int get = m == HTTP_GET || m == HTTP_HEAD;
  if (gw_ieq(u, plen, "/healthz") && get) {
    gw_admin_reply(r, 200, "text/plain", "ok\n", 3);
  } else if (gw_ieq(u, plen, "/readyz") && get) {
    idem_op op = {.kind = IDEM_OP_GET, .key = GW_ADMIN_READY_PROBE_KEY};
    submit_admin_op(r, &op, on_ready);
  } else if (gw_ieq(u, plen, "/metrics") && m == HTTP_GET) {
    gw_buf b = {0};
    gw_metrics_render(&b);
    gw_metrics_render_store(&b, admin_store(a));
    gw_admin_reply(r, 200, "text/plain; version=0.0.4", b.p, b.len);
    gw_buf_free(&b);
  } else if (gw_ieq(u, plen, "/policy") && m == HTTP_GET) {
    route_policy(r);
  } else if (plen > 6 && !strncmp(u, "/keys/", 6) && (m == HTTP_GET || m == HTTP_DELETE)) {
    route_key(r, u, plen, q, ulen);
  } else if (gw_ieq(u, plen, "/healthz") || gw_ieq(u, plen, "/readyz") ||
             gw_ieq(u, plen, "/metrics") || gw_ieq(u, plen, "/policy") ||
             (plen > 6 && !strncmp(u, "/keys/", 6))) {
    gw_admin_reply_problem(r, 405, "method-not-allowed", "Method Not Allowed",
                           "this admin path does not take that method");
  } else {
    gw_admin_reply_problem(r, 404, "not-found", "Not Found",
                           "admin paths: /healthz, /readyz, /metrics, /policy, /keys/KEY");
  }
}

gw_admin *gw_admin_start(uv_loop_t *loop, const gw_config *cfg, int fd) {
  gw_admin *a = calloc(1, sizeof *a);
  if (!a)
    return NULL;
  a->loop = loop;
  a->cfg = cfg;
  gw_admin_opts o = {.client_timeout_ms = cfg->client_timeout_ms,
                     .idle_timeout_ms = cfg->idle_timeout_ms,
                     .send_timeout_ms = cfg->send_timeout_ms,
                     .route = route,
                     .arg = a,
                     .req_data_size = sizeof(admin_req)};
  a->server = gw_admin_server_open_fd(loop, fd, &o);
  if (!a->server) {
    free(a);
    return NULL;
  }
  admin_store(a);
  return a;
}

static void store_closed(idem_store *st, void *arg) {
  gw_admin *a = arg;
  (void)st;
  gw_free_then(a, a->done, a->done_arg);
}

/* Every request is answered by now (the server waits for those a store
 * operation holds), so no operation is in flight: the store can go. */
static void server_stopped(void *arg) {
  gw_admin *a = arg;
  if (a->store)
    idem_store_close(a->store, store_closed, a);
  else
    store_closed(NULL, a);
}

void gw_admin_stop(gw_admin *a, void (*done)(void *), void *arg) {
  a->done = done;
  a->done_arg = arg;
  gw_admin_server_stop(a->server, server_stopped, a);
}
