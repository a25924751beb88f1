/*
 * lookup.h - the numeric addresses a host-name lookup (uv_getaddrinfo)
 * gave, for the stores that look their server up off the event loop and
 * connect by address (redis.c, postgres.c).
 */
#ifndef IDEM_STORE_LOOKUP_H
#define IDEM_STORE_LOOKUP_H

#include <netdb.h>
#include <netinet/in.h>

typedef char idem_addr_text[INET6_ADDRSTRLEN];

/* The first max IPv4 and IPv6 addresses of ai, in its order, as text
 * ("127.0.0.1", "::1") into out; returns how many. */
int idem_lookup_addresses(const struct addrinfo *ai, idem_addr_text *out, int max);

#endif
