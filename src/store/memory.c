/* memory.c - the memory: store. One table per name, shared by every handle
 * in the process (one handle per loop), guarded by a mutex. No durability:
 * for tests, and as the reference for how a backend runs idem_transition. */
#include <stdlib.h>
#include <string.h>

#include "core/fnv.h"
#include "core/scoped_key.h"
#include "store/backend.h"

typedef struct entry {
  struct entry *next;
  size_t key_len;
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  idem_record rec; /* deep copy, scope and key set */
} entry;

typedef struct table {
  idem_queue registered; /* in the registry */
  char *name;
  int refs;
  pthread_mutex_t lock;
  entry **buckets;
  size_t nbuckets, count;
} table;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static idem_queue registry = {&registry, &registry};

/* ---- the hash table ---------------------------------------------------- */

static entry **slot_of(table *t, const unsigned char *key, size_t len) {
  entry **slot = &t->buckets[idem_fnv1a(key, len) & (t->nbuckets - 1)];
  while (*slot && ((*slot)->key_len != len || memcmp((*slot)->key, key, len)))
    slot = &(*slot)->next;
  return slot;
}

static void grow(table *t) {
  size_t n = t->nbuckets * 2;
  entry **buckets = calloc(n, sizeof *buckets);
  if (!buckets)
    return; /* stay at the current size: slower, still correct */
  for (size_t i = 0; i < t->nbuckets; i++) {
    for (entry *e = t->buckets[i], *next; e; e = next) {
      next = e->next;
      entry **head = &buckets[idem_fnv1a(e->key, e->key_len) & (n - 1)];
      e->next = *head;
      *head = e;
    }
  }
  free(t->buckets);
  t->buckets = buckets;
  t->nbuckets = n;
}

static void entry_free(entry *e) {
  idem_record_clear(&e->rec);
  free(e);
}

static int put(table *t, entry **slot, const unsigned char *key, size_t len,
               const idem_record *rec) {
  idem_record copy;
  if (idem_record_copy(&copy, rec))
    return IDEM_ENOMEM;
  if (*slot) {
    idem_record_clear(&(*slot)->rec);
    (*slot)->rec = copy;
    return 0;
  }
  entry *e = calloc(1, sizeof *e);
  if (!e) {
    idem_record_clear(&copy);
    return IDEM_ENOMEM;
  }
  memcpy(e->key, key, len);
  e->key_len = len;
  e->rec = copy;
  *slot = e;
  if (++t->count > t->nbuckets)
    grow(t);
  return 0;
}

static void remove_at(table *t, entry **slot) {
  entry *e = *slot;
  *slot = e->next;
  entry_free(e);
  t->count--;
}

/* ---- operations ------------------------------------------------------- */

static int run_transition(table *t, idem_req *req) {
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t len = idem_scoped_key_encode(req->op.scope, req->op.key, key);
  entry **slot = slot_of(t, key, len);
  idem_record next;
  idem_result *res = &req->result;
  int write = idem_transition(*slot ? &(*slot)->rec : NULL, &req->op, idem_now_ms(), &next, res);
  if (res->record && idem_result_set_record(res, res->record, req->op.scope, req->op.key))
    return IDEM_ENOMEM;
  if (write == IDEM_WRITE_PUT)
    return put(t, slot, key, len, &next);
  return 0;
}

static int run_delete(table *t, idem_req *req) {
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t len = idem_scoped_key_encode(req->op.scope, req->op.key, key);
  entry **slot = slot_of(t, key, len);
  if (!*slot)
    return IDEM_ENOTFOUND;
  remove_at(t, slot);
  req->result.count = 1;
  return 0;
}

