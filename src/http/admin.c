/* admin.c - health, metrics and key inspection for operators (admin.h). */
#include "http/admin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>
#include <openssl/evp.h>

#include "core/queue.h"
#include "http/metrics.h"
#include "http/msg.h"
#include "http/policy.h"
#include "http/route_dump.h"
#include "http/send_watch.h"
#include "http/store_handle.h"

#define ADMIN_MAX_REQUEST 16384
/* Open admin connections at most. Probes and scrapers need a handful; past
 * this bound a new connection is accepted and closed at once, so that a
 * flood costs nothing and a probe fails fast instead of waiting in the
 * backlog. */
#define ADMIN_MAX_CONNS 64

/* What a connection's timer stands for (the same timeouts as the main
 * listener: --client-timeout, --idle-timeout, --send-timeout). */
enum { A_NONE = 0, A_REQUEST, A_IDLE, A_SEND };

struct gw_admin {
  uv_loop_t *loop;
  const gw_config *cfg;
  uv_tcp_t listener;
  idem_store *store;
  uint64_t store_retry_at;
  int handles; /* listener + connections + store + ops in flight */
  idem_queue conns; /* admin_conn.linked */
  int nconns;
  int stopping;
  void (*done)(void *);
  void *done_arg;
};

typedef struct admin_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  int timer_mode;
  gw_send_watch send;
  int handles;     /* tcp and timer, until both are closed */
  int closing;
  int keep_alive;  /* the request allows another after its answer */
  gw_admin *a;
  idem_queue linked; /* in a->conns */
  http_parser p;
  gw_buf url;
  size_t got;
  int complete;
  int busy; /* a store operation or the write is in flight */
  gw_buf out;
  uv_write_t wreq;
  char key[IDEM_KEY_MAX + 1];
  char scope[IDEM_SCOPE_MAX + 1];
} admin_conn;

static void admin_unref(gw_admin *a) {
  if (--a->handles == 0 && a->stopping) {
    void (*done)(void *) = a->done;
    void *arg = a->done_arg;
    free(a);
    if (done)
      done(arg);
  }
}

static void conn_closed(uv_handle_t *h) {
  admin_conn *c = h->data;
  gw_admin *a = c->a;
  if (--c->handles > 0)
    return;
  a->nconns--;
  idem_queue_remove(&c->linked);
  gw_buf_free(&c->url);
  gw_buf_free(&c->out);
  free(c);
  admin_unref(a);
}

static void conn_close(admin_conn *c) {
  if (c->closing)
    return;
  c->closing = 1;
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
  uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void on_timer(uv_timer_t *t);

static void timer_set(admin_conn *c, int mode, int64_t ms) {
  c->timer_mode = mode;
  if (mode == A_NONE)
    uv_timer_stop(&c->timer);
  else
    uv_timer_start(&c->timer, on_timer, (uint64_t)ms, 0);
}

static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* Ready for the connection's next request (keep-alive). */
static void next_request(admin_conn *c) {
  http_parser_init(&c->p, HTTP_REQUEST);
  c->p.data = c;
  c->url.len = 0;
  c->got = 0;
  c->complete = 0;
  timer_set(c, A_IDLE, c->a->cfg->idle_timeout_ms);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

static void write_done(uv_write_t *w, int status) {
  admin_conn *c = w->data;
  c->busy = 0;
  if (c->closing)
    return;
  if (status < 0 || !c->keep_alive || c->a->stopping)
    conn_close(c);
  else
    next_request(c);
}

static void reply(admin_conn *c, int status, const char *ctype, const char *body,
                  size_t len) {
  const char *conn = !c->keep_alive       ? "Connection: close\r\n"
                     : c->p.http_minor == 0 ? "Connection: keep-alive\r\n"
                                            : "";
  gw_buf head = {0};
  if (status == 204)
    gw_buf_printf(&head, "HTTP/1.1 204 No Content\r\n%s\r\n", conn);
  else
    gw_buf_printf(&head,
                  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                  "%s\r\n",
                  status, policy_reason(status), ctype, len, conn);
  if (status != 204 && c->p.method != HTTP_HEAD)
    gw_buf_append(&head, body, len);
  gw_buf_free(&c->out);
  c->out = head;
  uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.len);
  c->wreq.data = c;
  c->busy = 1;
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_done)) {
    c->busy = 0;
    conn_close(c);
    return;
  }
  gw_send_watch_queued(&c->send, b.len);
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > 0) {
    uint64_t period = gw_send_watch_period(c->a->cfg->send_timeout_ms);
    c->timer_mode = A_SEND;
    gw_send_watch_start(&c->send, (uv_stream_t *)&c->tcp);
    uv_timer_start(&c->timer, on_timer, period, period);
  }
}

