/*
 * backoff.h - how long a network store waits before its next connection
 * attempt (redis.c, postgres.c): doubling from min_ms up to max_ms, each
 * wait drawn between 75% and 125% of the current step, so that a fleet of
 * processes that lost the same server does not reconnect in step.
 */
#ifndef IDEM_STORE_BACKOFF_H
#define IDEM_STORE_BACKOFF_H

#include <stdint.h>

typedef struct {
  int64_t min_ms, max_ms;
  int64_t step_ms; /* the next wait, before jitter */
  uint64_t rng;    /* xorshift64 state, never 0 */
} idem_backoff;

/* Start at min_ms (> 0, <= max_ms); seed the jitter (any value). */
void idem_backoff_init(idem_backoff *b, int64_t min_ms, int64_t max_ms, uint64_t seed);
/* The wait before the next attempt, in ms; the step doubles after it. */
uint64_t idem_backoff_next(idem_backoff *b);
/* A connection is up: the next loss starts again from min_ms. */
void idem_backoff_reset(idem_backoff *b);
/* A seed that differs between processes, and between the connections
 * (salt: their address) of one. */
uint64_t idem_backoff_seed(const void *salt);

#endif
