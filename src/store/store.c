/* store.c - the part of every store that is not about storage: choosing a
 * backend by URI scheme, validating and copying operations, and delivering
 * completions on the store's loop whatever thread finished them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "store/backend.h"
#include "store/cache.h"
#include "store/store_id.h"

/* Every scheme idem knows, and its backend: NULL when this build leaves the
 * store out (-DIDEM_REDIS=OFF, -DIDEM_POSTGRES=OFF), so that its URIs are
 * refused by name rather than as unknown. */
#define BUILT(with, backend) ((with) ? (backend) : NULL)
static const struct {
  const char *scheme, *store, *option;
  const idem_backend *backend;
} schemes[] = {
    {"memory", "memory", NULL, &idem_backend_memory},
    {"lmdb", "LMDB", NULL, &idem_backend_lmdb},
    {"redis", "Redis", "IDEM_REDIS", BUILT(IDEM_WITH_REDIS, &idem_backend_redis)},
    {"redis+cluster", "Redis", "IDEM_REDIS", BUILT(IDEM_WITH_REDIS, &idem_backend_redis_cluster)},
    /* refused by the Redis URI parser, which says why (no TLS) */
    {"rediss", "Redis", "IDEM_REDIS", BUILT(IDEM_WITH_REDIS, &idem_backend_redis)},
    {"postgres", "PostgreSQL", "IDEM_POSTGRES", BUILT(IDEM_WITH_POSTGRES, &idem_backend_postgres)},
    {"postgresql", "PostgreSQL", "IDEM_POSTGRES", BUILT(IDEM_WITH_POSTGRES, &idem_backend_postgres)},
};

/* The scheme's entry in schemes[], or -1. */
static int find_scheme(const char *uri) {
  const char *colon = strchr(uri, ':');
  if (!colon)
    return -1;
  size_t n = (size_t)(colon - uri);
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strlen(schemes[i].scheme) == n && !strncmp(uri, schemes[i].scheme, n))
      return (int)i;
  return -1;
}

static char *message(const char *text, const char *uri) { return idem_join(text, ": ", uri); }

/* Both handles closed (in the same loop iteration: one more run of the
 * loop after a failed open frees it all, as idem.h promises). */
static void on_handle_closed(uv_handle_t *handle) {
  idem_store *store = handle->data;
  if (--store->handles_open)
    return;
  if (store->close_cb)
    store->close_cb(store, store->close_arg);
  idem_cache_release(store->cache);
  pthread_mutex_destroy(&store->done_lock);
  free(store->identity);
  free(store);
}

static void close_handles(idem_store *store) {
  store->closing = 2; /* handle close under way */
  store->handles_open = 2;
  uv_close((uv_handle_t *)&store->done_async, on_handle_closed);
  uv_close((uv_handle_t *)&store->done_check, on_handle_closed);
}

static void finish_close_if_idle(idem_store *store) {
  if (store->closing == 1 && store->backend_closed && store->in_flight == 0 &&
      !store->cache_store)
    close_handles(store);
}

/* Deliver every finished req on the loop thread, in the order finished. */
static void deliver(idem_store *store) {
  idem_queue done;
  idem_req *req;
  pthread_mutex_lock(&store->done_lock);
  idem_queue_move(&store->done, &done);
  pthread_mutex_unlock(&store->done_lock);
  while ((req = idem_req_of(idem_queue_pop(&done)))) {
    store->in_flight--;
    if (store->cache_learn)
      store->cache_learn(store, req);
    /* a delete through any handle clears the key in every cache of the
     * process in front of this store, with a cache of its own or not */
    if (req->op.kind == IDEM_OP_DELETE)
      idem_cache_bury_store(store->identity, req->op.scope, req->op.key, idem_now_ms());
    req->cb(store, &req->result, req->arg);
    idem_result_clear(&req->result);
    free(req);
  }
  finish_close_if_idle(store);
}

static void on_done(uv_async_t *async) { deliver(async->data); }

static void on_done_check(uv_check_t *check) {
  uv_check_stop(check);
  deliver(check->data);
}

/* The store whose submit this thread is inside, if any (see idem_req_finish). */
static _Thread_local idem_store *submitting;

void idem_req_finish(idem_req *req) {
  idem_store *store = req->store;
  pthread_mutex_lock(&store->done_lock);
  idem_queue_insert_tail(&store->done, &req->node);
  /* Wake the loop before unlocking: once the req is visible, the loop may
   * deliver it, find nothing in flight, close and free the store; a send
   * made after the unlock could then touch freed memory (a handle closed
   * while another thread, such as the LMDB writer shared with other
   * handles, still finishes its reqs). deliver takes this lock first. */
  uv_async_send(&store->done_async);
  pthread_mutex_unlock(&store->done_lock);
  /* Finished inside submit (memory:, a read answered from an LMDB snapshot,
   * a cache hit): this is the loop thread, and the req can be delivered at
   * the end of this loop iteration (check phase) rather than when the next
   * one polls the async among every other ready socket. The async stays
   * sent: submit may run before the poll (a timer's callback), and the
   * check phase comes only after it; whichever runs first delivers. */
  if (submitting == store)
    uv_check_start(&store->done_check, on_done_check);
}

