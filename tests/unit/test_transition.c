/*
 * test_transition.c - idem_transition, exhaustively: an explicit table of
 * the transitions in README.md's "How it works", then invariants checked over
 * every combination of stored state, lease, retention, fingerprint, fence and
 * operation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"

#define NOW 1000000
#define FP_A 0xaa
#define FP_B 0xbb

typedef enum {
  ABSENT,
  RELEASED,
  PROCESSING_LEASED,
  PROCESSING_LEASE_OVER,
  COMPLETED,
  FAILED,
  STORED_KINDS
} stored_kind;

static const char *stored_name[] = {"absent", "released", "processing", "processing(lease over)",
                                    "completed", "failed"};

/* A stored record of the given kind with fence 5, fingerprint A. */
static idem_record stored(stored_kind kind, int expired) {
  idem_record r = {.scope = "s", .key = "k", .fence = 5, .created_at = NOW - 5000,
                   .updated_at = NOW - 1000, .expires_at = expired ? NOW : NOW + 100000};
  memset(r.fingerprint, FP_A, sizeof r.fingerprint);
  switch (kind) {
  case RELEASED:
    r.state = IDEM_STATE_UNSEEN;
    break;
  case PROCESSING_LEASED:
    r.state = IDEM_STATE_PROCESSING;
    r.locked_until = NOW + 3000;
    break;
  case PROCESSING_LEASE_OVER:
    r.state = IDEM_STATE_PROCESSING;
    r.locked_until = NOW; /* the lease ends at locked_until itself */
    break;
  case COMPLETED:
    r.state = IDEM_STATE_COMPLETED;
    r.response = (idem_response){.status = 201, .body = "stored", .body_len = 6};
    break;
  case FAILED:
    r.state = IDEM_STATE_FAILED;
    r.response = (idem_response){.status = 402, .body = "declined", .body_len = 8};
    break;
  default:
    break;
  }
  return r;
}

static idem_op claim_op(int fp, unsigned flags) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = "s", .key = "k", .lease_ms = 30000,
                .ttl_ms = 86400000, .flags = flags};
  memset(op.fingerprint, fp, sizeof op.fingerprint);
  return op;
}

static idem_op end_op(idem_op_kind kind, uint64_t fence) {
  idem_op op = {.kind = kind, .scope = "s", .key = "k", .fence = fence, .ttl_ms = 60000,
                .response = {.status = 200, .body = "new", .body_len = 3}};
  return op;
}

/* ---- the table ---------------------------------------------------------- */

typedef struct {
  stored_kind kind;
  int expired;
  int fp;
  unsigned flags;
  int write;
  idem_outcome outcome;
  uint64_t fence;
} claim_row;

