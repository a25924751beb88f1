/*
 * lmdb_crash.c - nothing acknowledged is lost when the process dies.
 *
 *   lmdb_crash DIR [CYCLES]
 *
 * Each cycle starts a child (this binary, --child) that claims and completes
 * records with 64 in flight and writes each key to a pipe once its claim was
 * acknowledged ("C key") and once its complete was ("D key"). The parent
 * kills it with SIGKILL at a random moment (mostly mid-traffic: mid-batch,
 * mid-append to the log or mid-commit, mid-checkpoint, as the checkpointer
 * runs every 50 ms behind the log; sometimes during open and replay), then
 * reopens the store and checks that every completed key is completed,
 * decodes and holds the body the child wrote, that claiming it again
 * replays it, that a key whose claim alone was acknowledged cannot be
 * claimed again (its lease is an hour: a second claim would be a duplicate
 * execution), and that the store still takes writes. At the end every key
 * of every cycle is checked again. Exit 0 when nothing was lost and nothing
 * could run twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "idem/idem.h"

#define IN_FLIGHT 64
#define TTL_MS (24 * 3600 * 1000)
#define LEASE_MS (3600 * 1000)
#define BODY_MAX 3000

/* The body of a key: deterministic, of a size between 1 and BODY_MAX, so
 * that some records span overflow pages. */
static size_t body_of(const char *key, char *out) {
  uint32_t h = 2166136261u;
  for (const char *p = key; *p; p++)
    h = (h ^ (unsigned char)*p) * 16777619u;
  size_t len = 1 + h % BODY_MAX, klen = strlen(key);
  for (size_t i = 0; i < len; i++)
    out[i] = key[i % klen];
  return len;
}

static void fingerprint_of(const char *key, uint8_t *fp) {
  if (idem_fingerprint("POST", "/crash", key, strlen(key), 0, fp))
    abort();
}

/* ---- the child --------------------------------------------------------- */

typedef struct {
  idem_store *store;
  int fd;
  const char *prefix;
  unsigned long next;
} child_ctx;

typedef struct {
  child_ctx *ctx;
  char key[64];
  char body[BODY_MAX];
} child_slot;

static void child_claim(child_slot *s);

static void die(const char *what, int err) {
  fprintf(stderr, "lmdb_crash child: %s: %s\n", what, idem_strerror(err));
  _exit(3);
}

/* One short write per line: atomic on a pipe, so the parent never sees
 * half a key. */
static void report(child_slot *s, char what) {
  char line[80];
  int n = snprintf(line, sizeof line, "%c %s\n", what, s->key);
  if (write(s->ctx->fd, line, (size_t)n) != n)
    _exit(4);
}

static void on_completed(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  child_slot *s = arg;
  if (res->err)
    die("complete", res->err);
  report(s, 'D');
  child_claim(s);
}

static void on_claimed(idem_store *store, const idem_result *res, void *arg) {
  child_slot *s = arg;
  if (res->err)
    die("claim", res->err);
  if (res->outcome != IDEM_CLAIMED)
    die("claim outcome", IDEM_EINVAL);
  report(s, 'C');
  idem_op op = {.kind = IDEM_OP_COMPLETE, .key = s->key, .fence = res->fence, .ttl_ms = TTL_MS};
  op.response.status = 200;
  op.response.body = s->body;
  op.response.body_len = body_of(s->key, s->body);
  int err = idem_store_submit(store, &op, on_completed, s);
  if (err)
    die("submit complete", err);
}

static void child_claim(child_slot *s) {
  snprintf(s->key, sizeof s->key, "%s-%lu", s->ctx->prefix, s->ctx->next++);
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = s->key, .lease_ms = LEASE_MS, .ttl_ms = TTL_MS};
  fingerprint_of(s->key, op.fingerprint);
  int err = idem_store_submit(s->ctx->store, &op, on_claimed, s);
  if (err)
    die("submit claim", err);
}

