/* broker.c - the broker for a URI's scheme, and what every broker shares:
 * its allocation, its URI, and the end of its life (broker.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consume/broker.h"
#include "idem/idem.h"

/* Every broker idem knows; vt NULL when this build leaves it out (the
 * redis:// broker speaks hiredis, as the Redis store does: -DIDEM_REDIS=OFF
 * removes both), so that its URIs are refused by name. */
static const struct {
  const char *prefix;
  const cs_broker_vt *vt;
} brokers[] = {
#if IDEM_WITH_REDIS
    {"redis://", &cs_broker_redis},
#else
    {"redis://", NULL},
#endif
    {"nats://", &cs_broker_nats},
    {"amqp://", &cs_broker_amqp},
};

/* The broker's entry for uri's scheme, or -1. */
static int broker_for(const char *uri) {
  for (size_t i = 0; i < sizeof brokers / sizeof brokers[0]; i++)
    if (!strncasecmp(uri, brokers[i].prefix, strlen(brokers[i].prefix)))
      return (int)i;
  return -1;
}

/* Parse uri into u with its broker's check: the broker, or NULL with err. */
static const cs_broker_vt *checked(const char *uri, cs_uri *u, char *err, size_t len) {
  int i = broker_for(uri);
  const cs_broker_vt *vt = i < 0 ? NULL : brokers[i].vt;
  if (i >= 0 && !vt) {
    snprintf(err, len, "this build of idem has no Redis support (built with -DIDEM_REDIS=OFF)");
    return NULL;
  }
  if (!vt) {
    snprintf(err, len, "unknown broker; use "
#if IDEM_WITH_REDIS
                       "redis://HOST:PORT?stream=NAME&group=NAME, "
#endif
                       "amqp://USER:PASS@HOST:PORT/VHOST?queue=NAME or "
                       "nats://HOST:PORT?stream=NAME&consumer=NAME");
    return NULL;
  }
  if (cs_uri_parse(uri, u, err, len) || cs_uri_known(u, vt->params, err, len))
    return NULL;
  if (!u->port)
    u->port = vt->default_port;
  return vt->check_uri(u, err, len) ? NULL : vt;
}

int cs_broker_check(const char *uri, char *err, size_t len) {
  cs_uri u;
  memset(&u, 0, sizeof u);
  const cs_broker_vt *vt = checked(uri, &u, err, len);
  cs_uri_clear(&u);
  return vt ? 0 : -1;
}

int cs_broker_open(const char *uri, const cs_broker_opts *o, cs_broker **out, char **why) {
  char err[256];
  cs_uri u;
  memset(&u, 0, sizeof u);
  *out = NULL;
  const cs_broker_vt *vt = checked(uri, &u, err, sizeof err);
  cs_broker *b = vt ? calloc(1, vt->size) : NULL;
  if (!b) {
    cs_uri_clear(&u);
    *why = strdup(vt ? "out of memory" : err);
    return vt ? IDEM_ENOMEM : IDEM_EURI;
  }
  b->vt = vt;
  b->o = *o;
  b->uri = u;
  int rc = vt->start(b, why);
  if (rc == 0)
    *out = b;
  return rc;
}

void cs_broker_close(cs_broker *b, void (*done)(void *arg), void *arg) {
  b->closing = 1;
  b->done = done;
  b->done_arg = arg;
  b->vt->close(b);
}

void cs_broker_free(cs_broker *b) {
  void (*done)(void *) = b->done;
  void *arg = b->done_arg;
  cs_uri_clear(&b->uri);
  free(b);
  if (done)
    done(arg);
}

char *cs_dup(const void *p, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    if (n)
      memcpy(d, p, n);
    d[n] = 0;
  }
  return d;
}

void cs_msg_free_headers(cs_msg *m) {
  free(m->id);
  for (size_t i = 0; i < m->nheaders; i++) {
    free(m->headers[i].name);
    free(m->headers[i].value);
  }
  free(m->headers);
}
