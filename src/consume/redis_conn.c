/*
 * redis_conn.c - a hiredis async connection on libuv (redis_conn.h).
 *
 * hiredis 0.14's adapters/libuv.h drops poll errors (status < 0), and libuv
 * reports a refused connect or a reset socket only that way; so, as the
 * Redis store does, the adapter here lets hiredis do the read or write that
 * finds the error.
 */
#include "consume/redis_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rconn {
  rconn_opts o;
  redisAsyncContext *ac;
  uv_poll_t *poll;
  int events;
  uv_timer_t *timer; /* connect + handshake deadline */
  int handshake_left;
  int ready;
  int closed; /* rconn_close or gone: nothing more is reported */
};

/* ---- the libuv adapter ---- */

static void poll_cb(uv_poll_t *h, int status, int events) {
  rconn *c = h->data;
  int ev = events;
  if (status < 0) {
    ev = c->events;
    c->events = 0;
  }
  if (c->ac && (ev & UV_READABLE))
    redisAsyncHandleRead(c->ac);
  if (c->ac && (ev & UV_WRITABLE))
    redisAsyncHandleWrite(c->ac);
}

static void ev_update(rconn *c, int add, int del) {
  int events = (c->events | add) & ~del;
  if (events == c->events || !c->poll)
    return;
  c->events = events;
  if (events)
    uv_poll_start(c->poll, events, poll_cb);
  else
    uv_poll_stop(c->poll);
}
static void ev_add_read(void *d) { ev_update(d, UV_READABLE, 0); }
static void ev_del_read(void *d) { ev_update(d, 0, UV_READABLE); }
static void ev_add_write(void *d) { ev_update(d, UV_WRITABLE, 0); }
static void ev_del_write(void *d) { ev_update(d, 0, UV_WRITABLE); }
static void free_handle(uv_handle_t *h) { free(h); }
static void free_conn(uv_handle_t *h) {
  free(h->data);
  free(h);
}

/* hiredis is done with the context: the handles go, and the rconn with the
 * last of them, on a later turn of the loop (hiredis still calls the
 * disconnect callback, which reads it, after this). */
static void ev_cleanup(void *d) {
  rconn *c = d;
  c->ac = NULL;
  uv_close((uv_handle_t *)c->poll, free_handle);
  uv_close((uv_handle_t *)c->timer, free_conn);
}

/* ---- lifecycle ---- */

static void report_gone(rconn *c, const char *why) {
  if (c->closed)
    return;
  c->closed = 1;
  c->o.gone(c->o.arg, c, why);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  rconn *c = ac->data;
  if (status != REDIS_OK)
    report_gone(c, ac->errstr[0] ? ac->errstr : "cannot connect");
  /* on failure hiredis frees ac (and so c, through ev_cleanup) next */
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  rconn *c = ac->data;
  (void)status;
  report_gone(c, ac->errstr[0] ? ac->errstr : "connection closed");
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *priv) {
  rconn *c = ac->data;
  redisReply *r = reply;
  if (!r || c->closed)
    return;
  if (r->type == REDIS_REPLY_ERROR) {
    char why[160];
    snprintf(why, sizeof why, "%s refused: %.100s", (const char *)priv, r->str);
    report_gone(c, why);
    redisAsyncFree(ac);
    return;
  }
  if (--c->handshake_left > 0)
    return;
  c->ready = 1;
  uv_timer_stop(c->timer);
  c->o.ready(c->o.arg, c);
}

static void on_timeout(uv_timer_t *t) {
  rconn *c = t->data;
  if (c->ready || c->closed || !c->ac)
    return;
  report_gone(c, "connect timed out");
  redisAsyncFree(c->ac);
}

static void handshake(rconn *c) {
  redisAsyncContext *ac = c->ac;
  c->handshake_left = 1;
  if (c->o.password) {
    c->handshake_left++;
    if (c->o.user)
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s %s", c->o.user, c->o.password);
    else
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s", c->o.password);
  }
  if (c->o.db) {
    c->handshake_left++;
    redisAsyncCommand(ac, on_handshake, (char *)"SELECT", "SELECT %d", c->o.db);
  }
  redisAsyncCommand(ac, on_handshake, (char *)"PING", "PING");
}

rconn *rconn_open(uv_loop_t *loop, const rconn_opts *o, const char **why) {
  rconn *c = calloc(1, sizeof *c);
  uv_poll_t *poll = malloc(sizeof *poll);
  uv_timer_t *timer = malloc(sizeof *timer);
  redisAsyncContext *ac = c && poll && timer ? redisAsyncConnect(o->addr, o->port) : NULL;
  if (!ac || ac->err || uv_poll_init(loop, poll, ac->c.fd)) {
    *why = ac && ac->err ? "cannot connect" : "out of memory";
    if (ac)
      redisAsyncFree(ac);
    free(c);
    free(poll);
    free(timer);
    return NULL;
  }
  c->o = *o;
  c->ac = ac;
  c->poll = poll;
  c->timer = timer;
  poll->data = timer->data = c;
  uv_timer_init(loop, timer);
  uv_timer_start(timer, on_timeout, (uint64_t)o->connect_timeout_ms, 0);
  ac->data = c;
  ac->ev.data = c;
  ac->ev.addRead = ev_add_read;
  ac->ev.delRead = ev_del_read;
  ac->ev.addWrite = ev_add_write;
  ac->ev.delWrite = ev_del_write;
  ac->ev.cleanup = ev_cleanup;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  handshake(c);
  return c;
}

int rconn_send(rconn *c, int argc, const char **argv, const size_t *lens,
               redisCallbackFn *fn, void *priv) {
  if (!c || !c->ac || c->closed || !c->ready)
    return -1;
  return redisAsyncCommandArgv(c->ac, fn, priv, argc, argv, lens) == REDIS_OK ? 0 : -1;
}

void rconn_close(rconn *c) {
  if (!c || c->closed)
    return;
  c->closed = 1;
  if (c->ac)
    redisAsyncFree(c->ac);
}