static void reply_problem(admin_conn *c, int status, const char *slug,
                          const char *title, const char *detail);

/* A request that did not arrive in time gets a 408 (and the connection
 * closes); a connection that sent nothing, an idle one or a peer that takes
 * no byte of its answer is closed. */
static void on_timer(uv_timer_t *t) {
  admin_conn *c = t->data;
  if (c->timer_mode == A_SEND) {
    gw_send_state st = gw_send_watch_tick(&c->send, (uv_stream_t *)&c->tcp,
                                          c->a->cfg->send_timeout_ms);
    if (st == GW_SEND_STALLED)
      conn_close(c);
    else if (st == GW_SEND_DRAINED)
      timer_set(c, A_NONE, 0);
    return;
  }
  if (c->timer_mode == A_REQUEST && c->got > 0 && !c->busy) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->keep_alive = 0;
    timer_set(c, A_NONE, 0);
    reply_problem(c, 408, "request-timeout", "Request Timeout",
                  "the request did not arrive in time");
    return;
  }
  conn_close(c);
}

static void reply_problem(admin_conn *c, int status, const char *slug,
                          const char *title, const char *detail) {
  gw_buf b = {0};
  policy_problem(&b, status, slug, title, detail);
  reply(c, status, "application/problem+json", b.p, b.len);
  gw_buf_free(&b);
}

static idem_store *admin_store(gw_admin *a) {
  int had = a->store != NULL;
  gw_store_reopen(a->loop, a->cfg->store_uri, "admin ", &a->store, &a->store_retry_at);
  if (!had && a->store)
    a->handles++; /* the store handle's hold, until it is closed */
  return a->store;
}

static void json_record(gw_buf *o, const idem_record *r) {
  static const char hex[] = "0123456789abcdef";
  char fp[2 * IDEM_FINGERPRINT_LEN + 1];
  for (int i = 0; i < IDEM_FINGERPRINT_LEN; i++) {
    fp[2 * i] = hex[r->fingerprint[i] >> 4];
    fp[2 * i + 1] = hex[r->fingerprint[i] & 15];
  }
  fp[2 * IDEM_FINGERPRINT_LEN] = 0;
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
  admin_conn *c = arg;
  (void)st;
  c->busy = 0;
  int is_get = c->p.method == HTTP_GET;
  if (res->err == IDEM_ENOTFOUND || (!res->err && !is_get && res->count == 0) ||
      (!res->err && is_get && !res->record)) {
    reply_problem(c, 404, "no-record", "No record", "no record for this key and scope");
  } else if (res->err) {
    reply_problem(c, 503, "store-unavailable", "Store unavailable",
                  idem_strerror(res->err));
  } else if (is_get) {
    gw_buf b = {0};
    idem_record r = *res->record;
    r.scope = c->scope;
    r.key = c->key;
    json_record(&b, &r);
    reply(c, 200, "application/json", b.p, b.len);
    gw_buf_free(&b);
  } else {
    reply(c, 204, "text/plain", "", 0);
  }
  admin_unref(c->a); /* the op's hold */
}

/* /readyz: the store answered a read of a key nobody uses (not found is a
 * good answer); anything else means this gateway cannot serve keyed
 * requests, so a load balancer should send them elsewhere. */
#define READY_PROBE_KEY "idem-readyz-probe"

static void on_ready(idem_store *st, const idem_result *res, void *arg) {
  admin_conn *c = arg;
  (void)st;
  c->busy = 0;
  size_t spooled = gw_metrics_spool_depth_get();
  char body[96];
  int len = spooled ? snprintf(body, sizeof body, "ready\nspool: %zu answers waiting for the store\n",
                               spooled)
                    : snprintf(body, sizeof body, "ready\n");
  if (!res->err || res->err == IDEM_ENOTFOUND)
    reply(c, 200, "text/plain", body, (size_t)len);
  else {
    char detail[160];
    snprintf(detail, sizeof detail, "%s; spool: %zu answers waiting for the store",
             idem_strerror(res->err), spooled);
    reply_problem(c, 503, "store-unavailable", "Store unavailable", detail);
  }
  admin_unref(c->a); /* the op's hold */
}

