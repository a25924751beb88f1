/*
 * redis_list.c - LIST on the Redis store.
 *
 * SCAN every matching key, sort the names in the memory store's order
 * ((scope length, scope, key), see scoped_key.h), then read them in batches
 * with the script's get (which applies the same liveness rule as a claim)
 * until op.limit live records are found.
 */
#include <stdlib.h>
#include <string.h>

#include "core/scoped_key.h"
#include "store/redis_env.h"

#define SCAN_COUNT "1000"
#define LIST_BATCH 256

/* A name SCAN found, and the record read under it. */
typedef struct {
  unsigned char *sk; /* scoped key: the sort order */
  size_t sk_len;
  char *name;        /* the Redis key */
  size_t name_len;
  idem_record rec;   /* filled by the batch read */
  int found;
} candidate;

struct list_ctx {
  idem_req *req;
  char *match;
  char cursor[32];
  candidate *c;
  size_t n, cap;
  size_t next;    /* first candidate not read yet */
  size_t batch_end, pending;
  int err;
};

static void list_free(list_ctx *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->c[i].sk);
    free(l->c[i].name);
    idem_record_clear(&l->c[i].rec);
  }
  free(l->c);
  free(l->match);
  free(l);
}

static void list_done(rstore *rs, list_ctx *l, int err) {
  idem_req *req = l->req;
  list_free(l);
  redis_req_done(rs, req, err);
}

static int by_sk(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  return idem_scoped_key_cmp(x->sk, x->sk_len, y->sk, y->sk_len);
}

static void scan_answered(cmd *c, const redisReply *r);

static int list_scan(rstore *rs, list_ctx *l) {
  cmd *c = redis_cmd_new(rs, l->req, scan_answered);
  if (c == NULL)
    return IDEM_ENOMEM;
  c->list = l;
  const char *argv[] = {"SCAN", l->cursor, "MATCH", l->match, "COUNT", SCAN_COUNT};
  size_t lens[] = {4, strlen(l->cursor), 5, strlen(l->match), 5, strlen(SCAN_COUNT)};
  int err = redis_send_argv(rs, c, 6, argv, lens);
  if (err)
    free(c);
  return err;
}

/* Keep a SCAN name if it is one of ours, of the asked scope, after the
 * resume point. */
static int list_take(list_ctx *l, const redisReply *name, const unsigned char *pivot,
                     size_t pivot_len, const char *prefix) {
  const char *scope, *key;
  char *buf = malloc(name->len + 1);
  if (buf == NULL)
    return IDEM_ENOMEM;
  memcpy(buf, name->str, name->len);
  buf[name->len] = '\0';
  if (idem_redis_key_split(prefix, buf, name->len, &scope, &key) != 0 ||
      (l->req->op.scope && strcmp(scope, l->req->op.scope) != 0)) {
    free(buf);
    return 0;
  }
  unsigned char sk[IDEM_SCOPED_KEY_MAX];
  size_t sk_len = idem_scoped_key_encode(scope, key, sk);
  free(buf);
  candidate probe = {.sk = sk, .sk_len = sk_len};
  candidate piv = {.sk = (unsigned char *)pivot, .sk_len = pivot_len};
  if (pivot && by_sk(&probe, &piv) <= 0)
    return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    candidate *grown = realloc(l->c, cap * sizeof *grown);
    if (grown == NULL)
      return IDEM_ENOMEM;
    l->c = grown;
    l->cap = cap;
  }
  candidate *c = &l->c[l->n];
  memset(c, 0, sizeof *c);
  c->sk = malloc(sk_len);
  c->name = malloc(name->len);
  if (c->sk == NULL || c->name == NULL) {
    free(c->sk);
    free(c->name);
    return IDEM_ENOMEM;
  }
  memcpy(c->sk, sk, sk_len);
  c->sk_len = sk_len;
  memcpy(c->name, name->str, name->len);
  c->name_len = name->len;
  l->n++;
  return 0;
}

static void list_read_batch(rstore *rs, list_ctx *l);

static void list_after_scan(rstore *rs, list_ctx *l, const redisReply *r) {
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
      r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof l->cursor ||
      r->element[1]->type != REDIS_REPLY_ARRAY) {
    list_done(rs, l, IDEM_ESTORE);
    return;
  }
  unsigned char pivot[IDEM_SCOPED_KEY_MAX];
  size_t pivot_len = 0;
  if (l->req->op.key)
    pivot_len = idem_scoped_key_encode(l->req->op.scope, l->req->op.key, pivot);
  const redisReply *names = r->element[1];
  for (size_t i = 0; i < names->elements; i++) {
    if (names->element[i]->type != REDIS_REPLY_STRING)
      continue;
    int err = list_take(l, names->element[i], l->req->op.key ? pivot : NULL, pivot_len,
                        rs->uri.prefix);
    if (err) {
      list_done(rs, l, err);
      return;
    }
  }
  memcpy(l->cursor, r->element[0]->str, r->element[0]->len);
  l->cursor[r->element[0]->len] = '\0';
  if (strcmp(l->cursor, "0") != 0) {
    int err = list_scan(rs, l);
    if (err)
      list_done(rs, l, err);
    return;
  }
  /* SCAN may return a name twice: sort, then drop repeats */
  if (l->n > 1)
    qsort(l->c, l->n, sizeof *l->c, by_sk);
  size_t w = 0;
  for (size_t i = 0; i < l->n; i++) {
    if (w > 0 && by_sk(&l->c[w - 1], &l->c[i]) == 0) {
      free(l->c[i].sk);
      free(l->c[i].name);
      continue;
    }
    l->c[w++] = l->c[i];
  }
  l->n = w;
  list_read_batch(rs, l);
}

