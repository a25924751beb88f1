/*
 * deadline.h - a connection's timer standing for a deadline that moves on
 * every request: --upstream-timeout and the idle close of a pooled upstream
 * connection (upstream.c), --client-timeout and --idle-timeout of a client's
 * keep-alive connection (conn.c).
 *
 * Each re-arm of a libuv timer is a removal from its heap and an insertion,
 * and such a connection would re-arm twice or more per request. So
 * gw_deadline_set moves the timer only when the new deadline comes earlier
 * than the one it is armed for, and the timer's callback starts with
 * gw_deadline_early: a timer that fires before the deadline (which moved
 * later since) re-arms for what is left.
 */
#ifndef IDEM_HTTP_DEADLINE_H
#define IDEM_HTTP_DEADLINE_H

#include <stdint.h>

#include <uv.h>

/* The deadline is in ms from now: *due gets its loop time. armed: the timer
 * already runs cb for this connection's deadline (not something else). */
static inline void gw_deadline_set(uv_timer_t *t, uint64_t *due, uint64_t in, int armed,
                                   uv_timer_cb cb) {
  *due = uv_now(t->loop) + in;
  if (armed && uv_is_active((uv_handle_t *)t) && uv_timer_get_due_in(t) <= in)
    return;
  uv_timer_start(t, cb, in, 0);
}

/* In cb: 1 when due is still ahead (the timer re-armed for what is left),
 * 0 when the deadline has come. */
static inline int gw_deadline_early(uv_timer_t *t, uint64_t due, uv_timer_cb cb) {
  uint64_t now = uv_now(t->loop);
  if (now >= due)
    return 0;
  uv_timer_start(t, cb, due - now, 0);
  return 1;
}

#endif