void idem_req_fail(idem_req *req, int err) {
  idem_result_clear(&req->result);
  memset(&req->result, 0, sizeof req->result);
  req->result.err = err;
  idem_req_finish(req);
}

void idem_backend_closed(idem_store *store) {
  store->backend_closed = 1;
  finish_close_if_idle(store);
}

/* The backend of uri's scheme; NULL (and *errmsg says why) when there is
 * none in this build. */
static const idem_backend *backend_for(const char *uri, char **errmsg) {
  int i = find_scheme(uri);
  const idem_backend *backend = i < 0 ? NULL : schemes[i].backend;
  if (backend || !errmsg)
    return backend;
  if (i < 0) {
    *errmsg = message("unknown store URI (memory:, lmdb:PATH, redis://, redis+cluster://, postgres://)", uri);
  } else {
    char text[128];
    snprintf(text, sizeof text, "this build of idem has no %s support (built with -D%s=OFF)",
             schemes[i].store, schemes[i].option);
    *errmsg = message(text, uri);
  }
  return NULL;
}

int idem_store_uri_check(const char *uri, char **errmsg) {
  if (errmsg)
    *errmsg = NULL;
  const idem_backend *backend = backend_for(uri, errmsg);
  return backend ? backend->check(uri, errmsg) : IDEM_EURI;
}

int idem_store_open_may_heal(const char *uri, int rc) {
  int networked = !strncmp(uri, "redis", 5) || !strncmp(uri, "postgres", 8);
  return networked && (rc == IDEM_ESTORE || rc == IDEM_ETIMEDOUT);
}

int idem_store_open(struct uv_loop_s *loop, const char *uri, idem_store **out, char **errmsg) {
  if (errmsg)
    *errmsg = NULL;
  if (!loop || !uri || !out)
    return IDEM_EINVAL;
  const idem_backend *backend = backend_for(uri, errmsg);
  if (!backend)
    return IDEM_EURI;
  idem_store *store = calloc(1, sizeof *store);
  if (!store)
    return IDEM_ENOMEM;
  store->backend = backend;
  store->loop = loop;
  idem_queue_init(&store->done);
  char id[4200];
  idem_store_identity(uri, id, sizeof id);
  if (!(store->identity = strdup(id)) || pthread_mutex_init(&store->done_lock, NULL)) {
    free(store->identity);
    free(store);
    return IDEM_ENOMEM;
  }
  if (uv_async_init(loop, &store->done_async, on_done)) {
    pthread_mutex_destroy(&store->done_lock);
    free(store->identity);
    free(store);
    return IDEM_ENOMEM;
  }
  uv_check_init(loop, &store->done_check); /* cannot fail */
  store->done_async.data = store;
  store->done_check.data = store;
  int err = backend->open(store, uri, errmsg);
  if (err) {
    close_handles(store); /* nothing was submitted: only the handles to release */
    return err;
  }
  *out = store;
  return 0;
}

/* A shared cache closes first: its lookups in flight finish, and each miss
 * is handed to the backend, which must still take it; then the backend. */
static void on_cache_store_closed(idem_store *cache_store, void *arg) {
  idem_store *store = arg;
  (void)cache_store;
  store->cache_store = NULL;
  store->backend->close(store);
}

void idem_store_close(idem_store *store, idem_close_cb close_cb, void *arg) {
  if (!store || store->closing)
    return;
  store->closing = 1;
  store->close_cb = close_cb;
  store->close_arg = arg;
  if (store->cache_store)
    idem_store_close(store->cache_store, on_cache_store_closed, store);
  else
    store->backend->close(store);
}

const char *idem_store_scheme(const idem_store *store) { return store->backend->scheme; }

/* ---- validation and copying ------------------------------------------- */

static int valid_scope(const char *scope) {
  return !scope || strlen(scope) <= IDEM_SCOPE_MAX;
}

static int valid_response(const idem_response *r) {
  if (r->status != 0 && (r->status < 100 || r->status > 999))
    return 0;
  if (r->headers_len > IDEM_RESPONSE_PART_MAX || r->body_len > IDEM_RESPONSE_PART_MAX)
    return 0;
  return (r->headers || !r->headers_len) && (r->body || !r->body_len);
}

static int valid_key(const char *key) { return key && idem_key_valid(key, strlen(key)); }

/* Leases and retentions are added to the store's clock (now + ttl_ms, in C,
 * in Lua's doubles, in SQL): past this bound the sum overflows or loses
 * precision and the record would be born expired, letting a duplicate run.
 * The same bound as idem_parse_duration: about 100 years. */
#define DURATION_MAX_MS INT64_C(3155760000000)

static int valid_duration(int64_t ms) { return ms > 0 && ms <= DURATION_MAX_MS; }

