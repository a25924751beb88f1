/* pairs.h - the claim+complete pairs the store bench drivers keep in
 * flight on one loop (redis_bench.c, pg_bench.c): each pair claims a fresh
 * key, completes it, and starts again until the deadline. With replay_keys
 * set the keys go round a set of that many instead: once each is completed
 * a pair is one claim answered REPLAY. Header-only: each driver is one
 * executable. */
#ifndef IDEM_BENCH_PAIRS_H
#define IDEM_BENCH_PAIRS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "idem/idem.h"
#include "latencies.h"

static inline int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct pair_loop pair_loop;

typedef struct {
  pair_loop *l;
  char key[96];
  int64_t started;
} pair;

struct pair_loop {
  idem_store *store;
  const char *scope;  /* NULL: none */
  char prefix[64];    /* of every key: PREFIX-SEQ */
  int64_t ttl_ms;
  int64_t end_ns;     /* no pair starts after this */
  const char *body;   /* of the completes, with Content-Type: application/json */
  uint64_t replay_keys; /* 0: a fresh key per pair; else keys PREFIX-0..N-1 */
  uint64_t seq, done, errors;
  int outstanding, stopping;
  latencies lat;      /* of pairs, microseconds */
  void (*on_end)(pair_loop *l); /* once: deadline passed, nothing in flight */
};

static void pair_start(pair *p);

static void pair_end(pair *p, int ok) {
  pair_loop *l = p->l;
  l->outstanding--;
  if (ok) {
    l->done++;
    latencies_add(&l->lat, (mono_ns() - p->started) / 1000);
  } else {
    l->errors++;
  }
  pair_start(p);
}

static void pair_completed(idem_store *s, const idem_result *res, void *arg) {
  (void)s;
  pair_end(arg, !res->err);
}

static void pair_claimed(idem_store *s, const idem_result *res, void *arg) {
  pair *p = arg;
  static const char headers[] = "Content-Type: application/json\r\n";
  if (!res->err && res->outcome == IDEM_REPLAY && p->l->replay_keys) {
    pair_end(p, 1);
    return;
  }
  if (res->err || res->outcome != IDEM_CLAIMED) {
    pair_end(p, 0);
    return;
  }
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = p->l->scope, .key = p->key,
                .fence = res->fence, .ttl_ms = p->l->ttl_ms,
                .response = {.status = 200, .headers = headers, .headers_len = sizeof headers - 1,
                             .body = p->l->body, .body_len = strlen(p->l->body)}};
  if (idem_store_submit(s, &op, pair_completed, p))
    pair_end(p, 0);
}

static void pair_start(pair *p) {
  pair_loop *l = p->l;
  if (l->stopping || mono_ns() >= l->end_ns) {
    l->stopping = 1;
    if (l->outstanding == 0 && l->on_end) {
      void (*end)(pair_loop *) = l->on_end;
      l->on_end = NULL;
      end(l);
    }
    return;
  }
  uint64_t n = l->replay_keys ? l->seq++ % l->replay_keys : l->seq++;
  snprintf(p->key, sizeof p->key, "%s-%llu", l->prefix, (unsigned long long)n);
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = l->scope, .key = p->key, .lease_ms = 30000,
                .ttl_ms = l->ttl_ms};
  idem_fingerprint("POST", "/bench", l->body, strlen(l->body), 0, op.fingerprint);
  p->started = mono_ns();
  if (idem_store_submit(l->store, &op, pair_claimed, p) == 0)
    l->outstanding++;
  else
    l->errors++;
}

/* Start n pairs (p[0..n)) on l. */
static inline void pairs_start(pair_loop *l, pair *p, int n) {
  for (int i = 0; i < n; i++) {
    p[i].l = l;
    pair_start(&p[i]);
  }
}

#endif
