/*
 * conn.c - one client connection: read, parse, hand complete requests to the
 * engine one at a time (so pipelined requests are answered in order), write
 * answers with writev, and enforce the client-side limits and timeouts.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/deadline.h"
#include "http/gateway.h"
#include "http/metrics.h"
#include "http/policy.h"
#include "http/send_watch.h"

#define READ_CHUNK 65536
#define LINGER_MS 2000
#define DRAIN_GRACE_MS 1000 /* shutdown: wait for a new connection's request */
#define PIPELINE_BUFFER (1u << 20) /* pipelined input held while answering */ /* after an error answer: drain input, then close */

/* What the connection's one timer stands for. T_SEND ticks while an answer
 * waits in the socket's write queue (send_watch.h); the exchange in flight
 * is the only time the timer is otherwise free, and answers are written only
 * then. */
enum { T_NONE = 0, T_REQUEST, T_IDLE, T_LINGER, T_SEND };

struct gw_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shutdown_req;
  gw_worker *w;
  idem_queue linked; /* in w->conns */
  gw_reqparser rp;
  gw_buf in;
  size_t in_off;
  gw_exchange *ex; /* the request being answered */
  gw_exchange *spare; /* the last one, emptied, for the next request */
  int refs;        /* open handles + active exchange */
  int timer_mode;
  uint64_t due; /* loop ms when the deadline of timer_mode ends (timer_set) */
  gw_send_watch send;
  int closing;     /* uv_close called */
  int lingering;   /* answered with close: discarding input until EOF */
  int peer_eof;
  int reading;
  int in_process; /* process() is on the stack */
  int served;     /* answered at least one request */
};

static void process(gw_conn *c);
static void dispatch(gw_conn *c, gw_request *req);
static void stop_reading(gw_conn *c);
static void exchange_free(gw_exchange *ex);

/* ---- lifetime ---- */

/* Who answers this connection's requests (the engine, set by server.c):
 * called through the table, never by name. */
static const gw_handler *w_handler(const gw_conn *c) { return c->w->handler; }

static void conn_unref(gw_conn *c) {
  if (--c->refs > 0)
    return;
  gw_worker *w = c->w;
  idem_queue_remove(&c->linked);
  w->nconns--;
  gw_reqparser_free(&c->rp);
  gw_buf_free(&c->in);
  if (c->spare)
    exchange_free(c->spare);
  free(c);
  gw_metrics_connections(-1);
  w->conn_closed(w);
}

static void on_handle_close(uv_handle_t *h) { conn_unref(h->data); }

static void conn_close(gw_conn *c) {
  gw_close_conn(&c->closing, &c->tcp, &c->timer, on_handle_close);
}

static int64_t us_between(uint64_t from_ns, uint64_t to_ns) {
  return (int64_t)((to_ns - from_ns) / 1000);
}

/* The access log's line for an exchange that ends (a blank spare has no
 * worker: nothing to say). */
static void log_exchange(const gw_exchange *ex) {
  if (!ex->w || !ex->w->access.on)
    return;
  const gw_request *r = ex->req;
  uint64_t now = uv_hrtime();
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  gw_access_entry e = {
      .time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
      .method = r ? r->method : NULL,
      .target = r ? r->target.p : NULL,
      .target_len = r ? r->target.len : 0,
      .route = ex->route ? ex->route->index : -1,
      .key = ex->idem.key[0] ? ex->idem.key : NULL,
      .scope = ex->idem.scope[0] ? ex->idem.scope : NULL,
      .outcome = ex->outcome ? gw_metrics_outcome_name((gw_outcome)(ex->outcome - 1)) : NULL,
      .fence = ex->idem.fence,
      .status = ex->status,
      .upstream_us = ex->up_head_ns ? us_between(ex->up_sent_ns, ex->up_head_ns) : -1,
      .total_us = us_between(ex->started_ns, now),
  };
  gw_access_buf_add(&ex->w->access, &e);
}

/* Buffers bigger than this are freed after a request, not kept. */
#define KEEP_MAX (256u * 1024)

static gw_exchange *exchange_new(gw_conn *c) {
  gw_exchange *ex = c->spare;
  c->spare = NULL;
  if (!ex)
    ex = calloc(1, sizeof *ex);
  return ex;
}

