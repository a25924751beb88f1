/*
 * redis.c - the redis:// store: one Redis shared by every gateway and
 * consumer process that points at it. This file is the backend (open,
 * submit, close) and a transition's command and reply; redis_env.h lists
 * the others.
 *
 * Cluster: every script touches one key, and that key is its own hash tag,
 * so each record lives in one slot. redis+cluster:// (redis_cluster.c)
 * routes each req to its slot's primary over connections made here, and
 * takes back the reqs a node redirects (MOVED, ASK).
 *
 * Every transition is one run of the Lua script in redis_scripts.c (EVALSHA,
 * and EVAL when the server answers NOSCRIPT, which means it did not run), so
 * the server's clock and the server's atomicity decide, never ours. One
 * hiredis async connection per handle, on the handle's libuv loop
 * (redis_conn.c).
 *
 * Operations submitted while a connection attempt is under way wait for
 * its outcome, at most the connect timeout (so a store is usable as soon as
 * it is opened); while DOWN, between attempts, they fail at once with
 * IDEM_ESTORE: failing closed or open is the caller's policy, and a fast
 * answer is what it needs to apply it. A lost connection
 * fails every operation in flight with IDEM_ESTORE (or IDEM_ETIMEDOUT for
 * the one that timed out): a transition whose reply was lost may or may not
 * have run, so it is never sent again.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

#define BACKOFF_MIN_MS 100 /* reconnection: doubling, jittered (backoff.h) */
#define BACKOFF_MAX_MS 2000

/* The reply to a transition, get or delete. */
static void op_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  idem_req *req = c->req;
  if (r == NULL) {
    int err = redis_lost_error(c);
    free(c);
    redis_req_done(rs, req, err);
    return;
  }
  if (rs->owner && redis_is_redirect(r)) { /* not run: the router sends it on */
    free(c);
    rs->held--;
    rs->owner->redirected(rs, req, r->str);
    redis_maybe_teardown(rs);
    return;
  }
  if (redis_is_noscript(r) && !c->eval && req->op.kind != IDEM_OP_DELETE) {
    /* did not run: safe to send again, as EVAL (which also caches it) */
    size_t name_len;
    char *name = idem_redis_key(rs->uri.prefix, req->op.scope, req->op.key, &name_len);
    c->eval = 1;
    int err = name ? redis_send_script(rs, c, name, name_len, req->op.kind, 1) : IDEM_ENOMEM;
    free(name);
    if (err == 0 && redis_wait_wanted(rs, req->op.kind))
      redis_wait_after_sent(rs);
    if (err == 0)
      return;
    free(c);
    redis_req_done(rs, req, err);
    return;
  }
  free(c);
  int err = redis_decode_op(rs, req, r);
  if (err) {
    idem_result_clear(&req->result);
    memset(&req->result, 0, sizeof req->result);
  } else if (redis_wait_wanted(rs, req->op.kind)) {
    redis_wait_hold(rs, req);
    return;
  }
  redis_req_done(rs, req, err);
}

/* Send a transition (or get, delete) for req: the connection is UP. */
static void start_op(rstore *rs, idem_req *req) {
  size_t name_len;
  char *name = idem_redis_key(rs->uri.prefix, req->op.scope, req->op.key, &name_len);
  cmd *c = redis_cmd_new(rs, req, op_answered);
  int err = IDEM_ENOMEM;
  if (name && c) {
    if (req->op.kind == IDEM_OP_DELETE) {
      const char *argv[] = {"DEL", name};
      size_t lens[] = {3, name_len};
      err = redis_send_argv(rs, c, 2, argv, lens);
    } else {
      err = redis_send_script(rs, c, name, name_len, req->op.kind, 0);
      if (err == 0 && redis_wait_wanted(rs, req->op.kind))
        redis_wait_after_sent(rs);
    }
  }
  free(name);
  if (err) {
    free(c);
    redis_req_done(rs, req, err);
  }
}

