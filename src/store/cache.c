/*
 * cache.c - the memory: cache (cache.h): a hash table of scoped keys to
 * encoded records, in least-recently-used order, bounded in bytes.
 *
 * An entry is trusted until min(the record's expiry, the time it was filled
 * + ttl). Expiries are the store's clock where the store answered with a
 * record (a replay), and this process's clock counted from the submission
 * of the complete where the cache built it, which is no later than the
 * store's own expiry for the same complete.
 *
 * A delete leaves a tombstone: a replay the store answered before the
 * delete, but taken in by its loop after it (the admin listener and each
 * worker have their own handle and loop), must not put the deleted record
 * back. The tombstone answers nothing and refuses the fills of requests
 * submitted no later than the delete's end. A claim made after the delete
 * takes its place, then the record its complete makes: each carries the
 * deletion's time on, refusing the same late fills, and leaves the
 * tombstone behind when it goes (a release, an expiry), so that no late
 * fill lands between a delete and a record made after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "core/queue.h"
#include "core/otable.h"
#include "core/scoped_key.h"
#include "core/text.h"
#include "store/cache.h"
#if IDEM_WITH_REDIS
#include "store/redis.h"
#endif
#include "store/uri_options.h"

#define DEFAULT_TTL_MS 60000
/* How long a tombstone refuses late fills: longer than any store op takes
 * (as the shared cache's tombstone, redis_cache.c). */
#define TOMBSTONE_MS (10 * 60 * 1000)

enum { ENTRY_RECORD, ENTRY_CLAIM, ENTRY_TOMBSTONE };

typedef struct centry {
  idem_queue lru;      /* the cache's, most recent first */
  int64_t until;       /* trusted until (ms) */
  int kind;            /* ENTRY_*: only a record answers (a claim is this process's) */
  int64_t buried;      /* the key's last deletion (ms; 0: none seen), of any kind */
  size_t klen, vlen;
  unsigned char bytes[]; /* the scoped key, then the encoded record */
} centry;

