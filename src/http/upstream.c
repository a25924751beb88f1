/* upstream.c - keep-alive connection pool to the upstream (see upstream.h). */
#include "http/upstream.h"

#include "core/queue.h"
#include "http/deadline.h"
#include "http/respparse.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define IDLE_CLOSE_MS 15000 /* close pooled connections unused this long (or
                               sooner: the answer's Keep-Alive timeout) */
#define MAX_IDLE 512

enum { UC_CONNECTING, UC_BUSY, UC_IDLE, UC_CLOSING };

typedef struct up_conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_connect_t creq;
  uv_write_t wreq;
  gw_respparser rp; /* the answer to the request in flight */
  upstream_pool *pool;
  idem_queue idle_link; /* in pool->idle while idle */
  int state;
  int handles; /* open uv handles, the conn is freed at 0 */
  int reused;
  int writing;
  int write_broken; /* the request could not be written whole: no reuse */
  int sent_any; /* some byte of the request reached the socket */
  size_t got;
  /* the request in flight */
  const uv_buf_t *bufs;
  unsigned nbufs;
  int is_head, retry_safe;
  const upstream_stream *stream;
  int addr_i;     /* the pool address this connection goes to */
  int addrs_left; /* addresses still to try after this one if it is refused */
  int abandoned;  /* upstream_abort: closing, never reused */
  int paused;    /* upstream_pause: reading stopped, the deadline too */
  uint64_t deadline_left; /* ms of --upstream-timeout left when paused */
  uint64_t due;           /* loop ms when the current deadline ends (arm_deadline) */
  int deadline_armed;     /* the timer runs on_deadline, not a deferred failure */
  upstream_response *resp;
  upstream_cb cb;
  void *arg;
} up_conn;

struct upstream_pool {
  uv_loop_t *loop;
  upstream_options opts;
  upstream_addrs addrs;
  int addr_ok; /* the address a connection last reached: new ones go there */
  idem_queue idle; /* most recently used first */
  size_t nidle;
  size_t nconns;
  int closing;
  void (*done)(void *);
  void *done_arg;
};

void upstream_response_free(upstream_response *r) {
  gw_headers_free(&r->headers);
  gw_buf_free(&r->body);
}

static void conn_close(up_conn *c);
static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void start_request(upstream_pool *pool, up_conn *c, int addr_i, int addrs_left,
                          uint64_t timeout_ms);

static void idle_unlink(up_conn *c) {
  idem_queue_remove(&c->idle_link);
  c->pool->nidle--;
}

static up_conn *idle_first(const upstream_pool *pool) {
  idem_queue *node = idem_queue_head(&pool->idle);
  return node ? IDEM_QUEUE_DATA(node, up_conn, idle_link) : NULL;
}

/* Whether the upstream closed an idle connection (or sent on it) after the
 * loop last polled it: its FIN is in the kernel, but read_cb has not run.
 * A request sent there breaks with nothing back, and one that is not safe
 * to retry (a keyed POST) then fails as if it may have run. One peek per
 * reuse keeps such a connection out. */
