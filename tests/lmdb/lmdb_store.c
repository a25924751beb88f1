/*
 * lmdb_store.c - what the LMDB store promises beyond the contract
 * suite: clear errors for bad paths and foreign files, durability across a
 * reopen, group commit, a full map refused per request, the expiry index,
 * gc and the background sweeper, handles sharing one environment, and
 * processes sharing one log.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../support/temp_root.h"

#include <uv.h>

#include "idem/idem.h"
#include "store/backend.h"
#include "store/lmdb.h"

#define TTL_LONG_MS (3600 * 1000)
#define DEADLINE_MS 10000

static char root[256];
static int dir_seq;

/* A fresh path under this run's temp dir (not created). */
static const char *fresh_path(char *buf, size_t n) {
  snprintf(buf, n, "%s/s%d", root, ++dir_seq);
  return buf;
}

static char *uri_of(const char *path, const char *opts) {
  static char buf[4][512];
  static int next;
  char *u = buf[next++ % 4];
  snprintf(u, 512, "lmdb:%s%s%s", path, opts ? "?" : "", opts ? opts : "");
  return u;
}

static int open_err(const char *uri, char **msg) {
  idem_sync *s = NULL;
  int err = idem_sync_open(uri, &s, msg);
  if (!err)
    idem_sync_close(s);
  return err;
}

static idem_op claim_op(const char *scope, const char *key, int64_t ttl_ms) {
  idem_op op = {.kind = IDEM_OP_CLAIM, .scope = scope, .key = key, .lease_ms = 30000,
                .ttl_ms = ttl_ms};
  assert_int_equal(idem_fingerprint("POST", "/t", key, strlen(key), 0, op.fingerprint), 0);
  return op;
}

static idem_op complete_op(const char *scope, const char *key, uint64_t fence, const char *body,
                           size_t body_len, int64_t ttl_ms) {
  idem_op op = {.kind = IDEM_OP_COMPLETE, .scope = scope, .key = key, .fence = fence,
                .ttl_ms = ttl_ms};
  op.response.status = 200;
  op.response.body = body;
  op.response.body_len = body_len;
  return op;
}

/* claim + complete through the facade; returns the complete's error. */
static int put_completed(idem_sync *s, const char *key, const char *body, size_t len, int64_t ttl) {
  idem_op op = claim_op(NULL, key, TTL_LONG_MS);
  idem_result res;
  int err = idem_sync_run(s, &op, &res);
  uint64_t fence = res.fence;
  idem_outcome outcome = res.outcome;
  idem_result_clear(&res);
  if (err)
    return err;
  assert_int_equal(outcome, IDEM_CLAIMED);
  op = complete_op(NULL, key, fence, body, len, ttl);
  err = idem_sync_run(s, &op, &res);
  idem_result_clear(&res);
  return err;
}

static int get_state(idem_sync *s, const char *key, idem_state *state) {
  idem_op op = {.kind = IDEM_OP_GET, .key = key};
  idem_result res;
  int err = idem_sync_run(s, &op, &res);
  if (!err)
    *state = res.record->state;
  idem_result_clear(&res);
  return err;
}

static size_t run_gc(idem_sync *s, size_t limit) {
  idem_op op = {.kind = IDEM_OP_GC, .limit = limit};
  idem_result res;
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  size_t n = res.count;
  idem_result_clear(&res);
  return n;
}

/* ---- opening ----------------------------------------------------------- */

static void bad_uris_are_refused(void **state) {
  (void)state;
  char p[300], *msg = NULL;
  fresh_path(p, sizeof p);
  assert_int_equal(open_err("lmdb:", &msg), IDEM_EURI);
  assert_non_null(msg);
  free(msg);
  assert_int_equal(open_err(uri_of(p, "colour=blue"), &msg), IDEM_EURI);
  assert_non_null(strstr(msg, "colour"));
  free(msg);
  assert_int_equal(open_err(uri_of(p, "map_size=lots"), &msg), IDEM_EURI);
  free(msg);
  assert_int_equal(open_err(uri_of(p, "batch=0"), &msg), IDEM_EURI);
  free(msg);
  assert_int_equal(open_err(uri_of(p, "map_size"), &msg), IDEM_EURI);
  free(msg);
  /* nothing was created for a refused URI */
  assert_int_not_equal(access(p, F_OK), 0);
  assert_int_equal(open_err(uri_of(p, "map_size=8MiB&batch=16&sweep_interval=off"), NULL), 0);
}

static void uncreatable_path_is_a_clear_error(void **state) {
  (void)state;
  char file[300], path[400], *msg = NULL;
  fresh_path(file, sizeof file);
  int fd = open(file, O_CREAT | O_WRONLY, 0600);
  assert_true(fd >= 0);
  close(fd);
  /* under a regular file: ENOTDIR */
  snprintf(path, sizeof path, "%s/store", file);
  assert_int_equal(open_err(uri_of(path, NULL), &msg), IDEM_ESTORE);
  assert_non_null(strstr(msg, path));
  assert_non_null(strstr(msg, "Not a directory"));
  free(msg);
  /* two levels missing */
  snprintf(path, sizeof path, "%s/missing/store", root);
  assert_int_equal(open_err(uri_of(path, NULL), &msg), IDEM_ESTORE);
  assert_non_null(strstr(msg, "No such file"));
  free(msg);
}

