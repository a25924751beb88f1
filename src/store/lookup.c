/* lookup.c - see lookup.h. */
#include "store/lookup.h"

#include <uv.h>

int idem_lookup_addresses(const struct addrinfo *ai, idem_addr_text *out, int max) {
  int n = 0;
  for (; ai && n < max; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET)
      uv_ip4_name((const struct sockaddr_in *)ai->ai_addr, out[n], sizeof out[n]);
    else if (ai->ai_family == AF_INET6)
      uv_ip6_name((const struct sockaddr_in6 *)ai->ai_addr, out[n], sizeof out[n]);
    else
      continue;
    n++;
  }
  return n;
}
