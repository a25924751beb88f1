/*
 * redis_wait.c - wait_replicas=N: a transition is answered only once N
 * replicas have it.
 *
 * Redis replicates asynchronously: a primary that acknowledged a claim and
 * then failed before its replica got the write takes the claim with it, the
 * promoted replica has never seen the key, and a retry runs a second time.
 * WAIT N T blocks the client until N replicas acknowledge every write the
 * connection made before it, or T passes, and says how many did.
 *
 * One WAIT per turn of the loop, not per operation: the transitions sent in
 * a turn go out back to back and one WAIT follows them (sent from a
 * uv_prepare, at the end of the turn), so they share one replication round
 * trip. Replies come in order on the connection, so when a WAIT's reply
 * arrives every transition sent before it has been answered: those waiting
 * in rs->replicating are all covered by it. Fewer replicas than N, an error
 * or a lost connection fail them with IDEM_ESTORE (or the loss's code): the
 * write may be on the primary alone, and the client is told nothing was
 * promised. A claim failed this way keeps its lease, so a retry meanwhile is
 * busy, never a second run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

static void finish_all(rstore *rs, int err) {
  idem_queue *node;
  while ((node = idem_queue_pop(&rs->replicating)) != NULL) {
    idem_req *req = idem_req_of(node);
    if (err) {
      idem_result_clear(&req->result);
      memset(&req->result, 0, sizeof req->result);
    }
    redis_req_done(rs, req, err);
  }
}

static void wait_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  int err = 0;
  if (r == NULL) {
    err = redis_lost_error(c);
  } else if (r->type != REDIS_REPLY_INTEGER || r->integer < rs->uri.wait_replicas) {
    char got[360];
    if (r->type == REDIS_REPLY_INTEGER)
      snprintf(got, sizeof got, "replicas acknowledged %lld of %d", (long long)r->integer,
               rs->uri.wait_replicas);
    else if (r->type == REDIS_REPLY_ERROR) /* NOPERM: the ACL lacks +wait */
      snprintf(got, sizeof got, "refused: %.300s", r->str);
    else
      snprintf(got, sizeof got, "an answer that is not a count of replicas");
    redis_note(rs, "WAIT: %s", got);
    err = IDEM_ESTORE;
  }
  free(c);
  finish_all(rs, err);
}

static void on_prepare(uv_prepare_t *p) {
  rstore *rs = p->data;
  uv_prepare_stop(p);
  cmd *c = redis_cmd_new(rs, NULL, wait_answered);
  char n[16], ms[24];
  snprintf(n, sizeof n, "%d", rs->uri.wait_replicas);
  snprintf(ms, sizeof ms, "%lld", (long long)rs->uri.wait_timeout_ms);
  const char *argv[] = {"WAIT", n, ms};
  size_t lens[] = {4, strlen(n), strlen(ms)};
  if (c && redis_send_argv(rs, c, 3, argv, lens) == 0)
    return;
  /* not sent: the transitions before it were not sent either, or have
   * failed with the connection; any already answered cannot be vouched for */
  free(c);
  finish_all(rs, IDEM_ESTORE);
}

int redis_wait_wanted(const rstore *rs, idem_op_kind kind) {
  return rs->uri.wait_replicas > 0 &&
         (kind == IDEM_OP_CLAIM || kind == IDEM_OP_COMPLETE || kind == IDEM_OP_FAIL ||
          kind == IDEM_OP_RELEASE);
}

void redis_wait_after_sent(rstore *rs) {
  if (!uv_is_active((uv_handle_t *)&rs->wait_prepare))
    uv_prepare_start(&rs->wait_prepare, on_prepare);
}

void redis_wait_hold(rstore *rs, idem_req *req) {
  idem_queue_insert_tail(&rs->replicating, &req->node);
}
