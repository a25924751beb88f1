/*
 * broker_uri.h - the URIs of `idem consume --from`, parsed apart from any
 * I/O so that the unit tests reach all of it:
 *
 *   scheme://[user[:password]@]host[:port][/path][?name=value&...]
 *
 * user, password, path and values are percent-decoded (a NUL is refused);
 * host may be an IPv6 literal in brackets. Each broker then says which
 * parameters it takes (cs_uri_known) and reads them (cs_uri_param).
 */
#ifndef IDEM_CONSUME_BROKER_URI_H
#define IDEM_CONSUME_BROKER_URI_H

#include <stddef.h>

#define CS_URI_MAX_PARAMS 16

typedef struct {
  char scheme[16];
  char *user, *password; /* NULL when absent */
  char *host;
  int port;              /* 0 when absent */
  char *path;            /* after the first '/', "" when none */
  size_t nparams;
  char *names[CS_URI_MAX_PARAMS], *values[CS_URI_MAX_PARAMS];
} cs_uri;

/* 0, or -1 with a sentence in err (why the URI is malformed) and nothing
 * left to clear. */
int cs_uri_parse(const char *uri, cs_uri *out, char *err, size_t errlen);
void cs_uri_clear(cs_uri *u);
/* The value of parameter name, or NULL. */
const char *cs_uri_param(const cs_uri *u, const char *name);
/* 0 when every parameter is in the NULL-terminated list known, else -1 with
 * a sentence naming the first other one and the known ones. */
int cs_uri_known(const cs_uri *u, const char *const *known, char *err, size_t errlen);

#endif
