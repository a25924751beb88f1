/* memory.c - the memory: store. One table per name, shared by every handle
 * in the process (one handle per loop). No durability: for tests, and as the
 * reference for how a backend runs idem_transition.
 *
 * A table is SHARDS hash tables, each with its own mutex, picked by the
 * key's hash: the loops seldom wait for each other, and a table that doubles
 * (rehashing every record it holds, under its lock) stops one shard for a
 * sixteenth of the time, not every loop for all of it (a gateway on unique
 * keys holds millions of records for its --ttl). Expired records are swept
 * a little at every claim (sweep_some), so a long-running process holds
 * about what its retention implies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/otable.h"
#include "core/scoped_key.h"
#include "store/backend.h"

/* An entry and its record are one allocation: a gateway writes two records
 * a request (claim, complete), and one malloc each, not five, keeps a heap
 * of millions of records compact. A new record is a new entry. */
typedef struct entry {
  size_t klen;
  idem_record rec;     /* its scope, key, headers and body point into key[] */
  unsigned char key[]; /* klen bytes, then those four, each NUL-ended */
} entry;

typedef struct shard {
  pthread_mutex_t lock;
  idem_otable records; /* of entries */
  size_t sweep_at;     /* the next slot sweep_some looks at */
  int64_t earliest;    /* no record here expires before it: till then the
                        * sweep has nothing to find and reads nothing */
  int64_t cycle_least; /* the least expiry seen since sweep_at was 0 */
} shard;

#define SHARDS 16 /* a power of two */

typedef struct table {
  idem_queue registered; /* in the registry */
  char *name;
  int refs;
  shard shards[SHARDS];
} table;

/* Slots looked at per claim, in the claim's shard. A shard has at least
 * two slots per record, so records that expire are all gone within
 * nslots / SWEEP_SLOTS of its claims: it holds about twice its live
 * records, at most. Eight, not four: the keys spread over the shards
 * unevenly, and a whole table should still be swept within as many claims as
 * it holds records (test_memory_sweep.c). */
#define SWEEP_SLOTS 8

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static idem_queue registry = {&registry, &registry};

/* A key's hash (idem_otable_hash): its top four bits pick the shard; the
 * rest, shifted up, is the hash its shard's table knows (hash_in_shard). */
static shard *shard_of(table *t, uint64_t hash) { return &t->shards[hash >> 60]; }

static uint64_t hash_in_shard(uint64_t hash) { return hash << 4; }

/* ---- the hash table ---------------------------------------------------- */

static entry *entry_at(const shard *s, size_t i) { return s->records.slots[i].item; }

static int entry_matches(const void *item, const unsigned char *key, size_t klen) {
  const entry *e = item;
  return e->klen == klen && !memcmp(e->key, key, klen);
}

static size_t find(const shard *s, const unsigned char *key, size_t len, uint64_t hash) {
  return idem_otable_find(&s->records, hash, key, len, entry_matches);
}

/* Copy len bytes of src, if any, to *at, NUL-ended, and point *dst there. */
static void place(char **at, const char *src, size_t len, const char **dst) {
  *dst = NULL;
  if (!src)
    return;
  memcpy(*at, src, len);
  (*at)[len] = '\0';
  *dst = *at;
  *at += len + 1;
}

static size_t placed_size(const char *src, size_t len) { return src ? len + 1 : 0; }

/* A new entry of key, holding a copy of rec; NULL without memory. */
static entry *entry_new(const unsigned char *key, size_t len, const idem_record *rec) {
  size_t scope_len = rec->scope ? strlen(rec->scope) : 0, key_len = rec->key ? strlen(rec->key) : 0;
  const idem_response *resp = &rec->response;
  entry *e = malloc(sizeof *e + len + placed_size(rec->scope, scope_len) +
                    placed_size(rec->key, key_len) + placed_size(resp->headers, resp->headers_len) +
                    placed_size(resp->body, resp->body_len));
  if (!e)
    return NULL;
  e->klen = len;
  memcpy(e->key, key, len);
  e->rec = *rec;
  char *at = (char *)e->key + len;
  place(&at, rec->scope, scope_len, &e->rec.scope);
  place(&at, rec->key, key_len, &e->rec.key);
  place(&at, resp->headers, resp->headers_len, &e->rec.response.headers);
  place(&at, resp->body, resp->body_len, &e->rec.response.body);
  return e;
}

