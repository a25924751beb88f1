/*
 * redis_cache.c - a redis:// store serving as the cache tier shared by
 * gateways (--cache redis://...): the IDEM_OP_CACHE_* operations of
 * backend.h as plain GET, SET ... PX and DEL of encoded records, under
 * "<prefix>:cache:{<scope length>:<scope>:<key>}", apart from any records
 * the same database keeps as a store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

static void cache_answered(cmd *c, const redisReply *r) {
  rstore *rs = c->rs;
  idem_req *req = c->req;
  int err = r ? 0 : redis_lost_error(c);
  free(c);
  if (r && r->type == REDIS_REPLY_ERROR) {
    err = redis_error_reply(rs, r);
  } else if (r && req->op.kind == IDEM_OP_CACHE_GET) {
    idem_record rec;
    if (r->type != REDIS_REPLY_STRING)
      err = IDEM_ENOTFOUND;
    else if (!(err = idem_record_decode((const uint8_t *)r->str, r->len, &rec)))
      err = idem_result_set_record(&req->result, &rec, req->op.scope, req->op.key);
  }
  redis_req_done(rs, req, err);
}

void redis_cache_start(rstore *rs, idem_req *req) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "%s:cache", rs->uri.prefix);
  size_t name_len;
  char *name = idem_redis_key(prefix, req->op.scope, req->op.key, &name_len);
  cmd *c = redis_cmd_new(rs, req, cache_answered);
  int err = IDEM_ENOMEM;
  if (name && c) {
    const idem_op *op = &req->op;
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)op->ttl_ms);
    const char *argv[] = {op->kind == IDEM_OP_CACHE_GET   ? "GET"
                          : op->kind == IDEM_OP_CACHE_PUT ? "SET"
                                                          : "DEL",
                          name, op->response.body ? op->response.body : "", "PX", ms};
    size_t lens[] = {strlen(argv[0]), name_len, op->response.body_len, 2, strlen(ms)};
    err = redis_send_argv(rs, c, op->kind == IDEM_OP_CACHE_PUT ? 5 : 2, argv, lens);
  }
  free(name);
  if (err) {
    free(c);
    redis_req_done(rs, req, err);
  }
}
