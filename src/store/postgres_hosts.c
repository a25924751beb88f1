/*
 * postgres_hosts.c - the hosts of a PostgreSQL URI that the store looks up
 * itself (libpq would look them up inside PQconnectStart, on the loop
 * thread), and the host/hostaddr/port lists libpq gets once they are.
 *
 * Taken over: one host or a list (pg1,pg2 for a primary and its standby,
 * with target_session_attrs), each a name or a numeric address, with no
 * port, one port for all, or one port each. Left to libpq: a socket
 * directory, a hostaddr of the URI's own, an empty entry, or more than
 * IDEM_PG_HOSTS_MAX hosts.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/postgres.h"

/* Split a comma-separated list into at most max malloc'd entries; returns
 * how many, or -1 (too many, an empty entry, out of memory). */
static int split(const char *list, char **out, int max) {
  int n = 0;
  for (const char *p = list;; n++) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (n == max || len == 0 || len > 255 || !(out[n] = strndup(p, len))) {
      while (n > 0) {
        free(out[--n]);
        out[n] = NULL;
      }
      return -1;
    }
    if (!comma)
      return n + 1;
    p = comma + 1;
  }
}

static int is_numeric(const char *host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

void idem_pg_hosts_free(idem_pg_hosts *h) {
  for (int i = 0; i < IDEM_PG_HOSTS_MAX; i++) { /* a refused parse may hold more ports */
    free(h->name[i]);
    free(h->port[i]);
  }
  memset(h, 0, sizeof *h);
}

int idem_pg_hosts_parse(const char *conninfo, idem_pg_hosts *out) {
  memset(out, 0, sizeof *out);
  PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
  if (!opts)
    return 0;
  const char *host = NULL, *port = NULL;
  int has_addr = 0;
  for (PQconninfoOption *o = opts; o->keyword; o++) {
    if (!o->val || !o->val[0])
      continue;
    if (!strcmp(o->keyword, "host"))
      host = o->val;
    else if (!strcmp(o->keyword, "port"))
      port = o->val;
    else if (!strcmp(o->keyword, "hostaddr"))
      has_addr = 1;
  }
  int n = host && !has_addr ? split(host, out->name, IDEM_PG_HOSTS_MAX) : -1;
  int np = n > 0 && port && strchr(port, ',') ? split(port, out->port, IDEM_PG_HOSTS_MAX) : 0;
  PQconninfoFree(opts);
  int ok = n > 0 && (np == 0 || np == n);
  for (int i = 0; ok && i < n; i++) {
    if (out->name[i][0] == '/' || out->name[i][0] == '@')
      ok = 0; /* a socket directory: nothing to look up */
    out->numeric[i] = is_numeric(out->name[i]);
  }
  out->n = n > 0 ? n : 0; /* without a list of ports, port[] stays NULL: one serves all */
  if (!ok)
    idem_pg_hosts_free(out);
  return out->n;
}

int idem_pg_hosts_looked_up(const idem_pg_hosts *h) {
  for (int i = 0; i < h->n; i++)
    if (!h->numeric[i])
      return 1;
  return 0;
}

/* Append ",text" (or "text" first) to buf at *used, if it fits. */
static void append(char *buf, size_t size, size_t *used, const char *text) {
  int w = snprintf(buf + *used, size - *used, "%s%s", *used ? "," : "", text);
  if (w > 0 && (size_t)w < size - *used)
    *used += (size_t)w;
}

int idem_pg_hosts_lists(const idem_pg_hosts *h, const idem_pg_found *found,
                        const idem_slow_addrs *slow, idem_pg_lists *out) {
  /* every (host, address) in the URI's order, then those that timed out */
  int host[IDEM_PG_HOSTS_MAX * IDEM_LOOKUP_MAX], order[IDEM_PG_HOSTS_MAX * IDEM_LOOKUP_MAX];
  const char *addr[IDEM_PG_HOSTS_MAX * IDEM_LOOKUP_MAX] = {0};
  int n = 0;
  for (int i = 0; i < h->n; i++)
    for (int j = 0; j < found[i].n; j++, n++) {
      host[n] = i;
      addr[n] = found[i].addr[j];
    }
  idem_slow_addrs_order(slow, addr, n, order);
  if (n > IDEM_PG_ADDRS_MAX)
    n = IDEM_PG_ADDRS_MAX;
  size_t nh = 0, na = 0, np = 0;
  int with_ports = h->port[0] != NULL;
  for (int i = 0; i < n; i++) {
    /* sized for IDEM_PG_ADDRS_MAX entries: these always fit */
    int k = order[i];
    append(out->hosts, sizeof out->hosts, &nh, h->name[host[k]]);
    append(out->addrs, sizeof out->addrs, &na, addr[k]);
    if (with_ports)
      append(out->ports, sizeof out->ports, &np, h->port[host[k]]);
  }
  out->hosts[nh] = out->addrs[na] = out->ports[np] = '\0';
  return n;
}
