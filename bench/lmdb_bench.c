/*
 * lmdb_bench.c - durable claim+complete throughput of the LMDB store.
 *
 *   lmdb_bench group  DIR [CONCURRENCY] [SECONDS]   lmdb:DIR (the log: a flush per batch)
 *   lmdb_bench direct DIR [CONCURRENCY] [SECONDS]   lmdb:DIR?log=off (an LMDB commit per batch)
 *   lmdb_bench single DIR [CONCURRENCY] [SECONDS]   lmdb:DIR?log=off&batch=1 (a commit per operation)
 *   lmdb_bench fsync  DIR [SECONDS]                 write 4 KiB + fdatasync in a loop
 *   lmdb_bench URI    -   [CONCURRENCY] [SECONDS]   any store URI
 *
 * The store modes keep CONCURRENCY claim+complete pairs in flight on one
 * loop, each on a fresh key, for SECONDS, and print one line of key=value
 * figures: pairs per second, durable batches (log flushes or commits),
 * operations per batch, LMDB checkpoints behind the log, the latency of a
 * pair, and the device's flushes per acknowledged operation where the
 * kernel counts them. bench/lmdb_bench.sh runs them side by side.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "idem/idem.h"
#include "store/lmdb.h"

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the disk's own counters ------------------------------------------ */

typedef struct {
  unsigned long long writes, sectors, flushes;
} dev_io;

/* Write requests, sectors written and flushes so far on the block device
 * holding dir (/sys/dev/block/MAJ:MIN/stat); 0 when the kernel does not say
 * (overlay and other virtual file systems). They count every process's I/O
 * on that device, so they mean something on an otherwise quiet disk. */
static int dev_io_read(const char *dir, dev_io *io) {
  struct stat st;
  char path[128];
  unsigned long long f[17] = {0};
  if (stat(dir, &st))
    return 0;
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u/stat", major(st.st_dev), minor(st.st_dev));
  FILE *fp = fopen(path, "r");
  if (!fp)
    return 0;
  int n = 0;
  while (n < 17 && fscanf(fp, "%llu", &f[n]) == 1)
    n++;
  fclose(fp);
  if (n < 17)
    return 0;
  /* fields 5, 7 and 16 (1-based): write I/Os, sectors written, flush I/Os */
  io->writes = f[4];
  io->sectors = f[6];
  io->flushes = f[15];
  return 1;
}

/* What the device did per unit of work (a sync, a commit) since before. */
static void dev_io_print(const char *dir, const dev_io *before, unsigned long long n) {
  dev_io now;
  if (!n || !dev_io_read(dir, &now))
    return;
  double per = 1.0 / (double)n;
  printf(" dev_writes=%.1f dev_kb=%.1f dev_flushes=%.2f", (double)(now.writes - before->writes) * per,
         (double)(now.sectors - before->sectors) / 2 * per,
         (double)(now.flushes - before->flushes) * per);
}

/* ---- raw fsync rate ---------------------------------------------------- */

static int run_fsync(const char *dir, double seconds) {
  char path[4096];
  snprintf(path, sizeof path, "%s/fsync.dat", dir);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0)
    return perror(path), 1;
  static char block[4096];
  memset(block, 'f', sizeof block);
  /* a few blocks, rewritten in turn: the file's size stays put, as LMDB's
   * meta pages do, so fdatasync flushes data, not metadata */
  for (int i = 0; i < 16; i++)
    if (pwrite(fd, block, sizeof block, (off_t)i * 4096) != (ssize_t)sizeof block)
      return perror("pwrite"), 1;
  fsync(fd);
  dev_io io0;
  int has_io = dev_io_read(dir, &io0);
  int64_t start = mono_ns(), end = start + (int64_t)(seconds * 1e9), now;
  uint64_t n = 0;
  do {
    if (pwrite(fd, block, sizeof block, (off_t)(n % 16) * 4096) != (ssize_t)sizeof block ||
        fdatasync(fd))
      return perror("write+fdatasync"), 1;
    n++;
  } while ((now = mono_ns()) < end);
  double secs = (double)(now - start) / 1e9;
  printf("mode=fsync syncs=%llu seconds=%.2f syncs_per_sec=%.0f", (unsigned long long)n, secs,
         (double)n / secs);
  if (has_io)
    dev_io_print(dir, &io0, n);
  printf("\n");
  close(fd);
  unlink(path);
  return 0;
}

/* ---- claim+complete pairs ---------------------------------------------- */

typedef struct bench bench;

typedef struct {
  bench *b;
  char key[48];
  int64_t started;
} slot;

struct bench {
  idem_store *store;
  int64_t end_ns;
  unsigned long next_key;
  uint64_t pairs;
  int active;
  int failed;
  int64_t *lat; /* pair latencies, ns */
  size_t nlat, caplat;
};

static const char body[] = "{\"id\":12345,\"status\":\"accepted\",\"amount\":\"42.00\"}";

static void start_pair(slot *s);

static void on_complete(idem_store *store, const idem_result *res, void *arg) {
  (void)store;
  slot *s = arg;
  bench *b = s->b;
  if (res->err) {
    fprintf(stderr, "complete: %s\n", idem_strerror(res->err));
    b->failed = 1;
  }
  b->pairs++;
  if (b->nlat < b->caplat)
    b->lat[b->nlat++] = mono_ns() - s->started;
  start_pair(s);
}

