/*
 * redis_cluster.c - the redis+cluster:// store: records spread over the
 * primaries of a Redis Cluster by hash slot. This file is the backend
 * (open, submit, close) and the route of a req; redis_cluster.h lists the
 * others.
 *
 * A record's Redis key is its own hash tag (idem_redis_key), so every
 * transition is one script on the one primary that serves its slot: the
 * same script, WAIT and reconnection rules as redis://, on one connection
 * per primary (redis_rs_open). The router only picks the connection:
 *   - from the slot map (CLUSTER SLOTS, redis_cluster_map.c), asked at
 *     open and again after a redirection or a node's error;
 *   - MOVED: the slot has a new owner; the map learns it at once and the
 *     req goes there (the node did not run it);
 *   - ASK: the slot is being migrated and this key is already on the
 *     target; the req goes there once, preceded by ASKING;
 *   - a primary that is down fails its slots' reqs at once (IDEM_ESTORE,
 *     the caller's fail-closed or fail-open policy), and the map is asked
 *     again every few 100ms until it names the promoted replica.
 * Reqs submitted before the first map wait for it, at most connect_timeout;
 * so do reqs redirected more than twice, for the next map.
 */
#include <stdlib.h>

#include "store/redis_cluster.h"

/* Redirections a req follows at once; past them it waits for the next map
 * (a migration's last step reaches the nodes one by one, and meanwhile two
 * can send a key back and forth); past the most, it fails. */
#define REDIRECTS_AT_ONCE 2
#define MAX_REDIRECTS 16

/* ---- routing ---------------------------------------------------------------- */

static void route(rcluster *cl, idem_req *req) {
  if (!cl->have_map) {
    if (uv_now(cl->loop) < cl->opened_at + (uint64_t)cl->uri.connect_timeout_ms) {
      idem_queue_insert_tail(&cl->waiting, &req->node);
      return;
    }
    cluster_refresh_soon(cl);
    idem_req_fail(req, IDEM_ESTORE);
    return;
  }
  if (req->op.kind == IDEM_OP_GC) { /* Redis expires records itself; a map says it answers */
    idem_req_finish(req);
    return;
  }
  if (req->op.kind == IDEM_OP_LIST) {
    cluster_list_start(cl, req);
    return;
  }
  size_t len;
  char *name = idem_redis_key(cl->uri.prefix, req->op.scope, req->op.key, &len);
  if (name == NULL) {
    idem_req_fail(req, IDEM_ENOMEM);
    return;
  }
  cnode *n = cl->slots[idem_redis_slot(name, len)];
  free(name);
  if (n == NULL) { /* a slot no primary serves: the cluster is incomplete */
    cluster_refresh_soon(cl);
    idem_req_fail(req, IDEM_ESTORE);
    return;
  }
  redis_rs_submit(n->rs, req);
}

static void close_now(rcluster *cl);

/* A map has come: route what waited for it. */
static void map_came(rcluster *cl) {
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&cl->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    route(cl, req);
  if (cl->close_asked)
    close_now(cl);
}

