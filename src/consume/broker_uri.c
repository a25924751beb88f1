/* broker_uri.c - broker URIs (broker_uri.h). */
#include "consume/broker_uri.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decode s[0..n) into a malloc'd string; NULL when malformed (a bad
 * escape or %00) or out of memory. */
static char *decode(const char *s, size_t n) {
  char *d = malloc(n + 1);
  size_t j = 0;
  if (!d)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '%') {
      d[j++] = s[i];
      continue;
    }
    int hi = i + 2 < n ? hexval((unsigned char)s[i + 1]) : -1;
    int lo = i + 2 < n ? hexval((unsigned char)s[i + 2]) : -1;
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
      free(d);
      return NULL;
    }
    d[j++] = (char)(hi * 16 + lo);
    i += 2;
  }
  d[j] = 0;
  return d;
}

static int parse_userinfo(cs_uri *u, const char *s, size_t n, char *err, size_t len) {
  const char *colon = memchr(s, ':', n);
  size_t ulen = colon ? (size_t)(colon - s) : n;
  u->user = decode(s, ulen);
  if (colon)
    u->password = decode(colon + 1, n - ulen - 1);
  if (!u->user || (colon && !u->password))
    return refuse(err, len, "bad percent-encoding in the user or password");
  return 0;
}

static int parse_hostport(cs_uri *u, const char *s, size_t n, char *err, size_t len) {
  const char *port = NULL;
  size_t hlen = n;
  if (n && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close)
      return refuse(err, len, "an IPv6 host needs its closing ']'");
    hlen = (size_t)(close - s - 1);
    u->host = strndup(s + 1, hlen);
    if (close + 1 < s + n) {
      if (close[1] != ':')
        return refuse(err, len, "expected ':PORT' after ']'");
      port = close + 2;
    }
  } else {
    const char *colon = memchr(s, ':', n);
    if (colon) {
      hlen = (size_t)(colon - s);
      port = colon + 1;
    }
    u->host = strndup(s, hlen);
  }
  if (!u->host || !*u->host)
    return refuse(err, len, "no host");
  if (port) {
    size_t plen = (size_t)(s + n - port);
    long v = 0;
    for (size_t i = 0; i < plen; i++) {
      if (!isdigit((unsigned char)port[i]) || plen > 5)
        return refuse(err, len, "the port is not a number from 1 to 65535");
      v = v * 10 + (port[i] - '0');
    }
    if (plen == 0 || v < 1 || v > 65535)
      return refuse(err, len, "the port is not a number from 1 to 65535");
    u->port = (int)v;
  }
  return 0;
}

static int parse_query(cs_uri *u, const char *q, char *err, size_t len) {
  while (*q) {
    size_t n = strcspn(q, "&");
    const char *eq = memchr(q, '=', n);
    if (!eq || eq == q)
      return refuse(err, len, "parameter '%.*s' is not NAME=VALUE", (int)n, q);
    if (u->nparams == CS_URI_MAX_PARAMS)
      return refuse(err, len, "more than %d parameters", CS_URI_MAX_PARAMS);
    char *name = strndup(q, (size_t)(eq - q));
    char *value = decode(eq + 1, n - (size_t)(eq - q) - 1);
    u->names[u->nparams] = name;
    u->values[u->nparams++] = value;
    if (!name || !value)
      return refuse(err, len, "bad percent-encoding in parameter '%.*s'", (int)n, q);
    for (size_t i = 0; i + 1 < u->nparams; i++)
      if (!strcmp(u->names[i], name))
        return refuse(err, len, "parameter '%s' is given twice", name);
    q += n;
    if (*q == '&')
      q++;
  }
  return 0;
}

int cs_uri_parse(const char *uri, cs_uri *u, char *err, size_t len) {
  memset(u, 0, sizeof *u);
  const char *sep = strstr(uri, "://");
  if (!sep || sep == uri || (size_t)(sep - uri) >= sizeof u->scheme)
    return refuse(err, len, "no scheme (e.g. redis://HOST:PORT?stream=S&group=G)");
  memcpy(u->scheme, uri, (size_t)(sep - uri));
  for (char *c = u->scheme; *c; c++)
    *c = (char)tolower((unsigned char)*c);
  const char *a = sep + 3;
  if (strchr(a, '#'))
    return refuse(err, len, "a fragment ('#') has no meaning here");
  const char *q = strchr(a, '?');
  const char *end = q ? q : a + strlen(a);
  const char *slash = memchr(a, '/', (size_t)(end - a));
  const char *auth_end = slash ? slash : end;
  const char *at = NULL;
  for (const char *p = a; p < auth_end; p++)
    if (*p == '@')
      at = p; /* the last '@': a password may hold an unescaped one */
  if (at && parse_userinfo(u, a, (size_t)(at - a), err, len))
    return -1;
  const char *hp = at ? at + 1 : a;
  if (parse_hostport(u, hp, (size_t)(auth_end - hp), err, len))
    return -1;
  u->path = slash ? decode(slash + 1, (size_t)(end - slash - 1)) : strdup("");
  if (!u->path)
    return refuse(err, len, "bad percent-encoding in the path");
  return q ? parse_query(u, q + 1, err, len) : 0;
}

void cs_uri_clear(cs_uri *u) {
  free(u->user);
  free(u->password);
  free(u->host);
  free(u->path);
  for (size_t i = 0; i < u->nparams; i++) {
    free(u->names[i]);
    free(u->values[i]);
  }
  memset(u, 0, sizeof *u);
}

const char *cs_uri_param(const cs_uri *u, const char *name) {
  for (size_t i = 0; i < u->nparams; i++)
    if (!strcmp(u->names[i], name))
      return u->values[i];
  return NULL;
}

int cs_uri_known(const cs_uri *u, const char *const *known, char *err, size_t len) {
  for (size_t i = 0; i < u->nparams; i++) {
    int ok = 0;
    for (const char *const *k = known; *k && !ok; k++)
      ok = !strcmp(*k, u->names[i]);
    if (ok)
      continue;
    char list[256] = "";
    for (const char *const *k = known; *k; k++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k == known ? "" : ", ",
               *k);
    return refuse(err, len, "unknown parameter '%s' (known: %s)", u->names[i], list);
  }
  return 0;
}
