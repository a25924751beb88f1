/*
 * redis.c - the redis:// store: one Redis shared by every gateway and
 * consumer process that points at it.
 *
 * Cluster: every script touches one key, and that key is its own hash tag,
 * so each record lives in one slot; but this client does not follow MOVED
 * or ASK redirections: use a proxy that routes by key, or one primary.
 *
 * Every transition is one run of the Lua script in redis_scripts.c (EVALSHA,
 * and EVAL when the server answers NOSCRIPT, which means it did not run), so
 * the server's clock and the server's atomicity decide, never ours. One
 * hiredis async connection per handle, on the handle's libuv loop:
 *
 *   DOWN ──backoff timer──► CONNECTING ──AUTH, SELECT, ROLE master, SCRIPT LOAD──► UP
 *     ▲                          │ refused, error, connect timeout        │
 *     └──────────────────────────┴──────── lost, command timeout ◄────────┘
 *
 * Operations submitted while a connection attempt is under way wait for
 * its outcome, at most the connect timeout (so a store is usable as soon as
 * it is opened); while DOWN, between attempts, they fail at once with
 * IDEM_ESTORE: failing closed or open is the caller's policy, and a fast
 * answer is what it needs to apply it. A lost connection
 * fails every operation in flight with IDEM_ESTORE (or IDEM_ETIMEDOUT for
 * the one that timed out): a transition whose reply was lost may or may not
 * have run, so it is never sent again. Reconnection backs off exponentially
 * from 100ms to 2s, with jitter so that a fleet does not reconnect in step.
 *
 * Commands are answered in order on one connection, so the oldest command
 * in flight always has the nearest deadline: one timer watches it.
 *
 * CONNECTING starts with the host name's resolution on libuv's thread pool
 * (uv_getaddrinfo): hiredis would call getaddrinfo on the loop thread, and a
 * slow DNS server during an outage would then stall every request of that
 * loop, replays and pass-through included. hiredis gets the numeric address.
 * The name's addresses are tried in turn until one takes the connection;
 * one whose attempt timed out is tried after the others next time
 * (idem_slow_addrs), so a dead first address costs one connect timeout,
 * not every attempt.
 */
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "core/scoped_key.h"
#include "store/backend.h"
#include "store/backoff.h"
#include "store/lookup.h"
#include "store/redis.h"

#define BACKOFF_MIN_MS 100 /* reconnection: doubling, jittered (backoff.h) */
#define BACKOFF_MAX_MS 2000
#define SCAN_COUNT "1000"
#define LIST_BATCH 256

typedef enum { R_DOWN, R_CONNECTING, R_UP } rstate;

typedef struct cmd cmd;
typedef struct list_ctx list_ctx;

typedef struct {
  idem_store *store;
  uv_loop_t *loop;
  idem_redis_uri uri;
  const char *sha;
  redisAsyncContext *ac;
  rstate state;
  int closing;
  int handshake_left;   /* replies still awaited before UP */
  int reconnect_soon;   /* a reply said this server cannot take writes */
  idem_backoff backoff;
  uv_timer_t conn_timer; /* connect timeout while CONNECTING, backoff while DOWN */
  uv_timer_t cmd_timer;  /* deadline of the oldest command in flight */
  int timers_open;
  int resolves_open;     /* 1 while a lookup of the host is out (one at a time) */
  idem_addr_text addrs[IDEM_LOOKUP_MAX]; /* the last lookup's, in order */
  int naddrs, next_addr;
  idem_slow_addrs slow; /* addresses that timed out: tried last */
  int addrs_ready;       /* the last lookup ended after its attempt: unused */
  idem_queue waiting; /* reqs submitted while CONNECTING */
  idem_queue flight;  /* cmds in flight, in the order sent */
  size_t held;                     /* reqs not yet finished */
  char last_error[160];
} rstore;

enum { C_OP, C_EVAL, C_DEL, C_SCAN, C_LISTGET };

struct cmd {
  rstore *rs;
  idem_req *req;
  int kind;
  int timed_out;
  uint64_t deadline; /* uv_now */
  idem_queue node;   /* in rs->flight */
  list_ctx *list;
  size_t index;      /* C_LISTGET: candidate */
};

/* LIST: SCAN every matching key, sort the names in the memory store's order
 * ((scope length, scope, key), see scoped_key.h), then read them in batches
 * with the script's get (which applies the same liveness rule as a claim)
 * until op.limit live records are found. */
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

