/*
 * redis_bench.c - claim+complete throughput of the Redis store (redis://
 * or redis+cluster://).
 *
 *   redis_bench URI [THREADS] [IN_FLIGHT] [SECONDS]
 *       THREADS loops, each with its own store handle (one connection),
 *       keep IN_FLIGHT claim+complete pairs in flight, each on a fresh key,
 *       for SECONDS. Prints one line of key=value figures: pairs and script
 *       calls per second, and the latency of a pair (p50, p99).
 *   redis_bench script
 *       prints the Lua script the store runs (for redis-cli SCRIPT LOAD), so
 *       that bench/redis_bench.sh can time the same script with
 *       redis-benchmark.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "pairs.h"
#include "idem/idem.h"
#include "store/redis.h"

typedef struct {
  const char *uri;
  int id, in_flight;
  uv_loop_t loop;
  pair_loop pl;
  pair *pairs;
} worker;

static const char body[] = "{\"ok\":true,\"id\":\"bench\"}";

static void close_store(pair_loop *l) { idem_store_close(l->store, NULL, NULL); }

static void *run_worker(void *arg) {
  worker *w = arg;
  uv_loop_init(&w->loop);
  char *msg = NULL;
  if (idem_store_open(&w->loop, w->uri, &w->pl.store, &msg)) {
    fprintf(stderr, "redis_bench: cannot open %s: %s\n", w->uri, msg ? msg : "");
    exit(1);
  }
  w->pairs = calloc((size_t)w->in_flight, sizeof *w->pairs);
  pairs_start(&w->pl, w->pairs, w->in_flight);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  uv_loop_close(&w->loop);
  free(w->pairs);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "script")) {
    fwrite(idem_redis_script, 1, idem_redis_script_len, stdout);
    return 0;
  }
  if (argc < 2 || (strncmp(argv[1], "redis://", 8) && strncmp(argv[1], "redis+cluster://", 16))) {
    fprintf(stderr, "usage: redis_bench URI [THREADS] [IN_FLIGHT] [SECONDS] | redis_bench script\n");
    return 2;
  }
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  int in_flight = argc > 3 ? atoi(argv[3]) : 64;
  double seconds = argc > 4 ? atof(argv[4]) : 5;
  if (threads < 1 || in_flight < 1 || seconds <= 0) {
    fprintf(stderr, "redis_bench: THREADS, IN_FLIGHT and SECONDS must be positive\n");
    return 2;
  }
  worker *ws = calloc((size_t)threads, sizeof *ws);
  pthread_t *th = calloc((size_t)threads, sizeof *th);
  int64_t start = mono_ns();
  for (int i = 0; i < threads; i++) {
    ws[i] = (worker){.uri = argv[1], .id = i, .in_flight = in_flight,
                     .pl = {.ttl_ms = 3600 * 1000, .body = body, .on_end = close_store,
                            .end_ns = start + (int64_t)(seconds * 1e9)}};
    snprintf(ws[i].pl.prefix, sizeof ws[i].pl.prefix, "bench-%d-%d", (int)getpid(), i);
    pthread_create(&th[i], NULL, run_worker, &ws[i]);
  }
  uint64_t done = 0, errors = 0;
  latencies lat = {0};
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    done += ws[i].pl.done;
    errors += ws[i].pl.errors;
    latencies_take(&lat, &ws[i].pl.lat);
  }
  double secs = (double)(mono_ns() - start) / 1e9;
  latencies_sort(&lat);
  double p50 = latencies_ms(&lat, 0.50), p99 = latencies_ms(&lat, 0.99);
  printf("threads=%d in_flight=%d seconds=%.2f pairs=%llu errors=%llu pairs_per_sec=%.0f "
         "scripts_per_sec=%.0f pair_p50_ms=%.3f pair_p99_ms=%.3f\n",
         threads, in_flight, secs, (unsigned long long)done, (unsigned long long)errors,
         (double)done / secs, 2.0 * (double)done / secs, p50, p99);
  free(lat.v);
  free(ws);
  free(th);
  return errors ? 1 : 0;
}