static void create_no_opens_only_an_existing_store(void **state) {
  (void)state;
  char p[300], *msg = NULL;
  fresh_path(p, sizeof p);
  /* a missing directory: refused, not created */
  assert_int_equal(open_err(uri_of(p, "create=no"), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "no store at"));
  assert_non_null(strstr(msg, p));
  free(msg);
  assert_int_not_equal(access(p, F_OK), 0);
  /* an empty directory: refused, left empty */
  assert_int_equal(mkdir(p, 0700), 0);
  assert_int_equal(open_err(uri_of(p, "create=no"), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "holds no data.mdb"));
  free(msg);
  char f[400];
  snprintf(f, sizeof f, "%s/data.mdb", p);
  assert_int_not_equal(access(f, F_OK), 0);
  /* once a store is there, create=no opens it */
  assert_int_equal(open_err(uri_of(p, NULL), NULL), 0);
  assert_int_equal(open_err(uri_of(p, "create=no"), NULL), 0);
  assert_int_equal(open_err(uri_of(p, "create=yes"), NULL), 0);
  assert_int_equal(open_err(uri_of(p, "create=maybe"), &msg), IDEM_EURI);
  assert_non_null(strstr(msg, "want yes or no"));
  free(msg);
}

/* A creation that died before its first commit leaves an empty data.mdb, or
 * one with LMDB's first pages and no records: create=no (keys, gc, migrate, a
 * gateway told the store must exist) finds no store there, and the default
 * finishes the creation. */
static void an_unfinished_creation_is_no_store(void **state) {
  (void)state;
  char p[300], f[400], *msg = NULL;
  fresh_path(p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(f, sizeof f, "%s/data.mdb", p);
  FILE *fp = fopen(f, "w");
  fclose(fp);
  assert_int_equal(open_err(uri_of(p, "create=no"), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "no store at"));
  free(msg);
  struct stat st;
  assert_int_equal(stat(f, &st), 0);
  assert_int_equal(st.st_size, 0); /* left as it was */
  assert_int_equal(open_err(uri_of(p, NULL), NULL), 0);
  assert_int_equal(open_err(uri_of(p, "create=no"), NULL), 0);

  fresh_path(p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  MDB_env *env;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_open(env, p, 0, 0600), 0); /* its first pages, no commit */
  mdb_env_close(env);
  assert_int_equal(open_err(uri_of(p, "create=no"), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "holds no records yet"));
  free(msg);
  assert_int_equal(open_err(uri_of(p, NULL), NULL), 0);
  assert_int_equal(open_err(uri_of(p, "create=no"), NULL), 0);
}

static void foreign_files_are_not_stores(void **state) {
  (void)state;
  char p[300], f[400], *msg = NULL;
  /* a regular file */
  fresh_path(p, sizeof p);
  FILE *fp = fopen(p, "w");
  fputs("hello\n", fp);
  fclose(fp);
  assert_int_equal(open_err(uri_of(p, NULL), &msg), IDEM_ENOTSTORE);
  free(msg);
  /* a directory holding something else: left untouched */
  fresh_path(p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(f, sizeof f, "%s/notes.txt", p);
  fp = fopen(f, "w");
  fclose(fp);
  assert_int_equal(open_err(uri_of(p, NULL), &msg), IDEM_ENOTSTORE);
  free(msg);
  snprintf(f, sizeof f, "%s/data.mdb", p);
  assert_int_not_equal(access(f, F_OK), 0);
  /* data.mdb that is not LMDB */
  fresh_path(p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  snprintf(f, sizeof f, "%s/data.mdb", p);
  fp = fopen(f, "w");
  for (int i = 0; i < 4096; i++)
    fputs("not lmdb", fp);
  fclose(fp);
  assert_int_equal(open_err(uri_of(p, NULL), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "not an LMDB file"));
  free(msg);
  /* an LMDB environment written by something else */
  fresh_path(p, sizeof p);
  assert_int_equal(mkdir(p, 0700), 0);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_open(env, p, 0, 0600), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
  MDB_val k = {3, "foo"}, v = {3, "bar"};
  assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
  assert_int_equal(open_err(uri_of(p, NULL), &msg), IDEM_ENOTSTORE);
  assert_non_null(strstr(msg, "not an idem store"));
  free(msg);
}

static void records_survive_a_reopen(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  assert_int_equal(put_completed(s, "kept", "body", 4, TTL_LONG_MS), 0);
  idem_sync_close(s);
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  idem_op op = claim_op(NULL, "kept", TTL_LONG_MS);
  idem_result res;
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_REPLAY);
  assert_int_equal(res.record->response.body_len, 4);
  assert_memory_equal(res.record->response.body, "body", 4);
  idem_result_clear(&res);
  idem_sync_close(s);
}

/* ---- group commit ------------------------------------------------------ */

typedef struct {
  idem_store *store;
  int pending, failed;
} burst;

typedef struct {
  burst *b;
  char key[32];
} slot;

static void on_complete(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  burst *b = arg;
  if (res->err)
    b->failed++;
  b->pending--;
}

static void on_claim(idem_store *store, const idem_result *res, void *arg) {
  burst *b = ((slot *)arg)->b;
  const char *key = ((slot *)arg)->key;
  if (res->err || res->outcome != IDEM_CLAIMED) {
    b->failed++;
    b->pending--;
    return;
  }
  idem_op op = complete_op(NULL, key, res->fence, "ok", 2, TTL_LONG_MS);
  assert_int_equal(idem_store_submit(store, &op, on_complete, b), 0);
}

static void on_closed(idem_store *store, void *arg) {
  (void)store;
  *(int *)arg = 1;
}

/* Close store, run loop until the close has completed, then close loop. */
static void close_store_and_loop(idem_store *store, uv_loop_t *loop) {
  int closed = 0;
  idem_store_close(store, on_closed, &closed);
  while (!closed)
    uv_run(loop, UV_RUN_ONCE);
  assert_int_equal(uv_loop_close(loop), 0);
}

/* n claim+complete pairs in flight at once on one loop. */
static void run_burst(const char *uri, int n, const char *prefix, idem_lmdb_stats *st) {
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  burst b = {0};
  assert_int_equal(idem_store_open(&loop, uri, &b.store, NULL), 0);
  slot slots[256];
  assert_true(n <= 256);
  for (int i = 0; i < n; i++) {
    slots[i].b = &b;
    snprintf(slots[i].key, sizeof slots[i].key, "%s-%d", prefix, i);
    idem_op op = claim_op(NULL, slots[i].key, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(b.store, &op, on_claim, &slots[i]), 0);
    b.pending++;
  }
  while (b.pending)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(b.failed, 0);
  assert_int_equal(idem_lmdb_stats_get(b.store, st), 0);
  close_store_and_loop(b.store, &loop);
}

static void concurrent_writes_share_commits(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  idem_lmdb_stats st;
  run_burst(uri_of(p, NULL), 128, "g", &st);
  assert_int_equal(st.ops_written, 256);
  assert_true(st.commits < 256 / 4); /* 128 claims went out before the first commit */
  assert_true(st.max_batch > 1);
  assert_int_equal(st.errors_full + st.errors_store, 0);

  /* batch=1: one commit per operation, for comparison */
  fresh_path(p, sizeof p);
  run_burst(uri_of(p, "batch=1"), 16, "one", &st);
  assert_int_equal(st.commits, 32);
  assert_int_equal(st.max_batch, 1);
}

/* The writer keeps zeroed space past the last page (lmdb_writer.c) without
 * an fstat after every commit: on Linux 6.13+ a stat makes the next write
 * stamp a fine-grained mtime, and every fdatasync then writes the inode too.
 * This binary interposes fstat and counts the writer thread's calls. */
static atomic_int writer_fstats;

int fstat(int fd, struct stat *st) {
  static int (*real)(int, struct stat *);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "fstat");
  char name[16] = "";
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0 &&
      strcmp(name, "idem-lmdb-write") == 0)
    atomic_fetch_add(&writer_fstats, 1);
  return real(fd, st);
}

