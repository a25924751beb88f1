/* send_watch.c - the send timeout's progress check (send_watch.h). */
#include "http/send_watch.h"

/* Bytes of everything queued on s that the kernel has taken. */
static uint64_t bytes_taken(const gw_send_watch *sw, const uv_stream_t *s) {
  return sw->queued - uv_stream_get_write_queue_size(s);
}

void gw_send_watch_queued(gw_send_watch *sw, size_t len) { sw->queued += len; }

void gw_send_watch_start(gw_send_watch *sw, const uv_stream_t *s) {
  sw->taken = bytes_taken(sw, s);
  sw->progress_at = uv_now(s->loop);
}

gw_send_state gw_send_watch_tick(gw_send_watch *sw, const uv_stream_t *s,
                                 int64_t timeout_ms) {
  if (uv_stream_get_write_queue_size(s) == 0)
    return GW_SEND_DRAINED;
  uint64_t now = uv_now(s->loop), taken = bytes_taken(sw, s);
  if (taken != sw->taken) {
    sw->taken = taken;
    sw->progress_at = now;
    return GW_SEND_MOVING;
  }
  return now - sw->progress_at >= (uint64_t)timeout_ms ? GW_SEND_STALLED
                                                       : GW_SEND_MOVING;
}

/* A quarter of the timeout (a stall is closed within 1.25x of it), at most
 * a second: one timer tick per second per stalled peer costs nothing. */
uint64_t gw_send_watch_period(int64_t timeout_ms) {
  int64_t p = timeout_ms / 4;
  if (p > 1000)
    p = 1000;
  return p < 10 ? 10 : (uint64_t)p;
}