/* Submit op to the admin's store handle, answered by cb; 503 when the store
 * cannot take it. */
static void submit_admin_op(admin_conn *c, const idem_op *op, idem_cb cb) {
  gw_admin *a = c->a;
  idem_store *st = admin_store(a);
  if (!st) {
    reply_problem(c, 503, "store-unavailable", "Store unavailable",
                  "the store could not be opened");
    return;
  }
  c->busy = 1;
  a->handles++;
  int rc = idem_store_submit(st, op, cb, c);
  if (rc) {
    a->handles--;
    c->busy = 0;
    reply_problem(c, 503, "store-unavailable", "Store unavailable", idem_strerror(rc));
  }
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Percent-decode [s, s+len) into out (cap bytes with NUL); -1 when bad. */
static int pct_decode(const char *s, size_t len, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    char ch = s[i];
    if (ch == '%') {
      if (i + 2 >= len)
        return -1;
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi < 0 || lo < 0)
        return -1;
      ch = (char)(hi * 16 + lo);
      i += 2;
    } else if (ch == '+') {
      ch = ' ';
    }
    if (o + 1 >= cap)
      return -1;
    out[o++] = ch;
  }
  out[o] = 0;
  return (int)o;
}

static void route(admin_conn *c) {
  gw_admin *a = c->a;
  /* never NULL, always NUL-terminated */
  if (gw_buf_append(&c->url, "", 1)) {
    reply_problem(c, 503, "out-of-memory", "Service Unavailable", "out of memory");
    return;
  }
  c->url.len--;
  const char *u = c->url.p;
  size_t ulen = c->url.len;
  const char *q = memchr(u, '?', ulen);
  size_t plen = q ? (size_t)(q - u) : ulen;
  int m = c->p.method;
  if (gw_ieq(u, plen, "/healthz")) {
    if (m != HTTP_GET && m != HTTP_HEAD)
      goto not_allowed;
    reply(c, 200, "text/plain", "ok\n", 3);
    return;
  }
  if (gw_ieq(u, plen, "/readyz")) {
    if (m != HTTP_GET && m != HTTP_HEAD)
      goto not_allowed;
    idem_op op = {.kind = IDEM_OP_GET, .key = READY_PROBE_KEY};
    submit_admin_op(c, &op, on_ready);
    return;
  }
  if (gw_ieq(u, plen, "/metrics")) {
    if (m != HTTP_GET)
      goto not_allowed;
    gw_buf b = {0};
    gw_metrics_render(&b);
    gw_metrics_render_store(&b, admin_store(a));
    reply(c, 200, "text/plain; version=0.0.4", b.p, b.len);
    gw_buf_free(&b);
    return;
  }
  if (gw_ieq(u, plen, "/policy")) {
    if (m != HTTP_GET)
      goto not_allowed;
    gw_routes *t = gw_routes_current();
    gw_buf b = {0};
    if (!t || gw_routes_json(t, &b))
      reply_problem(c, 503, "out-of-memory", "Service Unavailable", "out of memory");
    else
      reply(c, 200, "application/json", b.p, b.len);
    gw_buf_free(&b);
    gw_routes_release(t);
    return;
  }
  if (plen > 6 && !strncmp(u, "/keys/", 6)) {
    if (m != HTTP_GET && m != HTTP_DELETE)
      goto not_allowed;
    int klen = pct_decode(u + 6, plen - 6, c->key, sizeof c->key);
    if (klen <= 0 || !idem_key_valid(c->key, (size_t)klen)) {
      reply_problem(c, 400, "invalid-key", "Invalid key",
                    "the key must be 1 to 255 printable ASCII characters, "
                    "percent-encoded in the path");
      return;
    }
    c->scope[0] = 0;
    /* the query: name=value pairs split by '&'; only scope is read */
    const char *qp = q ? q + 1 : u + ulen, *qend = u + ulen;
    while (qp < qend) {
      const char *amp = memchr(qp, '&', (size_t)(qend - qp));
      const char *pend = amp ? amp : qend;
      if (pend - qp >= 6 && !memcmp(qp, "scope=", 6) &&
          pct_decode(qp + 6, (size_t)(pend - qp - 6), c->scope, sizeof c->scope) < 0) {
        reply_problem(c, 400, "invalid-scope", "Invalid scope",
                      "the scope must be at most 255 bytes, percent-encoded");
        return;
      }
      qp = pend + 1;
    }
    idem_op op = {0};
    op.kind = m == HTTP_GET ? IDEM_OP_GET : IDEM_OP_DELETE;
    op.scope = c->scope;
    op.key = c->key;
    submit_admin_op(c, &op, on_store);
    return;
  }
  reply_problem(c, 404, "not-found", "Not Found",
                "admin paths: /healthz, /readyz, /metrics, /policy, /keys/KEY");
  return;
not_allowed:
  reply_problem(c, 405, "method-not-allowed", "Method Not Allowed",
                "this admin path does not take that method");
}