static int64_t least(int64_t a, int64_t b) { return a < b ? a : b; }

/* Start the sweep's pass again, when records moved under it. earliest stays
 * as it is: still a lower bound, raised only by a whole pass. */
static void restart_pass(shard *s) {
  s->sweep_at = 0;
  s->cycle_least = INT64_MAX;
}

static int put(shard *s, size_t slot, const unsigned char *key, size_t len, uint64_t hash,
               const idem_record *rec) {
  entry *e = entry_new(key, len, rec), *old = entry_at(s, slot);
  if (!e)
    return IDEM_ENOMEM;
  s->earliest = least(s->earliest, rec->expires_at);
  s->cycle_least = least(s->cycle_least, rec->expires_at);
  if (old) {
    idem_otable_replace(&s->records, slot, e);
    free(old);
    return 0;
  }
  size_t nslots = s->records.mask + 1;
  if (idem_otable_add(&s->records, slot, hash, e)) {
    free(e);
    return IDEM_ENOMEM;
  }
  if (s->records.mask + 1 != nslots)
    restart_pass(s); /* records moved to slots this pass has passed */
  return 0;
}

/* Free the entry in slot i and empty it; a later entry may move into it. */
static void remove_at(shard *s, size_t i) {
  free(entry_at(s, i));
  idem_otable_remove(&s->records, i);
}

/* Remove the entry in slot i, not where the sweep is: an entry the pass
 * has not seen yet may move back into a slot it has seen. */
static void remove_elsewhere(shard *s, size_t i) {
  remove_at(s, i);
  restart_pass(s);
}

/* Delete the records past their retention in the next few slots. Without
 * it, expired records stayed until their key was used again: a gateway on
 * memory: grew by every fresh key it ever saw. Each entry is a cache miss
 * in a large table, so nothing is read while no record can have expired
 * yet (earliest, a lower bound kept by put; each whole pass over the slots
 * raises it to the least expiry the pass saw). */
static void sweep_some(shard *s, int64_t now) {
  if (now < s->earliest)
    return;
  for (int n = 0; n < SWEEP_SLOTS; n++) {
    size_t mask = s->records.mask, i = s->sweep_at & mask;
    entry *e;
    while ((e = entry_at(s, i)) && e->rec.expires_at <= now)
      remove_at(s, i); /* the entry moved into i has not been seen */
    if (e)
      s->cycle_least = least(s->cycle_least, e->rec.expires_at);
    if ((++s->sweep_at & mask) == 0) { /* a whole pass: every record was seen */
      s->earliest = s->cycle_least;
      s->cycle_least = INT64_MAX;
    }
  }
}

/* ---- operations ------------------------------------------------------- */

/* A claim, complete, fail, release or get, under its shard's lock. */
static int run_transition(shard *s, const unsigned char *key, size_t len, uint64_t hash,
                          idem_req *req) {
  int64_t now = idem_now_ms();
  /* Only claims add records, so only claims sweep (before the slot is found:
   * a sweep may unlink near it); a gateway's complete then costs no sweep. */
  if (req->op.kind == IDEM_OP_CLAIM)
    sweep_some(s, now);
  size_t slot = find(s, key, len, hash);
  entry *e = entry_at(s, slot);
  idem_record next;
  idem_result *res = &req->result;
  int write = idem_transition(e ? &e->rec : NULL, &req->op, now, &next, res);
  if (res->record && idem_result_set_record(res, res->record, req->op.scope, req->op.key))
    return IDEM_ENOMEM;
  if (write == IDEM_WRITE_PUT)
    return put(s, slot, key, len, hash, &next);
  return 0;
}

static int run_delete(shard *s, const unsigned char *key, size_t len, uint64_t hash,
                      idem_req *req) {
  size_t slot = find(s, key, len, hash);
  if (!entry_at(s, slot))
    return IDEM_ENOTFOUND;
  remove_elsewhere(s, slot);
  req->result.count = 1;
  return 0;
}

