/* admin_server.c - connections, parsing and timeouts of the operator
 * listeners (admin_server.h). */
#include "http/admin_server.h"

#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "core/queue.h"
#include "http/config.h"
#include "http/msg.h"
#include "http/policy.h"
#include "http/send_watch.h"

#define ADMIN_MAX_REQUEST 16384

/* What a connection's timer stands for. */
enum { A_NONE = 0, A_REQUEST, A_IDLE, A_SEND };

struct gw_admin_server {
  uv_loop_t *loop;
  gw_admin_opts o;
  uv_tcp_t listener;
  int handles;      /* listener + connections */
  idem_queue conns; /* gw_admin_req.linked */
  int nconns;
  int stopping;
  void (*done)(void *);
  void *done_arg;
};

struct gw_admin_req {
  uv_tcp_t tcp;
  uv_timer_t timer;
  int timer_mode;
  gw_send_watch send;
  int handles;    /* tcp and timer, until both are closed */
  int closing;
  int keep_alive; /* the request allows another after its answer */
  gw_admin_server *s;
  idem_queue linked; /* in s->conns */
  http_parser p;
  gw_buf target;
  size_t got;
  int complete;
  int busy; /* routed and not yet answered, or the answer is being written */
  gw_buf out;
  uv_write_t wreq;
  max_align_t data[]; /* the owner's req_data_size bytes */
};

static void server_unref(gw_admin_server *s) {
  if (--s->handles == 0 && s->stopping)
    gw_free_then(s, s->done, s->done_arg);
}

static void conn_closed(uv_handle_t *h) {
  gw_admin_req *c = h->data;
  gw_admin_server *s = c->s;
  if (--c->handles > 0)
    return;
  s->nconns--;
  idem_queue_remove(&c->linked);
  gw_buf_free(&c->target);
  gw_buf_free(&c->out);
  free(c);
  server_unref(s);
}

static void conn_close(gw_admin_req *c) {
  gw_close_conn(&c->closing, &c->tcp, &c->timer, conn_closed);
}

static void on_timer(uv_timer_t *t);

static void timer_set(gw_admin_req *c, int mode, int64_t ms) {
  gw_timer_mode(&c->timer, &c->timer_mode, mode, ms, on_timer);
}

static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *buf);
static void read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

/* Ready for the connection's next request (keep-alive). */
static void next_request(gw_admin_req *c) {
  http_parser_init(&c->p, HTTP_REQUEST);
  c->p.data = c;
  c->target.len = 0;
  c->got = 0;
  c->complete = 0;
  timer_set(c, A_IDLE, c->s->o.idle_timeout_ms);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

static void write_done(uv_write_t *w, int status) {
  gw_admin_req *c = w->data;
  c->busy = 0;
  if (c->closing)
    return;
  if (status < 0 || !c->keep_alive || c->s->stopping)
    conn_close(c);
  else
    next_request(c);
}

/* A peer that takes no byte of its answer for --send-timeout is closed. */
static void watch_send(gw_admin_req *c, size_t len) {
  gw_send_watch_queued(&c->send, len);
  if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0)
    return;
  uint64_t period = gw_send_watch_period(c->s->o.send_timeout_ms);
  c->timer_mode = A_SEND;
  gw_send_watch_start(&c->send, (uv_stream_t *)&c->tcp);
  uv_timer_start(&c->timer, on_timer, period, period);
}

void gw_admin_reply(gw_admin_req *c, int status, const char *ctype, const char *body,
                    size_t len) {
  const char *conn = !c->keep_alive       ? "Connection: close\r\n"
                     : c->p.http_minor == 0 ? "Connection: keep-alive\r\n"
                                            : "";
  gw_buf head = {0};
  if (status == 204)
    gw_buf_printf(&head, "HTTP/1.1 204 No Content\r\n%s%s\r\n", gw_date_header(), conn);
  else
    gw_buf_printf(&head,
                  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
                  status, policy_reason(status), ctype, len, gw_date_header(), conn);
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
  watch_send(c, b.len);
}

void gw_admin_reply_problem(gw_admin_req *c, int status, const char *slug, const char *title,
                            const char *detail) {
  gw_buf b = {0};
  policy_problem(&b, status, slug, title, detail);
  gw_admin_reply(c, status, "application/problem+json", b.p, b.len);
  gw_buf_free(&b);
}

/* A request that did not arrive in time gets a 408 (and the connection
 * closes); a connection that sent nothing, an idle one or a peer that takes
 * no byte of its answer is closed. */
static void on_timer(uv_timer_t *t) {
  gw_admin_req *c = t->data;
  if (c->timer_mode == A_SEND) {
    gw_send_state st =
        gw_send_watch_tick(&c->send, (uv_stream_t *)&c->tcp, c->s->o.send_timeout_ms);
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
    gw_admin_reply_problem(c, 408, "request-timeout", "Request Timeout",
                           "the request did not arrive in time");
    return;
  }
  conn_close(c);
}

int gw_admin_req_method(const gw_admin_req *r) { return (int)r->p.method; }

const char *gw_admin_req_target(const gw_admin_req *r, size_t *len) {
  *len = r->target.len;
  return r->target.p ? r->target.p : "";
}

void *gw_admin_req_data(gw_admin_req *r) { return r->data; }

