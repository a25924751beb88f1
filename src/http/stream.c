/*
 * stream.c - streamed answers (pass-through, and keyed answers past
 * --max-response): the head with the framing of its mode, then the body as
 * it comes, each piece copied and written at once, with the backlog that
 * pauses the upstream (GW_BACKLOG_HIGH) and resumes it (STREAM_LOW).
 * Pieces that come while a write is in flight are gathered into one
 * pending write, sent when it completes: an upstream that sends its answer
 * in one-byte chunks would otherwise cost a write request (some 200 bytes)
 * per byte of a client that does not read. It
 * writes through the connection (gw_conn_write and friends in gateway.h)
 * and tells the engine through the worker's handler, never by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/gateway.h"

/* The upstream pauses above GW_BACKLOG_HIGH (gateway.h), resumes below: */
#define STREAM_LOW (256u << 10)

typedef struct stream_write {
  uv_write_t req;
  gw_exchange *ex;
  size_t len, cap;
  char data[];
} stream_write;

static void drop_pending(gw_exchange *ex) {
  if (!ex->stream.pending)
    return;
  ex->stream.queued -= ex->stream.pending->len;
  free(ex->stream.pending);
  ex->stream.pending = NULL;
}

static void stream_finish(gw_exchange *ex) {
  drop_pending(ex);
  gw_conn_finish(ex, ex->stream.failed);
}

static void stream_write_cb(uv_write_t *req, int status);

/* Send sw; it counts as in flight from here on. */
static void submit(gw_exchange *ex, stream_write *sw) {
  uv_buf_t b = uv_buf_init(sw->data, (unsigned)sw->len);
  if (gw_conn_write(ex, &sw->req, &b, 1, stream_write_cb)) {
    ex->stream.queued -= sw->len;
    free(sw);
    ex->stream.failed = 1;
    return;
  }
  ex->stream.writes++;
}

static void stream_write_cb(uv_write_t *req, int status) {
  stream_write *sw = (stream_write *)req;
  gw_exchange *ex = sw->ex;
  ex->stream.writes--;
  ex->stream.queued -= sw->len;
  free(sw);
  if (status < 0) {
    ex->stream.failed = 1;
    drop_pending(ex);
    ex->w->handler->stop(ex);
  }
  if (ex->stream.pending && ex->stream.writes == 0 && !gw_conn_gone(ex)) {
    stream_write *next = ex->stream.pending;
    ex->stream.pending = NULL;
    submit(ex, next);
  }
  if (ex->up_paused && ex->stream.queued < STREAM_LOW && !ex->stream.ended)
    ex->w->handler->proceed(ex);
  if (ex->stream.ended && ex->stream.writes == 0)
    stream_finish(ex);
}

/* Room for len more bytes in the pending write: it, or NULL (no memory). */
static stream_write *pending_room(gw_exchange *ex, size_t len) {
  stream_write *sw = ex->stream.pending;
  size_t used = sw ? sw->len : 0, cap = sw ? sw->cap : 0;
  if (used + len <= cap)
    return sw;
  if (!cap) /* written at once when nothing is in flight: no room to spare */
    cap = ex->stream.writes ? 4096 : len;
  while (cap < used + len)
    cap *= 2;
  stream_write *grown = realloc(sw, sizeof *sw + cap);
  if (!grown)
    return NULL;
  if (!sw)
    grown->len = 0;
  grown->cap = cap;
  grown->ex = ex;
  return ex->stream.pending = grown;
}

/* Write parts as one block (copied: the caller's bytes are gone after),
 * at once, or with the next write when one is in flight. */
static void stream_write_parts(gw_exchange *ex, const uv_buf_t *parts, int n) {
  if (gw_conn_gone(ex) || ex->stream.failed) {
    ex->w->handler->stop(ex); /* no one to send the rest to */
    return;
  }
  size_t len = 0;
  for (int i = 0; i < n; i++)
    len += parts[i].len;
  stream_write *sw = pending_room(ex, len);
  if (!sw) {
    ex->stream.failed = 1;
    return;
  }
  for (int i = 0; i < n; i++) {
    memcpy(sw->data + sw->len, parts[i].base, parts[i].len);
    sw->len += parts[i].len;
  }
  ex->stream.queued += len;
  if (ex->stream.writes == 0) {
    ex->stream.pending = NULL;
    submit(ex, sw);
  }
}

void gw_conn_stream_begin(gw_exchange *ex, int status, const char *headers,
                          size_t headers_len, int mode) {
  ex->stream.started = 1;
  ex->stream.mode = mode;
  if (gw_conn_gone(ex)) { /* nothing goes out: the access log's status stays 0 */
    ex->stream.failed = 1;
    ex->w->handler->stop(ex);
    return;
  }
  gw_buf *h = &ex->out_head;
  if (gw_conn_head(ex, status, headers, headers_len, mode == GW_STREAM_CHUNKED,
                   mode == GW_STREAM_CLOSE)) {
    ex->stream.failed = 1;
    return;
  }
  uv_buf_t b = uv_buf_init(h->p, (unsigned)h->len);
  stream_write_parts(ex, &b, 1);
}

void gw_conn_stream_data(gw_exchange *ex, const char *data, size_t len) {
  if (!len || !ex->stream.started || ex->req->is_head)
    return;
  if (ex->stream.mode == GW_STREAM_CHUNKED) {
    char size[24];
    int n = snprintf(size, sizeof size, "%zx\r\n", len);
    uv_buf_t parts[3] = {uv_buf_init(size, (unsigned)n),
                         uv_buf_init((char *)data, (unsigned)len),
                         uv_buf_init("\r\n", 2)};
    stream_write_parts(ex, parts, 3);
  } else {
    uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
    stream_write_parts(ex, &b, 1);
  }
}

/* How many bytes of a streamed answer wait in the socket's queue. */
size_t gw_conn_stream_backlog(const gw_exchange *ex) { return ex->stream.queued; }

void gw_conn_stream_end(gw_exchange *ex, int ok) {
  if (ok && ex->stream.mode == GW_STREAM_CHUNKED && !ex->req->is_head) {
    uv_buf_t b = uv_buf_init("0\r\n\r\n", 5);
    stream_write_parts(ex, &b, 1);
  }
  ex->stream.ended = 1;
  if (!ok) {
    /* the answer broke midway: the client must see it cut, not complete */
    ex->stream.failed = 1;
    ex->close_after = 1;
    gw_conn_cut(ex);
  }
  if (ex->stream.writes == 0)
    stream_finish(ex);
}

