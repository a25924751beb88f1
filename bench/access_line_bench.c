/*
 * access_line_bench.c - what one access log line costs a worker, without
 * the network's noise: format N typical lines into a worker buffer, writing
 * it whole every 64 KiB (as access_log.c does) to /dev/null, and print the
 * nanoseconds per line.
 *
 *   access_line_bench [N]      one line: "RESULT ns_per_line=... bytes_per_line=..."
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* the gateway is not in libidem: compile the pieces in */
#include "http/access_log.c"
#include "http/msg.c"
#include "http/policy.c"
#include "http/route.c"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 2000000;
  int fd = open("/dev/null", O_WRONLY);
  gw_buf b = {0};
  static const char target[] = "/v1/payments/pay_8f3k2?expand=customer";
  gw_access_entry e = {.time_ms = 1795833600123, .method = "POST", .target = target,
                       .target_len = sizeof target - 1, .route = 1, .key = "order-4711-attempt",
                       .scope = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                       .outcome = "executed", .fence = 3, .status = 201, .upstream_us = 3399,
                       .total_us = 6143};
  size_t bytes = 0;
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    e.time_ms += 1;
    if (gw_access_line(&b, &e))
      return 1;
    if (b.len >= 64 * 1024) {
      bytes += b.len;
      if (write(fd, b.p, b.len) < 0)
        return 1;
      b.len = 0;
    }
  }
  double t = now_ns() - t0;
  bytes += b.len;
  printf("RESULT ns_per_line=%.1f bytes_per_line=%.0f lines=%ld\n", t / (double)n,
         (double)bytes / (double)n, n);
  gw_buf_free(&b);
  close(fd);
  return 0;
}
