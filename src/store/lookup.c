/* lookup.c - see lookup.h. */
#include "store/lookup.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

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

static int slow_index(const idem_slow_addrs *s, const char *addr) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->addr[i], addr) == 0)
      return i;
  return -1;
}

void idem_slow_addrs_forget(idem_slow_addrs *s, const char *addr) {
  int i = slow_index(s, addr);
  if (i < 0)
    return;
  memmove(s->addr[i], s->addr[i + 1], (size_t)(s->n - i - 1) * sizeof s->addr[0]);
  s->n--;
}

void idem_slow_addrs_note(idem_slow_addrs *s, const char *addr) {
  idem_slow_addrs_forget(s, addr);
  if (s->n == IDEM_LOOKUP_MAX)
    idem_slow_addrs_forget(s, s->addr[0]);
  snprintf(s->addr[s->n++], sizeof s->addr[0], "%s", addr);
}

void idem_slow_addrs_order(const idem_slow_addrs *s, const char *const *addrs, int n,
                           int *order) {
  int k = 0;
  for (int i = 0; i < n; i++)
    if (slow_index(s, addrs[i]) < 0)
      order[k++] = i;
  for (int j = 0; j < s->n; j++)
    for (int i = 0; i < n; i++)
      if (strcmp(addrs[i], s->addr[j]) == 0)
        order[k++] = i;
}

void idem_slow_addrs_last(const idem_slow_addrs *s, idem_addr_text *addrs, int n) {
  const char *view[IDEM_LOOKUP_MAX] = {0};
  idem_addr_text copy[IDEM_LOOKUP_MAX];
  int order[IDEM_LOOKUP_MAX];
  if (n > IDEM_LOOKUP_MAX)
    n = IDEM_LOOKUP_MAX;
  for (int i = 0; i < n; i++)
    view[i] = copy[i];
  memcpy(copy, addrs, (size_t)n * sizeof copy[0]);
  idem_slow_addrs_order(s, view, n, order);
  for (int k = 0; k < n; k++)
    memcpy(addrs[k], copy[order[k]], sizeof copy[0]);
}
