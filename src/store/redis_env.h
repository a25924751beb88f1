/*
 * redis_env.h - internals shared by the Redis store's files, each using
 * only the ones listed after it:
 *   redis.c        the backend: open, submit, close; a transition's command
 *                  and its reply
 *   redis_list.c   LIST: SCAN, sort, read in batches
 *   redis_cmd.c    commands in flight: sending, deadlines, the reply callback
 *   redis_reply.c  script replies as records and IDEM_E codes
 *   redis_wait.c   wait_replicas: one WAIT per loop turn before answering
 *   redis_cache.c  the cache tier's GET, SET and DEL (a shared --cache)
 *   redis_conn.c   the connection's state machine, reconnection, and the
 *                  handle's lifetime
 *   redis_uv.c     hiredis on a libuv loop
 * (redis_uri.c and redis_scripts.c, which need no hiredis, share redis.h;
 * the Cluster router's files, redis_cluster.h.)
 */
#ifndef IDEM_STORE_REDIS_ENV_H
#define IDEM_STORE_REDIS_ENV_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <uv.h>

#include "store/backend.h"
#include "store/backoff.h"
#include "store/lookup.h"
#include "core/queue.h"
#include "store/redis.h"
#include "store/redis_uv.h"

/* The most of an answer a Redis store keeps: its proto-max-bulk-len's
 * default, 512 MiB, the longest argument it takes (each of the answer's
 * headers and body is one; an encoded record is one, for a cache). A longer
 * one makes the server drop the connection. */
#define REDIS_ANSWER_MAX ((size_t)512 << 20)

typedef enum { R_DOWN, R_CONNECTING, R_UP } rstate;

typedef struct rstore rstore;
typedef struct cmd cmd;
typedef struct list_ctx list_ctx;

/* Whom a connection answers to. The redis:// backend's own connection has
 * none (rs->owner NULL): its reqs finish to their store, and the store is
 * closed with it. The redis+cluster:// router (redis_cluster.c) holds one
 * connection per node and sets these. */
typedef struct {
  /* req, one the connection held, is answered (err 0) or failed */
  void (*done)(rstore *rs, idem_req *req, int err);
  /* the node answered MOVED or ASK (reply: the error's text): req did not
   * run, and is the owner's again */
  void (*redirected)(rstore *rs, idem_req *req, const char *reply);
  /* the connection is released */
  void (*closed)(void *owner_data);
  /* the connection was lost (it reconnects by itself): a Cluster node that
   * went away may have been failed over, with no request there to say so */
  void (*dropped)(rstore *rs);
  /* a Cluster node: ROLE is not asked (a replica redirects to its primary,
   * where a lone server's replica would refuse writes) */
  int any_role;
} redis_owner;

struct rstore {
  idem_store *store;
  uv_loop_t *loop;
  idem_redis_uri uri;
  const redis_owner *owner; /* NULL: the redis:// backend's (see above) */
  void *owner_data;
  const char *sha;
  /* Runs a req on the connection once it is UP (redis.c): the connection
   * calls it for the reqs that waited for it. */
  void (*start)(rstore *rs, idem_req *req);
  redisAsyncContext *ac;
  rstate state;
  int closing;
  int handshake_left;   /* replies still awaited before UP */
  int reconnect_soon;   /* a reply said this server cannot take writes */
  idem_backoff backoff;
  uv_timer_t conn_timer; /* connect timeout while CONNECTING, backoff while DOWN */
  uv_timer_t cmd_timer;  /* deadline of the oldest command in flight */
  int timers_open;
  int resolves_open;     /* 1 while a lookup of the host is out (one at a time) */
  idem_addr_text addrs[IDEM_LOOKUP_MAX]; /* the last lookup's, in order */
  int naddrs, next_addr;
  idem_slow_addrs slow; /* addresses that timed out: tried last */
  int addrs_ready;       /* the last lookup ended after its attempt: unused */
  idem_queue waiting; /* reqs submitted while CONNECTING */
  idem_queue flight;  /* cmds in flight, in the order sent */
  idem_queue replicating; /* reqs answered, waiting for a WAIT (redis_wait.c) */
  uv_prepare_t wait_prepare; /* sends that WAIT at the end of the loop turn */
  size_t held;        /* reqs not yet finished */
  char last_error[160];
};

