/* route_match_bench.c - what finding a request's route costs, alone: the
 * per-request work the engine adds for per-route policy (a relaxed load of
 * the table's generation, a hold and a release of the table, and
 * gw_routes_match over the 10 routes of bench/routes_bench.sh, none of
 * which matches, so every glob is tried), against the same loop with no
 * routes (the defaults at once). Alternating rounds; prints ns per request
 * for each and their difference (median of the rounds).
 *
 * usage: route_match_bench [ROUNDS] [ITERATIONS]   (run by routes_bench.sh) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/route.c"

static const char *const globs[10] = {
    "/v1/payments/*", "/v1/orders", "/v1/charges/**", "/v1/jobs/*/run", "/v1/login",
    "/v1/transfers/**", "/v1/items/*", "/v2/**/refunds", "/internal/**", "/bench/*"};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile int sink;

/* ns per request of the engine's lookup on table t */
static double run(gw_routes *t, long iters) {
  static const char *const targets[] = {"/bench", "/bench?x=1", "/v1/other/path", "/api/x"};
  double t0 = now_ns();
  for (long i = 0; i < iters; i++) {
    const char *target = targets[i & 3];
    (void)gw_routes_generation();
    gw_routes *held = gw_routes_hold(t);
    sink += gw_routes_match(held, "POST", target, strlen(target))->index;
    gw_routes_release(held);
  }
  return (now_ns() - t0) / (double)iters;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  long iters = argc > 2 ? atol(argv[2]) : 2000000;
  gw_routes *none = gw_routes_new(0), *ten = gw_routes_new(10);
  for (int i = 0; i < 10; i++) {
    snprintf(ten->routes[i].path, sizeof ten->routes[i].path, "%s", globs[i]);
    ten->routes[i].index = i + 1;
  }
  snprintf(ten->routes[6].methods[0], 16, "PUT"); /* match: {methods: [PUT], ...} */
  ten->routes[6].nmethods = 1;
  double d0[64], d10[64], diff[64];
  if (rounds > 64)
    rounds = 64;
  run(ten, iters / 10); /* warm up */
  for (int r = 0; r < rounds; r++) {
    if (r % 2) {
      d10[r] = run(ten, iters);
      d0[r] = run(none, iters);
    } else {
      d0[r] = run(none, iters);
      d10[r] = run(ten, iters);
    }
    diff[r] = d10[r] - d0[r];
  }
  qsort(d0, (size_t)rounds, sizeof d0[0], cmp);
  qsort(d10, (size_t)rounds, sizeof d10[0], cmp);
  qsort(diff, (size_t)rounds, sizeof diff[0], cmp);
  printf("RESULT no_routes_ns %.1f ten_routes_ns %.1f added_ns %.1f\n", d0[rounds / 2],
         d10[rounds / 2], diff[rounds / 2]);
  gw_routes_release(none);
  gw_routes_release(ten);
  return 0;
}