struct idem_cache {
  idem_queue registered; /* in the registry, by uri */
  char *uri;
  int refs;
  pthread_mutex_t lock;
  idem_otable entries; /* of centries, keyed by the scoped key at bytes */
  idem_queue lru;
  uint64_t bytes, max_bytes, hits, misses;
  int64_t ttl_ms;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static idem_queue registry = {&registry, &registry};

/* ---- the table ---------------------------------------------------------- */

/* The entry in slot i, or NULL. */
static centry *at(const idem_cache *c, size_t i) { return c->entries.slots[i].item; }

static int centry_matches(const void *item, const unsigned char *key, size_t klen) {
  const centry *e = item;
  return e->klen == klen && !memcmp(e->bytes, key, klen);
}

/* The slot of key, or the empty one where it would go. */
static size_t slot_of(const idem_cache *c, const unsigned char *key, size_t klen) {
  return idem_otable_find(&c->entries, idem_otable_hash(key, klen), key, klen, centry_matches);
}

static size_t entry_size(const centry *e) { return sizeof *e + e->klen + e->vlen; }

/* Another entry may move into slot i. */
static void remove_at(idem_cache *c, size_t i) {
  centry *e = at(c, i);
  idem_otable_remove(&c->entries, i);
  idem_queue_remove(&e->lru);
  c->bytes -= entry_size(e);
  free(e);
}

static void evict_to_fit(idem_cache *c) {
  while (c->bytes > c->max_bytes) {
    idem_queue *oldest = c->lru.prev;
    centry *e = IDEM_QUEUE_DATA(oldest, centry, lru);
    remove_at(c, slot_of(c, e->bytes, e->klen));
  }
}

static int64_t later(int64_t a, int64_t b) { return a > b ? a : b; }

/* Keep rec (NULL: a tombstone) under key until until (replacing what was
 * there, whose deletion time it keeps when later than buried). */
static void insert(idem_cache *c, const unsigned char *key, size_t klen, const idem_record *rec,
                   int64_t until, int kind, int64_t buried) {
  uint64_t hash = idem_otable_hash(key, klen);
  size_t slot = idem_otable_find(&c->entries, hash, key, klen, centry_matches);
  if (at(c, slot)) {
    buried = later(buried, at(c, slot)->buried);
    remove_at(c, slot); /* which may move another entry into slot */
    slot = idem_otable_empty_slot(&c->entries, hash);
  }
  size_t vlen = rec ? idem_record_encoded_len(rec) : 0;
  if (sizeof(centry) + klen + vlen > c->max_bytes)
    return;
  centry *e = malloc(sizeof *e + klen + vlen);
  if (!e)
    return; /* a cache may forget */
  *e = (centry){.until = until, .kind = kind, .buried = buried, .klen = klen, .vlen = vlen};
  memcpy(e->bytes, key, klen);
  if (rec)
    idem_record_encode(rec, e->bytes + klen);
  if (idem_otable_add(&c->entries, slot, hash, e)) {
    free(e);
    return;
  }
  idem_queue_insert_head(&c->lru, &e->lru);
  c->bytes += entry_size(e);
  evict_to_fit(c);
}

/* The claim or record at slot goes; a deletion it carries stays, as a
 * tombstone (which is left as it is). */
static void drop(idem_cache *c, size_t slot) {
  centry *e = at(c, slot);
  if (e->kind == ENTRY_TOMBSTONE)
    return;
  int64_t buried = e->buried;
  unsigned char key[IDEM_SCOPED_KEY_MAX];
  size_t klen = e->klen;
  memcpy(key, e->bytes, klen);
  remove_at(c, slot);
  if (buried) /* past its own end, the next lookup drops it */
    insert(c, key, klen, NULL, buried + TOMBSTONE_MS, ENTRY_TOMBSTONE, buried);
}

/* The live entry of key (an expired one goes, leaving its tombstone if it
 * carries a deletion), or NULL. */
static centry *lookup(idem_cache *c, const unsigned char *key, size_t klen, int64_t now) {
  size_t slot = slot_of(c, key, klen);
  if (at(c, slot) && at(c, slot)->until <= now) {
    if (at(c, slot)->kind == ENTRY_TOMBSTONE)
      remove_at(c, slot);
    else
      drop(c, slot);
    return NULL;
  }
  return at(c, slot);
}

static int64_t earlier(int64_t a, int64_t b) { return a < b ? a : b; }

static int finished(idem_state s) { return s == IDEM_STATE_COMPLETED || s == IDEM_STATE_FAILED; }

/* ---- the interface -------------------------------------------------------- */

int idem_cache_get(idem_cache *c, const char *scope, const char *key, int64_t now,
                   idem_record *rec) {
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(scope, key, k);
  int found = 0;
  pthread_mutex_lock(&c->lock);
  centry *e = lookup(c, k, klen, now);
  idem_record view;
  if (e && e->kind == ENTRY_RECORD && idem_record_decode(e->bytes + klen, e->vlen, &view) == 0 &&
      idem_record_copy(rec, &view) == 0) {
    idem_queue_remove(&e->lru);
    idem_queue_insert_head(&c->lru, &e->lru);
    found = 1;
  }
  pthread_mutex_unlock(&c->lock);
  return found;
}

void idem_cache_put(idem_cache *c, const char *scope, const char *key, const idem_record *rec,
                    int64_t now, int64_t read_at) {
  if (!finished(rec->state) || rec->expires_at <= now)
    return;
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(scope, key, k);
  pthread_mutex_lock(&c->lock);
  lookup(c, k, klen, now); /* drops an expired entry (its tombstone stays) */
  centry *e = at(c, slot_of(c, k, klen));
  /* not over a claim of this process (the store answered it after rec was
   * read: its complete makes the record), nor when rec was read before a
   * delete ended (whatever took the tombstone's place since) */
  int stale = e && (e->kind == ENTRY_CLAIM || read_at <= e->buried);
  if (!stale)
    insert(c, k, klen, rec, earlier(rec->expires_at, now + c->ttl_ms), ENTRY_RECORD, 0);
  pthread_mutex_unlock(&c->lock);
}

void idem_cache_claimed(idem_cache *c, const char *scope, const char *key, const idem_op *claim,
                        uint64_t fence, int64_t started) {
  idem_record rec = {.state = IDEM_STATE_PROCESSING, .fence = fence,
                     .created_at = started, .updated_at = started};
  memcpy(rec.fingerprint, claim->fingerprint, sizeof rec.fingerprint);
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(scope, key, k);
  pthread_mutex_lock(&c->lock);
  insert(c, k, klen, &rec, started + claim->lease_ms, ENTRY_CLAIM, 0);
  pthread_mutex_unlock(&c->lock);
}

/* The pending claim of op's fence, finished by op (under the lock): 1 with
 * *rec pointing into the entry, else 0 (and a stale entry is dropped). */
static int finish_claim(idem_cache *c, const unsigned char *k, size_t klen, const idem_op *op,
                        int64_t started, idem_record *rec) {
  size_t slot = slot_of(c, k, klen);
  centry *e = at(c, slot);
  if (!e || e->kind == ENTRY_TOMBSTONE)
    return 0;
  if (e->kind != ENTRY_CLAIM || idem_record_decode(e->bytes + klen, e->vlen, rec) ||
      rec->fence != op->fence) {
    drop(c, slot); /* not the claim it remembers: trust nothing */
    return 0;
  }
  rec->state = op->kind == IDEM_OP_COMPLETE ? IDEM_STATE_COMPLETED : IDEM_STATE_FAILED;
  rec->locked_until = 0;
  rec->updated_at = started;
  rec->expires_at = started + op->ttl_ms;
  rec->response = op->response;
  return 1;
}

void idem_cache_finished(idem_cache *c, const idem_op *op, int64_t started) {
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(op->scope, op->key, k);
  idem_record rec;
  pthread_mutex_lock(&c->lock);
  if (finish_claim(c, k, klen, op, started, &rec))
    insert(c, k, klen, &rec, earlier(rec.expires_at, started + c->ttl_ms), ENTRY_RECORD, 0);
  pthread_mutex_unlock(&c->lock);
}

int idem_cache_take_finished(idem_cache *c, const idem_op *op, int64_t started,
                             idem_record *out) {
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(op->scope, op->key, k);
  idem_record rec;
  pthread_mutex_lock(&c->lock);
  int found = finish_claim(c, k, klen, op, started, &rec) && idem_record_copy(out, &rec) == 0;
  size_t slot = slot_of(c, k, klen);
  if (at(c, slot))
    drop(c, slot);
  pthread_mutex_unlock(&c->lock);
  return found;
}

void idem_cache_forget(idem_cache *c, const char *scope, const char *key) {
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(scope, key, k);
  pthread_mutex_lock(&c->lock);
  size_t slot = slot_of(c, k, klen);
  if (at(c, slot))
    drop(c, slot);
  pthread_mutex_unlock(&c->lock);
}

void idem_cache_bury(idem_cache *c, const char *scope, const char *key, int64_t now) {
  unsigned char k[IDEM_SCOPED_KEY_MAX];
  size_t klen = idem_scoped_key_encode(scope, key, k);
  pthread_mutex_lock(&c->lock);
  insert(c, k, klen, NULL, now + TOMBSTONE_MS, ENTRY_TOMBSTONE, now);
  pthread_mutex_unlock(&c->lock);
}

void idem_cache_count(idem_cache *c, int hit) {
  pthread_mutex_lock(&c->lock);
  if (hit)
    c->hits++;
  else
    c->misses++;
  pthread_mutex_unlock(&c->lock);
}

void idem_cache_counts(const idem_cache *c, uint64_t *hits, uint64_t *misses) {
  pthread_mutex_lock((pthread_mutex_t *)&c->lock);
  *hits = c->hits;
  *misses = c->misses;
  pthread_mutex_unlock((pthread_mutex_t *)&c->lock);
}

/* ---- opening: one cache per URI ------------------------------------------ */

static int refuse(char **why, const char *uri, const char *what) {
  if (why) {
    size_t n = strlen(uri) + strlen(what) + 8;
    if ((*why = malloc(n)))
      snprintf(*why, n, "%s: %s", uri, what);
  }
  return IDEM_EURI;
}

/* "memory:SIZE[?ttl=DUR]" into max bytes and ttl. */
static int parse(const char *uri, uint64_t *max, int64_t *ttl, char **why) {
  static const char form[] = "a cache is memory:SIZE[?ttl=DURATION] (e.g. memory:64MiB?ttl=30s) "
                             "or redis://HOST:PORT[/DB]";
  if (strncmp(uri, "memory:", 7))
    return refuse(why, uri, form);
  const char *q = strchr(uri, '?');
  size_t n = q ? (size_t)(q - uri - 7) : strlen(uri + 7);
  char size[32];
  if (n == 0 || n >= sizeof size)
    return refuse(why, uri, form);
  memcpy(size, uri + 7, n);
  size[n] = 0;
  if (idem_parse_size(size, max) || *max < 4096)
    return refuse(why, uri, "SIZE is a size of at least 4KiB, such as 64MiB");
  *ttl = DEFAULT_TTL_MS;
  idem_uri_options o;
  if (q && idem_uri_options_parse(q + 1, &o))
    return IDEM_ENOMEM;
  int err = q && idem_uri_options_repeated(&o) ? refuse(why, uri, "ttl given twice") : 0;
  for (size_t i = 0; q && !err && i < o.n; i++) {
    if (strcmp(o.items[i].name, "ttl"))
      err = refuse(why, uri, "the only option is ttl=DURATION");
    else if (!o.items[i].value || idem_parse_duration(o.items[i].value, ttl))
      err = refuse(why, uri, "ttl is a duration such as 500ms, 30s or 5m");
  }
  if (q)
    idem_uri_options_free(&o);
  return err;
}

int idem_cache_uri_check(const char *uri, char **why) {
  /* rediss:// too: the Redis URI parser says that TLS is not supported */
  if (!strncmp(uri, "redis://", 8) || !strncmp(uri, "rediss://", 9)) {
#if IDEM_WITH_REDIS
    idem_redis_uri u;
    int err = idem_redis_uri_parse(uri, &u, why);
    if (!err)
      idem_redis_uri_clear(&u);
    return err;
#else
    return refuse(why, uri, "this build of idem has no Redis support (built with -DIDEM_REDIS=OFF)");
#endif
  }
  uint64_t max;
  int64_t ttl;
  return parse(uri, &max, &ttl, why);
}

static idem_cache *cache_new(const char *uri, uint64_t max, int64_t ttl) {
  idem_cache *c = calloc(1, sizeof *c);
  int made = c && (c->uri = strdup(uri)) && idem_otable_init(&c->entries) == 0 &&
             pthread_mutex_init(&c->lock, NULL) == 0;
  if (!made && c) {
    free(c->entries.slots);
    free(c->uri);
  }
  if (!made) {
    free(c);
    return NULL;
  }
  idem_queue_init(&c->lru);
  c->max_bytes = max;
  c->ttl_ms = ttl;
  return c;
}

/* The cache registered under name, made with max and ttl if there is none. */
static idem_cache *shared(const char *name, uint64_t max, int64_t ttl) {
  pthread_mutex_lock(&registry_lock);
  idem_cache *c = idem_queue_find_key(&registry, offsetof(idem_cache, registered),
                                      offsetof(idem_cache, uri), name);
  if (!c && (c = cache_new(name, max, ttl)))
    idem_queue_insert_tail(&registry, &c->registered);
  if (c)
    c->refs++;
  pthread_mutex_unlock(&registry_lock);
  return c;
}

/* A registry name: what the cache is, then "\n" and its store's identity
 * (no URI holds a newline). */
static char *cache_name(const char *what, const char *store_id) {
  return idem_join(what, "\n", store_id);
}

int idem_cache_open(const char *uri, const char *store_id, idem_cache **out, char **why) {
  uint64_t max;
  int64_t ttl;
  int err = parse(uri, &max, &ttl, why);
  if (err)
    return err;
  char *name = cache_name(uri, store_id);
  *out = name ? shared(name, max, ttl) : NULL;
  free(name);
  return *out ? 0 : IDEM_ENOMEM;
}

idem_cache *idem_cache_for_claims(const char *shared_uri, const char *store_id,
                                  uint64_t max_bytes, int64_t ttl_ms) {
  char what[512];
  snprintf(what, sizeof what, "claims for %s", shared_uri); /* never a memory: URI */
  char *name = cache_name(what, store_id);
  idem_cache *c = name ? shared(name, max_bytes, ttl_ms) : NULL;
  free(name);
  return c;
}

void idem_cache_bury_store(const char *store_id, const char *scope, const char *key, int64_t now) {
  pthread_mutex_lock(&registry_lock);
  idem_queue *node;
  IDEM_QUEUE_FOREACH(node, &registry) {
    idem_cache *c = IDEM_QUEUE_DATA(node, idem_cache, registered);
    const char *nl = strchr(c->uri, '\n');
    if (nl && !strcmp(nl + 1, store_id))
      idem_cache_bury(c, scope, key, now); /* its own lock, under the registry's */
  }
  pthread_mutex_unlock(&registry_lock);
}

static void cache_free(idem_cache *c) {
  c->max_bytes = 0; /* every entry goes */
  evict_to_fit(c);
  pthread_mutex_destroy(&c->lock);
  free(c->entries.slots);
  free(c->uri);
  free(c);
}

void idem_cache_release(idem_cache *c) {
  if (!c)
    return;
  pthread_mutex_lock(&registry_lock);
  if (--c->refs == 0) {
    idem_queue_remove(&c->registered);
    cache_free(c);
  }
  pthread_mutex_unlock(&registry_lock);
}