static int idle_gone(up_conn *c) {
  uv_os_fd_t fd;
  char byte;
  if (uv_fileno((uv_handle_t *)&c->tcp, &fd))
    return 1;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The most recently used idle connection still open, unlinked; or NULL. */
static up_conn *idle_take(upstream_pool *pool) {
  up_conn *c;
  while ((c = idle_first(pool)) && idle_gone(c))
    conn_close(c);
  if (c)
    idle_unlink(c);
  return c;
}


static void finish(up_conn *c, upstream_kind kind) {
  upstream_cb cb = c->cb;
  void *arg = c->arg;
  upstream_response *resp = c->resp;
  c->cb = NULL;
  c->resp = NULL;
  if (!cb)
    return;
  resp->conn = NULL;
  resp->kind = kind;
  cb(arg, resp);
}

/* The request of c moved to a new connection that has yet to start, or
 * NULL (no memory: c keeps it). c is closed by the caller. */
static up_conn *take_request(up_conn *c) {
  up_conn *n = calloc(1, sizeof *n);
  if (!n)
    return NULL;
  n->bufs = c->bufs;
  n->nbufs = c->nbufs;
  n->is_head = c->is_head;
  n->retry_safe = c->retry_safe;
  n->stream = c->stream;
  n->resp = c->resp;
  n->cb = c->cb;
  n->arg = c->arg;
  c->cb = NULL;
  c->resp = NULL;
  return n;
}

/* Hand the request of c to a fresh connection (c is closed by the caller). */
static void retry_fresh(up_conn *c) {
  up_conn *n = take_request(c);
  if (!n) {
    finish(c, UP_RESET);
    return;
  }
  n->retry_safe = 0;
  gw_headers_reset(&n->resp->headers);
  n->resp->body.len = 0;
  n->resp->status = 0;
  n->resp->head_ns = 0;
  upstream_pool *pool = c->pool;
  start_request(pool, n, pool->addr_ok, pool->addrs.n - 1, (uint64_t)pool->opts.timeout_ms);
}

/* A connection to c's address was refused, or failed at once: nothing was
 * sent. The request goes on to the next address, with what is left of its
 * deadline, until each was tried once (c is closed by the caller). */
static void next_address(up_conn *c) {
  upstream_pool *pool = c->pool;
  uint64_t now = uv_now(pool->loop);
  up_conn *n = c->addrs_left > 0 && c->cb && c->due > now ? take_request(c) : NULL;
  if (!n) {
    finish(c, UP_CONNECT_FAILED);
    return;
  }
  start_request(pool, n, (c->addr_i + 1) % pool->addrs.n, c->addrs_left - 1, c->due - now);
}

static void on_close(uv_handle_t *h) {
  up_conn *c = h->data;
  if (--c->handles > 0)
    return;
  upstream_pool *pool = c->pool;
  free(c);
  pool->nconns--;
  if (pool->closing && pool->nconns == 0 && pool->done) {
    void (*done)(void *) = pool->done;
    void *arg = pool->done_arg;
    free(pool);
    done(arg);
  }
}

static void conn_close(up_conn *c) {
  if (c->state == UC_CLOSING)
    return;
  if (c->state == UC_IDLE)
    idle_unlink(c);
  c->state = UC_CLOSING;
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->tcp, on_close);
  uv_close((uv_handle_t *)&c->timer, on_close);
}

/* One timer per connection serves both deadlines (deadline.h):
 * --upstream-timeout while connecting or busy, IDLE_CLOSE_MS while pooled. */
static void on_deadline(uv_timer_t *t) {
  up_conn *c = t->data;
  if (gw_deadline_early(t, c->due, on_deadline))
    return;
  c->deadline_armed = 0;
  if (c->state == UC_CONNECTING) {
    /* an address that never answers: the next connection tries another */
    if (c->pool->addr_ok == c->addr_i)
      c->pool->addr_ok = (c->addr_i + 1) % c->pool->addrs.n;
    finish(c, UP_CONNECT_FAILED);
  } else if (c->state == UC_BUSY)
    finish(c, UP_TIMEOUT);
  conn_close(c);
}

static void arm_deadline(up_conn *c, uint64_t ms) {
  gw_deadline_set(&c->timer, &c->due, ms, c->deadline_armed, on_deadline);
  c->deadline_armed = 1;
}

/* Run cb from the loop at its next turn (a failure found inside a call). */
static void defer(up_conn *c, uv_timer_cb cb) {
  c->deadline_armed = 0;
  uv_timer_start(&c->timer, cb, 0, 0);
}

/* A full answer arrived; leftover bytes mean the upstream misbehaves. */
static void answered(up_conn *c, int leftover) {
  uint64_t idle_ms = gw_respparser_idle_ms(&c->rp, IDLE_CLOSE_MS);
  int keep = gw_respparser_keep_alive(&c->rp) && !leftover && !c->pool->closing &&
             !c->abandoned && c->pool->nidle < MAX_IDLE && idle_ms > 0;
  c->resp->keep_alive = keep;
  if (keep) {
    upstream_pool *pool = c->pool;
    c->state = UC_IDLE;
    c->reused = 1;
    idem_queue_insert_head(&pool->idle, &c->idle_link);
    pool->nidle++;
    /* a streamed answer may have paused reading: idle connections read, to
     * notice the upstream closing them */
    c->paused = 0;
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
    arm_deadline(c, idle_ms);
  }
  finish(c, UP_OK);
  if (!keep)
    conn_close(c);
}

