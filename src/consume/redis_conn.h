/*
 * redis_conn.h - one hiredis async connection on a libuv loop, with its
 * handshake (AUTH, SELECT) done: what the Redis Streams broker holds two of
 * (one blocks in XREADGROUP, the other carries everything else). A
 * connection reports once that it is ready, or once that it is gone; it is
 * never reopened: the owner makes a new one.
 */
#ifndef IDEM_CONSUME_REDIS_CONN_H
#define IDEM_CONSUME_REDIS_CONN_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uv.h>

typedef struct rconn rconn;

typedef struct {
  const char *addr; /* numeric */
  int port;
  const char *user, *password; /* NULL when absent */
  int db;
  int64_t connect_timeout_ms;
  /* ready(arg, c): the handshake is done. gone(arg, c, why): failed or
   * lost (commands in flight got NULL replies first); c is freed after. */
  void (*ready)(void *arg, rconn *c);
  void (*gone)(void *arg, rconn *c, const char *why);
  void *arg;
} rconn_opts;

/* NULL when out of memory or the socket cannot be made (gone is not called
 * then; *why says it). */
rconn *rconn_open(uv_loop_t *loop, const rconn_opts *o, const char **why);

/* Send one command (argv form); fn(ac, reply, priv) runs exactly once,
 * with reply NULL when the connection is lost. Returns 0, or -1 when the
 * connection is down (fn is not called). */
int rconn_send(rconn *c, int argc, const char **argv, const size_t *lens,
               redisCallbackFn *fn, void *priv);

/* Close: commands in flight get NULL replies, gone is not called. */
void rconn_close(rconn *c);

#endif