static void conn_start(rstore *rs);
static void conn_drop(rstore *rs, const char *why);
static void maybe_teardown(rstore *rs);

/* ---- a libuv adapter for hiredis ----------------------------------------
 * hiredis 0.14's adapters/libuv.h drops poll errors (status < 0), and libuv
 * reports a refused connect or a reset socket only that way: the connection
 * would hang until a timeout. Like hiredis 1.x, we let hiredis do the read
 * or write that finds the error. */

typedef struct {
  redisAsyncContext *ac;
  uv_poll_t handle;
  int events;
} uvev;

static void uvev_poll(uv_poll_t *handle, int status, int events) {
  uvev *p = handle->data;
  int ev = events;
  if (status < 0) {
    ev = p->events;
    p->events = 0; /* libuv stopped the handle: the next add starts it again */
  }
  if (p->ac != NULL && (ev & UV_READABLE))
    redisAsyncHandleRead(p->ac);
  if (p->ac != NULL && (ev & UV_WRITABLE))
    redisAsyncHandleWrite(p->ac);
}

static void uvev_update(uvev *p, int add, int del) {
  int events = (p->events | add) & ~del;
  if (events == p->events)
    return; /* hiredis asks for writes once per command: no churn */
  p->events = events;
  if (p->events)
    uv_poll_start(&p->handle, p->events, uvev_poll);
  else
    uv_poll_stop(&p->handle);
}

static void uvev_add_read(void *d) { uvev_update(d, UV_READABLE, 0); }
static void uvev_del_read(void *d) { uvev_update(d, 0, UV_READABLE); }
static void uvev_add_write(void *d) { uvev_update(d, UV_WRITABLE, 0); }
static void uvev_del_write(void *d) { uvev_update(d, 0, UV_WRITABLE); }
static void uvev_closed(uv_handle_t *h) { free(h->data); }

static void uvev_cleanup(void *d) {
  uvev *p = d;
  p->ac = NULL;
  uv_close((uv_handle_t *)&p->handle, uvev_closed);
}

static int uvev_attach(redisAsyncContext *ac, uv_loop_t *loop) {
  uvev *p = calloc(1, sizeof *p);
  if (p == NULL)
    return -1;
  if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
    free(p);
    return -1;
  }
  p->handle.data = p;
  p->ac = ac;
  ac->ev.data = p;
  ac->ev.addRead = uvev_add_read;
  ac->ev.delRead = uvev_del_read;
  ac->ev.addWrite = uvev_add_write;
  ac->ev.delWrite = uvev_del_write;
  ac->ev.cleanup = uvev_cleanup;
  return 0;
}

/* ---- helpers ----------------------------------------------------------- */

static void note(rstore *rs, const char *fmt, const char *detail) {
  char line[sizeof rs->last_error];
  snprintf(line, sizeof line, fmt, detail ? detail : "");
  /* one line per change of situation, not one per attempt */
  if (strcmp(line, rs->last_error) != 0) {
    fprintf(stderr, "idem: redis %s:%d: %s\n", rs->uri.host, rs->uri.port, line);
    snprintf(rs->last_error, sizeof rs->last_error, "%s", line);
  }
}

static void req_done(rstore *rs, idem_req *req, int err) {
  rs->held--;
  if (err)
    idem_req_fail(req, err);
  else
    idem_req_finish(req);
  maybe_teardown(rs);
}

static int parse_i64(const char *s, size_t n, int64_t *out) {
  char buf[24], *end;
  if (n == 0 || n >= sizeof buf)
    return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  long long v = strtoll(buf, &end, 10);
  if (*end != '\0')
    return -1;
  *out = v;
  return 0;
}

static int parse_u64(const char *s, size_t n, uint64_t *out) {
  char buf[24], *end;
  if (n == 0 || n >= sizeof buf || s[0] == '-')
    return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  unsigned long long v = strtoull(buf, &end, 10);
  if (*end != '\0')
    return -1;
  *out = v;
  return 0;
}

static int str_i64(const redisReply *r, int64_t *out) {
  return r->type == REDIS_REPLY_STRING ? parse_i64(r->str, r->len, out) : -1;
}

/* The ten stored fields of a script reply, from element 4 on: the record
 * borrows the reply's strings. */