/* A disk that fails one flush of idem.log: this binary interposes
 * fdatasync, and fails the next one on the log once log_flush_fails is set. */
static atomic_int log_flush_fails;

static int is_the_log(int fd) {
  char link[64], target[512];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0)
    return 0;
  target[n] = '\0';
  return n >= 9 && strcmp(target + n - 9, "/idem.log") == 0;
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "fdatasync");
  if (atomic_load(&log_flush_fails) && is_the_log(fd) && atomic_exchange(&log_flush_fails, 0)) {
    errno = EIO;
    return -1;
  }
  return real(fd);
}

/* On s: "before" completed, then a claim of "k" whose log flush fails.
 * 1 when that claim was refused (IDEM_ESTORE) for the failed flush. */
static int claim_refused_by_a_failed_flush(idem_sync *s) {
  if (put_completed(s, "before", "b", 1, TTL_LONG_MS))
    return 0;
  idem_op claim = claim_op(NULL, "k", TTL_LONG_MS);
  idem_result res;
  atomic_store(&log_flush_fails, 1);
  int rc = idem_sync_run(s, &claim, &res);
  idem_result_clear(&res);
  return rc == IDEM_ESTORE && !atomic_load(&log_flush_fails);
}

/* The batch whose flush failed was written whole, and was refused: the
 * writer goes on in direct commits. A later open (or a process taking the
 * log over) must not lay that batch over what the direct commits wrote. */
static void a_refused_batch_is_never_replayed(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  assert_true(claim_refused_by_a_failed_flush(s)); /* refused: not run */
  assert_int_equal(put_completed(s, "k", "done", 4, TTL_LONG_MS), 0); /* direct now */
  idem_sync_close(s);
  for (int round = 0; round < 2; round++) { /* the open replays; then a plain reopen */
    assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
    const char *keys[] = {"k", "before"};
    for (int i = 0; i < 2; i++) {
      idem_op again = claim_op(NULL, keys[i], TTL_LONG_MS);
      idem_result res;
      assert_int_equal(idem_sync_run(s, &again, &res), 0);
      assert_int_equal(res.outcome, IDEM_REPLAY);
      assert_int_equal(res.fence, 1);
      idem_result_clear(&res);
    }
    idem_sync_close(s);
  }
}

static void zeroed_space_ahead_without_a_stat_per_commit(void **state) {
  (void)state;
  char p[300], data[340];
  fresh_path(p, sizeof p);
  atomic_store(&writer_fstats, 0);
  idem_lmdb_stats st;
  run_burst(uri_of(p, "batch=1"), 32, "z", &st);
  assert_int_equal(st.commits, 64);
  /* 4 MiB ahead, 1 MiB a step, one look per step (and one more at most) */
  assert_in_range(atomic_load(&writer_fstats), 1, 6);
  snprintf(data, sizeof data, "%s/data.mdb", p);
  struct stat fst;
  assert_int_equal(stat(data, &fst), 0);
  assert_true(fst.st_size >= 4 << 20);
}

