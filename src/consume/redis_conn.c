/*
 * redis_conn.c - a hiredis async connection on libuv (redis_conn.h), driven
 * by the Redis store's adapter (store/redis_uv.h).
 */
#include "consume/redis_conn.h"

#include "store/redis_uv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rconn {
  rconn_opts o;
  redisAsyncContext *ac;
  uv_timer_t *timer; /* connect + handshake deadline */
  int handshake_left;
  int ready;
  int closed; /* rconn_close or gone: nothing more is reported */
};

/* hiredis is done with the context: the rconn goes with its timer, on a
 * later turn of the loop (hiredis still calls the disconnect callback,
 * which reads it, before this). */
static void free_conn(uv_handle_t *h) {
  free(h->data);
  free(h);
}

static void ac_done(void *arg) {
  rconn *c = arg;
  c->ac = NULL;
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
  uv_timer_t *timer = malloc(sizeof *timer);
  redisAsyncContext *ac = c && timer ? redisAsyncConnect(o->addr, o->port) : NULL;
  if (!ac || ac->err || redis_uv_attach(ac, loop, ac_done, c)) {
    *why = ac && ac->err ? "cannot connect" : "out of memory";
    if (ac)
      redisAsyncFree(ac); /* before attach, or with it: ac_done does not run */
    free(c);
    free(timer);
    return NULL;
  }
  c->o = *o;
  c->ac = ac;
  c->timer = timer;
  timer->data = c;
  uv_timer_init(loop, timer);
  uv_timer_start(timer, on_timeout, (uint64_t)o->connect_timeout_ms, 0);
  ac->data = c;
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
