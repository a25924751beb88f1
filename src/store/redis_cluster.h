/*
 * redis_cluster.h - internals of the redis+cluster:// store, shared by its
 * files, each using only the ones listed after it:
 *   redis_cluster.c       the backend: open, submit, close; a req routed
 *                         to its slot's primary, MOVED and ASK followed
 *   redis_cluster_map.c   the slot map: CLUSTER SLOTS asked and applied,
 *                         the nodes it names (a key's slot: redis_uri.c)
 *   redis_cluster_list.c  LIST: every primary's, merged
 *
 * The router owns no socket: each node is a connection of the Redis
 * store's own (redis_rs_open), which runs the same scripts, WAITs and
 * reconnections as redis:// and answers to the router (redis_owner).
 */
#ifndef IDEM_STORE_REDIS_CLUSTER_H
#define IDEM_STORE_REDIS_CLUSTER_H

#include "store/redis_env.h"

typedef struct rcluster rcluster;

/* A node the router speaks to: a seed, a primary of the map, or the
 * target of a redirection. */
typedef struct {
  rcluster *cl;
  rstore *rs;
  char addr[272];   /* host:port, as the cluster names it */
  int closing;      /* no longer in the map: closes once idle */
  int in_map;       /* serves a slot of the map (marking, while applying it) */
  idem_queue node;  /* in cl->nodes */
} cnode;

struct rcluster {
  idem_store *store;
  uv_loop_t *loop;
  idem_redis_uri uri;
  cnode *slots[IDEM_REDIS_SLOTS]; /* each slot's primary; NULL: unknown */
  int have_map;
  idem_queue nodes;       /* every cnode, closing ones included */
  idem_queue waiting;     /* reqs waiting for a map: the first, or the next */
  uv_timer_t refresh_timer;
  int refresh_in_flight;  /* a CLUSTER SLOTS is out */
  int refresh_again;      /* and another was asked for meanwhile */
  uint64_t opened_at;     /* uv_now: reqs wait for a map until connect_timeout */
  uint64_t refreshed_at;  /* uv_now of the last CLUSTER SLOTS sent */
  int closing;
  int close_asked;        /* closing once the first map routes what waits */
  int timer_open;
  /* set by redis_cluster.c, so that the map's file reports back without
   * naming it: how nodes answer, and what to do with the waiting reqs when
   * a map comes (route them) or none came in time (fail them) */
  const redis_owner *node_owner;
  void (*map_came)(rcluster *cl);
  void (*wait_ended)(rcluster *cl);
};

/* ---- redis_cluster_map.c */
/* The node at host:port, opened (connecting) when the router has none. */
cnode *cluster_node(rcluster *cl, const char *host, int port);
/* Ask for the slot map soon (at most one CLUSTER SLOTS every few 100ms). */
void cluster_refresh_soon(rcluster *cl);
/* The refresh timer (opened by redis_cluster.c): sends CLUSTER SLOTS. */
void cluster_on_refresh(uv_timer_t *t);

/* ---- redis_cluster_list.c */
/* Run a LIST on every primary of the map and answer req with the merge. */
void cluster_list_start(rcluster *cl, idem_req *req);
/* Whether req is a part of a LIST (sent to one primary), and then take its
 * answer. */
int cluster_list_part_done(idem_req *req, int err);

#endif