static void on_claim(idem_store *store, const idem_result *res, void *arg) {
  slot *s = arg;
  if (res->err || res->outcome != IDEM_CLAIMED) {
    fprintf(stderr, "claim: %s\n", res->err ? idem_strerror(res->err) : idem_outcome_name(res->outcome));
    s->b->failed = 1;
    s->b->active--;
    return;
  }
  idem_op op = {.kind = IDEM_OP_COMPLETE, .key = s->key, .fence = res->fence, .ttl_ms = 86400000};
  op.response.status = 201;
  op.response.headers = "Content-Type: application/json\r\n";
  op.response.headers_len = strlen(op.response.headers);
  op.response.body = body;
  op.response.body_len = sizeof body - 1;
  if (idem_store_submit(store, &op, on_complete, s)) {
    s->b->failed = 1;
    s->b->active--;
  }
}

static void start_pair(slot *s) {
  bench *b = s->b;
  if (b->failed || mono_ns() >= b->end_ns) {
    b->active--;
    return;
  }
  snprintf(s->key, sizeof s->key, "bench-%lu", b->next_key++);
  idem_op op = {.kind = IDEM_OP_CLAIM, .key = s->key, .lease_ms = 30000, .ttl_ms = 86400000};
  idem_fingerprint("POST", "/payments", body, sizeof body - 1, 0, op.fingerprint);
  op.fingerprint[0] ^= (uint8_t)b->next_key; /* a distinct request per key */
  s->started = mono_ns();
  if (idem_store_submit(b->store, &op, on_claim, s)) {
    b->failed = 1;
    b->active--;
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static void on_closed(idem_store *store, void *arg) {
  (void)store;
  *(int *)arg = 1;
}

static int run_store(const char *mode, const char *uri, const char *dir, int concurrency,
                     double seconds) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  bench b = {0};
  char *msg = NULL;
  int err = idem_store_open(&loop, uri, &b.store, &msg);
  if (err) {
    fprintf(stderr, "open %s: %s\n", uri, msg ? msg : idem_strerror(err));
    return 1;
  }
  b.caplat = 1u << 22;
  b.lat = malloc(b.caplat * sizeof *b.lat);
  slot *slots = calloc((size_t)concurrency, sizeof *slots);
  if (!b.lat || !slots)
    return 1;
  idem_lmdb_stats before = {0}, after = {0};
  int is_lmdb = idem_lmdb_stats_get(b.store, &before) == 0;
  dev_io io0;
  int has_io = dir && dev_io_read(dir, &io0);
  int64_t start = mono_ns();
  b.end_ns = start + (int64_t)(seconds * 1e9);
  b.active = concurrency;
  for (int i = 0; i < concurrency; i++) {
    slots[i].b = &b;
    start_pair(&slots[i]);
  }
  while (b.active > 0)
    uv_run(&loop, UV_RUN_ONCE);
  double secs = (double)(mono_ns() - start) / 1e9;
  if (is_lmdb)
    idem_lmdb_stats_get(b.store, &after);
  int closed = 0;
  idem_store_close(b.store, on_closed, &closed);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  uv_loop_close(&loop);

  qsort(b.lat, b.nlat, sizeof *b.lat, cmp_i64);
  double p50 = b.nlat ? (double)b.lat[b.nlat / 2] / 1e6 : 0;
  double p99 = b.nlat ? (double)b.lat[b.nlat * 99 / 100] / 1e6 : 0;
  uint64_t commits = after.commits - before.commits;
  uint64_t written = after.ops_written - before.ops_written;
  double per = commits ? 1.0 / (double)commits : 0; /* per commit */
  printf("mode=%s concurrency=%d pairs=%llu seconds=%.2f pairs_per_sec=%.0f "
         "commits=%llu ops_per_commit=%.1f commit_ms=%.3f in_commit_ms=%.3f apply_ms=%.3f "
         "handback_ms=%.3f max_batch=%llu p50_ms=%.2f p99_ms=%.2f",
         mode, concurrency, (unsigned long long)b.pairs, secs, (double)b.pairs / secs,
         (unsigned long long)commits, (double)written * per, secs * 1000 * per,
         (double)(after.commit_us - before.commit_us) / 1000 * per,
         (double)(after.apply_us - before.apply_us) / 1000 * per,
         (double)(after.handback_us - before.handback_us) / 1000 * per,
         (unsigned long long)after.max_batch, p50, p99);
  printf(" checkpoints=%llu", (unsigned long long)(after.checkpoints - before.checkpoints));
  if (has_io) {
    dev_io_print(dir, &io0, commits);
    dev_io now;
    if (written && dev_io_read(dir, &now))
      printf(" dev_flushes_per_op=%.4f", (double)(now.flushes - io0.flushes) / (double)written);
  }
  printf("\n");
  free(b.lat);
  free(slots);
  return b.failed;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: lmdb_bench group|single DIR [CONCURRENCY] [SECONDS]\n"
                    "       lmdb_bench fsync DIR [SECONDS]\n"
                    "       lmdb_bench URI - [CONCURRENCY] [SECONDS]\n");
    return 2;
  }
  const char *mode = argv[1], *dir = argv[2];
  if (!strcmp(mode, "fsync"))
    return run_fsync(dir, argc > 3 ? atof(argv[3]) : 5);
  int concurrency = argc > 3 ? atoi(argv[3]) : 64;
  double seconds = argc > 4 ? atof(argv[4]) : 5;
  if (concurrency < 1 || seconds <= 0)
    return fprintf(stderr, "bad concurrency or seconds\n"), 2;
  char uri[4096];
  if (!strcmp(mode, "group"))
    snprintf(uri, sizeof uri, "lmdb:%s", dir);
  else if (!strcmp(mode, "direct"))
    snprintf(uri, sizeof uri, "lmdb:%s?log=off", dir);
  else if (!strcmp(mode, "single"))
    snprintf(uri, sizeof uri, "lmdb:%s?log=off&batch=1", dir);
  else
    snprintf(uri, sizeof uri, "%s", mode);
  return run_store(mode, uri, strcmp(dir, "-") ? dir : NULL, concurrency, seconds);
}
