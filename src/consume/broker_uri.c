/* broker_uri.c - broker URIs (broker_uri.h). */
#include "consume/broker_uri.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"


static int parse_userinfo(cs_uri *u, const char *s, size_t n, char *err, size_t len) {
  const char *colon = memchr(s, ':', n);
  size_t ulen = colon ? (size_t)(colon - s) : n;
  u->user = idem_pct_decode_dup(s, ulen);
  if (colon)
    u->password = idem_pct_decode_dup(colon + 1, n - ulen - 1);
  if (!u->user || (colon && !u->password))
    return idem_errf(err, len, "bad percent-encoding in the user or password");
  return 0;
}

static int parse_hostport(cs_uri *u, const char *s, size_t n, char *err, size_t len) {
  const char *port = NULL;
  size_t hlen = n;
  if (n && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (!close)
      return idem_errf(err, len, "an IPv6 host needs its closing ']'");
    hlen = (size_t)(close - s - 1);
    u->host = strndup(s + 1, hlen);
    if (close + 1 < s + n) {
      if (close[1] != ':')
        return idem_errf(err, len, "expected ':PORT' after ']'");
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
    return idem_errf(err, len, "no host");
  if (port) {
    size_t plen = (size_t)(s + n - port);
    long v = 0;
    for (size_t i = 0; i < plen; i++) {
      if (!isdigit((unsigned char)port[i]) || plen > 5)
        return idem_errf(err, len, "the port is not a number from 1 to 65535");
      v = v * 10 + (port[i] - '0');
    }
    if (plen == 0 || v < 1 || v > 65535)
      return idem_errf(err, len, "the port is not a number from 1 to 65535");
    u->port = (int)v;
  }
  return 0;
}

static int parse_query(cs_uri *u, const char *q, char *err, size_t len) {
  while (*q) {
    size_t n = strcspn(q, "&");
    const char *eq = memchr(q, '=', n);
    if (!eq || eq == q)
      return idem_errf(err, len, "parameter '%.*s' is not NAME=VALUE", (int)n, q);
    if (u->nparams == CS_URI_MAX_PARAMS)
      return idem_errf(err, len, "more than %d parameters", CS_URI_MAX_PARAMS);
    char *name = strndup(q, (size_t)(eq - q));
    char *value = idem_pct_decode_dup(eq + 1, n - (size_t)(eq - q) - 1);
    u->names[u->nparams] = name;
    u->values[u->nparams++] = value;
    if (!name || !value)
      return idem_errf(err, len, "bad percent-encoding in parameter '%.*s'", (int)n, q);
    for (size_t i = 0; i + 1 < u->nparams; i++)
      if (!strcmp(u->names[i], name))
        return idem_errf(err, len, "parameter '%s' is given twice", name);
    q += n;
    if (*q == '&')
      q++;
  }
  return 0;
}

static int parse_uri(const char *uri, cs_uri *u, char *err, size_t len) {
  const char *sep = strstr(uri, "://");
  if (!sep || sep == uri || (size_t)(sep - uri) >= sizeof u->scheme)
    return idem_errf(err, len, "no scheme (e.g. redis://HOST:PORT?stream=S&group=G)");
  memcpy(u->scheme, uri, (size_t)(sep - uri));
  for (char *c = u->scheme; *c; c++)
    *c = (char)tolower((unsigned char)*c);
  const char *a = sep + 3;
  if (strchr(a, '#'))
    return idem_errf(err, len, "a fragment ('#') has no meaning here");
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
  u->path = slash ? idem_pct_decode_dup(slash + 1, (size_t)(end - slash - 1)) : strdup("");
  if (!u->path)
    return idem_errf(err, len, "bad percent-encoding in the path");
  return q ? parse_query(u, q + 1, err, len) : 0;
}

int cs_uri_parse(const char *uri, cs_uri *u, char *err, size_t len) {
  memset(u, 0, sizeof *u);
  if (parse_uri(uri, u, err, len) == 0)
    return 0;
  cs_uri_clear(u); /* what was taken before the error */
  return -1;
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
    return idem_errf(err, len, "unknown parameter '%s' (known: %s)", u->names[i], list);
  }
  return 0;
}