static int decode_record(redisReply *const *e, idem_record *rec) {
  int64_t state, status;
  memset(rec, 0, sizeof *rec);
  for (int i = 0; i < 10; i++)
    if (e[i]->type != REDIS_REPLY_STRING)
      return IDEM_ECORRUPT;
  if (str_i64(e[0], &state) || state < 0 || state > 3 ||
      e[1]->len != IDEM_FINGERPRINT_LEN || parse_u64(e[2]->str, e[2]->len, &rec->fence) ||
      str_i64(e[3], &rec->locked_until) || str_i64(e[4], &rec->expires_at) ||
      str_i64(e[5], &rec->created_at) || str_i64(e[6], &rec->updated_at) ||
      str_i64(e[7], &status) || status < 0 || status > 999)
    return IDEM_ECORRUPT;
  rec->state = (idem_state)state;
  memcpy(rec->fingerprint, e[1]->str, IDEM_FINGERPRINT_LEN);
  rec->response.status = (int)status;
  rec->response.headers = e[8]->len ? e[8]->str : NULL;
  rec->response.headers_len = e[8]->len;
  rec->response.body = e[9]->len ? e[9]->str : NULL;
  rec->response.body_len = e[9]->len;
  return 0;
}

/* Map an error reply. NOSCRIPT is handled by the caller. A server that
 * became a replica (failover) or lost its master refuses every write: find
 * the master again through a new connection, as the URI's host resolves
 * now. */
static int error_reply(rstore *rs, const redisReply *r) {
  note(rs, "command refused: %s", r->str);
  if (!strncmp(r->str, "READONLY", 8) || !strncmp(r->str, "MASTERDOWN", 10) ||
      !strncmp(r->str, "LOADING", 7))
    rs->reconnect_soon = 1;
  return IDEM_ESTORE;
}

/* ---- the flight list and deadlines ------------------------------------- */

static void arm_cmd_timer(rstore *rs);

/* The oldest command in flight, or NULL. */
static cmd *oldest_cmd(const rstore *rs) {
  idem_queue *node = idem_queue_head(&rs->flight);
  return node ? IDEM_QUEUE_DATA(node, cmd, node) : NULL;
}

static void on_cmd_timer(uv_timer_t *t) {
  rstore *rs = t->data;
  cmd *c = oldest_cmd(rs);
  if (c == NULL)
    return;
  if (uv_now(rs->loop) >= c->deadline) {
    /* the server or the network hangs: everything behind this command is
     * stuck too. Fail them all and start over on a new connection. */
    c->timed_out = 1;
    conn_drop(rs, "command timed out");
    return;
  }
  arm_cmd_timer(rs);
}

static void arm_cmd_timer(rstore *rs) {
  cmd *oldest = oldest_cmd(rs);
  if (oldest == NULL) {
    uv_timer_stop(&rs->cmd_timer);
    return;
  }
  uint64_t now = uv_now(rs->loop), at = oldest->deadline;
  uv_timer_start(&rs->cmd_timer, on_cmd_timer, at > now ? at - now : 0, 0);
}

static void flight_add(rstore *rs, cmd *c) {
  c->deadline = uv_now(rs->loop) + (uint64_t)rs->uri.timeout_ms;
  idem_queue_insert_tail(&rs->flight, &c->node);
  if (c == oldest_cmd(rs))
    arm_cmd_timer(rs);
}

static void flight_remove(rstore *rs, cmd *c) {
  int was_head = c == oldest_cmd(rs);
  idem_queue_remove(&c->node);
  if (was_head)
    arm_cmd_timer(rs);
}

/* The error for a command whose reply will never come. */
static int lost_error(const rstore *rs, const cmd *c) {
  (void)rs;
  /* sent: it may have run, so "unknown", never "closed" */
  return c->timed_out ? IDEM_ETIMEDOUT : IDEM_ESTORE;
}

/* ---- sending ----------------------------------------------------------- */

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

static int send_argv(rstore *rs, cmd *c, int argc, const char **argv, const size_t *lens) {
  if (rs->ac == NULL || rs->state != R_UP)
    return IDEM_ESTORE;
  if (redisAsyncCommandArgv(rs->ac, on_reply, c, argc, argv, lens) != REDIS_OK)
    return IDEM_ESTORE;
  flight_add(rs, c);
  return 0;
}

