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

/* Runs on the loop with the lookup's outcome (status: 0 or a libuv error);
 * ai is freed after it returns. */
typedef void (*idem_lookup_cb)(void *owner, int status, const struct addrinfo *ai);

/* Look host up on the thread pool (any family, TCP). Returns 0, or a
 * negative libuv error and then cb never runs. */
int idem_lookup_start(uv_loop_t *loop, const char *host, idem_lookup_cb cb, void *owner);

/* The first max IPv4 and IPv6 addresses of ai, in its order, as text
 * ("127.0.0.1", "::1") into out; returns how many. */
int idem_lookup_addresses(const struct addrinfo *ai, idem_addr_text *out, int max);

#endif
