/*
 * redis_reply.c - what the script's replies mean: a transition's outcome,
 * fence and record (redis_scripts.c writes them), and error replies as
 * IDEM_E codes.
 */
#include <stdlib.h>
#include <string.h>

#include "store/redis_env.h"

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
int redis_decode_record(redisReply *const *e, idem_record *rec) {
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
int redis_error_reply(rstore *rs, const redisReply *r) {
  redis_note(rs, "command refused: %s", r->str);
  if (!strncmp(r->str, "READONLY", 8) || !strncmp(r->str, "MASTERDOWN", 10) ||
      !strncmp(r->str, "LOADING", 7))
    rs->reconnect_soon = 1;
  return IDEM_ESTORE;
}

int redis_is_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

int redis_is_redirect(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR &&
         ((r->len > 6 && memcmp(r->str, "MOVED ", 6) == 0) ||
          (r->len > 4 && memcmp(r->str, "ASK ", 4) == 0));
}

/* A script reply for a transition, get or delete. */
int redis_decode_op(rstore *rs, idem_req *req, const redisReply *r) {
  idem_result *res = &req->result;
  if (r->type == REDIS_REPLY_ERROR)
    return redis_error_reply(rs, r);
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
    int err = redis_decode_record((redisReply *const *)r->element + 4, &rec);
    if (err)
      return err;
    if (idem_result_set_record(res, &rec, req->op.scope, req->op.key))
      return IDEM_ENOMEM;
  }
  return 0;
}