static int on_url(http_parser *p, const char *at, size_t len) {
  gw_admin_req *c = p->data;
  return gw_buf_append(&c->target, at, len);
}

static int on_complete(http_parser *p) {
  gw_admin_req *c = p->data;
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
  static char slab[4096]; /* one loop: read_cb consumes it before the next read */
  (void)h;
  (void)sz;
  buf->base = slab;
  buf->len = sizeof slab;
}

/* The whole request is here: route it (its target NUL-terminated). */
static void dispatch(gw_admin_req *c) {
  if (gw_buf_append(&c->target, "", 1)) {
    gw_admin_reply_problem(c, 503, "out-of-memory", "Service Unavailable", "out of memory");
    return;
  }
  c->target.len--;
  c->busy = 1;
  c->s->o.route(c->s->o.arg, c);
}

static void read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  gw_admin_req *c = st->data;
  if (c->complete || c->busy || c->closing)
    return;
  if (n < 0) {
    conn_close(c);
    return;
  }
  /* a request begins: --client-timeout from here (a new connection keeps
   * the deadline it got at accept) */
  if (n > 0 && c->got == 0 && c->timer_mode != A_REQUEST)
    timer_set(c, A_REQUEST, c->s->o.client_timeout_ms);
  c->got += (size_t)n;
  size_t used = http_parser_execute(&c->p, &settings, buf->base, (size_t)n);
  enum http_errno e = HTTP_PARSER_ERRNO(&c->p);
  if (c->complete) {
    uv_read_stop(st);
    timer_set(c, A_NONE, 0);
    /* bytes past this request (pipelining) are not kept: answer, close */
    if (used < (size_t)n)
      c->keep_alive = 0;
    dispatch(c);
  } else if (e != HPE_OK || c->got > ADMIN_MAX_REQUEST) {
    uv_read_stop(st);
    timer_set(c, A_NONE, 0);
    c->keep_alive = 0;
    gw_admin_reply_problem(c, 400, "bad-request", "Bad Request", "malformed request");
  }
}

static void on_connection(uv_stream_t *l, int status) {
  gw_admin_server *s = l->data;
  if (status < 0 || s->stopping)
    return;
  gw_admin_req *c = calloc(1, sizeof *c + s->o.req_data_size);
  if (!c)
    return;
  c->s = s;
  uv_tcp_init(s->loop, &c->tcp);
  uv_timer_init(s->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->handles = 2;
  s->handles++;
  s->nconns++;
  idem_queue_insert_tail(&s->conns, &c->linked);
  if (uv_accept(l, (uv_stream_t *)&c->tcp) || s->nconns > GW_ADMIN_MAX_CONNS) {
    conn_close(c);
    return;
  }
  next_request(c);
  /* a new connection's first request has --client-timeout from accept, so
   * one that never sends a byte is closed too */
  timer_set(c, A_REQUEST, s->o.client_timeout_ms);
}

static gw_admin_server *server_new(uv_loop_t *loop, const gw_admin_opts *o) {
  gw_admin_server *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  idem_queue_init(&s->conns);
  s->loop = loop;
  s->o = *o;
  s->handles = 1;
  uv_tcp_init(loop, &s->listener);
  s->listener.data = s;
  return s;
}

static void free_server(uv_handle_t *h) { free(h->data); }

gw_admin_server *gw_admin_server_open_fd(uv_loop_t *loop, int fd, const gw_admin_opts *o) {
  gw_admin_server *s = server_new(loop, o);
  if (s && (uv_tcp_open(&s->listener, fd) ||
            uv_listen((uv_stream_t *)&s->listener, 128, on_connection))) {
    uv_close((uv_handle_t *)&s->listener, free_server);
    return NULL;
  }
  return s;
}

/* The port s listens on. */
static int bound_port(gw_admin_server *s) {
  struct sockaddr_storage ss;
  int sl = sizeof ss;
  if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &sl))
    return 0;
  return gw_sockaddr_port(&ss);
}

gw_admin_server *gw_admin_server_listen(uv_loop_t *loop, const char *host, int *port,
                                        const gw_admin_opts *o, int *err) {
  struct sockaddr_storage ss;
  int rc = strchr(host, ':') ? uv_ip6_addr(host, *port, (struct sockaddr_in6 *)&ss)
                             : uv_ip4_addr(host, *port, (struct sockaddr_in *)&ss);
  gw_admin_server *s = rc ? NULL : server_new(loop, o);
  if (!rc && !s)
    rc = UV_ENOMEM;
  if (s) {
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&ss, 0);
    if (!rc)
      rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
    if (rc) {
      uv_close((uv_handle_t *)&s->listener, free_server);
      s = NULL;
    } else if (*port == 0) {
      *port = bound_port(s);
    }
  }
  *err = rc;
  return s;
}

static void listener_closed(uv_handle_t *h) { server_unref(h->data); }

void gw_admin_server_stop(gw_admin_server *s, void (*done)(void *), void *arg) {
  s->stopping = 1;
  s->done = done;
  s->done_arg = arg;
  uv_close((uv_handle_t *)&s->listener, listener_closed);
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &s->conns) { /* they leave once their handles close */
    gw_admin_req *c = IDEM_QUEUE_DATA(node, gw_admin_req, linked);
    if (!c->busy)
      conn_close(c);
  }
}
