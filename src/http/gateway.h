/*
 * gateway.h - how the parts of `idem serve` meet inside one worker thread.
 *
 *   server.c   workers (one uv loop, store handle, upstream pool and
 *              SO_REUSEPORT listener each), signals, orderly shutdown
 *   conn.c     client connections: read, parse (reqparse.c), answer in order
 *   engine.c   the idempotency flow of one request
 *   upstream.c the keep-alive pool to the upstream
 *   admin.c    the admin listener (on the main thread's loop)
 *
 * An exchange is one request and everything needed to answer it. conn.c
 * creates it when a request is complete, engine.c runs it, and
 * gw_conn_respond ends it. Requests on one connection run one at a time, so
 * pipelined requests are answered in order.
 */
#ifndef IDEM_HTTP_GATEWAY_H
#define IDEM_HTTP_GATEWAY_H

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#include <uv.h>

#include "core/queue.h"
#include "http/access_log.h"
#include "http/config.h"
#include "http/metrics.h"
#include "http/request.h"
#include "http/route.h"
#include "http/spool.h"
#include "http/upstream.h"
#include "idem/idem.h"

typedef struct gw_conn gw_conn;
typedef struct gw_exchange gw_exchange;

/* What the connection layer (conn.c) calls on whoever answers its requests,
 * as h2o's generators do: the connection never names the engine. server.c
 * sets each worker's to the engine's (gw_engine). */
typedef struct {
  void (*handle)(gw_exchange *ex);  /* a complete request: answer it */
  void (*proceed)(gw_exchange *ex); /* a streamed answer's backlog drained: send more */
  void (*stop)(gw_exchange *ex);    /* the client of a streamed answer is gone */
} gw_handler;

typedef struct gw_worker gw_worker;
struct gw_worker {
  int id;
  const gw_handler *handler;               /* answers the requests */
  void (*conn_closed)(gw_worker *w);       /* a connection closed (server.c) */
  const gw_config *cfg;
  gw_routes *routes;     /* the route table this worker hands out (held) */
  unsigned routes_gen;   /* gw_routes_generation() when it was taken */
  uv_loop_t loop;
  uv_thread_t thread;
  int listen_fd;
  int listen_spare_fd; /* dup of the listening socket: survives a pause */
  uv_tcp_t listener;
  int listener_open;   /* 0 while accepting is paused: out of descriptors,
                          or --max-conns connections open */
  int listener_closing; /* the paused listener's handle is not closed yet */
  int limit_logged;    /* --max-conns was reached once (logged once) */
  uv_timer_t accept_timer;
  uv_async_t stop_async;
  idem_store *store;      /* NULL while the store cannot be opened */
  uint64_t store_retry_at; /* uv_now of the next open attempt */
  uint64_t store_log_next; /* uv_now before which a failed claim is not logged */
  unsigned store_log_quiet; /* failed claims not logged since the last line */
  upstream_pool *pool;
  gw_spool *spool;        /* the process's spool, NULL when off */
  uv_timer_t drain_timer; /* worker 0: drains the spool into the store */
  int draining;           /* a drain round is in flight */
  int drain_on;           /* drain_timer is initialised */
  int pool_closing;       /* closing: pool, then store, then stop_async */
  atomic_int loop_done;   /* set by the worker's thread as its loop ends */
  uv_async_t *finished;   /* the main loop's: this worker's loop is done */
  upstream_addrs upstream_addrs;
  idem_queue conns; /* every open client connection (gw_conn.linked) */
  size_t nconns;
  int stopping;
  int stopped; /* the store and pool are closing or closed */
  gw_access_buf access; /* --access-log lines, written by the worker */
};

/* The idempotency state of a keyed request (engine.c). */
typedef struct {
  char key[IDEM_KEY_MAX + 1];
  char scope[65];
  uint8_t fp[IDEM_FINGERPRINT_LEN];
  uint64_t fence;
  uint64_t lease_end_ns; /* uv_hrtime() when the lease claimed ends (about) */
  int claimed;
  int64_t wait_deadline; /* uv_now() ms; 0 when not waiting */
  unsigned wait_round;
  int bypass; /* the store failed and --on-store-error open let it by */
} gw_idem_state;