/* Keep the exchange's buffers for the connection's next request instead of
 * freeing and allocating them again; the request goes back to the parser. */
static void exchange_recycle(gw_conn *c, gw_exchange *ex) {
  log_exchange(ex);
  gw_routes_release(ex->routes);
  ex->routes = NULL;
  if (c->spare || c->closing) {
    exchange_free(ex);
    return;
  }
  if (ex->req) {
    if (!c->rp.cur) {
      gw_request_reset(ex->req, KEEP_MAX);
      c->rp.cur = ex->req;
    } else {
      gw_request_free(ex->req);
      free(ex->req);
    }
  }
  gw_buf bufs[7] = {ex->up_head, ex->up.body, ex->stored_headers, ex->out_hdrs,
                    ex->out_head, ex->out_body, ex->kept_headers};
  gw_headers uph = ex->up.headers;
  for (int i = 0; i < 7; i++)
    gw_buf_recycle(&bufs[i], KEEP_MAX);
  if (uph.text.cap > KEEP_MAX)
    gw_headers_free(&uph);
  gw_headers_reset(&uph);
  memset(ex, 0, sizeof *ex);
  ex->up_head = bufs[0];
  ex->up.body = bufs[1];
  ex->stored_headers = bufs[2];
  ex->out_hdrs = bufs[3];
  ex->out_head = bufs[4];
  ex->out_body = bufs[5];
  ex->kept_headers = bufs[6];
  ex->up.headers = uph;
  c->spare = ex;
}

static void exchange_free(gw_exchange *ex) {
  log_exchange(ex);
  gw_routes_release(ex->routes);
  if (ex->req) {
    gw_request_free(ex->req);
    free(ex->req);
  }
  gw_buf_free(&ex->up_head);
  upstream_response_free(&ex->up);
  gw_buf_free(&ex->stored_headers);
  gw_buf_free(&ex->kept_headers);
  gw_buf_free(&ex->out_hdrs);
  gw_buf_free(&ex->out_head);
  gw_buf_free(&ex->out_body);
  free(ex);
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t);

/* A keep-alive connection goes from T_REQUEST to T_NONE to T_IDLE and back
 * on every request: the deadlines move the timer as deadline.h says, and
 * T_NONE leaves it armed, to fire for nothing. T_SEND's tick repeats:
 * leaving it is a stop. */
static void timer_set(gw_conn *c, int mode, int64_t ms) {
  int was = c->timer_mode;
  c->timer_mode = mode;
  if (mode == T_NONE) {
    if (was == T_SEND)
      uv_timer_stop(&c->timer);
    return;
  }
  gw_deadline_set(&c->timer, &c->due, (uint64_t)ms, was != T_SEND, on_timer);
}

/* An answer's bytes wait in the write queue: watch that the client takes
 * them (unless the timer already does, or stands for something else). */
static void send_watch_arm(gw_conn *c) {
  if (c->timer_mode != T_NONE || c->closing ||
      uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) == 0)
    return;
  uint64_t period = gw_send_watch_period(c->w->cfg->send_timeout_ms);
  c->timer_mode = T_SEND;
  gw_send_watch_start(&c->send, (uv_stream_t *)&c->tcp);
  uv_timer_start(&c->timer, on_timer, period, period);
}

/* Every write to the client goes through here, so the send timeout sees it. */
static int conn_write(gw_conn *c, uv_write_t *req, const uv_buf_t *bufs,
                      unsigned n, uv_write_cb cb) {
  int rc = uv_write(req, (uv_stream_t *)&c->tcp, bufs, n, cb);
  if (rc)
    return rc;
  for (unsigned i = 0; i < n; i++)
    gw_send_watch_queued(&c->send, bufs[i].len);
  send_watch_arm(c);
  return 0;
}

/* A T_SEND tick: a client that took no byte for --send-timeout is closed
 * (its exchange ends through the cancelled write). */
static void send_watch_tick(gw_conn *c) {
  switch (gw_send_watch_tick(&c->send, (uv_stream_t *)&c->tcp,
                             c->w->cfg->send_timeout_ms)) {
  case GW_SEND_DRAINED:
    timer_set(c, T_NONE, 0);
    return;
  case GW_SEND_MOVING:
    return;
  case GW_SEND_STALLED:
    conn_close(c);
  }
}

