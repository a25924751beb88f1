/* slow_dns.c - see slow_dns.h. */
#include "slow_dns.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_int watching, lookups, lookups_on_loop, out_now, most_at_once;
static atomic_int delay_ms = 300;
static pthread_t loop;

void slow_dns_watch(pthread_t loop_thread) {
  loop = loop_thread;
  atomic_store(&lookups, 0);
  atomic_store(&lookups_on_loop, 0);
  atomic_store(&most_at_once, 0);
  atomic_store(&delay_ms, 300);
  atomic_store(&watching, 1);
}

void slow_dns_delay(int ms) { atomic_store(&delay_ms, ms); }

void slow_dns_stop(void) { atomic_store(&watching, 0); }

int slow_dns_lookups(void) { return atomic_load(&lookups); }

int slow_dns_lookups_on_loop(void) { return atomic_load(&lookups_on_loop); }

int slow_dns_most_at_once(void) { return atomic_load(&most_at_once); }

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
  static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
  if (node && strcmp(node, "idem-test-unresolvable") == 0)
    return EAI_NONAME;
  if (node && strcmp(node, "idem-test-two-addrs") == 0) {
    /* two lists from the C library, chained: freeaddrinfo frees both */
    struct addrinfo h = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                         .ai_flags = AI_NUMERICHOST};
    if (hints)
      h.ai_socktype = hints->ai_socktype, h.ai_protocol = hints->ai_protocol;
    struct addrinfo *first, *second;
    int rc = real("127.0.0.2", service, &h, &first);
    if (rc)
      return rc;
    if ((rc = real("127.0.0.1", service, &h, &second))) {
      freeaddrinfo(first);
      return rc;
    }
    struct addrinfo *last = first;
    while (last->ai_next)
      last = last->ai_next;
    last->ai_next = second;
    *res = first;
    return 0;
  }
  if (atomic_load(&watching) && node) {
    if (strcmp(node, "localhost") == 0) {
      atomic_fetch_add(&lookups, 1);
      if (pthread_equal(pthread_self(), loop))
        atomic_fetch_add(&lookups_on_loop, 1);
      int now = atomic_fetch_add(&out_now, 1) + 1, most = atomic_load(&most_at_once);
      while (now > most && !atomic_compare_exchange_weak(&most_at_once, &most, now))
        ;
      usleep((useconds_t)atomic_load(&delay_ms) * 1000);
      atomic_fetch_sub(&out_now, 1);
    }
  }
  return real(node, service, hints, res);
}

int slow_dns_silent_first(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (fd < 0 || inet_pton(AF_INET, "127.0.0.2", &sa.sin_addr) != 1 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16)) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return fd;
}
