/* cs_admin.c - /healthz, /readyz and /metrics of `idem consume` (cs_admin.h).
 * One request per connection, answered with Connection: close. */
#include "consume/cs_admin.h"

#include <stdlib.h>
#include <string.h>

#include "consume/cs_metrics.h"
#include "core/queue.h"
#include "http/msg.h"

#define MAX_REQUEST 8192

struct cs_admin {
  uv_tcp_t listener;
  cs_admin_hooks h;
  int handles; /* listener + connections */
  int stopping;
  idem_queue conns;
  void (*done)(void *);
  void *done_arg;
};

typedef struct aconn {
  uv_tcp_t tcp;
  cs_admin *a;
  idem_queue linked; /* in a->conns */
  char buf[MAX_REQUEST];
  size_t len;
  gw_buf out;
  uv_write_t wreq;
  int answered;
} aconn;

static void unref(cs_admin *a) {
  if (--a->handles == 0 && a->stopping) {
    void (*done)(void *) = a->done;
    void *arg = a->done_arg;
    free(a);
    if (done)
      done(arg);
  }
}

static void conn_closed(uv_handle_t *h) {
  aconn *c = h->data;
  cs_admin *a = c->a;
  idem_queue_remove(&c->linked);
  gw_buf_free(&c->out);
  free(c);
  unref(a);
}

static void conn_close(aconn *c) {
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void written(uv_write_t *w, int status) {
  (void)status;
  conn_close(w->data);
}

static void reply(aconn *c, int status, const char *reason, const char *ctype, const gw_buf *body) {
  c->answered = 1;
  if (gw_buf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                             "Connection: close\r\n\r\n", status, reason, ctype, body->len) ||
      gw_buf_append(&c->out, body->p ? body->p : "", body->len)) {
    conn_close(c);
    return;
  }
  uv_buf_t b = uv_buf_init(c->out.p, (unsigned)c->out.len);
  c->wreq.data = c;
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, written))
    conn_close(c);
}

static void route(aconn *c) {
  cs_admin *a = c->a;
  gw_buf body = {0};
  if (!strncmp(c->buf, "GET /healthz ", 13)) {
    gw_buf_puts(&body, "ok\n");
    reply(c, 200, "OK", "text/plain", &body);
  } else if (!strncmp(c->buf, "GET /readyz ", 12)) {
    const char *missing = a->h.not_ready(a->h.arg);
    gw_buf_printf(&body, "%s\n", missing ? missing : "ready");
    reply(c, missing ? 503 : 200, missing ? "Service Unavailable" : "OK", "text/plain", &body);
  } else if (!strncmp(c->buf, "GET /metrics ", 13)) {
    cs_metrics_render(&body, a->h.inflight(a->h.arg));
    reply(c, 200, "OK", "text/plain; version=0.0.4", &body);
  } else {
    gw_buf_puts(&body, "not found: GET /healthz, /readyz or /metrics\n");
    reply(c, 404, "Not Found", "text/plain", &body);
  }
  gw_buf_free(&body);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  aconn *c = h->data;
  (void)suggested;
  *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - 1 - c->len));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  aconn *c = s->data;
  (void)b;
  if (n < 0 || c->answered) {
    if (n < 0)
      conn_close(c);
    return;
  }
  c->len += (size_t)n;
  c->buf[c->len] = 0;
  if (strstr(c->buf, "\r\n\r\n")) {
    uv_read_stop(s);
    route(c);
  } else if (c->len >= sizeof c->buf - 1) {
    conn_close(c);
  }
}

static void on_connection(uv_stream_t *server, int status) {
  cs_admin *a = server->data;
  aconn *c = status < 0 || a->stopping ? NULL : calloc(1, sizeof *c);
  if (!c)
    return;
  uv_tcp_init(server->loop, &c->tcp);
  c->tcp.data = c;
  c->a = a;
  a->handles++;
  idem_queue_insert_tail(&a->conns, &c->linked);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) ||
      uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb))
    conn_close(c);
}

static void listener_closed(uv_handle_t *h) { unref(h->data); }

cs_admin *cs_admin_start(uv_loop_t *loop, const char *host, int port, const cs_admin_hooks *h,
                         int *err) {
  struct sockaddr_storage ss;
  cs_admin *a = calloc(1, sizeof *a);
  if (a)
    idem_queue_init(&a->conns);
  if (!a) {
    *err = UV_ENOMEM;
    return NULL;
  }
  a->h = *h;
  a->handles = 1;
  uv_tcp_init(loop, &a->listener);
  a->listener.data = a;
  int rc = strchr(host, ':') ? uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)
                             : uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
  if (!rc)
    rc = uv_tcp_bind(&a->listener, (const struct sockaddr *)&ss, 0);
  if (!rc)
    rc = uv_listen((uv_stream_t *)&a->listener, 64, on_connection);
  if (rc) {
    *err = rc;
    a->stopping = 1;
    uv_close((uv_handle_t *)&a->listener, listener_closed);
    return NULL;
  }
  return a;
}

void cs_admin_stop(cs_admin *a, void (*done)(void *), void *arg) {
  a->stopping = 1;
  a->done = done;
  a->done_arg = arg;
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &a->conns)
    conn_close(IDEM_QUEUE_DATA(node, aconn, linked));
  uv_close((uv_handle_t *)&a->listener, listener_closed);
}