static int on_url(http_parser *p, const char *at, size_t len) {
  admin_conn *c = p->data;
  return gw_buf_append(&c->url, at, len);
}

static int on_complete(http_parser *p) {
  admin_conn *c = p->data;
  c->complete = 1;
  c->keep_alive = http_should_keep_alive(p);
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings settings = {
    .on_url = on_url,
    .on_message_complete = on_complete,
};

static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *buf) {
  static char slab[4096];
  (void)h;
  (void)sz;
  buf->base = slab;
  buf->len = sizeof slab;
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  admin_conn *c = s->data;
  if (c->complete || c->busy || c->closing)
    return;
  if (n < 0) {
    conn_close(c);
    return;
  }
  /* a request begins: --client-timeout from here (a new connection keeps
   * the deadline it got at accept) */
  if (n > 0 && c->got == 0 && c->timer_mode != A_REQUEST)
    timer_set(c, A_REQUEST, c->a->cfg->client_timeout_ms);
  c->got += (size_t)n;
  size_t used = http_parser_execute(&c->p, &settings, buf->base, (size_t)n);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
  if (c->complete) {
    uv_read_stop(s);
    timer_set(c, A_NONE, 0);
    /* bytes past this request (pipelining) are not kept: answer, close */
    if (used < (size_t)n)
      c->keep_alive = 0;
    route(c);
  } else if (e != HPE_OK || c->got > ADMIN_MAX_REQUEST) {
    uv_read_stop(s);
    timer_set(c, A_NONE, 0);
    c->keep_alive = 0;
    reply_problem(c, 400, "bad-request", "Bad Request", "malformed request");
  }
}

static void on_connection(uv_stream_t *l, int status) {
  gw_admin *a = l->data;
  if (status < 0 || a->stopping)
    return;
  admin_conn *c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->a = a;
  uv_tcp_init(a->loop, &c->tcp);
  uv_timer_init(a->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  a->handles++;
  a->nconns++;
  idem_queue_insert_tail(&a->conns, &c->linked);
  if (uv_accept(l, (uv_stream_t *)&c->tcp) || a->nconns > ADMIN_MAX_CONNS) {
    conn_close(c);
    return;
  }
  next_request(c);
  /* a new connection's first request has --client-timeout from accept, so
   * one that never sends a byte is closed too */
  timer_set(c, A_REQUEST, a->cfg->client_timeout_ms);
}

static void free_admin(uv_handle_t *h) { free(h->data); }

gw_admin *gw_admin_start(uv_loop_t *loop, const gw_config *cfg, int fd) {
  gw_admin *a = calloc(1, sizeof *a);
  if (a)
    idem_queue_init(&a->conns);
  if (!a)
    return NULL;
  a->loop = loop;
  a->cfg = cfg;
  uv_tcp_init(loop, &a->listener);
  a->listener.data = a;
  a->handles = 1;
  if (uv_tcp_open(&a->listener, fd) ||
      uv_listen((uv_stream_t *)&a->listener, 128, on_connection)) {
    uv_close((uv_handle_t *)&a->listener, (uv_close_cb)free_admin);
    return NULL;
  }
  admin_store(a);
  return a;
}

static void listener_closed(uv_handle_t *h) { admin_unref(h->data); }
static void store_closed(idem_store *st, void *arg) {
  (void)st;
  admin_unref(arg);
}

void gw_admin_stop(gw_admin *a, void (*done)(void *), void *arg) {
  a->stopping = 1;
  a->done = done;
  a->done_arg = arg;
  if (a->store) {
    idem_store *st = a->store;
    a->store = NULL;
    idem_store_close(st, store_closed, a);
  }
  uv_close((uv_handle_t *)&a->listener, listener_closed);
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &a->conns) { /* they leave once their handles close */
    admin_conn *c = IDEM_QUEUE_DATA(node, admin_conn, linked);
    if (!c->busy)
      conn_close(c);
  }
}
