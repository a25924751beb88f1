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
};

/* Schemes the issue names that this build does not speak yet. */
static const char *const not_yet[] = {"amqp://"};

int cs_broker_check(const char *uri, char *err, size_t len) {
  for (size_t i = 0; i < sizeof brokers / sizeof brokers[0]; i++)
    if (!strncasecmp(uri, brokers[i].prefix, strlen(brokers[i].prefix)))
      return brokers[i].check(uri, err, len);
  for (size_t i = 0; i < sizeof not_yet / sizeof not_yet[0]; i++)
    if (!strncasecmp(uri, not_yet[i], strlen(not_yet[i])))
      return snprintf(err, len, "%.*s brokers are not supported by this build yet; use "
                      "redis://HOST:PORT?stream=NAME&group=NAME",
                      (int)strlen(not_yet[i]) - 3, not_yet[i]), -1;
  snprintf(err, len, "unknown broker; use redis://HOST:PORT?stream=NAME&group=NAME or "
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