/* Answer a request that never became one (bad, too large, too slow, or no
 * memory for it) and close; outcome is counted unless -1. */
static void send_error(gw_conn *c, int status, int outcome, const char *detail);

static void on_timer(uv_timer_t *t) {
  gw_conn *c = t->data;
  if (c->timer_mode == T_SEND) {
    send_watch_tick(c);
    return;
  }
  if (c->timer_mode == T_NONE)
    return; /* armed for a deadline that ended early */
  if (gw_deadline_early(t, c->due, on_timer))
    return;
  if (c->timer_mode == T_REQUEST && c->rp.started && !c->ex) {
    send_error(c, 408, GW_OUT_CLIENT_TIMEOUT, "the request did not arrive in time");
    return;
  }
  conn_close(c);
}

/* ---- reading ---- */

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  gw_conn *c = h->data;
  (void)suggested;
  if (c->lingering) {
    static _Thread_local char sink[16384];
    buf->base = sink;
    buf->len = sizeof sink;
    return;
  }
  if (gw_buf_reserve(&c->in, READ_CHUNK)) {
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = c->in.p + c->in.len;
  buf->len = c->in.cap - c->in.len;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  gw_conn *c = s->data;
  (void)buf;
  if (c->closing)
    return;
  if (c->lingering) {
    if (nread < 0)
      conn_close(c);
    return;
  }
  if (nread > 0) {
    c->in.len += (size_t)nread;
    if (!c->ex)
      process(c);
    else if (c->in.len - c->in_off > PIPELINE_BUFFER)
      stop_reading(c); /* enough pipelined input waiting: push back */
    return;
  }
  if (nread == 0)
    return;
  if (nread != UV_EOF) {
    /* a reset (or another error): nothing can reach the client any more.
     * A request in flight still runs and is recorded; its answer is
     * dropped (status 0 in the access log). */
    conn_close(c);
    return;
  }
  c->peer_eof = 1;
  uv_read_stop(s);
  c->reading = 0;
  if (c->ex)
    return; /* a half-close: answer the request in flight, then close */
  if (c->rp.started && gw_reqparser_eof(&c->rp) == GW_PARSE_DONE) {
    dispatch(c, gw_reqparser_take(&c->rp));
    return;
  }
  conn_close(c);
}

static void start_reading(gw_conn *c) {
  if (!c->reading && !c->peer_eof && !c->closing) {
    if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) == 0)
      c->reading = 1;
  }
}

static void stop_reading(gw_conn *c) {
  if (c->reading) {
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = 0;
  }
}

static void cont_cb(uv_write_t *w, int status) {
  gw_conn *c = w->data;
  (void)status;
  free(w);
  conn_unref(c);
}

/* A write request of its own for each 100 Continue: the one before may
 * still be queued (a pipelined request answered at once, a 400 for its
 * key, then the next one's head), and that next client waits for its own. */
static void send_continue(gw_conn *c) {
  static const char msg[] = "HTTP/1.1 100 Continue\r\n\r\n";
  uv_write_t *w = malloc(sizeof *w);
  if (!w)
    return; /* the client sends its body when it tires of waiting */
  uv_buf_t b = uv_buf_init((char *)msg, sizeof msg - 1);
  w->data = c;
  if (conn_write(c, w, &b, 1, cont_cb) == 0)
    c->refs++;
  else
    free(w);
}

static void dispatch(gw_conn *c, gw_request *req) {
  gw_exchange *ex = exchange_new(c);
  if (!ex) {
    gw_request_free(req);
    free(req);
    send_error(c, 503, -1, "out of memory");
    return;
  }
  ex->w = c->w;
  ex->conn = c;
  ex->req = req;
  ex->started_ns = uv_hrtime();
  c->ex = ex;
  c->served = 1;
  c->refs++;
  /* Reading goes on while the request runs (no epoll_ctl per request);
   * pipelined bytes wait in c->in, and read_cb stops past a bound. */
  timer_set(c, T_NONE, 0);
  w_handler(c)->handle(ex);
}

