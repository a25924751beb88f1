/* store_test.h - what the store tests share (contract, Redis, PostgreSQL):
 * keys unique to a run, and the end of a store driven on a loop of the
 * test's own. Header-only. */
#ifndef IDEM_TESTS_STORE_TEST_H
#define IDEM_TESTS_STORE_TEST_H

#include <stdio.h>
#include <unistd.h>

#include <uv.h>

#include "idem/idem.h"

/* A run's id: a letter, this process and the time ("c1234-1795...").
 * Keys named after it are this run's only. */
static inline void make_run_id(char *out, size_t len, char letter) {
  snprintf(out, len, "%c%ld-%lld", letter, (long)getpid(), (long long)idem_now_ms());
}

/* RUN-NAME, in one of 8 buffers used in turn: keys of this run only (a
 * shared server keeps those of earlier runs). */
static inline const char *run_key(const char *run, const char *name) {
  static char buf[8][200];
  static int next;
  char *k = buf[next++ % 8];
  snprintf(k, sizeof buf[0], "%s-%s", run, name);
  return k;
}

static void store_loop_closed(idem_store *s, void *arg) {
  (void)s;
  *(int *)arg = 1;
}

/* 0, or uv_loop_close's error (a handle left open). */
static inline int close_store_and_loop(uv_loop_t *loop, idem_store *store) {
  int closed = 0;
  idem_store_close(store, store_loop_closed, &closed);
  while (!closed)
    uv_run(loop, UV_RUN_ONCE);
  uv_run(loop, UV_RUN_DEFAULT);
  return uv_loop_close(loop);
}

#endif