static void on_write_failed(uv_timer_t *t);

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  static _Thread_local char slab[65536];
  buf->base = slab;
  buf->len = sizeof slab;
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  up_conn *c = s->data;
  if (nread == 0)
    return;
  if (c->state == UC_IDLE || c->state == UC_CLOSING) {
    conn_close(c); /* bytes or EOF on an idle connection: it is done */
    return;
  }
  if (nread < 0) {
    if (c->state != UC_BUSY) {
      conn_close(c);
      return;
    }
    if (nread == UV_EOF && c->got) {
      /* an answer delimited by the end of the connection */
      if (gw_respparser_eof(&c->rp) == GW_RESP_DONE) {
        c->resp->keep_alive = 0;
        finish(c, UP_OK);
        conn_close(c);
        return;
      }
    }
    if (!c->got && c->reused && c->retry_safe && !c->writing)
      retry_fresh(c);
    else
      finish(c, UP_RESET);
    conn_close(c);
    return;
  }
  c->got += (size_t)nread;
  /* the timer is not re-armed here: --upstream-timeout bounds the whole
   * answer, so an upstream that trickles cannot hold a request forever */
  size_t len = (size_t)nread, used;
  gw_resp_result r = gw_respparser_feed(&c->rp, buf->base, len, &used);
  if (r == GW_RESP_ERROR) {
    finish(c, UP_BAD_RESPONSE);
    conn_close(c);
    return;
  }
  if (r == GW_RESP_DONE) {
    if (c->writing || c->write_broken) {
      /* answered before the request was fully written: take the answer,
       * never reuse the connection */
      c->resp->keep_alive = 0;
      finish(c, UP_OK);
      conn_close(c);
      return;
    }
    answered(c, used < len);
  }
}

static void write_cb(uv_write_t *w, int status) {
  up_conn *c = w->data;
  c->writing = 0;
  if (c->state == UC_CLOSING)
    return;
  if (status < 0 && c->state == UC_BUSY && c->cb) {
    if (!c->got && c->reused && c->retry_safe) {
      retry_fresh(c);
      conn_close(c);
      return;
    }
    /* An upstream that answers before reading the whole body (an early
     * 413, or a 201) and then closes resets the connection under the
     * body still going out: the write fails, but its answer is in the
     * socket, readable after the reset. So the read side decides, at its
     * next turn (the socket stays readable: the answer, then the reset or
     * the end): that answer, or UP_RESET without one. The deadline still
     * runs. */
    c->write_broken = 1;
  }
}

static void send_now(up_conn *c) {
  c->state = UC_BUSY;
  c->got = 0;
  c->sent_any = 0;
  c->write_broken = 0;
  gw_respparser_start(&c->rp, c->resp, c->stream, c->arg, c, c->pool->opts.max_response,
                      c->is_head);
  c->wreq.data = c;
  /* Write at once when the socket takes it all: no queued write request
   * (libuv 1.44 re-arms epoll after each one). */
  size_t total = 0;
  for (unsigned i = 0; i < c->nbufs; i++)
    total += c->bufs[i].len;
  int wrote = uv_try_write((uv_stream_t *)&c->tcp, c->bufs, c->nbufs);
  if (wrote >= 0 && (size_t)wrote == total)
    return;
  if (wrote < 0 && wrote != UV_EAGAIN) {
    /* not a byte went out: fail (or retry) from the loop, via the timer */
    defer(c, on_write_failed);
    return;
  }
  uv_buf_t rest[4];
  unsigned k = 0;
  size_t skip = wrote > 0 ? (size_t)wrote : 0;
  c->sent_any = wrote > 0;
  for (unsigned i = 0; i < c->nbufs && k < 4; i++) {
    if (skip >= c->bufs[i].len) {
      skip -= c->bufs[i].len;
      continue;
    }
    rest[k++] = uv_buf_init(c->bufs[i].base + skip, (unsigned)(c->bufs[i].len - skip));
    skip = 0;
  }
  c->writing = 1;
  if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, rest, k, write_cb) < 0) {
    c->writing = 0;
    defer(c, on_write_failed);
  }
}

/* Deferred failure of a write that could not even start. When not a byte
 * went out the upstream never saw the request: a reused connection that
 * turned out closed is retried on a fresh one (whatever the method), and a
 * fresh one counts as unreachable (the key is released). */
static void on_write_failed(uv_timer_t *t) {
  up_conn *c = t->data;
  if (c->state == UC_BUSY) {
    if (c->sent_any)
      finish(c, UP_RESET);
    else if (c->reused)
      retry_fresh(c);
    else
      finish(c, UP_CONNECT_FAILED);
  }
  conn_close(c);
}


static void connect_cb(uv_connect_t *req, int status) {
  up_conn *c = req->data;
  if (c->state == UC_CLOSING)
    return;
  if (status < 0) {
    next_address(c);
    conn_close(c);
    return;
  }
  c->pool->addr_ok = c->addr_i;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
  send_now(c);
}

static void connect_failed_later(uv_timer_t *t) {
  up_conn *c = t->data;
  next_address(c);
  conn_close(c);
}

/* Connect c to address addr_i, with timeout_ms to connect and answer;
 * addrs_left addresses after it may be tried if it refuses (next_address). */
