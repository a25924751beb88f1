/* broker.c - the broker for a URI's scheme (broker.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consume/broker.h"
#include "idem/idem.h"

static const struct {
  const char *prefix;
  const cs_broker_vt *vt;
  int (*check)(const char *uri, char *err, size_t len);
} brokers[] = {
#if IDEM_WITH_REDIS /* the redis:// broker speaks hiredis, as the Redis store does */
    {"redis://", &cs_broker_redis, cs_redis_check},
#endif
    {"nats://", &cs_broker_nats, cs_nats_check},
    {"amqp://", &cs_broker_amqp, cs_amqp_check},
};

int cs_broker_check(const char *uri, char *err, size_t len) {
  for (size_t i = 0; i < sizeof brokers / sizeof brokers[0]; i++)
    if (!strncasecmp(uri, brokers[i].prefix, strlen(brokers[i].prefix)))
      return brokers[i].check(uri, err, len);
  snprintf(err, len, "unknown broker; use redis://HOST:PORT?stream=NAME&group=NAME, "
                     "amqp://USER:PASS@HOST:PORT/VHOST?queue=NAME or "
                     "nats://HOST:PORT?stream=NAME&consumer=NAME");
  return -1;
}

int cs_broker_open(const char *uri, const cs_broker_opts *o, cs_broker **out, char **why) {
  char err[256];
  *out = NULL;
  if (cs_broker_check(uri, err, sizeof err)) {
    *why = strdup(err);
    return IDEM_EURI;
  }
  for (size_t i = 0; i < sizeof brokers / sizeof brokers[0]; i++)
    if (!strncasecmp(uri, brokers[i].prefix, strlen(brokers[i].prefix)))
      return brokers[i].vt->open(uri, o, out, why);
  return IDEM_EURI;
}
