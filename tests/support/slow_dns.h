/*
 * slow_dns.h - getaddrinfo interposed for the store tests that check host
 * names are looked up off the event loop (link slow_dns.c into the test).
 *
 * While watching, a lookup of "localhost" takes 300 ms (a slow DNS server;
 * slow_dns_delay changes it until the next slow_dns_watch)
 * and is counted, with whether it ran on the given loop thread. Always:
 * "idem-test-unresolvable" fails at once with EAI_NONAME, and
 * "idem-test-two-addrs" has two addresses, 127.0.0.2 (where nothing
 * listens, so a connection is refused, unless slow_dns_silent_first) then
 * 127.0.0.1. Every other lookup goes to the C library.
 */
#ifndef IDEM_TEST_SLOW_DNS_H
#define IDEM_TEST_SLOW_DNS_H

#include <pthread.h>

void slow_dns_watch(pthread_t loop_thread);
void slow_dns_delay(int ms); /* how long a watched lookup takes (300 ms) */
void slow_dns_stop(void);
int slow_dns_lookups(void);         /* of "localhost" since slow_dns_watch */
int slow_dns_lookups_on_loop(void); /* of those, run on the loop thread */
int slow_dns_most_at_once(void);    /* of those, the most out at one time */

/* Make 127.0.0.2:port, the first address of "idem-test-two-addrs", a hung
 * server: a listener that never accepts, so the kernel completes the
 * connections and nobody ever answers on them. Returns its descriptor, to
 * close when done. */
int slow_dns_silent_first(int port);

#endif