static void start_any(rstore *rs, idem_req *req) {
  if (req->op.kind >= IDEM_OP_CACHE_GET) { /* a shared cache's (backend.h) */
    redis_cache_start(rs, req);
    return;
  }
  switch (req->op.kind) {
  case IDEM_OP_LIST:
    redis_list_start(rs, req);
    break;
  case IDEM_OP_GC:
    /* Redis expires records itself, at expires_at: nothing to collect */
    redis_req_done(rs, req, 0);
    break;
  default:
    start_op(rs, req);
  }
}

void redis_rs_submit(rstore *rs, idem_req *req) {
  rs->held++;
  /* Deadlines count from uv_now, which a loop that was idle (idem_sync
   * between operations) has not moved on: a stale "now" would time out a
   * command the moment it is sent. */
  uv_update_time(rs->loop);
  if (rs->state == R_DOWN && uv_is_active((uv_handle_t *)&rs->conn_timer)) {
    /* A caller that runs the loop only while it waits (idem_sync) would
     * otherwise never see the backoff timer fire before its next submit. */
    if (uv_timer_get_due_in(&rs->conn_timer) == 0) {
      uv_timer_stop(&rs->conn_timer);
      redis_conn_start(rs);
    }
  }
  if (rs->state == R_UP) {
    start_any(rs, req);
  } else if (rs->state == R_CONNECTING) {
    idem_queue_insert_tail(&rs->waiting, &req->node);
  } else if (req->op.kind == IDEM_OP_GC) {
    redis_req_done(rs, req, 0);
  } else {
    redis_req_done(rs, req, IDEM_ESTORE);
  }
}

static void redis_submit(idem_store *store, idem_req *req) {
  redis_rs_submit(store->impl, req);
}

void redis_rs_close(rstore *rs) {
  rs->closing = 1;
  if (rs->state != R_UP && !(rs->state == R_CONNECTING && !idem_queue_empty(&rs->waiting)))
    uv_timer_stop(&rs->conn_timer);
  redis_maybe_teardown(rs);
}

static void redis_close(idem_store *store) {
  redis_rs_close(store->impl);
}

rstore *redis_rs_open(idem_store *store, idem_redis_uri *uri, const redis_owner *owner,
                      void *owner_data) {
  rstore *rs = calloc(1, sizeof *rs);
  if (rs == NULL)
    return NULL;
  /* A write to a socket whose server went away raises SIGPIPE, which would
   * kill the process. Ignore it unless the program chose a handler. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  rs->uri = *uri;
  memset(uri, 0, sizeof *uri);
  rs->owner = owner;
  rs->owner_data = owner_data;
  rs->store = store;
  rs->loop = store->loop;
  idem_queue_init(&rs->waiting);
  idem_queue_init(&rs->flight);
  idem_queue_init(&rs->replicating);
  rs->sha = idem_redis_script_sha();
  idem_backoff_init(&rs->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS, idem_backoff_seed(rs));
  uv_timer_init(rs->loop, &rs->conn_timer);
  uv_timer_init(rs->loop, &rs->cmd_timer);
  uv_prepare_init(rs->loop, &rs->wait_prepare);
  rs->conn_timer.data = rs->cmd_timer.data = rs->wait_prepare.data = rs;
  rs->timers_open = 3;
  rs->start = start_any;
  redis_conn_start(rs);
  return rs;
}

static int redis_check(const char *uri, char **errmsg) {
  idem_redis_uri parsed;
  int err = idem_redis_uri_parse(uri, &parsed, errmsg);
  if (!err)
    idem_redis_uri_clear(&parsed);
  return err;
}

static int redis_open(idem_store *store, const char *uri, char **errmsg) {
  idem_redis_uri parsed;
  int err = idem_redis_uri_parse(uri, &parsed, errmsg);
  if (err)
    return err;
  store->impl = redis_rs_open(store, &parsed, NULL, NULL);
  if (store->impl == NULL) {
    idem_redis_uri_clear(&parsed);
    return IDEM_ENOMEM;
  }
  return 0;
}

const idem_backend idem_backend_redis = {"redis", redis_check, redis_open, redis_submit,
                                         redis_close, REDIS_ANSWER_MAX};