/* An operation on one key: it needs its shard only. */
static int run_keyed(table *t, idem_req *req) {
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t len = idem_scoped_key_encode(req->op.scope, req->op.key, key);
  uint64_t hash = idem_otable_hash(key, len);
  shard *s = shard_of(t, hash);
  pthread_mutex_lock(&s->lock);
  int err = req->op.kind == IDEM_OP_DELETE
                ? run_delete(s, key, len, hash_in_shard(hash), req)
                : run_transition(s, key, len, hash_in_shard(hash), req);
  pthread_mutex_unlock(&s->lock);
  return err;
}

static int by_scoped_key(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  return idem_scoped_key_cmp(x->key, x->klen, y->key, y->klen);
}

/* Live records in (scope, key) order, after op.key within op.scope; every
 * shard locked, so the entries stay while they are copied. */
static int run_list(table *t, idem_req *req) {
  size_t count = 0;
  for (int i = 0; i < SHARDS; i++) {
    pthread_mutex_lock(&t->shards[i].lock);
    count += t->shards[i].records.count;
  }
  int err = 0;
  entry **all = malloc((count + 1) * sizeof *all);
  if (!all) {
    err = IDEM_ENOMEM;
    goto out;
  }
  size_t n = 0;
  int64_t now = idem_now_ms();
  for (int i = 0; i < SHARDS; i++) {
    const shard *s = &t->shards[i];
    for (size_t j = 0; j <= s->records.mask; j++) {
      entry *e = entry_at(s, j);
      if (e && e->rec.state != IDEM_STATE_UNSEEN && now < e->rec.expires_at &&
            (!req->op.scope || !strcmp(req->op.scope, e->rec.scope)))
        all[n++] = e;
    }
  }
  qsort(all, n, sizeof *all, by_scoped_key);
  unsigned char after[IDEM_SCOPED_KEY_MAX];
  size_t after_len = req->op.key ? idem_scoped_key_encode(req->op.scope, req->op.key, after) : 0;
  for (size_t i = 0; i < n && req->result.count < req->op.limit && !err; i++)
    if (!req->op.key || idem_scoped_key_cmp(all[i]->key, all[i]->klen, after, after_len) > 0)
      err = idem_result_add_record(&req->result, &all[i]->rec, all[i]->rec.scope, all[i]->rec.key);
  free(all);
out:
  for (int i = SHARDS - 1; i >= 0; i--)
    pthread_mutex_unlock(&t->shards[i].lock);
  return err;
}

/* Expired records, up to op.limit, a shard at a time. */
static int run_gc(table *t, idem_req *req) {
  int64_t now = idem_now_ms();
  for (int i = 0; i < SHARDS && req->result.count < req->op.limit; i++) {
    shard *s = &t->shards[i];
    pthread_mutex_lock(&s->lock);
    for (size_t j = 0; j <= s->records.mask && req->result.count < req->op.limit;) {
      entry *e = entry_at(s, j);
      if (e && e->rec.expires_at <= now) {
        remove_elsewhere(s, j); /* and look at j again: another entry may be there */
        req->result.count++;
      } else {
        j++;
      }
    }
    pthread_mutex_unlock(&s->lock);
  }
  return 0;
}

static void memory_submit(idem_store *store, idem_req *req) {
  table *t = store->impl;
  int err = req->op.kind == IDEM_OP_LIST ? run_list(t, req)
            : req->op.kind == IDEM_OP_GC ? run_gc(t, req)
                                         : run_keyed(t, req);
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
  if (!(t->name = strdup(name))) {
    free(t);
    return NULL;
  }
  for (int i = 0; i < SHARDS; i++) {
    shard *s = &t->shards[i];
    s->earliest = s->cycle_least = INT64_MAX;
    if (idem_otable_init(&s->records) || pthread_mutex_init(&s->lock, NULL)) {
      free(s->records.slots);
      while (--i >= 0) {
        pthread_mutex_destroy(&t->shards[i].lock);
        free(t->shards[i].records.slots);
      }
      free(t->name);
      free(t);
      return NULL;
    }
  }
  return t;
}

static void table_free(table *t) {
  for (int i = 0; i < SHARDS; i++) {
    shard *s = &t->shards[i];
    for (size_t j = 0; j <= s->records.mask; j++)
      free(entry_at(s, j));
    pthread_mutex_destroy(&s->lock);
    free(s->records.slots);
  }
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
                                          memory_close, 0};