static const char *op_name(idem_op_kind kind) {
  switch (kind) {
  case IDEM_OP_CLAIM:
    return "claim";
  case IDEM_OP_COMPLETE:
    return "complete";
  case IDEM_OP_FAIL:
    return "fail";
  case IDEM_OP_RELEASE:
    return "release";
  default:
    return "get";
  }
}

/* EVALSHA sha 1 key op fp fence lease ttl flags status headers body (or EVAL
 * with the script text). */
static int send_script(rstore *rs, cmd *c, const char *name, size_t name_len,
                       idem_op_kind kind, int eval) {
  const idem_op *op = &c->req->op;
  char fence[24], lease[24], ttl[24], flags[16], status[16];
  snprintf(fence, sizeof fence, "%llu", (unsigned long long)op->fence);
  snprintf(lease, sizeof lease, "%lld", (long long)op->lease_ms);
  snprintf(ttl, sizeof ttl, "%lld", (long long)op->ttl_ms);
  snprintf(flags, sizeof flags, "%u", op->flags);
  snprintf(status, sizeof status, "%d", op->response.status);
  const char *opn = op_name(kind);
  int finish = kind == IDEM_OP_COMPLETE || kind == IDEM_OP_FAIL;
  const char *argv[] = {
      eval ? "EVAL" : "EVALSHA", eval ? idem_redis_script : rs->sha, "1", name, opn,
      (const char *)op->fingerprint, fence, lease, ttl, flags, status,
      finish && op->response.headers ? op->response.headers : "",
      finish && op->response.body ? op->response.body : ""};
  size_t lens[] = {
      eval ? 4 : 7, eval ? idem_redis_script_len : strlen(rs->sha), 1, name_len,
      strlen(opn), IDEM_FINGERPRINT_LEN, strlen(fence), strlen(lease), strlen(ttl),
      strlen(flags), strlen(status), finish ? op->response.headers_len : 0,
      finish ? op->response.body_len : 0};
  return send_argv(rs, c, 13, argv, lens);
}

static cmd *cmd_new(rstore *rs, idem_req *req, int kind) {
  cmd *c = calloc(1, sizeof *c);
  if (c) {
    c->rs = rs;
    c->req = req;
    c->kind = kind;
  }
  return c;
}

/* Send a transition (or get, delete) for req: the connection is UP. */
static void start_op(rstore *rs, idem_req *req) {
  size_t name_len;
  char *name = idem_redis_key(rs->uri.prefix, req->op.scope, req->op.key, &name_len);
  cmd *c = cmd_new(rs, req, req->op.kind == IDEM_OP_DELETE ? C_DEL : C_OP);
  int err = IDEM_ENOMEM;
  if (name && c) {
    if (c->kind == C_DEL) {
      const char *argv[] = {"DEL", name};
      size_t lens[] = {3, name_len};
      err = send_argv(rs, c, 2, argv, lens);
    } else {
      err = send_script(rs, c, name, name_len, req->op.kind, 0);
    }
  }
  free(name);
  if (err) {
    free(c);
    req_done(rs, req, err);
  }
}

/* ---- LIST ---------------------------------------------------------------- */

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
  req_done(rs, req, err);
}

static int by_sk(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  size_t n = x->sk_len < y->sk_len ? x->sk_len : y->sk_len;
  int c = memcmp(x->sk, y->sk, n);
  return c ? c : (x->sk_len > y->sk_len) - (x->sk_len < y->sk_len);
}