int idem_op_validate(const idem_op *op) {
  if (!valid_scope(op->scope))
    return IDEM_ESCOPE;
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    return valid_duration(op->lease_ms) && valid_duration(op->ttl_ms) ? 0 : IDEM_EINVAL;
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    return op->fence > 0 && valid_duration(op->ttl_ms) && valid_response(&op->response)
               ? 0
               : IDEM_EINVAL;
  case IDEM_OP_RELEASE:
    if (!valid_key(op->key))
      return IDEM_EKEY;
    return op->fence > 0 ? 0 : IDEM_EINVAL;
  case IDEM_OP_GET:
  case IDEM_OP_DELETE:
    return valid_key(op->key) ? 0 : IDEM_EKEY;
  case IDEM_OP_LIST:
    return !op->key || valid_key(op->key) ? 0 : IDEM_EKEY;
  case IDEM_OP_GC:
    return 0;
  }
  return IDEM_EINVAL;
}

static char *copy_into(char **cursor, const char *src, size_t len) {
  char *dst = *cursor;
  memcpy(dst, src, len);
  dst[len] = '\0';
  *cursor += len + 1;
  return dst;
}

/* One allocation holds the req and every byte the op points to. */
static idem_req *req_new(const idem_op *op) {
  int has_response = op->kind == IDEM_OP_COMPLETE || op->kind == IDEM_OP_FAIL ||
                     op->kind == IDEM_OP_CACHE_PUT;
  size_t scope_len = op->scope ? strlen(op->scope) : 0;
  size_t key_len = op->key ? strlen(op->key) : 0;
  size_t hlen = has_response ? op->response.headers_len : 0;
  size_t blen = has_response ? op->response.body_len : 0;
  idem_req *req = calloc(1, sizeof *req + scope_len + key_len + hlen + blen + 4);
  if (!req)
    return NULL;
  char *cursor = req->storage;
  req->op = *op;
  req->op.scope = op->scope || op->kind != IDEM_OP_LIST ? copy_into(&cursor, op->scope ? op->scope : "", scope_len) : NULL;
  req->op.key = op->key ? copy_into(&cursor, op->key, key_len) : NULL;
  memset(&req->op.response, 0, sizeof req->op.response);
  if (has_response) {
    req->op.response.status = op->response.status;
    req->op.response.headers = hlen ? copy_into(&cursor, op->response.headers, hlen) : NULL;
    req->op.response.headers_len = hlen;
    req->op.response.body = blen ? copy_into(&cursor, op->response.body, blen) : NULL;
    req->op.response.body_len = blen;
  }
  if ((op->kind == IDEM_OP_LIST || op->kind == IDEM_OP_GC) && req->op.limit == 0)
    req->op.limit = 1000;
  return req;
}

int idem_op_answer_fits(const idem_op *op, size_t max) {
  if (!max || (op->kind != IDEM_OP_COMPLETE && op->kind != IDEM_OP_FAIL &&
               op->kind != IDEM_OP_CACHE_PUT))
    return 1;
  return op->response.headers_len <= max && op->response.body_len <= max - op->response.headers_len;
}

static int submit(idem_store *store, const idem_op *op, idem_cb cb, void *arg) {
  if (!idem_op_answer_fits(op, store->backend->answer_max))
    return IDEM_ETOOBIG;
  idem_req *req = req_new(op);
  if (!req)
    return IDEM_ENOMEM;
  req->cb = cb;
  req->arg = arg;
  req->store = store;
  store->in_flight++;
  idem_store *outer = submitting; /* a cache tier submits to its own store */
  submitting = store;
  if (!store->cache_answer || !store->cache_answer(store, req))
    store->backend->submit(store, req);
  submitting = outer;
  return 0;
}

int idem_store_submit(idem_store *store, const idem_op *op, idem_cb cb, void *arg) {
  if (!store || !op || !cb)
    return IDEM_EINVAL;
  if (store->closing)
    return IDEM_ECLOSED;
  int err = idem_op_validate(op);
  return err ? err : submit(store, op, cb, arg);
}

int idem_store_submit_internal(idem_store *store, const idem_op *op, idem_cb cb, void *arg) {
  return store->closing ? IDEM_ECLOSED : submit(store, op, cb, arg);
}

/* ---- result helpers for backends --------------------------------------- */

static int copy_with_names(idem_record *dst, const idem_record *rec, const char *scope,
                           const char *key) {
  idem_record named = *rec;
  named.scope = scope ? scope : "";
  named.key = key;
  return idem_record_copy(dst, &named);
}

int idem_result_set_record(idem_result *res, const idem_record *rec, const char *scope,
                           const char *key) {
  idem_record *copy = calloc(1, sizeof *copy);
  if (!copy || copy_with_names(copy, rec, scope, key)) {
    free(copy);
    res->record = NULL;
    return IDEM_ENOMEM;
  }
  res->record = copy;
  return 0;
}

int idem_result_add_record(idem_result *res, const idem_record *rec, const char *scope,
                           const char *key) {
  idem_record *grown = realloc(res->records, (res->count + 1) * sizeof *grown);
  if (!grown)
    return IDEM_ENOMEM;
  res->records = grown;
  if (copy_with_names(&res->records[res->count], rec, scope, key))
    return IDEM_ENOMEM;
  res->count++;
  return 0;
}
