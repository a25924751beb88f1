/*
 * upstream.h - one worker's connections to the upstream: a pool of
 * keep-alive connections, one request at a time on each, responses parsed
 * with http_parser. Answers to keyed requests are buffered whole (up to
 * --max-response) so that they can be stored and replayed, and stream on
 * past that; pass-through answers stream.
 */
#ifndef IDEM_HTTP_UPSTREAM_H
#define IDEM_HTTP_UPSTREAM_H

#include <stdint.h>

#include <uv.h>

#include "http/config.h"
#include "http/msg.h"

typedef enum {
  UP_OK = 0,          /* a complete answer */
  UP_CONNECT_FAILED,  /* nothing was sent: the upstream never saw it */
  UP_TIMEOUT,         /* sent, no complete answer in --upstream-timeout (one
                         deadline for the whole answer, streamed ones too) */
  UP_RESET,           /* sent, the connection broke before a full answer */
  UP_BAD_RESPONSE     /* sent, the answer was not valid HTTP: broken framing,
                         a malformed status line, a status outside 100-599,
                         a 101, or a 1xx other than 100 and 103 as the answer */
} upstream_kind;

typedef struct {
  upstream_kind kind;
  int status;
  gw_headers headers; /* as received, hop-by-hop included */
  gw_buf body;        /* de-chunked */
  int keep_alive;
  uint64_t head_ns; /* uv_hrtime() when the final answer's head was in; 0: none */
  void *conn; /* internal: the connection while the answer streams */
} upstream_response;

/* Streaming, for answers that are not stored (pass-through): no size limit,
 * the body goes to on_data as it arrives (copy what you keep) instead of
 * into resp->body. on_head runs once status and headers are in resp; the
 * final upstream_cb still runs once, at the end or on failure.
 * past_limit: buffer the answer in resp->body as without a stream, and
 * stream only once it would pass --max-response: on_head then finds the
 * part buffered so far in resp->body, and the rest goes to on_data. */
typedef struct {
  void (*on_head)(void *arg, upstream_response *resp);
  void (*on_data)(void *arg, const char *data, size_t len);
  int past_limit;
} upstream_stream;

/* Backpressure for a streaming answer: stop (1) or resume (0) reading. */
void upstream_pause(upstream_response *resp, int paused);

/* Give up a streaming answer nobody will read (its client left): reading
 * stops and the connection is closed, not reused; the upstream_cb runs
 * with UP_RESET from the loop, never from inside this call. A no-op once
 * the answer is complete. */
void upstream_abort(upstream_response *resp);

void upstream_response_free(upstream_response *r);

typedef struct upstream_pool upstream_pool;

/* Completion: resp is the caller's, filled in. Called exactly once, never
 * from inside upstream_send. */
typedef void (*upstream_cb)(void *arg, upstream_response *resp);

/* What a pool needs to know: the largest answer body it buffers for a
 * caller that keeps answers (past it the answer streams, see
 * upstream_stream), and the deadline to connect and get a whole answer. */
typedef struct {
  uint64_t max_response;
  int64_t timeout_ms;
} upstream_options;

#define UPSTREAM_ADDRS_MAX 8

/* The addresses of the upstream's host, in the resolver's order. */
typedef struct {
  struct sockaddr_storage addr[UPSTREAM_ADDRS_MAX];
  int n;
} upstream_addrs;

/* Look host:port up once, at start (blocking): its first
 * UPSTREAM_ADDRS_MAX IPv4 and IPv6 addresses into out. 0, or -1 after a
 * line on stderr that starts with who ("idem serve: upstream host") and
 * names the host. */
int upstream_resolve(const char *host, int port, const char *who, upstream_addrs *out);

/* A pool with serve's values (--max-response, --upstream-timeout). A new
 * connection goes to the address the last one reached; one refused (or
 * failing at once) moves on to the next address, within the request's
 * --upstream-timeout, so "localhost" reaches a server listening on
 * 127.0.0.1 only though ::1 comes first. */
upstream_pool *upstream_pool_new(uv_loop_t *loop, const gw_config *cfg,
                                 const upstream_addrs *addrs);
/* A pool with these options (copied). */
upstream_pool *upstream_pool_new_opts(uv_loop_t *loop, const upstream_options *opts,
                                      const upstream_addrs *addrs);

/*
 * Send one request (bufs stay valid until cb). is_head: the answer has no
 * body. stream: how the answer comes back (see upstream_stream). retry_safe: the request may be sent twice (an idempotent method
 * without a key): when a reused keep-alive connection turns out closed
 * before any answer byte, it is sent once more on a fresh connection.
 */
void upstream_send(upstream_pool *pool, const uv_buf_t *bufs,
                   unsigned nbufs, int is_head, int retry_safe,
                   const upstream_stream *stream, upstream_response *resp,
                   upstream_cb cb, void *arg);

/* Close idle connections and free the pool once no request is in flight
 * (the caller has drained them); done runs on the loop afterwards. */
void upstream_pool_close(upstream_pool *pool, void (*done)(void *), void *arg);

#endif
