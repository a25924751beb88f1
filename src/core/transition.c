/* transition.c - the record state machine, as one pure function.
 *
 * Every store runs this (memory, LMDB) or mirrors it line by line (the Redis
 * Lua script, the PostgreSQL statements), and the contract suite holds them
 * all to it. It reads the stored record and the store's clock and decides;
 * it never allocates, so *next and res->record borrow from cur and op.
 */
#include <stdint.h>
#include <string.h>

#include "idem/idem.h"

/* A record is live while it holds a state and its retention has not ended.
 * A dead record (released, or expired) counts as unseen, but its fence still
 * counts: the next claim continues from it, so fences never go back. */
static int is_live(const idem_record *cur, int64_t now) {
  return cur && cur->state != IDEM_STATE_UNSEEN && now < cur->expires_at;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* now + a duration, saturating: a huge duration ("forever") must not wrap
 * into the past and make the record born expired or its lease over. */
static int64_t after(int64_t now, int64_t ms) {
  if (ms > 0 && now > INT64_MAX - ms)
    return INT64_MAX;
  if (ms < 0 && now < INT64_MIN - ms)
    return INT64_MIN;
  return now + ms;
}

static int take(const idem_record *cur, const idem_op *op, int64_t now,
                idem_record *next, idem_result *res) {
  memset(next, 0, sizeof *next);
  next->scope = op->scope;
  next->key = op->key;
  next->state = IDEM_STATE_PROCESSING;
  memcpy(next->fingerprint, op->fingerprint, IDEM_FINGERPRINT_LEN);
  next->fence = (cur ? cur->fence : 0) + 1;
  next->locked_until = after(now, op->lease_ms);
  /* Retention lasts at least one more lease past the end of this one, so
   * that the record is still there when a takeover comes (its fence goes on
   * counting) and when a late worker tries to finish (refused as stale). */
  next->expires_at = max64(after(now, op->ttl_ms), after(next->locked_until, op->lease_ms));
  next->created_at = is_live(cur, now) ? cur->created_at : now;
  next->updated_at = now;
  res->outcome = IDEM_CLAIMED;
  res->fence = next->fence;
  return IDEM_WRITE_PUT;
}

static int show(const idem_record *cur, idem_outcome outcome, idem_result *res) {
  res->outcome = outcome;
  res->fence = cur->fence;
  res->record = (idem_record *)cur; /* borrowed; the store copies it */
  return IDEM_WRITE_NONE;
}

static int claim(const idem_record *cur, const idem_op *op, int64_t now,
                 idem_record *next, idem_result *res) {
  if (!is_live(cur, now))
    return take(cur, op, now, next, res);
  if (memcmp(cur->fingerprint, op->fingerprint, IDEM_FINGERPRINT_LEN) != 0)
    return show(cur, IDEM_MISMATCH, res);
  switch (cur->state) {
  case IDEM_STATE_COMPLETED:
    return show(cur, IDEM_REPLAY, res);
  case IDEM_STATE_FAILED:
    if (op->flags & IDEM_CLAIM_REPLAY_FAILED)
      return show(cur, IDEM_REPLAY, res);
    return take(cur, op, now, next, res);
  case IDEM_STATE_PROCESSING:
    if (now < cur->locked_until) {
      res->outcome = IDEM_BUSY;
      res->fence = cur->fence;
      res->retry_after_ms = cur->locked_until - now;
      return IDEM_WRITE_NONE;
    }
    return take(cur, op, now, next, res); /* lease over: the worker is gone */
  default:
    return take(cur, op, now, next, res);
  }
}

/* complete, fail and release: only the holder of the current fence may end
 * the processing state; anyone else is a zombie whose lease was taken over.
 * A record past its retention is gone (a Redis key has expired, a sweep
 * may have deleted it), whether or not this store still holds it. */
static int finish(const idem_record *cur, const idem_op *op, int64_t now,
                  idem_record *next, idem_result *res) {
  if (!cur || cur->state != IDEM_STATE_PROCESSING || cur->fence != op->fence ||
      now >= cur->expires_at) {
    res->err = IDEM_ESTALE;
    return IDEM_WRITE_NONE;
  }
  *next = *cur;
  next->scope = op->scope;
  next->key = op->key;
  next->locked_until = 0;
  next->updated_at = now;
  memset(&next->response, 0, sizeof next->response);
  if (op->kind == IDEM_OP_RELEASE) {
    /* kept, stateless, until its retention ends: the fence lives on */
    next->state = IDEM_STATE_UNSEEN;
  } else {
    next->state = op->kind == IDEM_OP_COMPLETE ? IDEM_STATE_COMPLETED : IDEM_STATE_FAILED;
    next->expires_at = after(now, op->ttl_ms);
    next->response = op->response;
  }
  res->fence = cur->fence;
  return IDEM_WRITE_PUT;
}

int idem_transition(const idem_record *cur, const idem_op *op, int64_t now_ms,
                    idem_record *next, idem_result *res) {
  if (!op || !next || !res) {
    if (res) {
      memset(res, 0, sizeof *res);
      res->err = IDEM_EINVAL;
    }
    return IDEM_EINVAL;
  }
  memset(res, 0, sizeof *res);
  switch (op->kind) {
  case IDEM_OP_CLAIM:
    return claim(cur, op, now_ms, next, res);
  case IDEM_OP_COMPLETE:
  case IDEM_OP_FAIL:
  case IDEM_OP_RELEASE:
    return finish(cur, op, now_ms, next, res);
  case IDEM_OP_GET:
    if (!is_live(cur, now_ms)) {
      res->err = IDEM_ENOTFOUND;
      return IDEM_WRITE_NONE;
    }
    res->record = (idem_record *)cur;
    res->fence = cur->fence;
    return IDEM_WRITE_NONE;
  default:
    res->err = IDEM_EINVAL;
    return IDEM_WRITE_NONE;
  }
}