static void replays_do_not_go_through_the_writer(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri_of(p, NULL), &store, NULL), 0);
  idem_sync *s; /* a second handle on the same environment */
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  assert_int_equal(put_completed(s, "r", "x", 1, TTL_LONG_MS), 0);
  idem_lmdb_stats before, after;
  assert_int_equal(idem_lmdb_stats_get(store, &before), 0);
  idem_op op = claim_op(NULL, "r", TTL_LONG_MS);
  idem_result res;
  for (int i = 0; i < 10; i++) {
    assert_int_equal(idem_sync_run(s, &op, &res), 0);
    assert_int_equal(res.outcome, IDEM_REPLAY);
    idem_result_clear(&res);
  }
  assert_int_equal(idem_lmdb_stats_get(store, &after), 0);
  assert_int_equal(after.commits, before.commits);
  assert_int_equal(after.ops_read, before.ops_read + 10);
  idem_sync_close(s);
  close_store_and_loop(store, &loop);
}

/* ---- a full map -------------------------------------------------------- */

static void on_result(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  int *slot = arg;
  *slot = res->err;
}

/* A child process (this binary, --hold-write-lock PATH) that holds the
 * environment's write transaction until its stdin closes. */
typedef struct {
  pid_t pid;
  int to_child;
} lock_holder;

static int hold_lock_main(const char *path) {
  MDB_env *env;
  MDB_txn *txn;
  if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 4) || mdb_env_open(env, path, 0, 0600) ||
      mdb_txn_begin(env, NULL, 0, &txn))
    return 1;
  if (write(1, "L", 1) != 1)
    return 1;
  char c;
  while (read(0, &c, 1) > 0)
    ;
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return 0;
}

static lock_holder hold_write_lock(const char *path) {
  int in[2], out[2];
  assert_int_equal(pipe(in), 0);
  assert_int_equal(pipe(out), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execl("/proc/self/exe", "lmdb_store", "--hold-write-lock", path, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  char c;
  assert_int_equal(read(out[0], &c, 1), 1); /* it holds the lock */
  close(out[0]);
  return (lock_holder){pid, in[1]};
}

static void release_write_lock(lock_holder *h) {
  close(h->to_child);
  int status;
  assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Complete PREFIX-0, PREFIX-1, ... (len bytes of body each) until the
 * store says IDEM_EFULL (at most max): how many were stored. */
static int fill_until_full(idem_sync *s, const char *prefix, const char *body, size_t len,
                           int max) {
  char key[64];
  int err = 0, stored = 0;
  for (int i = 0; i < max && !err; i++) {
    snprintf(key, sizeof key, "%s-%d", prefix, i);
    if (!(err = put_completed(s, key, body, len, TTL_LONG_MS)))
      stored++;
  }
  assert_int_equal(err, IDEM_EFULL);
  return stored;
}

/* PREFIX-0 .. PREFIX-(n-1) are all there, completed. */
static void assert_all_completed(idem_sync *s, const char *prefix, int n) {
  char key[64];
  for (int i = 0; i < n; i++) {
    idem_state st;
    snprintf(key, sizeof key, "%s-%d", prefix, i);
    assert_int_equal(get_state(s, key, &st), 0);
    assert_int_equal(st, IDEM_STATE_COMPLETED);
  }
}

static void full_map_refuses_per_request(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, "map_size=1MiB"), &s, NULL), 0);
  char *body = malloc(2 << 20);
  memset(body, 'x', 2 << 20);
  int stored = fill_until_full(s, "full", body, 64 * 1024, 100);
  assert_true(stored > 2);
  assert_all_completed(s, "full", stored); /* everything acknowledged is still there */
  idem_sync_close(s);

  /* In one batch, the operation that does not fit is refused and the rest
   * commit: a 2 MiB body among small ones, on a fresh 1 MiB map. */
  fresh_path(p, sizeof p);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri_of(p, "map_size=1MiB"), &store, NULL), 0);
  int errs[5];
  for (int i = 0; i < 5; i++) {
    errs[i] = 1;
    snprintf(key, sizeof key, "mix-%d", i);
    idem_op op = claim_op(NULL, key, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, on_result, &errs[i]), 0);
  }
  for (int pending = 5; pending;) {
    uv_run(&loop, UV_RUN_ONCE);
    pending = 0;
    for (int i = 0; i < 5; i++)
      pending += errs[i] == 1;
  }
  /* Another process holds LMDB's writer lock while the completes queue up,
   * so that at least ops 1-4 (the 2 MiB one among them) share a batch. */
  idem_lmdb_stats st;
  assert_int_equal(idem_lmdb_stats_get(store, &st), 0);
  uint64_t commits_before = st.commits;
  lock_holder holder = hold_write_lock(p);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(errs[i], 0);
    errs[i] = 1;
    snprintf(key, sizeof key, "mix-%d", i);
    idem_op op = complete_op(NULL, key, 1, body, i == 2 ? (size_t)(2 << 20) : 10, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, on_result, &errs[i]), 0);
  }
  release_write_lock(&holder);
  for (int pending = 5; pending;) {
    uv_run(&loop, UV_RUN_ONCE);
    pending = 0;
    for (int i = 0; i < 5; i++)
      pending += errs[i] == 1;
  }
  for (int i = 0; i < 5; i++)
    assert_int_equal(errs[i], i == 2 ? IDEM_EFULL : 0);
  assert_int_equal(idem_lmdb_stats_get(store, &st), 0);
  assert_true(st.errors_full >= 1);
  assert_true(st.commits - commits_before <= 2); /* 4 completes in at most 2 commits */
  assert_true(st.max_batch >= 3);
  close_store_and_loop(store, &loop);
  free(body);
}

/* With the log, a batch goes to the log only while LMDB has room for what
 * the log holds ahead of it; nearer a full map it is a direct commit, so
 * the operation that does not fit is refused before anything about it is
 * acknowledged, and everything acknowledged is there after a reopen. */
