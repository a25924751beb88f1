/*
 * redis_cluster_list.c - LIST on a Redis Cluster: every primary of the map
 * lists its own records (redis_list.c, one part each, the same op), and
 * the parts are merged in the memory store's order ((scope length, scope,
 * key), scoped_key.h); the first op.limit are the answer. Each part holds
 * at most op.limit records after the resume key, so the merge's first
 * op.limit are the cluster's. A part that fails fails the LIST.
 */
#include <stdlib.h>
#include <string.h>

#include "core/scoped_key.h"
#include "store/redis_cluster.h"

typedef struct {
  idem_req *req; /* the LIST asked */
  size_t pending;
  int err;
  idem_record *got; /* every part's records, owned */
  size_t n, cap;
} list_fan;

/* A part is a req of the router's own: no store (it is never delivered),
 * the fan in arg. */
static int is_part(const idem_req *req) { return req->store == NULL; }

static int take_records(list_fan *f, idem_result *res) {
  if (res->count == 0)
    return 0;
  if (f->n + res->count > f->cap) {
    size_t cap = f->n + res->count + 16;
    idem_record *grown = realloc(f->got, cap * sizeof *grown);
    if (grown == NULL)
      return IDEM_ENOMEM;
    f->got = grown;
    f->cap = cap;
  }
  /* moved, not copied: the part's result lets go of them */
  memcpy(f->got + f->n, res->records, res->count * sizeof *res->records);
  f->n += res->count;
  free(res->records);
  res->records = NULL;
  res->count = 0;
  return 0;
}

static int by_scoped_key(const void *a, const void *b) {
  const idem_record *x = a, *y = b;
  unsigned char kx[IDEM_SCOPED_KEY_MAX], ky[IDEM_SCOPED_KEY_MAX];
  size_t nx = idem_scoped_key_encode(x->scope, x->key, kx);
  size_t ny = idem_scoped_key_encode(y->scope, y->key, ky);
  return idem_scoped_key_cmp(kx, nx, ky, ny);
}

static void fan_finish(list_fan *f) {
  idem_req *req = f->req;
  int err = f->err;
  if (!err && f->n > 1)
    qsort(f->got, f->n, sizeof *f->got, by_scoped_key);
  for (size_t i = 0; !err && i < f->n && req->result.count < req->op.limit; i++) {
    if (i > 0 && by_scoped_key(&f->got[i - 1], &f->got[i]) == 0)
      continue; /* a record seen on two nodes mid-migration */
    err = idem_result_add_record(&req->result, &f->got[i], f->got[i].scope, f->got[i].key);
  }
  for (size_t i = 0; i < f->n; i++)
    idem_record_clear(&f->got[i]);
  free(f->got);
  free(f);
  if (err)
    idem_req_fail(req, err);
  else
    idem_req_finish(req);
}

int cluster_list_part_done(idem_req *part, int err) {
  if (!is_part(part))
    return 0;
  list_fan *f = part->arg;
  if (!err && !f->err)
    err = take_records(f, &part->result);
  if (err && !f->err)
    f->err = err;
  idem_result_clear(&part->result);
  free(part);
  if (--f->pending == 0)
    fan_finish(f);
  return 1;
}

void cluster_list_start(rcluster *cl, idem_req *req) {
  list_fan *f = calloc(1, sizeof *f);
  if (f == NULL) {
    idem_req_fail(req, IDEM_ENOMEM);
    return;
  }
  f->req = req;
  f->pending = 1; /* this function's own, so that no part finishes the fan early */
  idem_queue *q;
  IDEM_QUEUE_FOREACH(q, &cl->nodes) {
    cnode *n = IDEM_QUEUE_DATA(q, cnode, node);
    if (!n->in_map || n->closing)
      continue;
    idem_req *part = calloc(1, sizeof *part);
    if (part == NULL) {
      f->err = IDEM_ENOMEM;
      break;
    }
    part->op = req->op; /* its strings stay req's: req outlives its parts */
    part->arg = f;
    f->pending++;
    redis_rs_submit(n->rs, part);
  }
  if (--f->pending == 0)
    fan_finish(f);
}