static void process(gw_conn *c) {
  if (c->in_process)
    return;
  c->in_process = 1;
  while (!c->ex && !c->closing && !c->lingering && c->in_off < c->in.len) {
    int was_started = c->rp.started;
    size_t used = 0;
    gw_parse_result r = gw_reqparser_feed(&c->rp, c->in.p + c->in_off,
                                          c->in.len - c->in_off, &used);
    c->in_off += used;
    /* --client-timeout counts from a request's first byte: also on a new
     * connection, whose deadline from the accept ends here */
    if (!was_started && c->rp.started)
      timer_set(c, T_REQUEST, c->w->cfg->client_timeout_ms);
    if (r == GW_PARSE_ERROR) {
      int st = c->rp.error_status;
      send_error(c, st,
                 st == 413   ? GW_OUT_TOO_LARGE
                 : st == 431 ? GW_OUT_HEADER_TOO_LARGE
                             : GW_OUT_BAD_REQUEST,
                 c->rp.error_detail);
      break;
    }
    if (r == GW_PARSE_HEAD) {
      send_continue(c);
      continue;
    }
    if (r == GW_PARSE_DONE)
      dispatch(c, gw_reqparser_take(&c->rp)); /* may be answered at once */
  }
  c->in_process = 0;
  if (c->closing || c->lingering)
    return;
  if (c->in_off == c->in.len) {
    c->in_off = c->in.len = 0;
  } else if (c->in_off > READ_CHUNK) {
    memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
    c->in.len -= c->in_off;
    c->in_off = 0;
  }
  if (!c->ex) {
    if (c->peer_eof) {
      conn_close(c);
      return;
    }
    start_reading(c);
    if (c->rp.started) {
      if (c->timer_mode != T_REQUEST)
        timer_set(c, T_REQUEST, c->w->cfg->client_timeout_ms);
    } else if (c->served) {
      /* between requests (a new connection keeps its first deadline) */
      timer_set(c, T_IDLE, c->w->cfg->idle_timeout_ms);
    }
  }
}

/* ---- writing ---- */

static void shutdown_cb(uv_shutdown_t *req, int status) {
  gw_conn *c = req->data;
  (void)status;
  conn_unref(c);
}

/* Answered with Connection: close. Closing with unread input would make the
 * kernel send a reset that can destroy the answer before the client reads
 * it, so send FIN, drain input for a moment, then close. */
static void linger_close(gw_conn *c) {
  if (c->closing)
    return;
  if (c->peer_eof) {
    conn_close(c);
    return;
  }
  c->lingering = 1;
  c->shutdown_req.data = c;
  if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, shutdown_cb)) {
    conn_close(c);
    return;
  }
  c->refs++;
  timer_set(c, T_LINGER, LINGER_MS);
  stop_reading(c);
  start_reading(c);
}

/* The answer is written (status 0) or failed: end the exchange and go on
 * with the connection. Runs from write_cb, or at once when the answer went
 * out in one uv_try_write. */
static void response_done(gw_conn *c, gw_exchange *ex, int status) {
  /* stopping: a streamed answer's head may have promised keep-alive before
   * the signal came; the connection closes all the same */
  int close = ex->close_after || c->w->stopping;
  c->ex = NULL;
  if (close || status < 0)
    exchange_free(ex);
  else
    exchange_recycle(c, ex);
  if (status < 0)
    conn_close(c);
  else if (close)
    linger_close(c);
  else if (!c->closing)
    process(c); /* a no-op inside process(): its loop goes on instead */
  conn_unref(c);
}

static void write_cb(uv_write_t *wr, int status) {
  gw_exchange *ex = wr->data;
  response_done(ex->conn, ex, status);
}

/* The connection closed while its exchange was in flight: there is no one to
 * answer, so free the exchange and the reference it held. */
static int drop_if_client_gone(gw_exchange *ex) {
  gw_conn *c = ex->conn;
  if (!c->closing)
    return 0;
  exchange_free(ex);
  c->ex = NULL;
  conn_unref(c);
  return 1;
}

/* Whether the connection closes after this answer. After the client's EOF,
 * pipelined requests already received are still answered; the last answer
 * closes. */