/* The answer being kept, or the key being released (keep.c). */
typedef struct {
  int status;
  const gw_buf *headers, *body;
  int is_marker;
  int reclaimed; /* a stale complete claimed the key again (keep.c) */
  void (*kept)(struct gw_exchange *ex, int ok);
  void (*released)(struct gw_exchange *ex);
  int after_release; /* engine.c: what to answer once the release is done */
} gw_keep_state;

/* A streamed answer (stream.c; pass-through, or keyed past --max-response). */
typedef struct {
  int started;   /* its head is out */
  int mode;      /* GW_STREAM_* */
  int writes;    /* writes in flight */
  size_t queued; /* bytes in flight, and waiting in pending */
  struct stream_write *pending; /* pieces that came while a write was in
                                   flight, gathered into the next one */
  int ended;
  int failed;
} gw_stream_state;

/* A keyed answer past --max-response (engine.c, "answers too large to
 * keep"): its marker is being kept (or, for a status not kept, its key
 * released), the answer waits in up.body. */
typedef struct {
  int on;
  int ended;          /* the upstream finished meanwhile, with: */
  upstream_kind kind;
  int refused;        /* nothing kept its marker: 503 once the upstream is gone */
  int released;       /* a status not kept: the key was released, no marker */
} gw_spill_state;

/* An exchange: one request and everything needed to answer it, by concern. */
struct gw_exchange {
  gw_worker *w;
  gw_conn *conn;
  gw_request *req;
  uint64_t started_ns;
  uint64_t op_started_ns; /* the store operation in flight, for its histogram */
  gw_routes *routes;      /* the table the request started with (held) */
  const gw_route *route;  /* its route in that table (engine.c) */
  gw_idem_state idem;
  gw_keep_state keep;
  /* the upstream request and answer */
  gw_buf up_head;
  uv_buf_t up_bufs[3]; /* the head, the body (two pieces when 4 GiB) */
  upstream_response up;
  gw_buf stored_headers; /* replayable headers of up, "Name: value\r\n" */
  gw_buf kept_headers;   /* those the route replays (replay_headers: drop) */
  int up_paused;         /* the upstream is paused for backpressure */
  int upstream_cut;      /* the client left a streamed answer: upstream dropped */
  /* the answer to the client (conn.c) */
  gw_buf out_hdrs; /* headers of the gateway's own answers */
  gw_buf out_head;
  gw_buf out_body;
  uv_buf_t out_bufs[3]; /* the head, the body (two pieces when 4 GiB) */
  uv_write_t wreq;
  int close_after;
  gw_stream_state stream;
  gw_spill_state spill;
  /* for the access log */
  int outcome;         /* gw_outcome + 1 once counted; 0: none */
  int status;          /* of the answer's head; 0 while none went out */
  uint64_t up_sent_ns; /* the request went upstream */
  uint64_t up_head_ns; /* the head of its answer came back */
};

/* len bytes at p as uv_buf_t pieces at bufs: one, or two for a length a
 * uv_buf_t's unsigned len cannot hold (--max-body and --max-response go
 * up to 4 GiB, one more than UINT_MAX). The pieces made. */
static inline unsigned gw_bufs_put(uv_buf_t *bufs, const char *p, size_t len) {
  const size_t half = (size_t)1 << 31;
  if (len <= UINT_MAX) {
    bufs[0] = uv_buf_init((char *)p, (unsigned)len);
    return 1;
  }
  bufs[0] = uv_buf_init((char *)p, (unsigned)half);
  bufs[1] = uv_buf_init((char *)p + half, (unsigned)(len - half));
  return 2;
}

/* Count ex's outcome (metrics.h) and keep it for the access log. */
static inline void gw_exchange_outcome(gw_exchange *ex, gw_outcome o) {
  ex->outcome = (int)o + 1;
  gw_metrics_outcome(o);
}

