/* time.c - the local store clock, and the duration and size syntax of every
 * command-line flag and URI option. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idem/idem.h"

int64_t idem_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Split "123unit" into a number and its unit; the number must be a plain
 * non-negative decimal integer. */
static int parse_number_unit(const char *text, uint64_t *n, const char **unit) {
  if (!text || *text < '0' || *text > '9')
    return IDEM_EINVAL;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno)
    return IDEM_EINVAL;
  *n = v;
  *unit = end;
  return 0;
}

static int scale(uint64_t n, uint64_t factor, uint64_t limit, uint64_t *out) {
  if (n > limit / factor)
    return IDEM_EINVAL;
  *out = n * factor;
  return 0;
}

int idem_parse_duration(const char *text, int64_t *ms) {
  static const struct {
    const char *unit;
    uint64_t ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  uint64_t n, v;
  const char *unit;
  if (!ms || parse_number_unit(text, &n, &unit))
    return IDEM_EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(unit, units[i].unit))
      continue;
    /* bound at ~100 years so that now + duration never overflows */
    if (scale(n, units[i].ms, 3155760000000ull, &v) || v == 0)
      return IDEM_EINVAL;
    *ms = (int64_t)v;
    return 0;
  }
  return IDEM_EINVAL;
}

int idem_parse_size(const char *text, uint64_t *bytes) {
  static const struct {
    const char *unit;
    uint64_t factor;
  } units[] = {{"", 1},           {"B", 1},
               {"k", 1ull << 10}, {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"KB", 1000},
               {"M", 1ull << 20}, {"MiB", 1ull << 20}, {"MB", 1000000},
               {"G", 1ull << 30}, {"GiB", 1ull << 30}, {"GB", 1000000000},
               {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1000000000000ull}};
  uint64_t n;
  const char *unit;
  if (!bytes || parse_number_unit(text, &n, &unit))
    return IDEM_EINVAL;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(unit, units[i].unit))
      return scale(n, units[i].factor, UINT64_MAX, bytes);
  return IDEM_EINVAL;
}