static void full_map_through_the_log(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  const char *uri = uri_of(p, "map_size=40MiB&sweep_interval=off");
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri, &s, NULL), 0);
  size_t big = 256 * 1024;
  char *body = malloc(big);
  memset(body, 'y', big);
  int stored = fill_until_full(s, "lf", body, big, 400);
  assert_true(stored > 20);
  idem_sync_close(s);
  assert_int_equal(idem_sync_open(uri, &s, NULL), 0);
  assert_all_completed(s, "lf", stored);
  /* deleting makes room, and writes go through again */
  for (int i = 0; i < stored; i++) {
    snprintf(key, sizeof key, "lf-%d", i);
    idem_op op = {.kind = IDEM_OP_DELETE, .key = key};
    idem_result res;
    assert_int_equal(idem_sync_run(s, &op, &res), 0);
    idem_result_clear(&res);
  }
  assert_int_equal(put_completed(s, "lf-again", body, big, TTL_LONG_MS), 0);
  idem_sync_close(s);
  free(body);
}

/* ---- retention --------------------------------------------------------- */

static void wait_until(int64_t t) {
  while (idem_now_ms() < t)
    usleep(1000);
}

static void gc_deletes_expired_records_in_bounded_passes(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, "sweep_interval=off&sweep_batch=7"), &s, NULL), 0);
  for (int i = 0; i < 25; i++) {
    snprintf(key, sizeof key, "short-%d", i);
    assert_int_equal(put_completed(s, key, "b", 1, 50), 0);
  }
  /* each complete moved its record in the expiry index (claim: 1h, complete:
   * 50ms); this one stays at 1h, so gc leaves it */
  assert_int_equal(put_completed(s, "long", "b", 1, TTL_LONG_MS), 0);
  wait_until(idem_now_ms() + 60);
  assert_int_equal(run_gc(s, 10), 10); /* bounded by limit, in chunks of 7 */
  assert_int_equal(run_gc(s, 0), 15);  /* default limit 1000 */
  assert_int_equal(run_gc(s, 0), 0);
  idem_state st;
  assert_int_equal(get_state(s, "long", &st), 0);
  assert_int_equal(st, IDEM_STATE_COMPLETED);
  assert_int_equal(get_state(s, "short-3", &st), IDEM_ENOTFOUND);
  /* a deleted key starts over */
  idem_op op = claim_op(NULL, "short-3", TTL_LONG_MS);
  idem_result res;
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  idem_result_clear(&res);
  idem_sync_close(s);
}

static void sweeper_runs_in_the_background(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  const char *uri = uri_of(p, "sweep_interval=50ms&sweep_batch=5");
  assert_int_equal(idem_store_open(&loop, uri, &store, NULL), 0);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri, &s, NULL), 0);
  for (int i = 0; i < 12; i++) {
    snprintf(key, sizeof key, "swept-%d", i);
    assert_int_equal(put_completed(s, key, "b", 1, 20), 0);
  }
  assert_int_equal(put_completed(s, "stays", "b", 1, TTL_LONG_MS), 0);
  idem_lmdb_stats st;
  int64_t deadline = idem_now_ms() + DEADLINE_MS;
  do {
    usleep(5000);
    assert_int_equal(idem_lmdb_stats_get(store, &st), 0);
  } while (st.swept < 12 && idem_now_ms() < deadline);
  assert_int_equal(st.swept, 12);
  idem_state state_;
  assert_int_equal(get_state(s, "stays", &state_), 0);
  idem_sync_close(s);
  close_store_and_loop(store, &loop);
}

/* A long gc runs in chunks between batches: a claim submitted after it is
 * answered long before it ends. */
typedef struct {
  int order, claim_at, gc_at;
  size_t gc_count;
  int pending;
} race;

static void on_race_claim(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  race *r = arg;
  assert_int_equal(res->err, 0);
  r->claim_at = ++r->order;
  r->pending--;
}

static void on_race_gc(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  race *r = arg;
  assert_int_equal(res->err, 0);
  r->gc_count = res->count;
  r->gc_at = ++r->order;
  r->pending--;
}

static void on_fill(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  assert_int_equal(res->err, 0);
  (*(int *)arg)--;
}

static void gc_does_not_stall_claims(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri_of(p, "sweep_interval=off&sweep_batch=200"), &store, NULL), 0);
  /* 4000 claims that expire at once (lease and ttl of 1 ms) */
  int pending = 0;
  for (int i = 0; i < 4000; i++) {
    snprintf(key, sizeof key, "exp-%d", i);
    idem_op op = claim_op(NULL, key, 1);
    op.lease_ms = 1;
    assert_int_equal(idem_store_submit(store, &op, on_fill, &pending), 0);
    pending++;
    if (pending >= 256)
      while (pending > 128)
        uv_run(&loop, UV_RUN_ONCE);
  }
  while (pending)
    uv_run(&loop, UV_RUN_ONCE);
  wait_until(idem_now_ms() + 5);
  race r = {.pending = 2};
  idem_op gc = {.kind = IDEM_OP_GC, .limit = 100000};
  assert_int_equal(idem_store_submit(store, &gc, on_race_gc, &r), 0);
  idem_op claim = claim_op(NULL, "during-gc", TTL_LONG_MS);
  assert_int_equal(idem_store_submit(store, &claim, on_race_claim, &r), 0);
  while (r.pending)
    uv_run(&loop, UV_RUN_ONCE);
  assert_int_equal(r.gc_count, 4000); /* 20 chunks of 200 */
  assert_int_equal(r.claim_at, 1);    /* the claim did not wait for them */
  assert_int_equal(r.gc_at, 2);
  close_store_and_loop(store, &loop);
}

