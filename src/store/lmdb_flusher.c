/*
 * lmdb_flusher.c - the log's flusher thread: the writer appends a batch to
 * the log and goes on with the next one while this thread flushes. One
 * fdatasync covers every batch appended before it started; then each batch
 * is promoted in the overlay and handed back, in seq order. A batch is
 * acknowledged only after its own flush and every earlier one succeeded: a
 * failed flush fails every batch written after it too (the log then holds
 * an unknown tail, and replay stops at the first torn batch).
 *
 * Keys: the writer never applies an operation to a key whose last state is
 * still being flushed (it drains first, lmdb_logbatch.c), so each overlay
 * entry has at most one staged value, from one batch.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/lmdb_env.h"

static void flight_free(lmdb_flight *f) {
  free(f->reqs);
  free(f->staged);
  free(f->done);
}

static void finish_flight(lmdb_env *e, lmdb_flight *f, int err) {
  if (err)
    lmdb_overlay_unstage(&e->ov, f->staged, f->nstaged);
  else {
    lmdb_overlay_promote(&e->ov, f->staged, f->nstaged, f->seq);
    lmdb_ckpt_flushed(e, f->seq);
    atomic_fetch_add(&e->commits, 1);
  }
  lmdb_finish_each(e, f->reqs, f->n, err, f->done);
}

static void *flusher_main(void *arg) {
  lmdb_env *e = arg;
  pthread_setname_np(pthread_self(), "idem-lmdb-flush");
  pthread_mutex_lock(&e->fl_lock);
  for (;;) {
    while (idem_queue_empty(&e->fl_written) && !e->fl_stop)
      pthread_cond_wait(&e->fl_wake, &e->fl_lock);
    if (idem_queue_empty(&e->fl_written))
      break;
    idem_queue group;
    idem_queue_move(&e->fl_written, &group);
    pthread_mutex_unlock(&e->fl_lock);

    int64_t t0 = lmdb_mono_us();
    int err = atomic_load(&e->fl_err);
    if (!err && fdatasync(e->log_fd))
      err = lmdb_error(e, errno);
    int64_t took = lmdb_mono_us() - t0;
    atomic_fetch_add(&e->commit_us, (uint64_t)took);
    atomic_store(&e->fl_last_us, took);
    if (err)
      atomic_store(&e->fl_err, err);
    size_t k = 0;
    idem_queue *node;
    IDEM_QUEUE_FOREACH(node, &group) {
      finish_flight(e, IDEM_QUEUE_DATA(node, lmdb_flight, node), err);
      k++;
    }

    pthread_mutex_lock(&e->fl_lock);
    while (!idem_queue_empty(&group))
      idem_queue_insert_tail(&e->fl_free, idem_queue_pop(&group));
    atomic_fetch_sub(&e->fl_out, k);
    pthread_cond_broadcast(&e->fl_idle);
  }
  pthread_mutex_unlock(&e->fl_lock);
  return NULL;
}

int lmdb_flusher_start(lmdb_env *e) {
  idem_queue_init(&e->fl_free);
  idem_queue_init(&e->fl_written);
  e->flights = calloc(LMDB_FLIGHTS, sizeof *e->flights);
  if (!e->flights)
    return IDEM_ENOMEM;
  for (size_t i = 0; i < LMDB_FLIGHTS; i++) {
    lmdb_flight *f = &e->flights[i];
    f->reqs = calloc(e->opt.batch_max, sizeof *f->reqs);
    f->staged = calloc(e->opt.batch_max, sizeof *f->staged);
    f->done = calloc(e->opt.batch_max, 1);
    if (!f->reqs || !f->staged || !f->done)
      goto fail;
    idem_queue_insert_tail(&e->fl_free, &f->node);
  }
  if (lmdb_lock_init(&e->fl_lock, &e->fl_wake))
    goto fail;
  if (pthread_cond_init(&e->fl_idle, NULL))
    goto fail_lock;
  if (pthread_create(&e->flusher, NULL, flusher_main, e))
    goto fail_idle;
  e->fl_running = 1;
  return 0;
fail_idle:
  pthread_cond_destroy(&e->fl_idle);
fail_lock:
  pthread_cond_destroy(&e->fl_wake);
  pthread_mutex_destroy(&e->fl_lock);
fail:
  for (size_t i = 0; i < LMDB_FLIGHTS; i++)
    flight_free(&e->flights[i]);
  free(e->flights);
  e->flights = NULL;
  return IDEM_ENOMEM;
}

void lmdb_flusher_stop(lmdb_env *e) {
  if (!e->fl_running)
    return;
  lmdb_thread_stop(e->flusher, &e->fl_lock, &e->fl_wake, &e->fl_stop);
  pthread_cond_destroy(&e->fl_idle);
  for (size_t i = 0; i < LMDB_FLIGHTS; i++)
    flight_free(&e->flights[i]);
  free(e->flights);
  e->flights = NULL;
  e->fl_running = 0;
}

lmdb_flight *lmdb_flight_take(lmdb_env *e) {
  pthread_mutex_lock(&e->fl_lock);
  while (idem_queue_empty(&e->fl_free))
    pthread_cond_wait(&e->fl_idle, &e->fl_lock);
  lmdb_flight *f = IDEM_QUEUE_DATA(idem_queue_pop(&e->fl_free), lmdb_flight, node);
  pthread_mutex_unlock(&e->fl_lock);
  f->n = f->nstaged = 0;
  return f;
}

void lmdb_flight_return(lmdb_env *e, lmdb_flight *f) {
  pthread_mutex_lock(&e->fl_lock);
  idem_queue_insert_tail(&e->fl_free, &f->node);
  pthread_cond_broadcast(&e->fl_idle);
  pthread_mutex_unlock(&e->fl_lock);
}

void lmdb_flight_send(lmdb_env *e, lmdb_flight *f) {
  pthread_mutex_lock(&e->fl_lock);
  atomic_fetch_add(&e->fl_out, 1);
  idem_queue_insert_tail(&e->fl_written, &f->node);
  pthread_cond_signal(&e->fl_wake);
  pthread_mutex_unlock(&e->fl_lock);
}

void lmdb_flusher_drain(lmdb_env *e) {
  if (!e->fl_running || atomic_load(&e->fl_out) == 0)
    return;
  pthread_mutex_lock(&e->fl_lock);
  while (atomic_load(&e->fl_out))
    pthread_cond_wait(&e->fl_idle, &e->fl_lock);
  pthread_mutex_unlock(&e->fl_lock);
}
