/* store_loop.h - for tests that drive a store on a loop of their own: the
 * end of it (close the store, let the loop run out, close the loop).
 * Header-only, included by the test files that need it. */
#ifndef IDEM_TESTS_STORE_LOOP_H
#define IDEM_TESTS_STORE_LOOP_H

#include <uv.h>

#include "idem/idem.h"

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
