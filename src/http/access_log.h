/*
 * access_log.h - `idem serve --access-log PATH|-`: one JSON line per
 * request (README, "Access log"). The file is the process's; each worker
 * fills a buffer of its own and writes it whole (O_APPEND: lines of two
 * workers never mix) when it passes 64 KiB, every second, and when the
 * worker stops, so a line costs a format and a copy on the request path.
 * SIGUSR1 reopens the path (logrotate).
 */
#ifndef IDEM_HTTP_ACCESS_LOG_H
#define IDEM_HTTP_ACCESS_LOG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "http/msg.h"

/* Open path ("-": standard output) for the process: 0, or -1 with a
 * sentence in err. */
int gw_access_log_open(const char *path, char *err, size_t errlen);
/* Whether a log is open. */
int gw_access_log_on(void);
/* Open the path again in place (after logrotate moved it): 0 or -1. */
int gw_access_log_reopen(void);
void gw_access_log_close(void);

/* What a line says of one request. Strings may be NULL (written null). */
typedef struct {
  int64_t time_ms;        /* wall clock at the answer, Unix ms */
  const char *method;
  const char *target;     /* as received, any bytes */
  size_t target_len;
  int route;              /* 1-based index in routes:, 0 the defaults, -1 none */
  const char *key, *scope;
  const char *outcome;    /* metrics.h's name: executed, replayed, ... */
  uint64_t fence;         /* 0: none */
  int status;             /* of the answer; 0 when none went out */
  int64_t upstream_us;    /* -1: the upstream was not asked */
  int64_t total_us;
} gw_access_entry;

/* Append e as one JSON line to out: 0, or -1 out of memory. */
int gw_access_line(gw_buf *out, const gw_access_entry *e);

/* A worker's buffer, flushed by its own timer on its loop. The lock is
 * the worker's but for gw_access_buf_flush_now (--drain-timeout, on the
 * main thread). */
typedef struct {
  gw_buf buf;
  uv_timer_t timer;
  int on;
  pthread_mutex_t lock;
} gw_access_buf;

void gw_access_buf_start(gw_access_buf *b, uv_loop_t *loop);
void gw_access_buf_add(gw_access_buf *b, const gw_access_entry *e);
/* Write what is buffered, stop the timer and close it (close_cb may be NULL). */
void gw_access_buf_stop(gw_access_buf *b);
/* Write what is buffered, from any thread (the worker may be running): for
 * an exit that does not wait for the worker to stop. */
void gw_access_buf_flush_now(gw_access_buf *b);

#endif
