/* memory.c - the memory: store. One table per name, shared by every handle
 * in the process (one handle per loop), guarded by a mutex. No durability:
 * for tests, and as the reference for how a backend runs idem_transition.
 * Expired records are swept a little at every transition (sweep_some), so a
 * long-running process holds about what its retention implies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/htable.h"
#include "core/scoped_key.h"
#include "store/backend.h"

typedef struct entry {
  idem_hnode node; /* keyed by key[] */
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  idem_record rec; /* deep copy, scope and key set */
} entry;

typedef struct table {
  idem_queue registered; /* in the registry */
  char *name;
  int refs;
  pthread_mutex_t lock;
  idem_htable records;
  size_t sweep_at; /* the next bucket sweep_some looks at */
} table;

/* Buckets looked at per transition. The table has at least one bucket per
 * record, so records that expire are all gone within nbuckets / SWEEP_BUCKETS
 * transitions: the table holds about twice its live records, at most. */
#define SWEEP_BUCKETS 2

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static idem_queue registry = {&registry, &registry};

/* ---- the hash table ---------------------------------------------------- */

static entry *entry_of(idem_hnode *node) { return node ? IDEM_HNODE_DATA(node, entry, node) : NULL; }

static void entry_free(entry *e) {
  idem_record_clear(&e->rec);
  free(e);
}

static int put(table *t, idem_hnode **slot, const unsigned char *key, size_t len,
               const idem_record *rec) {
  idem_record copy;
  if (idem_record_copy(&copy, rec))
    return IDEM_ENOMEM;
  if (*slot) {
    idem_record_clear(&entry_of(*slot)->rec);
    entry_of(*slot)->rec = copy;
    return 0;
  }
  entry *e = calloc(1, sizeof *e);
  if (!e) {
    idem_record_clear(&copy);
    return IDEM_ENOMEM;
  }
  memcpy(e->key, key, len);
  e->node.key = e->key;
  e->node.klen = len;
  e->rec = copy;
  idem_htable_link(&t->records, slot, &e->node);
  return 0;
}

static void remove_at(table *t, idem_hnode **slot) {
  entry_free(entry_of(idem_htable_unlink(&t->records, slot)));
}

/* Delete the records past their retention in the next few buckets. Without
 * it, expired records stayed until their key was used again: a gateway on
 * memory: grew by every fresh key it ever saw. */
static void sweep_some(table *t, int64_t now) {
  for (int n = 0; n < SWEEP_BUCKETS; n++) {
    idem_hnode **slot = &t->records.buckets[t->sweep_at++ & (t->records.nbuckets - 1)];
    while (*slot) {
      if (entry_of(*slot)->rec.expires_at <= now)
        remove_at(t, slot);
      else
        slot = &(*slot)->next;
    }
  }
}

/* ---- operations ------------------------------------------------------- */

static int run_transition(table *t, idem_req *req) {
  int64_t now = idem_now_ms();
  sweep_some(t, now); /* before the slot is found: a sweep may unlink near it */
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t len = idem_scoped_key_encode(req->op.scope, req->op.key, key);
  idem_hnode **slot = idem_htable_slot(&t->records, key, len);
  idem_record next;
  idem_result *res = &req->result;
  int write = idem_transition(*slot ? &entry_of(*slot)->rec : NULL, &req->op, now, &next, res);
  if (res->record && idem_result_set_record(res, res->record, req->op.scope, req->op.key))
    return IDEM_ENOMEM;
  if (write == IDEM_WRITE_PUT)
    return put(t, slot, key, len, &next);
  return 0;
}

static int run_delete(table *t, idem_req *req) {
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t len = idem_scoped_key_encode(req->op.scope, req->op.key, key);
  idem_hnode **slot = idem_htable_slot(&t->records, key, len);
  if (!*slot)
    return IDEM_ENOTFOUND;
  remove_at(t, slot);
  req->result.count = 1;
  return 0;
}

static int by_scoped_key(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  return idem_scoped_key_cmp(x->key, x->node.klen, y->key, y->node.klen);
}

/* Live records in (scope, key) order, after op.key within op.scope. */
static int run_list(table *t, idem_req *req) {
  entry **all = malloc((t->records.count + 1) * sizeof *all);
  if (!all)
    return IDEM_ENOMEM;
  size_t n = 0;
  int64_t now = idem_now_ms();
  for (size_t i = 0; i < t->records.nbuckets; i++)
    for (entry *e = entry_of(t->records.buckets[i]); e; e = entry_of(e->node.next))
      if (e->rec.state != IDEM_STATE_UNSEEN && now < e->rec.expires_at &&
          (!req->op.scope || !strcmp(req->op.scope, e->rec.scope)))
        all[n++] = e;
  qsort(all, n, sizeof *all, by_scoped_key);
  unsigned char after[IDEM_SCOPED_KEY_MAX];
  entry pivot = {.node.klen = req->op.key ? idem_scoped_key_encode(req->op.scope, req->op.key, after) : 0};
  memcpy(pivot.key, after, pivot.node.klen);
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
  for (size_t i = 0; i < t->records.nbuckets && req->result.count < req->op.limit; i++) {
    idem_hnode **slot = &t->records.buckets[i];
    while (*slot && req->result.count < req->op.limit) {
      if (entry_of(*slot)->rec.expires_at <= now) {
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
  t->name = strdup(name);
  if (idem_htable_init(&t->records) || !t->name || pthread_mutex_init(&t->lock, NULL)) {
    free(t->records.buckets);
    free(t->name);
    free(t);
    return NULL;
  }
  return t;
}

static void table_free(table *t) {
  for (size_t i = 0; i < t->records.nbuckets; i++)
    for (idem_hnode *e = t->records.buckets[i], *next; e; e = next) {
      next = e->next;
      entry_free(entry_of(e));
    }
  pthread_mutex_destroy(&t->lock);
  free(t->records.buckets);
  free(t->name);
  free(t);
}

static table *table_find(const char *name) {
  return idem_queue_find_key(&registry, offsetof(table, registered), offsetof(table, name), name);
}

static int memory_check(const char *uri, char **errmsg) {
  if (strchr(uri, '?')) { /* an option meant for another store, or a typo */
    if (errmsg && asprintf(errmsg, "memory: takes no options (memory:[NAME]): '%s'", uri) < 0)
      *errmsg = NULL;
    return IDEM_EURI;
  }
  return 0;
}

static int memory_open(idem_store *store, const char *uri, char **errmsg) {
  const char *name = uri + strlen("memory:");
  int err = memory_check(uri, errmsg);
  if (err)
    return err;
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

const idem_backend idem_backend_memory = {"memory", memory_check, memory_open, memory_submit,
                                          memory_close};
