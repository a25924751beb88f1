/* access_log.c - the access log's file, its lines and the workers' buffers
 * (access_log.h). */
#include "http/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/policy.h"

#define FLUSH_BYTES (64u * 1024)
#define FLUSH_EVERY_MS 1000

/* The process's log: opened before the workers start, reopened in place
 * (dup2) by the main thread, so workers always write to log_fd. */
static int log_fd = -1;
static char log_path[4096];

static int open_path(const char *path) {
  if (!strcmp(path, "-"))
    return fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0);
  return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

int gw_access_log_open(const char *path, char *err, size_t errlen) {
  if (strlen(path) >= sizeof log_path)
    return snprintf(err, errlen, "--access-log: the path is too long"), -1;
  int fd = open_path(path);
  if (fd < 0)
    return snprintf(err, errlen, "--access-log: cannot open '%s': %s", path, strerror(errno)), -1;
  gw_access_log_close();
  log_fd = fd;
  snprintf(log_path, sizeof log_path, "%s", path);
  return 0;
}

int gw_access_log_on(void) { return log_fd >= 0; }

int gw_access_log_reopen(void) {
  if (log_fd < 0 || !strcmp(log_path, "-"))
    return 0;
  int fd = open_path(log_path);
  if (fd < 0)
    return -1;
  int rc = dup3(fd, log_fd, O_CLOEXEC) < 0 ? -1 : 0;
  close(fd);
  return rc;
}

void gw_access_log_close(void) {
  if (log_fd >= 0)
    close(log_fd);
  log_fd = -1;
}

/* ---- lines ---- */

static int json_or_null(gw_buf *out, const char *s, size_t len) {
  return s ? policy_json_ascii(out, s, len) : gw_buf_puts(out, "null");
}

/* RFC 3339 UTC with milliseconds: 2026-11-24T02:30:00.123Z. The text of
 * the second is kept per thread: gmtime and strftime run once a second. */
static int put_time(gw_buf *out, int64_t ms) {
  static _Thread_local int64_t cached_sec = -1;
  static _Thread_local char text[32];
  int64_t sec = ms / 1000;
  if (sec != cached_sec) {
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_sec = sec;
  }
  char frac[6] = {'.', (char)('0' + ms % 1000 / 100), (char)('0' + ms % 100 / 10),
                  (char)('0' + ms % 10), 'Z', '"'};
  return gw_buf_puts(out, "{\"time\":\"") | gw_buf_puts(out, text) |
         gw_buf_append(out, frac, sizeof frac);
}

/* Microseconds as milliseconds with three decimals, or null. */
static int put_ms(gw_buf *out, const char *name, int64_t us) {
  int err = gw_buf_puts(out, name);
  if (us < 0)
    return err | gw_buf_puts(out, "null");
  char frac[4] = {'.', (char)('0' + us % 1000 / 100), (char)('0' + us % 100 / 10),
                  (char)('0' + us % 10)};
  return err | gw_buf_u64(out, (uint64_t)(us / 1000)) | gw_buf_append(out, frac, sizeof frac);
}

/* A number, or null for none. */
static int put_num(gw_buf *out, const char *name, uint64_t v, int none) {
  return gw_buf_puts(out, name) | (none ? gw_buf_puts(out, "null") : gw_buf_u64(out, v));
}

int gw_access_line(gw_buf *out, const gw_access_entry *e) {
  int err = put_time(out, e->time_ms);
  err |= gw_buf_puts(out, ",\"method\":");
  err |= json_or_null(out, e->method, e->method ? strlen(e->method) : 0);
  err |= gw_buf_puts(out, ",\"target\":");
  err |= json_or_null(out, e->target, e->target_len);
  err |= put_num(out, ",\"route\":", (uint64_t)e->route, e->route < 0);
  err |= gw_buf_puts(out, ",\"key\":");
  err |= json_or_null(out, e->key, e->key ? strlen(e->key) : 0);
  err |= gw_buf_puts(out, ",\"scope\":");
  err |= json_or_null(out, e->scope, e->scope ? strlen(e->scope) : 0);
  err |= gw_buf_puts(out, ",\"outcome\":\"");
  err |= gw_buf_puts(out, e->outcome ? e->outcome : "none");
  err |= put_num(out, "\",\"fence\":", e->fence, e->fence == 0);
  err |= put_num(out, ",\"status\":", (uint64_t)e->status, 0);
  err |= put_ms(out, ",\"upstream_ms\":", e->upstream_us);
  err |= put_ms(out, ",\"total_ms\":", e->total_us);
  err |= gw_buf_puts(out, "}\n");
  return err ? -1 : 0;
}

/* ---- a worker's buffer ---- */

static void flush(gw_access_buf *b) {
  size_t off = 0;
  while (off < b->buf.len) {
    ssize_t n = write(log_fd, b->buf.p + off, b->buf.len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break; /* a full disk loses these lines, never a request */
    off += (size_t)n;
  }
  b->buf.len = 0;
}

static void on_flush_timer(uv_timer_t *t) {
  gw_access_buf *b = t->data;
  pthread_mutex_lock(&b->lock);
  if (b->buf.len)
    flush(b);
  pthread_mutex_unlock(&b->lock);
}

/* The lock is never destroyed: the main thread may flush the buffer after
 * its worker stopped, until the process exits (it holds no resource). */
void gw_access_buf_start(gw_access_buf *b, uv_loop_t *loop) {
  memset(b, 0, sizeof *b);
  pthread_mutex_init(&b->lock, NULL);
  if (log_fd < 0)
    return;
  b->on = 1;
  uv_timer_init(loop, &b->timer);
  b->timer.data = b;
  uv_timer_start(&b->timer, on_flush_timer, FLUSH_EVERY_MS, FLUSH_EVERY_MS);
  uv_unref((uv_handle_t *)&b->timer); /* the log never keeps a loop alive */
}

void gw_access_buf_add(gw_access_buf *b, const gw_access_entry *e) {
  if (!b->on)
    return;
  pthread_mutex_lock(&b->lock);
  size_t mark = b->buf.len;
  if (gw_access_line(&b->buf, e))
    b->buf.len = mark; /* out of memory: the line is lost, never half of it */
  if (b->buf.len >= FLUSH_BYTES)
    flush(b);
  pthread_mutex_unlock(&b->lock);
}

void gw_access_buf_stop(gw_access_buf *b) {
  if (!b->on)
    return;
  pthread_mutex_lock(&b->lock);
  flush(b);
  b->on = 0;
  gw_buf_free(&b->buf);
  pthread_mutex_unlock(&b->lock);
  uv_close((uv_handle_t *)&b->timer, NULL);
}

void gw_access_buf_flush_now(gw_access_buf *b) {
  pthread_mutex_lock(&b->lock);
  if (b->on && b->buf.len)
    flush(b);
  pthread_mutex_unlock(&b->lock);
}