static int by_scoped_key(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Live records in (scope, key) order, after op.key within op.scope. */
static int run_list(table *t, idem_req *req) {
  entry **all = malloc((t->count + 1) * sizeof *all);
  if (!all)
    return IDEM_ENOMEM;
  size_t n = 0;
  int64_t now = idem_now_ms();
  for (size_t i = 0; i < t->nbuckets; i++)
    for (entry *e = t->buckets[i]; e; e = e->next)
      if (e->rec.state != IDEM_STATE_UNSEEN && now < e->rec.expires_at &&
          (!req->op.scope || !strcmp(req->op.scope, e->rec.scope)))
        all[n++] = e;
  qsort(all, n, sizeof *all, by_scoped_key);
  unsigned char after[IDEM_SCOPED_KEY_MAX];
  entry pivot = {.key_len = req->op.key ? idem_scoped_key_encode(req->op.scope, req->op.key, after) : 0};
  memcpy(pivot.key, after, pivot.key_len);
  entry *pivot_ptr = &pivot;
  int err = 0;
  for (size_t i = 0; i < n && req->result.count < req->op.limit && !err; i++)
    if (!req->op.key || by_scoped_key(&all[i], &pivot_ptr) > 0)
      err = idem_result_add_record(&req->result, &all[i]->rec, all[i]->rec.scope, all[i]->rec.key);
  free(all);
  return err;
}

static int run_gc(table *t, idem_req *req) {
  int64_t now = idem_now_ms();
  for (size_t i = 0; i < t->nbuckets && req->result.count < req->op.limit; i++) {
    entry **slot = &t->buckets[i];
    while (*slot && req->result.count < req->op.limit) {
      if ((*slot)->rec.expires_at <= now) {
        remove_at(t, slot);
        req->result.count++;
      } else {
        slot = &(*slot)->next;
      }
    }
  }
  return 0;
}

static int run(table *t, idem_req *req) {
  switch (req->op.kind) {
  case IDEM_OP_DELETE:
    return run_delete(t, req);
  case IDEM_OP_LIST:
    return run_list(t, req);
  case IDEM_OP_GC:
    return run_gc(t, req);
  default:
    return run_transition(t, req);
  }
}

static void memory_submit(idem_store *store, idem_req *req) {
  table *t = store->impl;
  pthread_mutex_lock(&t->lock);
  int err = run(t, req);
  pthread_mutex_unlock(&t->lock);
  if (err)
    idem_req_fail(req, err);
  else
    idem_req_finish(req); /* delivered from the loop, never from inside submit */
}

/* ---- the registry of named tables ---------------------------------------- */

static table *table_new(const char *name) {
  table *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  t->nbuckets = 64;
  t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
  t->name = strdup(name);
  if (!t->buckets || !t->name || pthread_mutex_init(&t->lock, NULL)) {
    free(t->buckets);
    free(t->name);
    free(t);
    return NULL;
  }
  return t;
}

static void table_free(table *t) {
  for (size_t i = 0; i < t->nbuckets; i++)
    for (entry *e = t->buckets[i], *next; e; e = next) {
      next = e->next;
      entry_free(e);
    }
  pthread_mutex_destroy(&t->lock);
  free(t->buckets);
  free(t->name);
  free(t);
}

static table *table_find(const char *name) {
  return idem_queue_find_key(&registry, offsetof(table, registered), offsetof(table, name), name);
}

static int memory_open(idem_store *store, const char *uri, char **errmsg) {
  (void)errmsg;
  const char *name = uri + strlen("memory:");
  pthread_mutex_lock(&registry_lock);
  table *t = table_find(name);
  if (!t && (t = table_new(name)))
    idem_queue_insert_tail(&registry, &t->registered);
  if (t)
    t->refs++;
  pthread_mutex_unlock(&registry_lock);
  store->impl = t;
  return t ? 0 : IDEM_ENOMEM;
}

/* The last handle on a table frees it: memory: keeps nothing past its users. */
static void memory_close(idem_store *store) {
  table *t = store->impl;
  pthread_mutex_lock(&registry_lock);
  if (--t->refs == 0) {
    idem_queue_remove(&t->registered);
    table_free(t);
  }
  pthread_mutex_unlock(&registry_lock);
  idem_backend_closed(store);
}

const idem_backend idem_backend_memory = {"memory", memory_open, memory_submit, memory_close};