static int closes_after(const gw_exchange *ex, int asked) {
  const gw_conn *c = ex->conn;
  const gw_request *req = ex->req;
  return asked || !req || !req->keep_alive || req->upgrade || c->w->stopping ||
         (c->peer_eof && c->in_off >= c->in.len);
}

/* The head of an answer into ex->out_head: status line, headers, framing
 * (a Content-Length of content_length when >= 0, or chunked), and the
 * connection's fate. 0, or -1 out of memory. */
static int write_head(gw_exchange *ex, int status, const char *headers, size_t headers_len,
                      int64_t content_length, int chunked, int close) {
  gw_buf *h = &ex->out_head;
  h->len = 0;
  ex->status = status;
  int err = gw_buf_reserve(h, headers_len + 128);
  /* appended piece by piece: this runs for every answer, and printf's
   * format parsing showed in profiles */
  err |= gw_buf_puts(h, "HTTP/1.1 ");
  err |= gw_buf_u64(h, (uint64_t)status);
  err |= gw_buf_puts(h, " ");
  err |= gw_buf_puts(h, policy_reason(status));
  err |= gw_buf_puts(h, "\r\n");
  err |= gw_buf_append(h, headers, headers_len);
  if (content_length >= 0) {
    err |= gw_buf_puts(h, "Content-Length: ");
    err |= gw_buf_u64(h, (uint64_t)content_length);
    err |= gw_buf_puts(h, "\r\n");
  }
  if (chunked)
    err |= gw_buf_puts(h, "Transfer-Encoding: chunked\r\n");
  if (close)
    err |= gw_buf_puts(h, "Connection: close\r\n");
  else if (ex->req->http_minor == 0)
    err |= gw_buf_puts(h, "Connection: keep-alive\r\n");
  err |= gw_buf_puts(h, "\r\n");
  return err ? -1 : 0;
}

void gw_conn_respond(gw_exchange *ex, int status, const char *headers,
                     size_t headers_len, const char *body, size_t body_len,
                     unsigned flags) {
  gw_conn *c = ex->conn;
  gw_request *req = ex->req;
  if (drop_if_client_gone(ex))
    return;
  int is_head = req && req->is_head;
  int close = closes_after(ex, flags & GW_RESP_CLOSE);
  int sized = !(flags & (GW_RESP_OWN_CL | GW_RESP_NO_CL)) && status != 204 && status != 304 &&
              status >= 200;
  gw_buf *h = &ex->out_head;
  if (write_head(ex, status, headers, headers_len, sized ? (int64_t)body_len : -1, 0, close)) {
    exchange_free(ex);
    c->ex = NULL;
    conn_close(c);
    conn_unref(c);
    return;
  }
  unsigned n = 1;
  ex->out_bufs[0] = uv_buf_init(h->p, (unsigned)h->len);
  if (!is_head && body_len && status >= 200 && status != 204 && status != 304)
    n += gw_bufs_put(ex->out_bufs + n, body, body_len);
  ex->wreq.data = ex;
  ex->close_after = close;
  /* Most answers fit the socket buffer: write them now, without a queued
   * write request (libuv 1.44 re-arms epoll after every queued write). */
  size_t total = 0;
  for (unsigned i = 0; i < n; i++)
    total += ex->out_bufs[i].len;
  int wrote = uv_try_write((uv_stream_t *)&c->tcp, ex->out_bufs, n);
  if (wrote >= 0 && (size_t)wrote == total) {
    response_done(c, ex, 0);
    return;
  }
  if (wrote < 0 && wrote != UV_EAGAIN) {
    response_done(c, ex, wrote);
    return;
  }
  uv_buf_t rest[3];
  unsigned k = 0;
  size_t skip = wrote > 0 ? (size_t)wrote : 0;
  for (unsigned i = 0; i < n; i++) {
    if (skip >= ex->out_bufs[i].len) {
      skip -= ex->out_bufs[i].len;
      continue;
    }
    rest[k++] = uv_buf_init(ex->out_bufs[i].base + skip,
                            (unsigned)(ex->out_bufs[i].len - skip));
    skip = 0;
  }
  int rc = conn_write(c, &ex->wreq, rest, k, write_cb);
  if (rc)
    response_done(c, ex, rc);
}

/* ---- for stream.c: the connection under a streamed answer ---- */

