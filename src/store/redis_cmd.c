/*
 * redis_cmd.c - the commands in flight on the Redis connection: sending,
 * deadlines, and the one reply callback that hands each reply to the
 * command's owner (cmd.answered).
 *
 * Commands are answered in order on one connection, so the oldest command
 * in flight always has the nearest deadline: one timer watches it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

/* The oldest command in flight, or NULL. */
static cmd *oldest_cmd(const rstore *rs) {
  idem_queue *node = idem_queue_head(&rs->flight);
  return node ? IDEM_QUEUE_DATA(node, cmd, node) : NULL;
}

static void arm_cmd_timer(rstore *rs);

static void on_cmd_timer(uv_timer_t *t) {
  rstore *rs = t->data;
  cmd *c = oldest_cmd(rs);
  if (c == NULL)
    return;
  if (uv_now(rs->loop) >= c->deadline) {
    /* the server or the network hangs: everything behind this command is
     * stuck too. Fail them all and start over on a new connection. */
    c->timed_out = 1;
    redis_conn_drop(rs, "command timed out");
    return;
  }
  arm_cmd_timer(rs);
}

static void arm_cmd_timer(rstore *rs) {
  cmd *oldest = oldest_cmd(rs);
  if (oldest == NULL) {
    uv_timer_stop(&rs->cmd_timer);
    return;
  }
  uint64_t now = uv_now(rs->loop), at = oldest->deadline;
  uv_timer_start(&rs->cmd_timer, on_cmd_timer, at > now ? at - now : 0, 0);
}

static void flight_add(rstore *rs, cmd *c) {
  c->deadline = uv_now(rs->loop) + (uint64_t)rs->uri.timeout_ms;
  idem_queue_insert_tail(&rs->flight, &c->node);
  if (c == oldest_cmd(rs))
    arm_cmd_timer(rs);
}

static void flight_remove(rstore *rs, cmd *c) {
  int was_head = c == oldest_cmd(rs);
  idem_queue_remove(&c->node);
  if (was_head)
    arm_cmd_timer(rs);
}

/* The error for a command whose reply will never come. */
int redis_lost_error(const cmd *c) {
  /* sent: it may have run, so "unknown", never "closed" */
  return c->timed_out ? IDEM_ETIMEDOUT : IDEM_ESTORE;
}

/* The one hiredis callback of every command: take it out of the flight,
 * let its owner have the reply, then act on what the reply said of the
 * server. */
static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  cmd *c = privdata;
  rstore *rs = c->rs;
  flight_remove(rs, c);
  c->answered(c, reply); /* c is freed or sent again */
  if (rs->reconnect_soon && rs->ac == ac && reply != NULL) {
    rs->reconnect_soon = 0;
    redis_conn_drop(rs, "server cannot take writes");
  }
}

int redis_send_argv(rstore *rs, cmd *c, int argc, const char **argv, const size_t *lens) {
  if (rs->ac == NULL || rs->state != R_UP)
    return IDEM_ESTORE;
  /* a Cluster node importing the slot runs the next command only after
   * ASKING (its reply carries nothing: hiredis drops it) */
  if (c->req && c->req->asking && redisAsyncCommand(rs->ac, NULL, NULL, "ASKING") != REDIS_OK)
    return IDEM_ESTORE;
  if (redisAsyncCommandArgv(rs->ac, on_reply, c, argc, argv, lens) != REDIS_OK)
    return IDEM_ESTORE;
  flight_add(rs, c);
  return 0;
}

static const char *op_name(idem_op_kind kind) {
  switch (kind) {
  case IDEM_OP_CLAIM:
    return "claim";
  case IDEM_OP_COMPLETE:
    return "complete";
  case IDEM_OP_FAIL:
    return "fail";
  case IDEM_OP_RELEASE:
    return "release";
  default:
    return "get";
  }
}

/* EVALSHA sha 1 key op fp fence lease ttl flags status headers body (or EVAL
 * with the script text). */
int redis_send_script(rstore *rs, cmd *c, const char *name, size_t name_len,
                       idem_op_kind kind, int eval) {
  const idem_op *op = &c->req->op;
  char fence[24], lease[24], ttl[24], flags[16], status[16];
  snprintf(fence, sizeof fence, "%llu", (unsigned long long)op->fence);
  snprintf(lease, sizeof lease, "%lld", (long long)op->lease_ms);
  snprintf(ttl, sizeof ttl, "%lld", (long long)op->ttl_ms);
  snprintf(flags, sizeof flags, "%u", op->flags);
  snprintf(status, sizeof status, "%d", op->response.status);
  const char *opn = op_name(kind);
  int finish = kind == IDEM_OP_COMPLETE || kind == IDEM_OP_FAIL;
  const char *argv[] = {
      eval ? "EVAL" : "EVALSHA", eval ? idem_redis_script : rs->sha, "1", name, opn,
      (const char *)op->fingerprint, fence, lease, ttl, flags, status,
      finish && op->response.headers ? op->response.headers : "",
      finish && op->response.body ? op->response.body : ""};
  size_t lens[] = {
      eval ? 4 : 7, eval ? idem_redis_script_len : strlen(rs->sha), 1, name_len,
      strlen(opn), IDEM_FINGERPRINT_LEN, strlen(fence), strlen(lease), strlen(ttl),
      strlen(flags), strlen(status), finish ? op->response.headers_len : 0,
      finish ? op->response.body_len : 0};
  return redis_send_argv(rs, c, 13, argv, lens);
}

cmd *redis_cmd_new(rstore *rs, idem_req *req, cmd_answered_fn *answered) {
  cmd *c = calloc(1, sizeof *c);
  if (c) {
    c->rs = rs;
    c->req = req;
    c->answered = answered;
  }
  return c;
}
