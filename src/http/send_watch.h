/*
 * send_watch.h - the send timeout (--send-timeout), as nginx's send_timeout:
 * a peer that takes no byte of an answer for that long is stalled, however
 * long the whole answer takes.
 *
 * libuv calls a write's callback only when all of its bytes are out, so
 * progress is read on a periodic tick from the stream's write queue: the
 * bytes handed to uv_write minus the bytes still queued is what the kernel
 * took so far. Used by client connections (conn.c) and the admin listener.
 */
#ifndef IDEM_HTTP_SEND_WATCH_H
#define IDEM_HTTP_SEND_WATCH_H

#include <stdint.h>

#include <uv.h>

typedef struct {
  uint64_t queued;      /* bytes ever handed to uv_write on the stream */
  uint64_t taken;       /* bytes the kernel had taken at the last progress */
  uint64_t progress_at; /* uv_now() of the last progress */
} gw_send_watch;

typedef enum {
  GW_SEND_DRAINED, /* nothing waits: stop watching */
  GW_SEND_MOVING,  /* bytes are waiting, within the timeout */
  GW_SEND_STALLED  /* no byte taken for the timeout: close the peer */
} gw_send_state;

/* Count len bytes just queued with a successful uv_write on s. */
void gw_send_watch_queued(gw_send_watch *sw, size_t len);

/* Start watching s now (call when its timer is armed): the clock starts. */
void gw_send_watch_start(gw_send_watch *sw, const uv_stream_t *s);

/* One tick: where the answer on s stands after timeout_ms without progress. */
gw_send_state gw_send_watch_tick(gw_send_watch *sw, const uv_stream_t *s,
                                 int64_t timeout_ms);

/* The period of the tick for timeout_ms: a stall is seen at most this late. */
uint64_t gw_send_watch_period(int64_t timeout_ms);

/* Close a connection's socket and timer, once (*closing says it began);
 * cb runs for each handle. */
static inline void gw_close_conn(int *closing, uv_tcp_t *tcp, uv_timer_t *timer, uv_close_cb cb) {
  if (*closing)
    return;
  *closing = 1;
  uv_close((uv_handle_t *)tcp, cb);
  uv_close((uv_handle_t *)timer, cb);
}

/* A connection's one timer, standing for one thing at a time (mode; 0:
 * nothing): set *mode to it and start the timer for ms, or stop it. */
static inline void gw_timer_mode(uv_timer_t *t, int *mode, int want, int64_t ms, uv_timer_cb cb) {
  *mode = want;
  if (want == 0)
    uv_timer_stop(t);
  else
    uv_timer_start(t, cb, (uint64_t)ms, 0);
}

#endif
