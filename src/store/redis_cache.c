/*
 * redis_cache.c - a redis:// store serving as the cache tier shared by
 * gateways (--cache redis://...): the IDEM_OP_CACHE_* operations of
 * backend.h as GET, a SET ... PX and a DEL that both yield to a
 * tombstone, and a tombstone SET ... PX, of encoded records, under
 * "<prefix>:cache:{<scope length>:<scope>:<key>}", apart from any records
 * the same database keeps as a store.
 *
 * The tombstone closes a race a plain DEL leaves open: gateway A's claim
 * is answered by the store with a replay just before gateway B deletes the
 * key (its DELs on either side of the store's delete), and A's fill reaches
 * Redis after them; the deleted record would be replayed until its expiry.
 * A fill never overwrites a tombstone, and a tombstone outlives any such
 * fill by far (a fill is sent as soon as the store's answer is read).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

/* Not an encoded record (those start with a version byte below 0x20). */
#define TOMBSTONE "idem:deleted"
#define TOMBSTONE_MS "600000"

/* ARGV: the record, its PX, the tombstone. */
static const char fill_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[3] then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1";
/* ARGV: the tombstone. A release's drop must not end a delete's tombstone
 * early: a late fill could then land after all. */
static const char drop_script[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end "
    "return redis.call('DEL', KEYS[1])";

static void cache_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  idem_req *req = c->req;
  int err = r ? 0 : redis_lost_error(c);
  free(c);
  if (r && r->type == REDIS_REPLY_ERROR) {
    err = redis_error_reply(rs, r);
  } else if (r && req->op.kind == IDEM_OP_CACHE_GET) {
    idem_record rec;
    if (r->type != REDIS_REPLY_STRING ||
        (r->len == sizeof TOMBSTONE - 1 && !memcmp(r->str, TOMBSTONE, r->len)))
      err = IDEM_ENOTFOUND;
    else if (!(err = idem_record_decode((const uint8_t *)r->str, r->len, &rec)))
      err = idem_result_set_record(&req->result, &rec, req->op.scope, req->op.key);
  }
  redis_req_done(rs, req, err);
}

/* The command for op on the entry name: its argc, into argv. */
static int cache_command(const idem_op *op, const char *name, char ms[24], const char *argv[7]) {
  switch ((int)op->kind) { /* the cache's kinds are outside idem_op_kind's */
  case IDEM_OP_CACHE_GET:
    argv[0] = "GET", argv[1] = name;
    return 2;
  case IDEM_OP_CACHE_DEL:
    argv[0] = "EVAL", argv[1] = drop_script, argv[2] = "1", argv[3] = name;
    argv[4] = TOMBSTONE;
    return 5;
  case IDEM_OP_CACHE_BURY:
    argv[0] = "SET", argv[1] = name, argv[2] = TOMBSTONE, argv[3] = "PX";
    argv[4] = TOMBSTONE_MS;
    return 5;
  default: /* IDEM_OP_CACHE_PUT */
    snprintf(ms, 24, "%lld", (long long)op->ttl_ms);
    argv[0] = "EVAL", argv[1] = fill_script, argv[2] = "1", argv[3] = name;
    argv[4] = op->response.body, argv[5] = ms, argv[6] = TOMBSTONE;
    return 7;
  }
}

void redis_cache_start(rstore *rs, idem_req *req) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s:cache", rs->uri.prefix);
  size_t name_len;
  char *name = idem_redis_key(prefix, req->op.scope, req->op.key, &name_len);
  cmd *c = redis_cmd_new(rs, req, cache_answered);
  int err = IDEM_ENOMEM;
  if (name && c) {
    const char *argv[7];
    size_t lens[7];
    char ms[24];
    int argc = cache_command(&req->op, name, ms, argv);
    for (int i = 0; i < argc; i++) /* the record is bytes, with NULs */
      lens[i] = argv[i] == name                ? name_len
                : argv[i] == req->op.response.body ? req->op.response.body_len
                                                   : strlen(argv[i]);
    err = redis_send_argv(rs, c, argc, argv, lens);
  }
  free(name);
  if (err) {
    free(c);
    redis_req_done(rs, req, err);
  }
}