/* ---- conn.c ---- */

/* The most bytes of an answer a connection buffers before the upstream's
 * read is paused (streamed answers; conn.c and engine.c). */
#define GW_BACKLOG_HIGH (1u << 20)

/* Accept a pending connection on w's listener. */
void gw_conn_accept(gw_worker *w);

#define GW_RESP_CLOSE 1u    /* close the connection after this answer */
#define GW_RESP_OWN_CL 2u   /* headers carry their own Content-Length */
#define GW_RESP_NO_CL 4u    /* no Content-Length at all (1xx, 204) */

/*
 * Answer ex's request and end the exchange: headers is a "Name: value\r\n"
 * block, body is borrowed until the write completes (it must live in ex or
 * be static). Content-Length and Connection are added here.
 */
void gw_conn_respond(gw_exchange *ex, int status, const char *headers,
                     size_t headers_len, const char *body, size_t body_len,
                     unsigned flags);

/* Answer with a problem+json body. extra_headers may be NULL. */
void gw_conn_problem(gw_exchange *ex, int status, const char *slug,
                     const char *title, const char *detail,
                     const char *extra_headers, unsigned flags);

/* A streamed answer, for pass-through (nothing stored, no size limit).
 * begin writes the head with the framing of mode; data copies and writes a
 * piece of body; end finishes the exchange (ok) or cuts the connection (the
 * client sees a truncated answer). */
#define GW_STREAM_RAW 0     /* Content-Length in headers, or no body */
#define GW_STREAM_CHUNKED 1 /* chunked to the client */
#define GW_STREAM_CLOSE 2   /* ends with the connection (HTTP/1.0 client) */
void gw_conn_stream_begin(gw_exchange *ex, int status, const char *headers,
                          size_t headers_len, int mode);
void gw_conn_stream_data(gw_exchange *ex, const char *data, size_t len);
void gw_conn_stream_end(gw_exchange *ex, int ok);
/* Bytes of a streamed answer still waiting to be written. */
size_t gw_conn_stream_backlog(const gw_exchange *ex);
/* (stream.c has the four above) */

/* The connection under a streamed answer, for stream.c: write (counted by
 * the send timeout), whether the client is gone, cut it (the answer must
 * look broken, not complete), end the exchange, and write the head. */
int gw_conn_write(gw_exchange *ex, uv_write_t *req, const uv_buf_t *bufs, unsigned n,
                  uv_write_cb cb);
int gw_conn_gone(const gw_exchange *ex);
void gw_conn_cut(gw_exchange *ex);
void gw_conn_finish(gw_exchange *ex, int failed);
int gw_conn_head(gw_exchange *ex, int status, const char *headers, size_t headers_len,
                 int chunked, int close);

/* Shutdown: close idle connections now, the others after their answer. */
void gw_conn_drain_all(gw_worker *w);

/* ---- keep.c ---- */

/* Keep the answer of ex's claimed request (status, headers, body: borrowed
 * until kept runs): in the store, else its marker when the store is full,
 * else in the spool. kept(ex, 1) once something durable holds it (or the
 * lease moved on and another answer is kept); kept(ex, 0) when nothing
 * could. is_marker: what is kept is the marker already (a spilled answer). */
void gw_keep(gw_exchange *ex, int status, const gw_buf *headers, const gw_buf *body,
             int is_marker, void (*kept)(gw_exchange *ex, int ok));

/* Release ex's claimed key (spooled when the store fails), then released(ex). */
void gw_keep_release(gw_exchange *ex, void (*released)(gw_exchange *ex));

/* ---- engine.c ---- */

/* The idempotency flow of a request, as a connection's handler. */
extern const gw_handler gw_engine;

/* ---- server.c ---- */



/* Run the gateway until SIGTERM or SIGINT. Returns the exit code. */
int gw_run(const gw_config *cfg);

#endif