static void get_answered(cmd *c, const redisReply *r);

static void list_read_batch(rstore *rs, list_ctx *l) {
  idem_req *req = l->req;
  if (l->next >= l->n || req->result.count >= req->op.limit) {
    list_done(rs, l, 0);
    return;
  }
  size_t want = req->op.limit - req->result.count;
  l->batch_end = l->next + (want < LIST_BATCH ? want : LIST_BATCH);
  if (l->batch_end > l->n)
    l->batch_end = l->n;
  for (size_t i = l->next; i < l->batch_end; i++) {
    cmd *c = redis_cmd_new(rs, req, get_answered);
    int err = IDEM_ENOMEM;
    if (c) {
      c->list = l;
      c->index = i;
      err = redis_send_script(rs, c, l->c[i].name, l->c[i].name_len, IDEM_OP_GET, 0);
    }
    if (err) {
      free(c);
      l->err = err;
      l->batch_end = i; /* the replies of those sent still come */
      break;
    }
    l->pending++;
  }
  if (l->pending == 0)
    list_done(rs, l, l->err);
}

/* One get of a batch answered (reply NULL: lost). */
static void list_after_get(rstore *rs, list_ctx *l, size_t i, const redisReply *r, int err) {
  candidate *c = &l->c[i];
  if (!err && r->type == REDIS_REPLY_ARRAY && r->elements == 14 &&
      r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 0) {
    idem_record rec;
    err = redis_decode_record((redisReply *const *)r->element + 4, &rec);
    if (!err)
      err = idem_record_copy(&c->rec, &rec) ? IDEM_ENOMEM : 0;
    c->found = !err;
  } else if (!err && !(r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                       r->element[0]->type == REDIS_REPLY_INTEGER &&
                       r->element[0]->integer == IDEM_ENOTFOUND)) {
    err = r->type == REDIS_REPLY_ERROR ? redis_error_reply(rs, r) : IDEM_ESTORE;
  }
  if (err && !l->err)
    l->err = err;
  if (--l->pending > 0)
    return;
  if (l->err) {
    list_done(rs, l, l->err);
    return;
  }
  idem_req *req = l->req;
  for (size_t j = l->next; j < l->batch_end && req->result.count < req->op.limit; j++) {
    if (!l->c[j].found)
      continue;
    char *buf = malloc(l->c[j].name_len + 1);
    const char *scope, *key;
    if (buf == NULL) {
      list_done(rs, l, IDEM_ENOMEM);
      return;
    }
    memcpy(buf, l->c[j].name, l->c[j].name_len);
    buf[l->c[j].name_len] = '\0';
    int bad = idem_redis_key_split(rs->uri.prefix, buf, l->c[j].name_len, &scope, &key);
    int e = bad ? 0 : idem_result_add_record(&req->result, &l->c[j].rec, scope, key);
    free(buf);
    if (e) {
      list_done(rs, l, e);
      return;
    }
  }
  l->next = l->batch_end;
  list_read_batch(rs, l);
}

static void scan_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  list_ctx *l = c->list;
  if (r == NULL)
    list_done(rs, l, redis_lost_error(c));
  else if (r->type == REDIS_REPLY_ERROR)
    list_done(rs, l, redis_error_reply(rs, r));
  else
    list_after_scan(rs, l, r);
  free(c);
}

static void get_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  list_ctx *l = c->list;
  if (r != NULL && redis_is_noscript(r)) {
    /* did not run: safe to send again, as EVAL (which also caches it) */
    if (redis_send_script(rs, c, l->c[c->index].name, l->c[c->index].name_len, IDEM_OP_GET, 1) == 0)
      return;
    list_after_get(rs, l, c->index, NULL, IDEM_ESTORE);
  } else {
    list_after_get(rs, l, c->index, r, r == NULL ? redis_lost_error(c) : 0);
  }
  free(c);
}

void redis_list_start(rstore *rs, idem_req *req) {
  list_ctx *l = calloc(1, sizeof *l);
  if (l == NULL) {
    redis_req_done(rs, req, IDEM_ENOMEM);
    return;
  }
  l->req = req;
  strcpy(l->cursor, "0");
  l->match = idem_redis_match(rs->uri.prefix, req->op.scope);
  int err = l->match ? list_scan(rs, l) : IDEM_ENOMEM;
  if (err)
    list_done(rs, l, err);
}