static void start_request(upstream_pool *pool, up_conn *c, int addr_i, int addrs_left,
                          uint64_t timeout_ms) {
  c->pool = pool;
  c->state = UC_CONNECTING;
  c->handles = 2;
  c->addr_i = addr_i;
  c->addrs_left = addrs_left;
  pool->nconns++;
  uv_tcp_init(pool->loop, &c->tcp);
  uv_timer_init(pool->loop, &c->timer);
  c->tcp.data = c->timer.data = c->creq.data = c;
  arm_deadline(c, timeout_ms);
  int rc = uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&pool->addrs.addr[addr_i],
                          connect_cb);
  if (rc < 0)
    defer(c, connect_failed_later);
}

int upstream_resolve(const char *host, int port, const char *who, upstream_addrs *out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  int rc = getaddrinfo(host, service, &hints, &res);
  out->n = 0;
  for (const struct addrinfo *ai = rc ? NULL : res; ai && out->n < UPSTREAM_ADDRS_MAX;
       ai = ai->ai_next)
    if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
        ai->ai_addrlen <= sizeof out->addr[0])
      memcpy(&out->addr[out->n++], ai->ai_addr, ai->ai_addrlen);
  if (res)
    freeaddrinfo(res);
  if (out->n == 0) {
    fprintf(stderr, "%s '%s': %s\n", who, host, rc ? gai_strerror(rc) : "no address");
    return -1;
  }
  return 0;
}

upstream_pool *upstream_pool_new(uv_loop_t *loop, const gw_config *cfg,
                                 const upstream_addrs *addrs) {
  upstream_options o = {.max_response = cfg->max_response,
                        .timeout_ms = cfg->upstream_timeout_ms};
  return upstream_pool_new_opts(loop, &o, addrs);
}

upstream_pool *upstream_pool_new_opts(uv_loop_t *loop, const upstream_options *opts,
                                      const upstream_addrs *addrs) {
  upstream_pool *pool = addrs->n > 0 ? calloc(1, sizeof *pool) : NULL;
  if (!pool)
    return NULL;
  pool->loop = loop;
  idem_queue_init(&pool->idle);
  pool->opts = *opts;
  pool->addrs = *addrs;
  return pool;
}

void upstream_pause(upstream_response *resp, int paused) {
  up_conn *c = resp->conn;
  if (!c || c->state != UC_BUSY || c->abandoned)
    return;
  /* The deadline is the upstream's: it stands still while a slow client
   * holds the answer back (a client that takes nothing is --send-timeout's
   * to close), so a long download to a slow reader is not cut, and an
   * upstream that trickles is, whatever the client does. */
  if (paused && !c->paused) {
    uint64_t now = uv_now(c->pool->loop);
    c->deadline_left = c->due > now ? c->due - now : 0;
    c->deadline_armed = 0;
    uv_timer_stop(&c->timer);
    uv_read_stop((uv_stream_t *)&c->tcp);
  } else if (!paused && c->paused) {
    arm_deadline(c, c->deadline_left);
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
  }
  c->paused = paused;
}

/* Deferred: upstream_abort may be called from inside on_data, with
 * http_parser still running on this connection's read. */
static void on_abandoned(uv_timer_t *t) {
  up_conn *c = t->data;
  if (c->state == UC_BUSY)
    finish(c, UP_RESET);
  conn_close(c);
}

void upstream_abort(upstream_response *resp) {
  up_conn *c = resp->conn;
  if (!c || c->state != UC_BUSY || c->abandoned)
    return;
  c->abandoned = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  defer(c, on_abandoned);
}

void upstream_send(upstream_pool *pool, const uv_buf_t *bufs, unsigned nbufs,
                   int is_head, int retry_safe, const upstream_stream *stream,
                   upstream_response *resp, upstream_cb cb, void *arg) {
  up_conn *c = idle_take(pool);
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c) {
      /* no memory for a connection: nothing was sent */
      resp->kind = UP_CONNECT_FAILED;
      cb(arg, resp);
      return;
    }
  }
  c->bufs = bufs;
  c->nbufs = nbufs;
  c->is_head = is_head;
  c->retry_safe = retry_safe;
  c->stream = stream;
  c->resp = resp;
  c->cb = cb;
  c->arg = arg;
  resp->status = 0;
  resp->head_ns = 0;
  resp->kind = UP_OK;
  if (c->state == UC_IDLE) {
    arm_deadline(c, (uint64_t)pool->opts.timeout_ms);
    send_now(c);
  } else {
    start_request(pool, c, pool->addr_ok, pool->addrs.n - 1, (uint64_t)pool->opts.timeout_ms);
  }
}

void upstream_pool_close(upstream_pool *pool, void (*done)(void *), void *arg) {
  pool->closing = 1;
  pool->done = done;
  pool->done_arg = arg;
  up_conn *c;
  while ((c = idle_first(pool)))
    conn_close(c);
  if (pool->nconns == 0) {
    free(pool);
    done(arg);
  }
}
