/*
 * lookup.h - host-name lookups on libuv's thread pool, and the numeric
 * addresses they gave, for the stores that look their server up off the
 * event loop and connect by address (redis.c, postgres.c).
 */
#ifndef IDEM_STORE_LOOKUP_H
#define IDEM_STORE_LOOKUP_H

#include <netdb.h>
#include <netinet/in.h>

#include <uv.h>

typedef char idem_addr_text[INET6_ADDRSTRLEN];

#define IDEM_LOOKUP_MAX 8 /* addresses of a host name tried per connection attempt */

/* Runs on the loop with the lookup's outcome (status: 0 or a libuv error);
 * ai is freed after it returns. */
typedef void (*idem_lookup_cb)(void *owner, int status, const struct addrinfo *ai);

/* Look host up on the thread pool (any family, TCP). Returns 0, or a
 * negative libuv error and then cb never runs. */
int idem_lookup_start(uv_loop_t *loop, const char *host, idem_lookup_cb cb, void *owner);

/* The first max IPv4 and IPv6 addresses of ai, in its order, as text
 * ("127.0.0.1", "::1") into out; returns how many. */
int idem_lookup_addresses(const struct addrinfo *ai, idem_addr_text *out, int max);

/* Addresses whose connection attempt timed out: a host that drops packets,
 * or a server that takes the connection and never answers. Without this,
 * every attempt would start with the same dead first address and time out
 * there, however many good ones follow. They are tried after the others,
 * the one that timed out longest ago first, until one of them answers. */
typedef struct {
  idem_addr_text addr[IDEM_LOOKUP_MAX];
  int n;
} idem_slow_addrs;

/* addr timed out: it goes to the end of the list (the oldest drops out when full). */
void idem_slow_addrs_note(idem_slow_addrs *s, const char *addr);
/* addr answered: it is tried in its own turn again. */
void idem_slow_addrs_forget(idem_slow_addrs *s, const char *addr);
/* The order to try addrs[0..n) in: order[k] is the index of the k-th. The
 * ones not in s keep their order, then come those in s, in its order. */
void idem_slow_addrs_order(const idem_slow_addrs *s, const char *const *addrs, int n,
                           int *order);
/* Reorder addrs[0..n) (n <= IDEM_LOOKUP_MAX) in that order. */
void idem_slow_addrs_last(const idem_slow_addrs *s, idem_addr_text *addrs, int n);

#endif