static void delete_and_list(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  assert_int_equal(put_completed(s, "a", "1", 1, TTL_LONG_MS), 0);
  assert_int_equal(put_completed(s, "b", "2", 1, TTL_LONG_MS), 0);
  assert_int_equal(put_completed(s, "c", "3", 1, 30), 0);
  idem_op op = claim_op("tenant", "a", TTL_LONG_MS);
  idem_result res;
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  idem_result_clear(&res);
  wait_until(idem_now_ms() + 40);
  /* every scope, live only, scoped-key order */
  op = (idem_op){.kind = IDEM_OP_LIST};
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.count, 3);
  assert_string_equal(res.records[0].key, "a");
  assert_string_equal(res.records[0].scope, "");
  assert_string_equal(res.records[1].key, "b");
  assert_string_equal(res.records[2].scope, "tenant");
  idem_result_clear(&res);
  /* one scope, resuming after a key */
  op = (idem_op){.kind = IDEM_OP_LIST, .scope = "", .key = "a"};
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.count, 1);
  assert_string_equal(res.records[0].key, "b");
  idem_result_clear(&res);
  op = (idem_op){.kind = IDEM_OP_DELETE, .key = "b"};
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.count, 1);
  idem_result_clear(&res);
  assert_int_equal(idem_sync_run(s, &op, &res), IDEM_ENOTFOUND);
  idem_result_clear(&res);
  /* the index entry went with the record: gc finds only "c" */
  assert_int_equal(run_gc(s, 0), 1);
  idem_sync_close(s);
}

/* ---- processes sharing one store (and its log) ------------------------- */

/* Run this binary with args; returns its exit status. */
static int run_self(const char *const *args) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execv("/proc/self/exe", (char *const *)args);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* --guest PATH: what `idem keys` does against a served store. Every record
 * the owner acknowledged is there; one is deleted; one is added. */
static int guest_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 10;
  char key[32];
  for (int i = 0; i < 50; i++) {
    idem_state st;
    snprintf(key, sizeof key, "mp-%d", i);
    if (get_state(s, key, &st) || st != IDEM_STATE_COMPLETED)
      return 11;
  }
  idem_op op = {.kind = IDEM_OP_DELETE, .key = "mp-7"};
  idem_result res;
  if (idem_sync_run(s, &op, &res))
    return 12;
  idem_result_clear(&res);
  op = (idem_op){.kind = IDEM_OP_LIST, .limit = 1000};
  if (idem_sync_run(s, &op, &res) || res.count != 49)
    return 13;
  idem_result_clear(&res);
  if (put_completed(s, "mp-guest", "g", 1, TTL_LONG_MS))
    return 14;
  idem_sync_close(s);
  return 0;
}

/* --refuse PATH: a claim of "k" whose log flush fails (refused), then the
 * process dies as a SIGKILL leaves it: no close, nothing after it. */
static int refuse_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 30;
  _exit(claim_refused_by_a_failed_flush(s) ? 0 : 32);
}

/* --claim-k PATH: claim "k" once; exits 0 if it was handed to this process
 * with fence 1 (the key was unseen), else 40 + the outcome. */
static int claim_k_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 39;
  idem_op op = claim_op(NULL, "k", TTL_LONG_MS);
  idem_result res;
  if (idem_sync_run(s, &op, &res))
    return 38;
  int rc = res.outcome == IDEM_CLAIMED && res.fence == 1 ? 0 : 40 + (int)res.outcome;
  idem_result_clear(&res);
  idem_sync_close(s);
  return rc;
}

/* A refused batch (its flush failed) must not come back when no direct
 * commit followed it: neither for the next start after the process died,
 * nor for another process that takes the log over. The refused claim said
 * "not run": the key is unseen, not locked. */
static void a_refused_batch_does_not_come_back_at_the_next_owner(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  const char *refuse[] = {"lmdb_store", "--refuse", p, NULL};
  assert_int_equal(run_self(refuse), 0); /* died right after the refusal */
  const char *claim[] = {"lmdb_store", "--claim-k", p, NULL};
  assert_int_equal(run_self(claim), 0);

  /* the owner still runs; a guest takes the log over */
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  assert_true(claim_refused_by_a_failed_flush(s));
  assert_int_equal(run_self(claim), 0);
  idem_sync_close(s);
}

/* --claim-all PATH: claim mp-0..mp-39 once each; exits with how many were
 * handed to it. */
static int claim_all_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 200;
  int claimed = 0;
  char key[32];
  for (int i = 0; i < 40; i++) {
    snprintf(key, sizeof key, "mp-%d", i);
    idem_op op = claim_op(NULL, key, TTL_LONG_MS);
    idem_result res;
    if (idem_sync_run(s, &op, &res))
      return 201;
    claimed += res.outcome == IDEM_CLAIMED;
    idem_result_clear(&res);
  }
  idem_sync_close(s);
  return claimed;
}

static void a_second_process_sees_what_the_log_holds(void **state) {
  (void)state;
  char p[300], key[32];
  fresh_path(p, sizeof p);
  uv_loop_t loop; /* the owner: a store that stays open, as a gateway's */
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri_of(p, NULL), &store, NULL), 0);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  for (int i = 0; i < 50; i++) {
    snprintf(key, sizeof key, "mp-%d", i);
    assert_int_equal(put_completed(s, key, "b", 1, TTL_LONG_MS), 0);
  }
  idem_lmdb_stats st;
  assert_int_equal(idem_lmdb_stats_get(store, &st), 0);
  assert_int_equal(st.logged, 1);
  const char *args[] = {"lmdb_store", "--guest", p, NULL};
  assert_int_equal(run_self(args), 0);
  /* the owner took the log back and sees the guest's writes */
  idem_state state_;
  assert_int_equal(get_state(s, "mp-7", &state_), IDEM_ENOTFOUND);
  assert_int_equal(get_state(s, "mp-guest", &state_), 0);
  assert_int_equal(state_, IDEM_STATE_COMPLETED);
  assert_int_equal(get_state(s, "mp-8", &state_), 0);
  idem_sync_close(s);
  close_store_and_loop(store, &loop);
}

