/* lookup.c - see lookup.h. */
#include "store/lookup.h"

#include <stdlib.h>

typedef struct {
  uv_getaddrinfo_t req;
  idem_lookup_cb cb;
  void *owner;
} lookup;

static void on_lookup(uv_getaddrinfo_t *req, int status, struct addrinfo *ai) {
  lookup *l = req->data;
  l->cb(l->owner, status, ai);
  uv_freeaddrinfo(ai);
  free(l);
}

int idem_lookup_start(uv_loop_t *loop, const char *host, idem_lookup_cb cb, void *owner) {
  lookup *l = calloc(1, sizeof *l);
  if (!l)
    return UV_ENOMEM;
  l->req.data = l;
  l->cb = cb;
  l->owner = owner;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  int rc = uv_getaddrinfo(loop, &l->req, on_lookup, host, NULL, &hints);
  if (rc < 0)
    free(l);
  return rc;
}

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