/* No map came in time, or the store closes: fail what waited. */
static void wait_ended(rcluster *cl) {
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&cl->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    idem_req_fail(req, cl->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  if (cl->close_asked && !cl->closing)
    close_now(cl);
}

/* ---- what the nodes answer --------------------------------------------------- */

static void node_done(rstore *rs, idem_req *req, int err) {
  cnode *n = rs->owner_data;
  if (cluster_list_part_done(req, err))
    return;
  req->asking = 0;
  /* a node gone, or refusing: the map may have changed under us */
  if (err == IDEM_ESTORE || err == IDEM_ETIMEDOUT)
    cluster_refresh_soon(n->cl);
  if (err)
    idem_req_fail(req, err);
  else
    idem_req_finish(req);
}

static void node_redirected(rstore *rs, idem_req *req, const char *reply) {
  cnode *from = rs->owner_data;
  rcluster *cl = from->cl;
  unsigned slot;
  char host[256];
  int port;
  if (cl->closing) {
    idem_req_fail(req, IDEM_ECLOSED); /* it did not run */
    return;
  }
  if (++req->redirects > REDIRECTS_AT_ONCE && req->redirects <= MAX_REDIRECTS) {
    req->asking = 0; /* the next map routes it afresh */
    idem_queue_insert_tail(&cl->waiting, &req->node);
    cluster_refresh_soon(cl);
    return;
  }
  if (req->redirects > MAX_REDIRECTS ||
      idem_redis_redirect_parse(reply, &slot, host, sizeof host, &port)) {
    redis_note(rs, "redirection not followed: %s", reply);
    cluster_refresh_soon(cl);
    idem_req_fail(req, IDEM_ESTORE);
    return;
  }
  cnode *to = cluster_node(cl, host[0] ? host : rs->uri.host, port);
  if (to == NULL) {
    idem_req_fail(req, IDEM_ENOMEM);
    return;
  }
  req->asking = reply[0] == 'A';
  if (!req->asking) { /* MOVED: the slot is to's from now on */
    cl->slots[slot] = to;
    cluster_refresh_soon(cl);
  }
  redis_rs_submit(to->rs, req);
}

/* ---- open, submit, close ------------------------------------------------------- */

static void maybe_teardown(rcluster *cl);

static void node_closed(void *owner_data) {
  cnode *n = owner_data;
  rcluster *cl = n->cl;
  idem_queue_remove(&n->node);
  free(n);
  maybe_teardown(cl);
}

/* A node's connection lost: the map is asked again now (and every few 100ms
 * while a primary of it is not connected), so that a failover is learnt
 * before the next request for those slots, even on an idle gateway. */
static void node_dropped(rstore *rs) {
  cnode *n = rs->owner_data;
  if (n->in_map)
    cluster_refresh_soon(n->cl);
}

static const redis_owner cluster_owner = {node_done, node_redirected, node_closed, node_dropped,
                                          1};

static void on_timer_closed(uv_handle_t *h) {
  rcluster *cl = h->data;
  idem_store *store = cl->store;
  idem_redis_uri_clear(&cl->uri);
  free(cl);
  idem_backend_closed(store);
}

/* Closing ends once every node has closed (each lets its reqs finish). */
static void maybe_teardown(rcluster *cl) {
  if (!cl->closing || !idem_queue_empty(&cl->nodes) || !cl->timer_open)
    return;
  cl->timer_open = 0;
  uv_close((uv_handle_t *)&cl->refresh_timer, on_timer_closed);
}

static void cluster_submit(idem_store *store, idem_req *req) {
  rcluster *cl = store->impl;
  uv_update_time(cl->loop); /* an idle loop's (idem_sync) "now" is stale */
  route(cl, req);
}

/* Reqs submitted before the first map still wait for it (at most
 * connect_timeout), as a close lets what is in flight finish; reqs waiting
 * for a later map fail, unrun. */
static void cluster_close(idem_store *store) {
  rcluster *cl = store->impl;
  if (!cl->have_map && !idem_queue_empty(&cl->waiting)) {
    cl->close_asked = 1; /* map_came or wait_ended closes */
    return;
  }
  close_now(cl);
}

static void close_now(rcluster *cl) {
  if (cl->closing)
    return;
  cl->close_asked = 0;
  cl->closing = 1;
  uv_timer_stop(&cl->refresh_timer);
  wait_ended(cl);
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (!n->closing) {
      n->closing = 1;
      redis_rs_close(n->rs); /* may call node_closed, later, never inside */
    }
  }
  maybe_teardown(cl);
}

static int cluster_check(const char *uri, char **errmsg) {
  idem_redis_uri parsed;
  int err = idem_redis_cluster_uri_parse(uri, &parsed, errmsg);
  if (!err)
    idem_redis_uri_clear(&parsed);
  return err;
}

static int cluster_open(idem_store *store, const char *uri, char **errmsg) {
  rcluster *cl = calloc(1, sizeof *cl);
  if (cl == NULL)
    return IDEM_ENOMEM;
  int err = idem_redis_cluster_uri_parse(uri, &cl->uri, errmsg);
  if (err) {
    free(cl);
    return err;
  }
  cl->store = store;
  cl->loop = store->loop;
  idem_queue_init(&cl->nodes);
  idem_queue_init(&cl->waiting);
  cl->node_owner = &cluster_owner;
  cl->map_came = map_came;
  cl->wait_ended = wait_ended;
  for (size_t i = 0; i < cl->uri.nseeds; i++)
    cluster_node(cl, cl->uri.seeds[i].host, cl->uri.seeds[i].port);
  if (idem_queue_empty(&cl->nodes)) { /* out of memory for every seed: nothing to undo */
    idem_redis_uri_clear(&cl->uri);
    free(cl);
    return IDEM_ENOMEM;
  }
  uv_timer_init(cl->loop, &cl->refresh_timer);
  cl->refresh_timer.data = cl;
  cl->timer_open = 1;
  uv_update_time(cl->loop);
  cl->opened_at = uv_now(cl->loop);
  store->impl = cl;
  cluster_refresh_soon(cl);
  return 0;
}

const idem_backend idem_backend_redis_cluster = {"redis+cluster", cluster_check, cluster_open,
                                                 cluster_submit, cluster_close, REDIS_ANSWER_MAX};
