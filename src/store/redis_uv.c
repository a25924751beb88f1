/*
 * redis_uv.c - hiredis on a libuv loop: one poll handle per connection.
 *
 * hiredis 0.14's adapters/libuv.h drops poll errors (status < 0), and libuv
 * reports a refused connect or a reset socket only that way: the connection
 * would hang until a timeout. Like hiredis 1.x, we let hiredis do the read
 * or write that finds the error.
 */
#include <stdlib.h>

#include "store/redis_uv.h"

typedef struct {
  redisAsyncContext *ac;
  uv_poll_t handle;
  int events;
  void (*done)(void *arg);
  void *done_arg;
} uvev;

static void uvev_poll(uv_poll_t *handle, int status, int events) {
  uvev *p = handle->data;
  int ev = events;
  if (status < 0) {
    ev = p->events;
    p->events = 0; /* libuv stopped the handle: the next add starts it again */
  }
  if (p->ac != NULL && (ev & UV_READABLE))
    redisAsyncHandleRead(p->ac);
  if (p->ac != NULL && (ev & UV_WRITABLE))
    redisAsyncHandleWrite(p->ac);
}

static void uvev_update(uvev *p, int add, int del) {
  int events = (p->events | add) & ~del;
  if (events == p->events)
    return; /* hiredis asks for writes once per command: no churn */
  p->events = events;
  if (p->events)
    uv_poll_start(&p->handle, p->events, uvev_poll);
  else
    uv_poll_stop(&p->handle);
}

static void uvev_add_read(void *d) { uvev_update(d, UV_READABLE, 0); }
static void uvev_del_read(void *d) { uvev_update(d, 0, UV_READABLE); }
static void uvev_add_write(void *d) { uvev_update(d, UV_WRITABLE, 0); }
static void uvev_del_write(void *d) { uvev_update(d, 0, UV_WRITABLE); }
static void uvev_closed(uv_handle_t *h) { free(h->data); }

static void uvev_cleanup(void *d) {
  uvev *p = d;
  p->ac = NULL;
  uv_close((uv_handle_t *)&p->handle, uvev_closed);
  if (p->done)
    p->done(p->done_arg);
}

int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, void (*done)(void *arg), void *arg) {
  uvev *p = calloc(1, sizeof *p);
  if (p == NULL)
    return -1;
  if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
    free(p);
    return -1;
  }
  p->handle.data = p;
  p->ac = ac;
  p->done = done;
  p->done_arg = arg;
  ac->ev.data = p;
  ac->ev.addRead = uvev_add_read;
  ac->ev.delRead = uvev_del_read;
  ac->ev.addWrite = uvev_add_write;
  ac->ev.delWrite = uvev_del_write;
  ac->ev.cleanup = uvev_cleanup;
  return 0;
}
