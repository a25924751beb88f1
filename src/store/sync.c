/* sync.c - the blocking facade: a store on a private loop, one operation at a
 * time, for the CLI and for callers without an event loop of their own. */
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "idem/idem.h"

struct idem_sync {
  uv_loop_t loop;
  idem_store *store;
};

typedef struct {
  int done;
  int err;
  idem_result *out;
} waiter;

static void on_result(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  waiter *w = arg;
  w->done = 1;
  w->err = res->err ? res->err : idem_result_copy(w->out, res);
  w->out->err = w->err; /* a copy that failed is an error of the result too */
}

static void on_closed(idem_store *store, void *arg) {
  (void)store;
  *(int *)arg = 1;
}

static void drain_and_close_loop(uv_loop_t *loop) {
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
}

int idem_sync_open(const char *uri, idem_sync **out, char **errmsg) {
  return idem_sync_open_cached(uri, NULL, out, errmsg);
}

int idem_sync_open_cached(const char *uri, const char *cache_uri, idem_sync **out,
                          char **errmsg) {
  if (errmsg)
    *errmsg = NULL;
  if (!out)
    return IDEM_EINVAL;
  idem_sync *sync = calloc(1, sizeof *sync);
  if (!sync)
    return IDEM_ENOMEM;
  if (uv_loop_init(&sync->loop)) {
    free(sync);
    return IDEM_ENOMEM;
  }
  int err = idem_store_open_cached(&sync->loop, uri, cache_uri, &sync->store, errmsg);
  if (err) {
    drain_and_close_loop(&sync->loop);
    free(sync);
    return err;
  }
  *out = sync;
  return 0;
}

int idem_sync_run(idem_sync *sync, const idem_op *op, idem_result *res) {
  if (!res)
    return IDEM_EINVAL;
  memset(res, 0, sizeof *res);
  if (!sync)
    return res->err = IDEM_EINVAL;
  waiter w = {.out = res};
  int err = idem_store_submit(sync->store, op, on_result, &w);
  if (err) {
    res->err = err;
    return err;
  }
  while (!w.done)
    uv_run(&sync->loop, UV_RUN_ONCE);
  return w.err;
}

void idem_sync_close(idem_sync *sync) {
  if (!sync)
    return;
  int closed = 0;
  idem_store_close(sync->store, on_closed, &closed);
  while (!closed)
    uv_run(&sync->loop, UV_RUN_ONCE);
  drain_and_close_loop(&sync->loop);
  free(sync);
}