static int child_main(const char *uri, const char *prefix, int fd) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  child_ctx ctx = {.fd = fd, .prefix = prefix};
  char *msg = NULL;
  int err = idem_store_open(&loop, uri, &ctx.store, &msg);
  if (err) {
    fprintf(stderr, "lmdb_crash child: open: %s\n", msg ? msg : idem_strerror(err));
    _exit(3);
  }
  static child_slot slots[IN_FLIGHT];
  for (int i = 0; i < IN_FLIGHT; i++) {
    slots[i].ctx = &ctx;
    child_claim(&slots[i]);
  }
  uv_run(&loop, UV_RUN_DEFAULT); /* until killed */
  return 5;
}

/* ---- the parent -------------------------------------------------------- */

typedef struct {
  char **keys;
  size_t n, cap;
} key_list;

static void add_key(key_list *l, const char *key, size_t len) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 1024;
    l->keys = realloc(l->keys, l->cap * sizeof *l->keys);
    if (!l->keys)
      abort();
  }
  l->keys[l->n++] = strndup(key, len);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct {
  key_list done;    /* completes acknowledged */
  key_list claimed; /* claims acknowledged */
} acked_keys;

/* Append the complete lines in buf to their lists; keep a partial tail. */
static void take_lines(char *buf, size_t *len, acked_keys *a) {
  size_t start = 0;
  for (size_t i = 0; i < *len; i++)
    if (buf[i] == '\n') {
      if (i - start > 2)
        add_key(buf[start] == 'D' ? &a->done : &a->claimed, buf + start + 2, i - start - 2);
      start = i + 1;
    }
  memmove(buf, buf + start, *len - start);
  *len -= start;
}

static int check_key(idem_sync *s, const char *key) {
  idem_op op = {.kind = IDEM_OP_GET, .key = key};
  idem_result res;
  int err = idem_sync_run(s, &op, &res);
  int ok = 0;
  char body[BODY_MAX];
  if (err) {
    fprintf(stderr, "LOST: %s: %s\n", key, idem_strerror(err));
  } else if (res.record->state != IDEM_STATE_COMPLETED || res.record->response.status != 200) {
    fprintf(stderr, "LOST: %s is %s\n", key, idem_state_name(res.record->state));
  } else {
    size_t len = body_of(key, body);
    if (res.record->response.body_len != len || memcmp(res.record->response.body, body, len))
      fprintf(stderr, "LOST: %s has the wrong body\n", key);
    else
      ok = 1;
  }
  idem_result_clear(&res);
  return ok;
}

/* Claiming key again must not hand it out: a completed key replays, a key
 * claimed under its hour-long lease is busy (or replays, when its complete
 * became durable just before the kill). */
static int check_claim(idem_sync *s, const char *key, int completed) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = LEASE_MS, .ttl_ms = TTL_MS};
  fingerprint_of(key, op.fingerprint);
  idem_result res;
  int err = idem_sync_run(s, &op, &res);
  int ok = !err && (res.outcome == IDEM_REPLAY || (!completed && res.outcome == IDEM_BUSY));
  if (!ok)
    fprintf(stderr, "%s: %s claimed again: %s\n", err ? "LOST" : "DUPLICATE", key,
            err ? idem_strerror(err) : idem_outcome_name(res.outcome));
  idem_result_clear(&res);
  return ok;
}

/* The store opens, every acknowledged key is there, none can be claimed
 * again, and it takes a write. */