static int list_scan(rstore *rs, list_ctx *l) {
  cmd *c = cmd_new(rs, l->req, C_SCAN);
  if (c == NULL)
    return IDEM_ENOMEM;
  c->list = l;
  const char *argv[] = {"SCAN", l->cursor, "MATCH", l->match, "COUNT", SCAN_COUNT};
  size_t lens[] = {4, strlen(l->cursor), 5, strlen(l->match), 5, strlen(SCAN_COUNT)};
  int err = send_argv(rs, c, 6, argv, lens);
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
    cmd *c = cmd_new(rs, req, C_LISTGET);
    int err = IDEM_ENOMEM;
    if (c) {
      c->list = l;
      c->index = i;
      err = send_script(rs, c, l->c[i].name, l->c[i].name_len, IDEM_OP_GET, 0);
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
    err = decode_record((redisReply *const *)r->element + 4, &rec);
    if (!err)
      err = idem_record_copy(&c->rec, &rec) ? IDEM_ENOMEM : 0;
    c->found = !err;
  } else if (!err && !(r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                       r->element[0]->type == REDIS_REPLY_INTEGER &&
                       r->element[0]->integer == IDEM_ENOTFOUND)) {
    err = r->type == REDIS_REPLY_ERROR ? error_reply(rs, r) : IDEM_ESTORE;
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

static void start_list(rstore *rs, idem_req *req) {
  list_ctx *l = calloc(1, sizeof *l);
  if (l == NULL) {
    req_done(rs, req, IDEM_ENOMEM);
    return;
  }
  l->req = req;
  strcpy(l->cursor, "0");
  l->match = idem_redis_match(rs->uri.prefix, req->op.scope);
  int err = l->match ? list_scan(rs, l) : IDEM_ENOMEM;
  if (err)
    list_done(rs, l, err);
}

/* ---- replies ----------------------------------------------------------- */

static int is_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* A script reply for a transition, get or delete. */
static int decode_op(rstore *rs, idem_req *req, const redisReply *r) {
  idem_result *res = &req->result;
  if (r->type == REDIS_REPLY_ERROR)
    return error_reply(rs, r);
  if (req->op.kind == IDEM_OP_DELETE) {
    if (r->type != REDIS_REPLY_INTEGER)
      return IDEM_ESTORE;
    if (r->integer == 0)
      return IDEM_ENOTFOUND;
    res->count = (size_t)r->integer;
    return 0;
  }
  if (r->type != REDIS_REPLY_ARRAY || (r->elements != 4 && r->elements != 14))
    return IDEM_ESTORE;
  for (int i = 0; i < 4; i++)
    if (r->element[i]->type != (i == 2 ? REDIS_REPLY_STRING : REDIS_REPLY_INTEGER))
      return IDEM_ESTORE;
  if (r->element[0]->integer != 0)
    return (int)r->element[0]->integer;
  res->outcome = (idem_outcome)r->element[1]->integer;
  if (parse_u64(r->element[2]->str, r->element[2]->len, &res->fence))
    return IDEM_ECORRUPT;
  res->retry_after_ms = r->element[3]->integer;
  if (r->elements == 14) {
    idem_record rec;
    int err = decode_record((redisReply *const *)r->element + 4, &rec);
    if (err)
      return err;
    if (idem_result_set_record(res, &rec, req->op.scope, req->op.key))
      return IDEM_ENOMEM;
  }
  return 0;
}

static void handle_reply(redisAsyncContext *ac, void *reply, void *privdata);

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  rstore *rs = ((cmd *)privdata)->rs;
  handle_reply(ac, reply, privdata);
  if (rs->reconnect_soon && rs->ac == ac && reply != NULL) {
    rs->reconnect_soon = 0;
    conn_drop(rs, "server cannot take writes");
  }
}

static void handle_reply(redisAsyncContext *ac, void *reply, void *privdata) {
  (void)ac;
  cmd *c = privdata;
  rstore *rs = c->rs;
  redisReply *r = reply;
  flight_remove(rs, c);
  if (c->kind == C_SCAN || c->kind == C_LISTGET) {
    list_ctx *l = c->list;
    if (c->kind == C_SCAN) {
      if (r == NULL)
        list_done(rs, l, lost_error(rs, c));
      else if (r->type == REDIS_REPLY_ERROR)
        list_done(rs, l, error_reply(rs, r));
      else
        list_after_scan(rs, l, r);
    } else if (r != NULL && is_noscript(r)) {
      /* did not run: safe to send again, as EVAL (which also caches it) */
      if (send_script(rs, c, l->c[c->index].name, l->c[c->index].name_len, IDEM_OP_GET, 1) == 0)
        return;
      list_after_get(rs, l, c->index, NULL, IDEM_ESTORE);
    } else {
      list_after_get(rs, l, c->index, r, r == NULL ? lost_error(rs, c) : 0);
    }
    free(c);
    return;
  }
  idem_req *req = c->req;
  if (r == NULL) {
    int err = lost_error(rs, c);
    free(c);
    req_done(rs, req, err);
    return;
  }
  if (is_noscript(r) && c->kind == C_OP) {
    size_t name_len;
    char *name = idem_redis_key(rs->uri.prefix, req->op.scope, req->op.key, &name_len);
    c->kind = C_EVAL;
    int err = name ? send_script(rs, c, name, name_len, req->op.kind, 1) : IDEM_ENOMEM;
    free(name);
    if (err == 0)
      return;
    free(c);
    req_done(rs, req, err);
    return;
  }
  free(c);
  int err = decode_op(rs, req, r);
  if (err) {
    idem_result_clear(&req->result);
    memset(&req->result, 0, sizeof req->result);
  }
  req_done(rs, req, err);
}

/* ---- the connection ---------------------------------------------------- */

static void start_any(rstore *rs, idem_req *req) {
  switch (req->op.kind) {
  case IDEM_OP_LIST:
    start_list(rs, req);
    break;
  case IDEM_OP_GC:
    /* Redis expires records itself, at expires_at: nothing to collect */
    req_done(rs, req, 0);
    break;
  default:
    start_op(rs, req);
  }
}

static void fail_waiting(rstore *rs, int err) {
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&rs->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    req_done(rs, req, err);
}

static void on_backoff(uv_timer_t *t) {
  rstore *rs = t->data;
  if (!rs->closing && rs->state == R_DOWN)
    conn_start(rs);
}

static void schedule_reconnect(rstore *rs) {
  if (rs->closing) {
    maybe_teardown(rs);
    return;
  }
  uv_timer_start(&rs->conn_timer, on_backoff, idem_backoff_next(&rs->backoff), 0);
}

/* Give up this connection: every command in flight gets a NULL reply
 * (hiredis calls them back from redisAsyncFree), reqs still waiting for a
 * connection fail, and a new attempt is scheduled. */
static void conn_drop(rstore *rs, const char *why) {
  redisAsyncContext *ac = rs->ac;
  rs->ac = NULL;
  rs->state = R_DOWN;
  uv_timer_stop(&rs->conn_timer);
  if (why)
    note(rs, "%s; reconnecting", why);
  if (ac) {
    ac->data = NULL; /* its disconnect callback is ours to ignore now */
    redisAsyncFree(ac);
  }
  fail_waiting(rs, rs->closing ? IDEM_ECLOSED : IDEM_ESTORE);
  schedule_reconnect(rs);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  rstore *rs = ac->data;
  (void)status;
  if (rs == NULL || rs->ac != ac)
    return;
  /* hiredis frees ac after this; the pending callbacks have run */
  rs->ac = NULL;
  conn_drop(rs, ac->errstr[0] ? ac->errstr : "connection closed");
}

static void connect_next(rstore *rs, const char *why);

static void on_connect(const redisAsyncContext *ac, int status) {
  rstore *rs = ac->data;
  if (rs == NULL || rs->ac != ac || status == REDIS_OK)
    return;
  /* hiredis frees ac after this, without a disconnect callback; the name's
   * next address, if any, gets a context of its own */
  rs->ac = NULL;
  connect_next(rs, ac->errstr[0] ? ac->errstr : "cannot connect");
}

static void on_connect_timeout(uv_timer_t *t) {
  rstore *rs = t->data;
  if (rs->state != R_CONNECTING)
    return;
  if (!rs->ac) {
    conn_drop(rs, "connect timed out");
    return;
  }
  const char *addr = rs->addrs[rs->next_addr - 1];
  char why[120];
  snprintf(why, sizeof why, "connect to %s timed out", addr);
  idem_slow_addrs_note(&rs->slow, addr); /* the next attempt tries it last */
  conn_drop(rs, why);
}

static void on_handshake(redisAsyncContext *ac, void *reply, void *privdata) {
  rstore *rs = ac->data;
  redisReply *r = reply;
  if (rs == NULL || rs->ac != ac || rs->state != R_CONNECTING || r == NULL)
    return; /* the drop is already under way */
  /* A user whose ACL allows only what idem runs may not ask ROLE or SCRIPT
   * LOAD: go on without (EVALSHA falls back to EVAL on NOSCRIPT). */
  int optional = strcmp(privdata, "ROLE") == 0 || strcmp(privdata, "SCRIPT LOAD") == 0;
  if (r->type == REDIS_REPLY_ERROR && !(optional && !strncmp(r->str, "NOPERM", 6))) {
    char why[120];
    snprintf(why, sizeof why, "%s refused: %.80s", (const char *)privdata, r->str);
    conn_drop(rs, why);
    return;
  }
  if (!strcmp(privdata, "ROLE") && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master")) {
    /* a replica takes no writes: back off until the name leads to a master */
    conn_drop(rs, "server is a replica");
    return;
  }
  if (--rs->handshake_left > 0)
    return;
  rs->state = R_UP;
  idem_backoff_reset(&rs->backoff);
  idem_slow_addrs_forget(&rs->slow, rs->addrs[rs->next_addr - 1]);
  uv_timer_stop(&rs->conn_timer);
  if (rs->last_error[0]) { /* quiet on a first connect, loud on a recovery */
    fprintf(stderr, "idem: redis %s:%d: connected again\n", rs->uri.host, rs->uri.port);
    rs->last_error[0] = '\0';
  }
  idem_queue waiting;
  idem_req *req;
  idem_queue_move(&rs->waiting, &waiting);
  while ((req = idem_req_of(idem_queue_pop(&waiting))))
    start_any(rs, req);
}

static void on_resolved(void *owner, int status, const struct addrinfo *addrs) {
  rstore *rs = owner;
  rs->resolves_open--;
  if (status == 0) {
    rs->naddrs = idem_lookup_addresses(addrs, rs->addrs, IDEM_LOOKUP_MAX);
    rs->next_addr = 0;
  }
  if (rs->state != R_CONNECTING || rs->ac) {
    /* its attempt timed out: the next one starts from these addresses */
    rs->addrs_ready = status == 0 && rs->naddrs > 0;
  } else if (rs->closing && idem_queue_empty(&rs->waiting)) {
    rs->state = R_DOWN; /* nothing waits for this connection */
    uv_timer_stop(&rs->conn_timer);
  } else if (status < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot resolve %.100s: %s", rs->uri.host, uv_strerror(status));
    conn_drop(rs, why);
  } else {
    connect_next(rs, "no address");
  }
  maybe_teardown(rs);
}

/* DOWN -> CONNECTING: resolve the host (see the top), then connect_next. */
static void conn_start(rstore *rs) {
  uv_update_time(rs->loop); /* the connect timeout counts from now */
  rs->state = R_CONNECTING;
  uv_timer_start(&rs->conn_timer, on_connect_timeout, (uint64_t)rs->uri.connect_timeout_ms, 0);
  /* A DNS server slower than connect_timeout: the lookup of an attempt
   * that timed out answers the next attempt (still out: when it comes;
   * done: at once), so lookups never pile up and a slow one still counts. */
  if (rs->resolves_open > 0)
    return;
  if (rs->addrs_ready) {
    rs->addrs_ready = 0;
    rs->next_addr = 0;
    connect_next(rs, "no address");
    return;
  }
  int rc = idem_lookup_start(rs->loop, rs->uri.host, on_resolved, rs);
  if (rc < 0) {
    char why[160];
    snprintf(why, sizeof why, "cannot resolve %.100s: %s", rs->uri.host, uv_strerror(rc));
    conn_drop(rs, why);
    return;
  }
  rs->resolves_open++;
}

/* Connect to the next address of this attempt: the first that answers
 * wins, as libpq does (hiredis alone would stop at the first that takes a
 * connect() call, and a refusal comes later). why: the last failure. */
static void connect_next(rstore *rs, const char *why) {
  char last[160];
  snprintf(last, sizeof last, "%s", why);
  if (rs->next_addr == 0) /* a new attempt */
    idem_slow_addrs_last(&rs->slow, rs->addrs, rs->naddrs);
  redisAsyncContext *ac = NULL;
  while (!ac && rs->next_addr < rs->naddrs) {
    ac = redisAsyncConnect(rs->addrs[rs->next_addr++], rs->uri.port);
    if (ac == NULL) {
      conn_drop(rs, "out of memory");
      return;
    }
    if (ac->err) {
      snprintf(last, sizeof last, "cannot connect: %.100s", ac->errstr);
      redisAsyncFree(ac);
      ac = NULL;
    }
  }
  if (ac == NULL) {
    conn_drop(rs, last);
    return;
  }
  if (uvev_attach(ac, rs->loop) != 0) {
    redisAsyncFree(ac);
    conn_drop(rs, "cannot watch the socket");
    return;
  }
  ac->data = rs;
  rs->ac = ac;
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);

  /* Pipelined behind the connect; the last reply makes the connection UP. */
  rs->handshake_left = 0;
  if (rs->uri.password) {
    if (rs->uri.user)
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s %s", rs->uri.user, rs->uri.password);
    else
      redisAsyncCommand(ac, on_handshake, (char *)"AUTH", "AUTH %s", rs->uri.password);
    rs->handshake_left++;
  }
  if (rs->uri.db != 0) {
    redisAsyncCommand(ac, on_handshake, (char *)"SELECT", "SELECT %d", rs->uri.db);
    rs->handshake_left++;
  }
  redisAsyncCommand(ac, on_handshake, (char *)"ROLE", "ROLE");
  rs->handshake_left++;
  const char *argv[] = {"SCRIPT", "LOAD", idem_redis_script};
  size_t lens[] = {6, 4, idem_redis_script_len};
  redisAsyncCommandArgv(ac, on_handshake, (char *)"SCRIPT LOAD", 3, argv, lens);
  rs->handshake_left++;
}