int gw_conn_write(gw_exchange *ex, uv_write_t *req, const uv_buf_t *bufs, unsigned n,
                  uv_write_cb cb) {
  return conn_write(ex->conn, req, bufs, n, cb);
}

int gw_conn_gone(const gw_exchange *ex) { return ex->conn->closing; }

void gw_conn_cut(gw_exchange *ex) {
  if (!ex->conn->closing)
    conn_close(ex->conn);
}

void gw_conn_finish(gw_exchange *ex, int failed) {
  gw_conn *c = ex->conn;
  if (drop_if_client_gone(ex))
    return;
  response_done(c, ex, failed ? UV_ECANCELED : 0);
}

int gw_conn_head(gw_exchange *ex, int status, const char *headers, size_t headers_len,
                 int chunked, int close) {
  ex->close_after = closes_after(ex, close);
  if (write_head(ex, status, headers, headers_len, -1, chunked, ex->close_after))
    return -1;
  return 0;
}

void gw_conn_problem(gw_exchange *ex, int status, const char *slug,
                     const char *title, const char *detail,
                     const char *extra_headers, unsigned flags) {
  ex->out_body.len = 0;
  policy_problem(&ex->out_body, status, slug, title, detail);
  gw_buf *hb = &ex->out_hdrs;
  hb->len = 0;
  gw_buf_puts(hb, "Content-Type: application/problem+json\r\n");
  gw_buf_puts(hb, gw_date_header());
  if (extra_headers)
    gw_buf_puts(hb, extra_headers);
  gw_conn_respond(ex, status, hb->p, hb->len, ex->out_body.p, ex->out_body.len,
                  flags);
}

/* An answer outside any request (bad framing, limits, timeouts): it always
 * closes the connection. */
static void send_error(gw_conn *c, int status, int outcome, const char *detail) {
  gw_exchange *ex = exchange_new(c);
  if (outcome >= 0 && !ex)
    gw_metrics_outcome((gw_outcome)outcome);
  if (!ex) {
    conn_close(c);
    return;
  }
  ex->w = c->w;
  ex->conn = c;
  ex->started_ns = uv_hrtime();
  if (outcome >= 0)
    gw_exchange_outcome(ex, (gw_outcome)outcome);
  c->ex = ex;
  c->refs++;
  stop_reading(c);
  timer_set(c, T_NONE, 0);
  const char *slug = status == 413   ? "body-too-large"
                     : status == 431 ? "headers-too-large"
                     : status == 408 ? "request-timeout"
                                     : "bad-request";
  gw_conn_problem(ex, status, slug, policy_reason(status), detail, NULL,
                  GW_RESP_CLOSE);
}

/* ---- accept and drain ---- */

void gw_conn_accept(gw_worker *w) {
  gw_conn *c = calloc(1, sizeof *c);
  if (!c)
    return;
  c->w = w;
  uv_tcp_init(&w->loop, &c->tcp);
  uv_timer_init(&w->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->refs = 2;
  idem_queue_insert_tail(&w->conns, &c->linked);
  w->nconns++;
  gw_metrics_connections(1);
  gw_reqparser_init(&c->rp, w->cfg);
  if (uv_accept((uv_stream_t *)&w->listener, (uv_stream_t *)&c->tcp)) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  timer_set(c, T_REQUEST, w->cfg->client_timeout_ms);
  start_reading(c);
}

void gw_conn_drain_all(gw_worker *w) {
  idem_queue *node;
  /* closing only starts here: each leaves w->conns once its handles close */
  IDEM_QUEUE_FOREACH(node, &w->conns) {
    gw_conn *c = IDEM_QUEUE_DATA(node, gw_conn, linked);
    if (!c->ex && !c->rp.started && !c->lingering) {
      if (c->served) {
        conn_close(c); /* idle keep-alive: clients expect such closes */
      } else {
        /* Accepted, its first request not read yet (it may be in flight):
         * give it a moment; it is answered with Connection: close. */
        int64_t grace = w->cfg->client_timeout_ms < DRAIN_GRACE_MS
                            ? w->cfg->client_timeout_ms
                            : DRAIN_GRACE_MS;
        timer_set(c, T_IDLE, grace);
      }
    }
  }
  if (w->nconns == 0)
    w->conn_closed(w);
}