static int verify(const char *uri, acked_keys *a, size_t from_done, size_t from_claimed,
                  int cycle) {
  idem_sync *s;
  char *msg = NULL;
  int err = idem_sync_open(uri, &s, &msg);
  if (err) {
    fprintf(stderr, "cycle %d: the store does not open after the kill: %s\n", cycle,
            msg ? msg : idem_strerror(err));
    free(msg);
    return 0;
  }
  size_t bad = 0;
  for (size_t i = from_done; i < a->done.n; i++)
    bad += !check_key(s, a->done.keys[i]) + !check_claim(s, a->done.keys[i], 1);
  for (size_t i = from_claimed; i < a->claimed.n; i++)
    bad += !check_claim(s, a->claimed.keys[i], 0);
  char key[64];
  snprintf(key, sizeof key, "probe-%d", cycle);
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = key, .lease_ms = 1000, .ttl_ms = TTL_MS};
  fingerprint_of(key, op.fingerprint);
  idem_result res;
  err = idem_sync_run(s, &op, &res);
  if (err || res.outcome != IDEM_CLAIMED) {
    fprintf(stderr, "cycle %d: the store takes no write after the kill: %s\n", cycle,
            err ? idem_strerror(err) : idem_outcome_name(res.outcome));
    bad++;
  }
  idem_result_clear(&res);
  idem_sync_close(s);
  return bad == 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && !strcmp(argv[1], "--child"))
    return child_main(argv[2], argv[3], atoi(argv[4]));
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: lmdb_crash DIR [CYCLES]\n");
    return 2;
  }
  int cycles = argc == 3 ? atoi(argv[2]) : 100;
  char uri[4096];
  snprintf(uri, sizeof uri, "lmdb:%s/crash-store", argv[1]);
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  if (getenv("IDEM_CRASH_SEED"))
    seed = (unsigned)strtoul(getenv("IDEM_CRASH_SEED"), NULL, 10);
  printf("lmdb_crash: %d cycles on %s, seed %u (IDEM_CRASH_SEED to repeat)\n", cycles, uri, seed);
  fflush(stdout);
  srand(seed);

  acked_keys acked = {0};
  int64_t started = mono_ms();
  int failed = 0, killed_before_ack = 0, kills = 0;
  for (int cycle = 0; cycle < cycles && !failed; cycle++) {
    int p[2];
    if (pipe(p))
      return perror("pipe"), 1;
    pid_t pid = fork();
    if (pid < 0)
      return perror("fork"), 1;
    if (pid == 0) {
      close(p[0]);
      char prefix[32], fd[16];
      snprintf(prefix, sizeof prefix, "c%d", cycle);
      snprintf(fd, sizeof fd, "%d", p[1]);
      execl("/proc/self/exe", argv[0], "--child", uri, prefix, fd, (char *)NULL);
      _exit(127);
    }
    close(p[1]);
    /* three cycles in four: 0-100 ms after the first acknowledgement (mid
     * traffic); the fourth: 0-150 ms after the start (during open, too) */
    int after_first = rand() % 4 != 0;
    int delay = rand() % (after_first ? 100 : 150);
    int64_t kill_at = mono_ms() + (after_first ? 10000 : delay);
    size_t before = acked.done.n, before_claimed = acked.claimed.n;
    char buf[8192];
    size_t len = 0;
    for (;;) {
      int64_t left = kill_at - mono_ms();
      if (left <= 0)
        break;
      struct pollfd pfd = {.fd = p[0], .events = POLLIN};
      if (poll(&pfd, 1, (int)left) > 0) {
        ssize_t n = read(p[0], buf + len, sizeof buf - len);
        if (n <= 0)
          break; /* the child died on its own */
        len += (size_t)n;
        take_lines(buf, &len, &acked);
        if (after_first && acked.done.n > before) {
          after_first = 0;
          kill_at = mono_ms() + delay;
        }
      }
    }
    kill(pid, SIGKILL);
    kills++;
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      fprintf(stderr, "cycle %d: the child exited by itself (status %d)\n", cycle, status);
      failed = 1;
    }
    /* what it wrote before dying was acknowledged too */
    ssize_t n;
    while ((n = read(p[0], buf + len, sizeof buf - len)) > 0) {
      len += (size_t)n;
      take_lines(buf, &len, &acked);
    }
    close(p[0]);
    if (acked.done.n == before)
      killed_before_ack++;
    if (!verify(uri, &acked, before, before_claimed, cycle)) {
      fprintf(stderr, "cycle %d: FAILED (killed after %d ms, seed %u)\n", cycle, delay, seed);
      failed = 1;
    }
  }
  if (!failed && !verify(uri, &acked, 0, 0, cycles)) {
    fprintf(stderr, "final check: FAILED (seed %u)\n", seed);
    failed = 1;
  }
  printf("lmdb_crash: %s: %zu completed and %zu claimed records checked after %d kills "
         "(%d before any acknowledgement), %.1f s\n",
         failed ? "FAILED" : "ok", acked.done.n, acked.claimed.n, kills, killed_before_ack,
         (double)(mono_ms() - started) / 1000);
  key_list *lists[] = {&acked.done, &acked.claimed};
  for (int l = 0; l < 2; l++) {
    for (size_t i = 0; i < lists[l]->n; i++)
      free(lists[l]->keys[i]);
    free(lists[l]->keys);
  }
  return failed;
}