static void two_processes_claim_each_key_once(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0); /* creates it */
  idem_sync_close(s);
  const char *args[] = {"lmdb_store", "--claim-all", p, NULL};
  pid_t pids[2];
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      execv("/proc/self/exe", (char *const *)args);
      _exit(127);
    }
  }
  int total = 0;
  for (int i = 0; i < 2; i++) {
    int status;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 40);
    total += WEXITSTATUS(status);
  }
  assert_int_equal(total, 40);
}

/* --owner PATH: acknowledges 200 records, says so on stdout, and waits to
 * be killed (owning the log, LMDB behind it). */
static int owner_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 10;
  char key[32];
  for (int i = 0; i < 200; i++) {
    snprintf(key, sizeof key, "ko-%d", i);
    if (put_completed(s, key, key, strlen(key), TTL_LONG_MS))
      return 11;
  }
  if (write(1, "x", 1) != 1)
    return 12;
  for (;;)
    pause();
}

/* A child process running `lmdb_store MODE path` (--owner: owner_main,
 * --hammer: hammer_main), once it owns the log and says so. */
static pid_t start_child(const char *mode, const char *path) {
  int out[2];
  assert_int_equal(pipe(out), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl("/proc/self/exe", "lmdb_store", mode, path, (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  char c;
  assert_int_equal(read(out[0], &c, 1), 1);
  close(out[0]);
  return pid;
}

/* A process waiting as a guest when the owner dies takes the log over and
 * replays what LMDB lacked. */
static void a_guest_takes_over_from_a_killed_owner(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  pid_t pid = start_child("--owner", p);
  idem_sync *s; /* a guest: the child owns the log */
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_all_completed(s, "ko", 200);
  idem_sync_close(s);
}

/* An owner that is stopped (SIGSTOP, a Ctrl-Z'd `idem keys`) never hands
 * the log over: a guest's operation fails with IDEM_ETIMEDOUT after a
 * bounded wait instead of hanging, and goes through once the owner runs
 * again. */
static void a_stopped_owner_times_a_guest_out(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  pid_t pid = start_child("--owner", p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  assert_int_equal(kill(pid, SIGSTOP), 0);
  idem_op op = claim_op(NULL, "while-stopped", TTL_LONG_MS);
  idem_result res;
  assert_int_equal(idem_sync_run(s, &op, &res), IDEM_ETIMEDOUT);
  idem_result_clear(&res);
  assert_int_equal(kill(pid, SIGCONT), 0);
  assert_int_equal(idem_sync_run(s, &op, &res), 0);
  assert_int_equal(res.outcome, IDEM_CLAIMED);
  assert_int_equal(res.fence, 1);
  idem_result_clear(&res);
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_all_completed(s, "ko", 200);
  idem_sync_close(s);
}

/* --hammer PATH: claims distinct keys back to back, owning the log. */
static int hammer_main(const char *path) {
  idem_sync *s;
  if (idem_sync_open(uri_of(path, NULL), &s, NULL))
    return 10;
  if (write(1, "x", 1) != 1)
    return 12;
  char key[32];
  for (unsigned i = 0;; i++) {
    snprintf(key, sizeof key, "h-%u", i);
    idem_op op = claim_op(NULL, key, TTL_LONG_MS);
    idem_result res;
    if (idem_sync_run(s, &op, &res) == 0)
      idem_result_clear(&res);
  }
}

/* An owner busy with work hands the log over and must ask for it back
 * behind the guest that asked first: it never takes it straight back and
 * starves the guest into timeouts. */
static void a_busy_owner_does_not_starve_a_guest(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  pid_t pid = start_child("--hammer", p);
  idem_sync *s;
  assert_int_equal(idem_sync_open(uri_of(p, NULL), &s, NULL), 0);
  int claimed = 0;
  for (int i = 0; i < 8; i++) {
    char key[32];
    usleep(100000); /* long enough for the owner to have the log back */
    snprintf(key, sizeof key, "guest-%d", i);
    idem_op op = claim_op(NULL, key, TTL_LONG_MS);
    idem_result res;
    if (idem_sync_run(s, &op, &res) == 0) {
      claimed += res.outcome == IDEM_CLAIMED;
      idem_result_clear(&res);
    }
  }
  kill(pid, SIGKILL); /* before any assert: a failed one leaves no child behind */
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  idem_sync_close(s);
  assert_int_equal(claimed, 8);
}

/* log=off: no log file, every batch an LMDB commit, as before the log */
static void log_off_commits_each_batch_to_lmdb(void **state) {
  (void)state;
  char p[300], logpath[340];
  fresh_path(p, sizeof p);
  idem_lmdb_stats st;
  run_burst(uri_of(p, "log=off"), 64, "off", &st);
  assert_int_equal(st.logged, 0);
  assert_int_equal(st.checkpoints, 0);
  assert_int_equal(st.ops_written, 128);
  snprintf(logpath, sizeof logpath, "%s/idem.log", p);
  assert_int_equal(access(logpath, F_OK), -1);
  /* the log path: fewer flushes than operations */
  fresh_path(p, sizeof p);
  run_burst(uri_of(p, NULL), 64, "on", &st);
  assert_int_equal(st.logged, 1);
  assert_int_equal(st.ops_written, 128);
  assert_true(st.commits < 128);
}

/* ---- closing one of several handles on one environment ----------------- */

/* The writer thread finishes a req with idem_req_finish, which queues it and
 * wakes the handle's loop with uv_async_send. This test binary interposes
 * uv_async_send to hold back the writer's second wake-up of one handle (the
 * first wakes the loop) until that handle is gone, or 100 ms at most: a
 * send that is still to come when the loop has delivered every req, run
 * close_cb and freed the handle would touch freed memory. It is recorded
 * instead of made. */
static _Atomic(idem_store *) slow_store;
static pthread_t slow_loop_thread;
static atomic_int slow_sends, slow_holding, slow_freed, slow_late, slow_done;

static int64_t mono_ms(void) { return (int64_t)(uv_hrtime() / 1000000); }

int uv_async_send(uv_async_t *async) {
  static int (*real)(uv_async_t *);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "uv_async_send");
  idem_store *s = atomic_load(&slow_store);
  if (!s || async != &s->done_async || pthread_equal(pthread_self(), slow_loop_thread))
    return real(async);
  if (atomic_fetch_add(&slow_sends, 1) == 0)
    return real(async);
  atomic_store(&slow_holding, 1);
  int64_t until = mono_ms() + 100;
  while (!atomic_load(&slow_freed) && mono_ms() < until)
    sched_yield();
  int rc = 0;
  if (atomic_load(&slow_freed))
    atomic_store(&slow_late, 1); /* the handle is gone: do not touch it */
  else
    rc = real(async);
  atomic_store(&slow_done, 1);
  return rc;
}

static void closing_a_shared_handle_never_touches_it_afterwards(void **state) {
  (void)state;
  char p[300];
  fresh_path(p, sizeof p);
  /* log=off: a direct batch finishes its reqs one at a time (a log batch
   * hands each loop its results with one wake-up, sent before the unlock) */
  idem_sync *other; /* keeps the environment and its writer alive */
  assert_int_equal(idem_sync_open(uri_of(p, "log=off"), &other, NULL), 0);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  idem_store *store;
  assert_int_equal(idem_store_open(&loop, uri_of(p, "log=off"), &store, NULL), 0);
  slow_loop_thread = pthread_self();
  atomic_store(&slow_store, store);
  int results[2] = {1, 1};
  for (int i = 0; i < 2; i++) {
    char key[16];
    snprintf(key, sizeof key, "shared-%d", i);
    idem_op op = claim_op(NULL, key, TTL_LONG_MS);
    assert_int_equal(idem_store_submit(store, &op, on_result, &results[i]), 0);
  }
  int closed = 0;
  idem_store_close(store, on_closed, &closed); /* both claims still in flight */
  /* the writer has finished both, and holds back the second wake-up */
  int64_t deadline = mono_ms() + DEADLINE_MS;
  while (!atomic_load(&slow_holding) && mono_ms() < deadline)
    sched_yield();
  assert_true(atomic_load(&slow_holding));
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  atomic_store(&slow_freed, 1); /* close_cb has run and the handle is freed */
  while (!atomic_load(&slow_done) && mono_ms() < deadline)
    sched_yield();
  atomic_store(&slow_store, NULL);
  assert_int_equal(results[0], 0);
  assert_int_equal(results[1], 0);
  assert_int_equal(atomic_load(&slow_late), 0);
  assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(&loop), 0);
  idem_sync_close(other);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--hold-write-lock"))
    return hold_lock_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--guest"))
    return guest_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--claim-all"))
    return claim_all_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--refuse"))
    return refuse_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--claim-k"))
    return claim_k_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--owner"))
    return owner_main(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "--hammer"))
    return hammer_main(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bad_uris_are_refused),
      cmocka_unit_test(uncreatable_path_is_a_clear_error),
      cmocka_unit_test(create_no_opens_only_an_existing_store),
      cmocka_unit_test(foreign_files_are_not_stores),
      cmocka_unit_test(an_unfinished_creation_is_no_store),
      cmocka_unit_test(records_survive_a_reopen),
      cmocka_unit_test(a_refused_batch_is_never_replayed),
      cmocka_unit_test(a_refused_batch_does_not_come_back_at_the_next_owner),
      cmocka_unit_test(a_stopped_owner_times_a_guest_out),
      cmocka_unit_test(a_busy_owner_does_not_starve_a_guest),
      cmocka_unit_test(concurrent_writes_share_commits),
      cmocka_unit_test(zeroed_space_ahead_without_a_stat_per_commit),
      cmocka_unit_test(replays_do_not_go_through_the_writer),
      cmocka_unit_test(full_map_refuses_per_request),
      cmocka_unit_test(full_map_through_the_log),
      cmocka_unit_test(gc_deletes_expired_records_in_bounded_passes),
      cmocka_unit_test(sweeper_runs_in_the_background),
      cmocka_unit_test(gc_does_not_stall_claims),
      cmocka_unit_test(delete_and_list),
      cmocka_unit_test(closing_a_shared_handle_never_touches_it_afterwards),
      cmocka_unit_test(a_second_process_sees_what_the_log_holds),
      cmocka_unit_test(two_processes_claim_each_key_once),
      cmocka_unit_test(a_guest_takes_over_from_a_killed_owner),
      cmocka_unit_test(log_off_commits_each_batch_to_lmdb),
  };
  return cmocka_run_group_tests(tests, temp_root_setup, temp_root_teardown);
}
