/*
 * redis_cluster_map.c - which primary serves which slot: the nodes the
 * router speaks to, and CLUSTER SLOTS asked and applied.
 *
 * The map is asked for at open, after a MOVED (which says the map has
 * changed, so more than one slot may have), after a node's error or
 * timeout, and every DEGRADED_EVERY_MS while a primary of the map is not
 * connected: that is how a failover is seen, when a surviving node names
 * the promoted replica. One CLUSTER SLOTS at a time, at most one every
 * REFRESH_GAP_MS, sent to a primary that is connected. A reply that cannot
 * be read keeps the map as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_cluster.h"

#define REFRESH_GAP_MS 100     /* at most one CLUSTER SLOTS per this */
#define DEGRADED_EVERY_MS 250  /* while a primary of the map is not up */
#define FIRST_MAP_POLL_MS 10   /* before the first map: until a seed is up */

/* ---- nodes ------------------------------------------------------------------- */

cnode *cluster_node(rcluster *cl, const char *host, int port) {
  char addr[sizeof ((cnode *)0)->addr];
  if (snprintf(addr, sizeof addr, "%s:%d", host, port) >= (int)sizeof addr)
    return NULL;
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (!n->closing && strcmp(n->addr, addr) == 0)
      return n;
  }
  cnode *n = calloc(1, sizeof *n);
  idem_redis_uri uri;
  if (n == NULL || idem_redis_uri_for_node(&cl->uri, host, port, &uri)) {
    free(n);
    return NULL;
  }
  n->cl = cl;
  memcpy(n->addr, addr, sizeof addr);
  n->rs = redis_rs_open(cl->store, &uri, cl->node_owner, n);
  if (n->rs == NULL) {
    idem_redis_uri_clear(&uri);
    free(n);
    return NULL;
  }
  idem_queue_insert_tail(&cl->nodes, &n->node);
  return n;
}

/* A primary of the map that is not connected (or no map yet). */
static int degraded(const rcluster *cl) {
  if (!cl->have_map)
    return 1;
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (n->in_map && n->rs->state != R_UP)
      return 1;
  }
  return 0;
}

/* A connected node to ask, a primary of the map first. */
static cnode *node_to_ask(const rcluster *cl) {
  cnode *any = NULL;
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (n->closing || n->rs->state != R_UP)
      continue;
    if (n->in_map)
      return n;
    if (!any)
      any = n;
  }
  return any;
}

/* ---- CLUSTER SLOTS --------------------------------------------------------- */

/* One range of the reply: [start, end, [host, port, id, ...], replicas...].
 * An empty or unknown ("?") host is the asked node's own. */
static int read_range(const redisReply *e, const char *asked_host, long long *start,
                      long long *end, const char **host, long long *port) {
  if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
      e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
    return -1;
  const redisReply *primary = e->element[2];
  if (primary->type != REDIS_REPLY_ARRAY || primary->elements < 2 ||
      primary->element[0]->type != REDIS_REPLY_STRING ||
      primary->element[1]->type != REDIS_REPLY_INTEGER)
    return -1;
  *start = e->element[0]->integer;
  *end = e->element[1]->integer;
  *port = primary->element[1]->integer;
  *host = primary->element[0]->str;
  if ((*host)[0] == '\0' || strcmp(*host, "?") == 0)
    *host = asked_host;
  return *start < 0 || *end < *start || *end >= IDEM_REDIS_SLOTS || *port <= 0 ||
                 *port > 65535 || strlen(*host) > 255
             ? -1
             : 0;
}

/* Nodes that no slot names any more close (once idle). */
static void close_unmapped(rcluster *cl) {
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    n->in_map = 0;
  }
  for (size_t s = 0; s < IDEM_REDIS_SLOTS; s++)
    if (cl->slots[s])
      cl->slots[s]->in_map = 1;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (!n->in_map && !n->closing) {
      n->closing = 1;
      redis_rs_close(n->rs);
    }
  }
}

/* Replace the map with the reply's. -1 (map unchanged) when the reply is
 * malformed or names no slot (a node not yet in a cluster). */
static int apply_slots(rcluster *cl, const rstore *asked, const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
    return -1;
  long long start, end, port;
  const char *host;
  for (size_t i = 0; i < r->elements; i++)
    if (read_range(r->element[i], asked->uri.host, &start, &end, &host, &port))
      return -1;
  cnode **next = calloc(IDEM_REDIS_SLOTS, sizeof *next);
  if (next == NULL)
    return -1;
  for (size_t i = 0; i < r->elements; i++) {
    read_range(r->element[i], asked->uri.host, &start, &end, &host, &port);
    cnode *n = cluster_node(cl, host, (int)port);
    for (long long s = start; n && s <= end; s++)
      next[s] = n;
  }
  memcpy(cl->slots, next, sizeof cl->slots);
  free(next);
  close_unmapped(cl);
  return 0;
}

static void schedule(rcluster *cl, uint64_t after_ms) {
  if (!cl->closing && !uv_is_active((uv_handle_t *)&cl->refresh_timer))
    uv_timer_start(&cl->refresh_timer, cluster_on_refresh, after_ms, 0);
}

static void slots_answered(cmd *c, const redisReply *r) {
  cnode *asked = c->rs->owner_data;
  rcluster *cl = asked->cl;
  cl->refresh_in_flight = 0;
  if (!cl->closing && r && r->type == REDIS_REPLY_ERROR)
    redis_note(c->rs, "CLUSTER SLOTS refused: %s", r->str);
  int applied = !cl->closing && r && apply_slots(cl, c->rs, r) == 0;
  free(c);
  if (cl->closing)
    return;
  cl->have_map |= applied;
  if (cl->have_map)
    cl->map_came(cl); /* what waited for a map, first or next */
  if (cl->refresh_again) {
    cl->refresh_again = 0;
    schedule(cl, REFRESH_GAP_MS);
  } else if (!cl->have_map) {
    schedule(cl, FIRST_MAP_POLL_MS);
  } else if (degraded(cl)) {
    schedule(cl, DEGRADED_EVERY_MS);
  }
}

void cluster_on_refresh(uv_timer_t *t) {
  rcluster *cl = t->data;
  if (cl->closing || cl->refresh_in_flight)
    return;
  uint64_t now = uv_now(cl->loop);
  int expired = now >= cl->opened_at + (uint64_t)cl->uri.connect_timeout_ms;
  if (!cl->have_map && expired)
    cl->wait_ended(cl);
  cnode *n = node_to_ask(cl);
  cmd *c = n ? redis_cmd_new(n->rs, NULL, slots_answered) : NULL;
  const char *argv[] = {"CLUSTER", "SLOTS"};
  size_t lens[] = {7, 5};
  if (c && redis_send_argv(n->rs, c, 2, argv, lens) == 0) {
    cl->refresh_in_flight = 1;
    cl->refreshed_at = now;
    return;
  }
  free(c);
  /* no node to ask: what waits for the next map goes by this one (its
   * nodes fail it, or redirect it again, up to the most) rather than wait
   * on for a node to come back */
  if (cl->have_map)
    cl->map_came(cl);
  schedule(cl, cl->have_map || expired ? REFRESH_GAP_MS : FIRST_MAP_POLL_MS);
}

void cluster_refresh_soon(rcluster *cl) {
  if (cl->closing)
    return;
  if (cl->refresh_in_flight) {
    cl->refresh_again = 1;
    return;
  }
  uint64_t now = uv_now(cl->loop), due = cl->refreshed_at + REFRESH_GAP_MS;
  schedule(cl, due > now ? due - now : 0);
}