static const claim_row claim_table[] = {
    /* unseen ──claim──► processing(fence=1) */
    {ABSENT, 0, FP_A, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 1},
    {ABSENT, 0, FP_B, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 1},
    /* released: unseen, the fence keeps counting, the payload is free */
    {RELEASED, 0, FP_A, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    {RELEASED, 0, FP_B, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    /* processing: busy while leased, taken over once the lease is over */
    {PROCESSING_LEASED, 0, FP_A, 0, IDEM_WRITE_NONE, IDEM_BUSY, 5},
    {PROCESSING_LEASE_OVER, 0, FP_A, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    /* any, fingerprint differs ──claim──► mismatch */
    {PROCESSING_LEASED, 0, FP_B, 0, IDEM_WRITE_NONE, IDEM_MISMATCH, 5},
    {PROCESSING_LEASE_OVER, 0, FP_B, 0, IDEM_WRITE_NONE, IDEM_MISMATCH, 5},
    {COMPLETED, 0, FP_B, 0, IDEM_WRITE_NONE, IDEM_MISMATCH, 5},
    {FAILED, 0, FP_B, 0, IDEM_WRITE_NONE, IDEM_MISMATCH, 5},
    /* completed ──claim──► replay */
    {COMPLETED, 0, FP_A, 0, IDEM_WRITE_NONE, IDEM_REPLAY, 5},
    {COMPLETED, 0, FP_A, IDEM_CLAIM_REPLAY_FAILED, IDEM_WRITE_NONE, IDEM_REPLAY, 5},
    /* failed ──claim──► processing(fence+1), or replay by flag */
    {FAILED, 0, FP_A, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    {FAILED, 0, FP_A, IDEM_CLAIM_REPLAY_FAILED, IDEM_WRITE_NONE, IDEM_REPLAY, 5},
    /* any, expired ──claim──► as unseen, fence keeps counting up */
    {PROCESSING_LEASED, 1, FP_B, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    {COMPLETED, 1, FP_A, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    {COMPLETED, 1, FP_B, 0, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
    {FAILED, 1, FP_B, IDEM_CLAIM_REPLAY_FAILED, IDEM_WRITE_PUT, IDEM_CLAIMED, 6},
};

static void claim_follows_the_table(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof claim_table / sizeof claim_table[0]; i++) {
    const claim_row *row = &claim_table[i];
    idem_record cur = stored(row->kind, row->expired), next;
    idem_op op = claim_op(row->fp, row->flags);
    idem_result res;
    int write = idem_transition(row->kind == ABSENT ? NULL : &cur, &op, NOW, &next, &res);
    if (write != row->write || res.outcome != row->outcome || res.fence != row->fence ||
        res.err != 0)
      fail_msg("row %zu (%s%s fp %x flags %u): write %d outcome %s fence %llu", i,
               stored_name[row->kind], row->expired ? ", expired" : "", row->fp, row->flags,
               write, idem_outcome_name(res.outcome), (unsigned long long)res.fence);
    if (row->outcome == IDEM_REPLAY || row->outcome == IDEM_MISMATCH)
      assert_ptr_equal(res.record, &cur);
    if (row->outcome == IDEM_BUSY)
      assert_int_equal(res.retry_after_ms, 3000);
  }
}

static void claim_writes_a_fresh_processing_record(void **state) {
  (void)state;
  idem_record cur = stored(FAILED, 0), next;
  idem_op op = claim_op(FP_A, 0);
  idem_result res;
  assert_int_equal(idem_transition(&cur, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_int_equal(next.state, IDEM_STATE_PROCESSING);
  assert_int_equal(next.fence, 6);
  assert_int_equal(next.locked_until, NOW + 30000);
  assert_int_equal(next.expires_at, NOW + 86400000);
  assert_int_equal(next.created_at, cur.created_at); /* the same live record */
  assert_int_equal(next.updated_at, NOW);
  assert_int_equal(next.response.status, 0);
  assert_int_equal(next.response.body_len, 0);
  assert_memory_equal(next.fingerprint, op.fingerprint, IDEM_FINGERPRINT_LEN);

  idem_record expired = stored(COMPLETED, 1);
  assert_int_equal(idem_transition(&expired, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_int_equal(next.created_at, NOW); /* a new life for the key */
}

/* A record outlives its lease by one more lease, however short the ttl: a
 * takeover must find the fence to count on from, and a zombie's late finish
 * must find the record that refuses it. */
static void retention_outlives_the_lease_by_a_lease(void **state) {
  (void)state;
  idem_record next;
  idem_op op = claim_op(FP_A, 0);
  op.ttl_ms = 10;
  op.lease_ms = 5000;
  idem_result res;
  assert_int_equal(idem_transition(NULL, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_int_equal(next.locked_until, NOW + 5000);
  assert_int_equal(next.expires_at, NOW + 10000);
  op.ttl_ms = 60000; /* a longer ttl wins */
  assert_int_equal(idem_transition(NULL, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_int_equal(next.expires_at, NOW + 60000);
}

/* idem_transition is public: a caller of its own may ask for "forever"
 * (INT64_MAX). now + duration must not wrap into the past, which would make
 * the record expired (a duplicate runs again) or its lease over at once. */
static void huge_durations_saturate(void **state) {
  (void)state;
  idem_record next;
  idem_result res;
  idem_op op = claim_op(FP_A, 0);
  op.ttl_ms = INT64_MAX;
  op.lease_ms = INT64_MAX;
  assert_int_equal(idem_transition(NULL, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_true(next.locked_until > NOW);
  assert_true(next.expires_at >= next.locked_until);
  idem_record cur = next;
  assert_int_equal(idem_transition(&cur, &op, NOW + 1, &next, &res), IDEM_WRITE_NONE);
  assert_int_equal(res.outcome, IDEM_BUSY);
  assert_true(res.retry_after_ms > 0);

  idem_op end = end_op(IDEM_OP_COMPLETE, cur.fence);
  end.ttl_ms = INT64_MAX;
  assert_int_equal(idem_transition(&cur, &end, NOW + 2, &next, &res), IDEM_WRITE_PUT);
  assert_true(next.expires_at > NOW + 2);
  cur = next;
  assert_int_equal(idem_transition(&cur, &op, NOW + 3, &next, &res), IDEM_WRITE_NONE);
  assert_int_equal(res.outcome, IDEM_REPLAY);
}

typedef struct {
  stored_kind kind;
  idem_op_kind op;
  uint64_t fence;
  int err;
  idem_state after;
  int expired;
} end_row;

static const end_row end_table[] = {
    /* processing ──complete(fence)──► completed, stale fence refused */
    {PROCESSING_LEASED, IDEM_OP_COMPLETE, 5, 0, IDEM_STATE_COMPLETED, 0},
    {PROCESSING_LEASED, IDEM_OP_COMPLETE, 4, IDEM_ESTALE, 0, 0},
    {PROCESSING_LEASED, IDEM_OP_COMPLETE, 6, IDEM_ESTALE, 0, 0},
    /* the lease ended but nobody took over: the holder may still finish */
    {PROCESSING_LEASE_OVER, IDEM_OP_COMPLETE, 5, 0, IDEM_STATE_COMPLETED, 0},
    {PROCESSING_LEASED, IDEM_OP_FAIL, 5, 0, IDEM_STATE_FAILED, 0},
    {PROCESSING_LEASED, IDEM_OP_FAIL, 4, IDEM_ESTALE, 0, 0},
    {PROCESSING_LEASED, IDEM_OP_RELEASE, 5, 0, IDEM_STATE_UNSEEN, 0},
    {PROCESSING_LEASED, IDEM_OP_RELEASE, 4, IDEM_ESTALE, 0, 0},
    /* nothing to end */
    {ABSENT, IDEM_OP_COMPLETE, 1, IDEM_ESTALE, 0, 0},
    {RELEASED, IDEM_OP_COMPLETE, 5, IDEM_ESTALE, 0, 0},
    {COMPLETED, IDEM_OP_COMPLETE, 5, IDEM_ESTALE, 0, 0},
    {COMPLETED, IDEM_OP_RELEASE, 5, IDEM_ESTALE, 0, 0},
    {FAILED, IDEM_OP_COMPLETE, 5, IDEM_ESTALE, 0, 0},
    {FAILED, IDEM_OP_FAIL, 5, IDEM_ESTALE, 0, 0},
    /* past its retention the record is gone, even for the current fence */
    {PROCESSING_LEASE_OVER, IDEM_OP_COMPLETE, 5, IDEM_ESTALE, 0, 1},
    {PROCESSING_LEASE_OVER, IDEM_OP_FAIL, 5, IDEM_ESTALE, 0, 1},
    {PROCESSING_LEASE_OVER, IDEM_OP_RELEASE, 5, IDEM_ESTALE, 0, 1},
};

static void endings_follow_the_table(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof end_table / sizeof end_table[0]; i++) {
    const end_row *row = &end_table[i];
    idem_record cur = stored(row->kind, row->expired), next;
    idem_op op = end_op(row->op, row->fence);
    idem_result res;
    int write = idem_transition(row->kind == ABSENT ? NULL : &cur, &op, NOW, &next, &res);
    if (res.err != row->err || write != (row->err ? IDEM_WRITE_NONE : IDEM_WRITE_PUT))
      fail_msg("row %zu (%s): err %d write %d", i, stored_name[row->kind], res.err, write);
    if (row->err)
      continue;
    assert_int_equal(next.state, row->after);
    assert_int_equal(next.fence, cur.fence);
    assert_int_equal(next.locked_until, 0);
    assert_int_equal(next.updated_at, NOW);
    if (row->op == IDEM_OP_RELEASE) {
      assert_int_equal(next.expires_at, cur.expires_at); /* kept for the fence */
      assert_int_equal(next.response.status, 0);
    } else {
      assert_int_equal(next.expires_at, NOW + 60000);
      assert_ptr_equal(next.response.body, op.response.body);
      assert_int_equal(next.response.status, 200);
    }
  }
}

static void get_sees_only_live_records(void **state) {
  (void)state;
  idem_op op = {.kind = IDEM_OP_GET, .scope = "s", .key = "k"};
  idem_record next;
  idem_result res;
  for (stored_kind k = ABSENT; k < STORED_KINDS; k++) {
    for (int expired = 0; expired < 2; expired++) {
      idem_record cur = stored(k, expired);
      int live = k != ABSENT && k != RELEASED && !expired;
      assert_int_equal(idem_transition(k == ABSENT ? NULL : &cur, &op, NOW, &next, &res),
                       IDEM_WRITE_NONE);
      assert_int_equal(res.err, live ? 0 : IDEM_ENOTFOUND);
      if (live)
        assert_ptr_equal(res.record, &cur);
    }
  }
}

static void other_operations_are_not_transitions(void **state) {
  (void)state;
  idem_record next;
  idem_result res;
  idem_op_kind kinds[] = {IDEM_OP_DELETE, IDEM_OP_LIST, IDEM_OP_GC, (idem_op_kind)99};
  for (size_t i = 0; i < 4; i++) {
    idem_op op = {.kind = kinds[i], .key = "k"};
    assert_int_equal(idem_transition(NULL, &op, NOW, &next, &res), IDEM_WRITE_NONE);
    assert_int_equal(res.err, IDEM_EINVAL);
  }
}

/* Missing arguments are refused, not dereferenced: IDEM_EINVAL, returned
 * and in res->err when there is a res, and nothing to write. */
static void null_arguments_are_einval(void **state) {
  (void)state;
  idem_record next;
  idem_result res;
  idem_op op = claim_op(FP_A, 0);
  assert_int_equal(idem_transition(NULL, NULL, NOW, &next, &res), IDEM_EINVAL);
  assert_int_equal(res.err, IDEM_EINVAL);
  assert_int_equal(idem_transition(NULL, &op, NOW, NULL, &res), IDEM_EINVAL);
  assert_int_equal(res.err, IDEM_EINVAL);
  assert_int_equal(idem_transition(NULL, &op, NOW, &next, NULL), IDEM_EINVAL);
  assert_int_equal(idem_transition(NULL, &op, NOW, &next, &res), IDEM_WRITE_PUT);
  assert_int_equal(res.err, 0);
}

/* ---- invariants over every combination --------------------------------- */

static void invariants_hold_everywhere(void **state) {
  (void)state;
  idem_op ops[] = {claim_op(FP_A, 0), claim_op(FP_B, 0), claim_op(FP_A, IDEM_CLAIM_REPLAY_FAILED),
                   end_op(IDEM_OP_COMPLETE, 5), end_op(IDEM_OP_COMPLETE, 4),
                   end_op(IDEM_OP_FAIL, 5), end_op(IDEM_OP_FAIL, 6),
                   end_op(IDEM_OP_RELEASE, 5), end_op(IDEM_OP_RELEASE, 1)};
  int64_t clocks[] = {NOW - 1, NOW, NOW + 1, NOW + 3000, NOW + 200000};
  for (stored_kind k = ABSENT; k < STORED_KINDS; k++)
    for (int expired = 0; expired < 2; expired++)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t c = 0; c < sizeof clocks / sizeof clocks[0]; c++) {
          idem_record cur = stored(k, expired), before = cur, next;
          idem_result res;
          const idem_record *curp = k == ABSENT ? NULL : &cur;
          int write = idem_transition(curp, &ops[o], clocks[c], &next, &res);
          /* pure: the stored record is never modified */
          assert_memory_equal(&cur, &before, sizeof cur);
          if (write == IDEM_WRITE_PUT) {
            uint64_t base = curp ? cur.fence : 0;
            assert_int_equal(res.err, 0);
            /* the fence never goes back, and only a claim moves it, by one */
            assert_true(next.fence >= base);
            if (ops[o].kind == IDEM_OP_CLAIM) {
              assert_int_equal(res.outcome, IDEM_CLAIMED);
              assert_int_equal(next.fence, base + 1);
              assert_true(next.expires_at >= next.locked_until + ops[o].lease_ms);
              assert_true(next.locked_until > clocks[c]);
            } else {
              assert_int_equal(next.fence, base);
              assert_int_equal(ops[o].fence, cur.fence);
              assert_int_equal(cur.state, IDEM_STATE_PROCESSING);
            }
            assert_ptr_equal(next.key, ops[o].key);
          } else {
            assert_int_equal(write, IDEM_WRITE_NONE);
            if (ops[o].kind == IDEM_OP_CLAIM) {
              assert_int_equal(res.err, 0);
              assert_true(res.outcome == IDEM_BUSY || res.outcome == IDEM_REPLAY ||
                          res.outcome == IDEM_MISMATCH);
              assert_int_equal(res.fence, cur.fence);
            } else {
              assert_int_equal(res.err, IDEM_ESTALE);
            }
          }
        }
}

UNIT_TESTS(cmocka_unit_test(claim_follows_the_table),
           cmocka_unit_test(claim_writes_a_fresh_processing_record),
           cmocka_unit_test(retention_outlives_the_lease_by_a_lease),
           cmocka_unit_test(huge_durations_saturate),
           cmocka_unit_test(endings_follow_the_table),
           cmocka_unit_test(get_sees_only_live_records),
           cmocka_unit_test(other_operations_are_not_transitions),
           cmocka_unit_test(null_arguments_are_einval),
           cmocka_unit_test(invariants_hold_everywhere))
