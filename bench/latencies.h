/* latencies.h - a growing array of latencies (microseconds) for the bench
 * drivers, sorted once at the end for quantiles. Header-only: each driver
 * is one executable. */
#ifndef IDEM_BENCH_LATENCIES_H
#define IDEM_BENCH_LATENCIES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t *v;
  size_t n, cap;
} latencies;

static inline void latencies_add(latencies *l, int64_t us) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 65536;
    l->v = realloc(l->v, l->cap * sizeof *l->v);
    if (!l->v)
      abort();
  }
  l->v[l->n++] = us;
}

/* Append from's values to l, and free from's. */
static inline void latencies_take(latencies *l, latencies *from) {
  for (size_t i = 0; i < from->n; i++)
    latencies_add(l, from->v[i]);
  free(from->v);
  memset(from, 0, sizeof *from);
}

static int latencies_cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static inline void latencies_sort(latencies *l) {
  if (l->n)
    qsort(l->v, l->n, sizeof *l->v, latencies_cmp);
}

/* Quantile q (0..1) of sorted l, in milliseconds; 0 when empty. */
static inline double latencies_ms(const latencies *l, double q) {
  return l->n ? (double)l->v[(size_t)(q * (double)(l->n - 1))] / 1000.0 : 0;
}

#endif
