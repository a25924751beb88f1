/*
 * backend.h - what a store implements, and what the generic layer (store.c)
 * does for it. Adding a store means one new file with one idem_backend.
 *
 * Life of an operation:
 *   idem_store_submit validates the op, deep-copies it into an idem_req and
 *   hands it to backend->submit on the loop thread. The backend fills
 *   req->result (allocating with the helpers below) and calls
 *   idem_req_finish(req) from ANY thread, exactly once. The generic layer
 *   then calls the user's callback on the loop thread and frees the req.
 *
 * Closing: idem_store_close calls backend->close on the loop thread. The
 * backend finishes or fails (IDEM_ECLOSED) every req it holds, releases its
 * own handles, and calls idem_backend_closed(store) on the loop thread. When
 * that has happened and every req is delivered, close_cb runs.
 */
#ifndef IDEM_STORE_BACKEND_H
#define IDEM_STORE_BACKEND_H

#include <pthread.h>

#include <uv.h>

#include "idem/idem.h"
#include "core/queue.h"

typedef struct idem_req idem_req;

/* Operations only the cache tier sends, to a redis:// store that serves as
 * a shared cache (store_cache.c, redis_cache.c); never from the public API.
 *   CACHE_GET  the finished record kept for (scope, key): result.record, or
 *              IDEM_ENOTFOUND
 *   CACHE_PUT  keep response.body (an encoded finished record) for ttl_ms,
 *              unless a CACHE_BURY's tombstone is there
 *   CACHE_DEL  drop it
 *   CACHE_BURY drop it, and keep fills out for a while (a delete's: a fill
 *              from a replay the store answered just before the delete may
 *              arrive after it) */
#define IDEM_OP_CACHE_GET ((idem_op_kind)100)
#define IDEM_OP_CACHE_PUT ((idem_op_kind)101)
#define IDEM_OP_CACHE_DEL ((idem_op_kind)102)
#define IDEM_OP_CACHE_BURY ((idem_op_kind)103)

struct idem_req {
  idem_op op;        /* deep copy: strings live in storage[] */
  idem_result result;
  idem_cb cb;
  void *arg;
  idem_store *store;
  idem_queue node;   /* the backend's queues until finished, then store.c's */
  int64_t submitted; /* idem_now_ms() at submit, when a cache is in front */
  int from_cache;    /* answered by the cache: the backend never saw it */
  unsigned char asking;    /* redis+cluster: send ASKING before it (an ASK) */
  unsigned char redirects; /* redis+cluster: MOVED and ASK followed so far */
  char storage[];
};

/* The req queued by its node; NULL for NULL, so that
 * idem_req_of(idem_queue_pop(q)) is NULL once q is empty. */
static inline idem_req *idem_req_of(idem_queue *node) {
  return node ? IDEM_QUEUE_DATA(node, idem_req, node) : NULL;
}

typedef struct {
  const char *scheme; /* URI scheme without ':' */
  /* Whether uri is well formed, without opening anything: 0, or IDEM_EURI
   * (and may set *errmsg, malloc'd). open makes the same checks. */
  int (*check)(const char *uri, char **errmsg);
  /* Set store->impl. On failure return IDEM_E* and may set *errmsg (malloc'd). */
  int (*open)(idem_store *store, const char *uri, char **errmsg);
  void (*submit)(idem_store *store, idem_req *req);
  void (*close)(idem_store *store);
  /* The most bytes of an answer (headers and body together) it keeps; 0:
   * as much as IDEM_RESPONSE_PART_MAX allows. A bigger one is refused at
   * submit with IDEM_ETOOBIG, before any byte goes to a server that would
   * refuse it (Redis drops the connection: tried again, it would flap). */
  size_t answer_max;
} idem_backend;

/* Whether a store URI is well formed (its scheme is built in, its options
 * parse), without opening anything: 0, or IDEM_EURI and *errmsg (malloc'd,
 * may be NULL). */
int idem_store_uri_check(const char *uri, char **errmsg);

/* Whether idem_store_open(uri) failing with rc may heal by itself: a
 * network store (Redis, PostgreSQL) that is down or slow, to be opened
 * again later. A malformed URI, or an embedded store that cannot be opened
 * (its path, its permissions), will not: serve and consume refuse to start. */
int idem_store_open_may_heal(const char *uri, int rc);

/* The store URIs this build takes, for --help texts. */
#if IDEM_WITH_REDIS
#define IDEM_STORE_HELP_REDIS ", redis://..., redis+cluster://..."
#else
#define IDEM_STORE_HELP_REDIS ""
#endif
#if IDEM_WITH_POSTGRES
#define IDEM_STORE_HELP_PG ", postgres://..."
#else
#define IDEM_STORE_HELP_PG ""
#endif
#define IDEM_STORE_HELP "memory:, lmdb:PATH" IDEM_STORE_HELP_REDIS IDEM_STORE_HELP_PG

struct idem_cache;

struct idem_store {
  const idem_backend *backend;
  /* The cache tier in front (store_cache.c, which sets these), or NULL: */
  struct idem_cache *cache;       /* records (memory:) or this process's claims */
  struct idem_store *cache_store; /* a shared (redis://) cache */
  /* before the backend: 1 when the cache took req (answered it, or asks a
   * shared cache first and hands req to the backend itself on a miss) */
  int (*cache_answer)(idem_store *store, idem_req *req);
  /* after the answer, before the caller's callback: fill or clear the cache */
  void (*cache_learn)(idem_store *store, const idem_req *req);
  uv_loop_t *loop;
  void *impl;
  char *identity; /* idem_store_identity of its URI: the caches a delete clears */
  /* completed reqs waiting to be called back on the loop: woken by the
   * async from any thread, and by the check handle at the end of the same
   * loop iteration for reqs a backend finished inside submit (store.c) */
  uv_async_t done_async;
  uv_check_t done_check;
  pthread_mutex_t done_lock;
  idem_queue done;
  size_t in_flight; /* submitted, not yet called back (loop thread only) */
  int handles_open; /* of done_async and done_check, while closing */
  int closing;
  int backend_closed;
  idem_close_cb close_cb;
  void *close_arg;
};

/* Submit an operation of the cache tier's (IDEM_OP_CACHE_*), unchecked. */
int idem_store_submit_internal(idem_store *store, const idem_op *op, idem_cb cb, void *arg);

/* The rules every operation is held to before a store sees it: valid key and
 * scope, positive bounded durations, fences, response status and sizes.
 * Returns 0 or the IDEM_E* code to refuse it with. */
int idem_op_validate(const idem_op *op);
/* Whether op's answer (a complete's, fail's or cache put's) fits max bytes,
 * headers and body together (max 0: any that idem_op_validate takes). */
int idem_op_answer_fits(const idem_op *op, size_t max);

/* Complete a req: safe from any thread. */
void idem_req_finish(idem_req *req);
/* Shorthand: set result.err and finish. */
void idem_req_fail(idem_req *req, int err);
/* The backend has released everything (loop thread). */
void idem_backend_closed(idem_store *store);

/* Result helpers: allocate result.record / result.records as deep copies. */
int idem_result_set_record(idem_result *res, const idem_record *rec,
                           const char *scope, const char *key);
int idem_result_add_record(idem_result *res, const idem_record *rec,
                           const char *scope, const char *key);

extern const idem_backend idem_backend_memory;
extern const idem_backend idem_backend_lmdb;
extern const idem_backend idem_backend_redis;
extern const idem_backend idem_backend_redis_cluster;
extern const idem_backend idem_backend_postgres;

#endif
