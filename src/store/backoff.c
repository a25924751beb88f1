/* backoff.c - see backoff.h. */
#include <stdint.h>
#include <unistd.h>

#include <uv.h>

#include "store/backoff.h"

void idem_backoff_init(idem_backoff *b, int64_t min_ms, int64_t max_ms, uint64_t seed) {
  b->min_ms = min_ms;
  b->max_ms = max_ms;
  b->step_ms = min_ms;
  b->rng = seed | 1;
}

uint64_t idem_backoff_next(idem_backoff *b) {
  int64_t d = b->step_ms;
  b->rng ^= b->rng << 13;
  b->rng ^= b->rng >> 7;
  b->rng ^= b->rng << 17;
  d = d * 3 / 4 + (int64_t)(b->rng % (uint64_t)(d / 2 + 1));
  b->step_ms = b->step_ms * 2 > b->max_ms ? b->max_ms : b->step_ms * 2;
  return (uint64_t)d;
}

void idem_backoff_reset(idem_backoff *b) { b->step_ms = b->min_ms; }

uint64_t idem_backoff_seed(const void *salt) {
  return uv_hrtime() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)salt;
}
