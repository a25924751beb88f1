/*
 * pg_bench.c - claim+complete throughput of the PostgreSQL store.
 *
 *   pg_bench run URI [IN_FLIGHT] [SECONDS] [REPLAY_KEYS]
 *       one loop, one store handle (its pool: pool=N in URI), keeps
 *       IN_FLIGHT claim+complete pairs in flight, each on a fresh key, for
 *       SECONDS. Prints one line of key=value figures: pairs per second and
 *       the latency of a pair (p50, p99). With REPLAY_KEYS, the keys go
 *       round that many (replay-0 ...): once they are completed every claim
 *       is a replay, and a "pair" is that one claim.
 *   pg_bench script
 *       prints a pgbench script running the very statements the store
 *       prepares (claim, then complete of a fresh key), so that
 *       bench/pg_bench.sh can time them with pgbench on the same server.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

#include "pairs.h"
#include "idem/idem.h"
#include "store/postgres.h"

static const char body[] = "{\"ok\":true,\"id\":\"bench\"}";

static void on_closed(idem_store *s, void *arg) {
  (void)s;
  *(int *)arg = 1;
}

static int run(const char *uri, int in_flight, double secs, uint64_t replay_keys) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  pair_loop b = {.scope = "bench", .ttl_ms = 24 * 3600 * 1000, .body = body};
  b.replay_keys = replay_keys;
  if (replay_keys)
    snprintf(b.prefix, sizeof b.prefix, "replay");
  else
    snprintf(b.prefix, sizeof b.prefix, "r%lld", (long long)idem_now_ms());
  char *msg = NULL;
  int err = idem_store_open(&loop, uri, &b.store, &msg);
  if (err) {
    fprintf(stderr, "pg_bench: %s: %s\n", idem_strerror(err), msg ? msg : "");
    free(msg);
    return 1;
  }
  pair *pairs = calloc((size_t)in_flight, sizeof *pairs);
  int64_t t0 = mono_ns();
  b.end_ns = t0 + (int64_t)(secs * 1e9);
  pairs_start(&b, pairs, in_flight);
  while (!b.stopping || b.outstanding > 0)
    uv_run(&loop, UV_RUN_ONCE);
  double elapsed = (double)(mono_ns() - t0) / 1e9;
  int closed = 0;
  idem_store_close(b.store, on_closed, &closed);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  latencies_sort(&b.lat);
  const char *pool = strstr(uri, "pool="), *batch = strstr(uri, "batch=");
  printf("tool=idem mode=%s pool=%d batch=%d in_flight=%d pairs=%llu errors=%llu seconds=%.2f "
         "pairs_per_sec=%.0f p50_ms=%.2f p99_ms=%.2f\n",
         replay_keys ? "replay" : "unique", pool ? atoi(pool + 5) : 2, batch ? atoi(batch + 6) : 64, in_flight, (unsigned long long)b.done,
         (unsigned long long)b.errors, elapsed, (double)b.done / elapsed, latencies_ms(&b.lat, 0.50),
         latencies_ms(&b.lat, 0.99));
  free(b.lat.v);
  free(pairs);
  return b.errors ? 1 : 0;
}

/* The store's statement with its $N parameters replaced by pgbench text. */
static void print_statement(idem_pg_stmt stmt, const char *const *args) {
  for (const char *p = idem_pg_statements[stmt].sql; *p; p++) {
    if (*p == '$' && p[1] >= '1' && p[1] <= '9') {
      fputs(args[p[1] - '1'], stdout);
      p++;
    } else {
      putchar(*p);
    }
  }
  puts(";");
}

/* bytes as a bytea hex literal: pgbench would take ":name" inside a string
 * literal for a variable */
static char *hex_literal(const char *bytes, size_t n) {
  char *out = malloc(2 * n + 16);
  char *p = out + sprintf(out, "'\\x");
  for (size_t i = 0; i < n; i++)
    p += sprintf(p, "%02x", (unsigned char)bytes[i]);
  strcpy(p, "'::bytea");
  return out;
}

static void script(void) {
  static const char headers[] = "Content-Type: application/json\r\n"; /* as pairs.h's */
  char *h = hex_literal(headers, sizeof headers - 1), *b = hex_literal(body, sizeof body - 1);
  /* a fresh key per transaction: client id and a random 48-bit number */
  const char *const claim[] = {
      "'bench'", "('p' || :client_id::text || '-' || :n::text)",
      "'\\x0001020304050607080910111213141516171819202122232425262728293031'::bytea",
      "30000", "86400000", "false"};
  const char *const complete[] = {
      "'bench'", "('p' || :client_id::text || '-' || :n::text)", "1", "86400000", "2", "200",
      h, b};
  puts("\\set n random(1, 281474976710655)");
  print_statement(IDEM_PG_CLAIM, claim);
  print_statement(IDEM_PG_FINISH, complete);
  free(h);
  free(b);
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "script")) {
    script();
    return 0;
  }
  if (argc < 3 || strcmp(argv[1], "run")) {
    fprintf(stderr, "usage: pg_bench run URI [IN_FLIGHT] [SECONDS] [REPLAY_KEYS] | pg_bench script\n");
    return 2;
  }
  int in_flight = argc > 3 ? atoi(argv[3]) : 64;
  double secs = argc > 4 ? atof(argv[4]) : 5;
  if (in_flight < 1 || secs <= 0) {
    fprintf(stderr, "pg_bench: IN_FLIGHT and SECONDS must be positive\n");
    return 2;
  }
  uint64_t replay_keys = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
  return run(argv[2], in_flight, secs, replay_keys);
}