/* ---- the backend --------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h) {
  rstore *rs = h->data;
  if (--rs->timers_open > 0)
    return;
  idem_store *store = rs->store;
  idem_redis_uri_clear(&rs->uri);
  free(rs);
  idem_backend_closed(store);
}

/* Closing finishes once no req is held: in-flight commands are answered
 * (or time out) first, so an acknowledged completion is never cut off. */
static void maybe_teardown(rstore *rs) {
  if (!rs->closing || rs->held > 0 || rs->resolves_open > 0 || rs->timers_open == 0 ||
      uv_is_closing((uv_handle_t *)&rs->conn_timer))
    return;
  redisAsyncContext *ac = rs->ac;
  rs->ac = NULL;
  rs->state = R_DOWN;
  if (ac) {
    ac->data = NULL;
    redisAsyncFree(ac); /* deferred by hiredis when inside its callback */
  }
  uv_close((uv_handle_t *)&rs->conn_timer, on_timer_closed);
  uv_close((uv_handle_t *)&rs->cmd_timer, on_timer_closed);
}

static void redis_submit(idem_store *store, idem_req *req) {
  rstore *rs = store->impl;
  rs->held++;
  /* Deadlines count from uv_now, which a loop that was idle (idem_sync
   * between operations) has not moved on: a stale "now" would time out a
   * command the moment it is sent. */
  uv_update_time(rs->loop);
  if (rs->state == R_DOWN && uv_is_active((uv_handle_t *)&rs->conn_timer)) {
    /* A caller that runs the loop only while it waits (idem_sync) would
     * otherwise never see the backoff timer fire before its next submit. */
    if (uv_timer_get_due_in(&rs->conn_timer) == 0) {
      uv_timer_stop(&rs->conn_timer);
      conn_start(rs);
    }
  }
  if (rs->state == R_UP) {
    start_any(rs, req);
  } else if (rs->state == R_CONNECTING) {
    idem_queue_insert_tail(&rs->waiting, &req->node);
  } else if (req->op.kind == IDEM_OP_GC) {
    req_done(rs, req, 0);
  } else {
    req_done(rs, req, IDEM_ESTORE);
  }
}