/* Called with the command's reply, or with NULL when it will never come
 * (the connection is gone); frees c, or sends it again. */
typedef void cmd_answered_fn(cmd *c, const redisReply *r);

/* One command sent for a req: a transition, get or delete (redis.c), or a
 * SCAN or get of a LIST (redis_list.c). */
struct cmd {
  rstore *rs;
  idem_req *req;
  cmd_answered_fn *answered;
  int eval;          /* sent as EVAL after a NOSCRIPT: not sent again */
  int timed_out;
  uint64_t deadline; /* uv_now */
  idem_queue node;   /* in rs->flight */
  list_ctx *list;
  size_t index;      /* a LIST get: its candidate */
};

/* ---- redis.c */
/* A connection to uri (taken: the caller's copy is cleared) for store, on
 * store's loop, answering to owner (NULL: the store itself). It starts
 * connecting at once. NULL when out of memory. */
rstore *redis_rs_open(idem_store *store, idem_redis_uri *uri, const redis_owner *owner,
                      void *owner_data);
/* Run req on the connection (loop thread). */
void redis_rs_submit(rstore *rs, idem_req *req);
/* Let what is in flight finish, then release it (owner->closed). */
void redis_rs_close(rstore *rs);

/* ---- redis_cmd.c */
/* A command for req, answered by answered; NULL when out of memory. */
cmd *redis_cmd_new(rstore *rs, idem_req *req, cmd_answered_fn *answered);
/* Send c (the connection is UP) and watch its deadline; IDEM_ESTORE when
 * it cannot be sent, and c is then still the caller's. */
int redis_send_argv(rstore *rs, cmd *c, int argc, const char **argv, const size_t *lens);
/* EVALSHA (EVAL when eval) of the script for the record named name. */
int redis_send_script(rstore *rs, cmd *c, const char *name, size_t name_len,
                      idem_op_kind kind, int eval);
/* The error for a command whose reply will never come. */
int redis_lost_error(const cmd *c);

/* ---- redis_reply.c */
/* The ten stored fields of a script reply, from element 4 on: the record
 * borrows the reply's strings. */
int redis_decode_record(redisReply *const *e, idem_record *rec);
/* A script reply for a transition, get or delete into req->result. */
int redis_decode_op(rstore *rs, idem_req *req, const redisReply *r);
/* An error reply as an IDEM_E code (noted, and a reconnection asked for
 * when the server cannot take writes). */
int redis_error_reply(rstore *rs, const redisReply *r);
/* NOSCRIPT: the script was not run, so it may be sent again as EVAL. */
int redis_is_noscript(const redisReply *r);
/* MOVED or ASK (a Cluster node that does not serve the key's slot): the
 * command was not run. */
int redis_is_redirect(const redisReply *r);

/* ---- redis_cache.c */
/* Run an IDEM_OP_CACHE_* req (the connection is UP). */
void redis_cache_start(rstore *rs, idem_req *req);

/* ---- redis_wait.c */
/* Whether an operation of kind waits for replicas (wait_replicas > 0). */
int redis_wait_wanted(const rstore *rs, idem_op_kind kind);
/* A transition that waits was sent: a WAIT follows at the end of the turn. */
void redis_wait_after_sent(rstore *rs);
/* Its reply is decoded into req: hold req until that WAIT says enough. */
void redis_wait_hold(rstore *rs, idem_req *req);

/* ---- redis_conn.c */
/* DOWN -> CONNECTING (resolve the host, then connect). */
void redis_conn_start(rstore *rs);
/* Give up the connection (why: logged) and schedule the next attempt. */
void redis_conn_drop(rstore *rs, const char *why);
/* Log a change of situation once, not once per attempt. */
void redis_note(rstore *rs, const char *fmt, const char *detail);
/* Finish or fail req, one the handle held; closing may then end. */
void redis_req_done(rstore *rs, idem_req *req, int err);
/* When closing and nothing is held any more: release it all, then
 * idem_backend_closed. */
void redis_maybe_teardown(rstore *rs);

/* ---- redis_list.c */
void redis_list_start(rstore *rs, idem_req *req);


#endif