static void redis_close(idem_store *store) {
  rstore *rs = store->impl;
  rs->closing = 1;
  if (rs->state != R_UP && !(rs->state == R_CONNECTING && !idem_queue_empty(&rs->waiting)))
    uv_timer_stop(&rs->conn_timer);
  maybe_teardown(rs);
}

static int redis_open(idem_store *store, const char *uri, char **errmsg) {
  rstore *rs = calloc(1, sizeof *rs);
  if (rs == NULL)
    return IDEM_ENOMEM;
  int err = idem_redis_uri_parse(uri, &rs->uri, errmsg);
  if (err) {
    free(rs);
    return err;
  }
  /* A write to a socket whose server went away raises SIGPIPE, which would
   * kill the process. Ignore it unless the program chose a handler. */
  struct sigaction sa;
  if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  rs->store = store;
  rs->loop = store->loop;
  idem_queue_init(&rs->waiting);
  idem_queue_init(&rs->flight);
  rs->sha = idem_redis_script_sha();
  idem_backoff_init(&rs->backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS, idem_backoff_seed(rs));
  uv_timer_init(rs->loop, &rs->conn_timer);
  uv_timer_init(rs->loop, &rs->cmd_timer);
  rs->conn_timer.data = rs->cmd_timer.data = rs;
  rs->timers_open = 2;
  store->impl = rs;
  conn_start(rs);
  return 0;
}

const idem_backend idem_backend_redis = {
    .scheme = "redis",
    .open = redis_open,
    .submit = redis_submit,
    .close = redis_close,
};
