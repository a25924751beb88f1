/*
 * uri_options.h - the "?name=value&..." part of a store URI, split the same
 * way for every store (lmdb:, redis://, postgres://). Splitting only: which
 * names exist, what their values mean, whether a value is percent-decoded
 * and what an item without '=' is, each store decides.
 */
#ifndef IDEM_STORE_URI_OPTIONS_H
#define IDEM_STORE_URI_OPTIONS_H

#include <stddef.h>

typedef struct {
  const char *name;  /* up to the first '=' (or the whole item), NUL-terminated */
  const char *value; /* after that '=', NUL-terminated; NULL when there is none */
  const char *text;  /* the item as the URI spells it: points into the query */
  size_t text_len;
} idem_uri_option;

typedef struct {
  idem_uri_option *items; /* in the URI's order */
  size_t n;
  char *buf; /* holds every name and value */
} idem_uri_options;

/* Split query (what follows the URI's first '?', up to its end) at each
 * '&' into items, each at its first '='. Empty items ("a&&b", a trailing
 * '&') are skipped. Returns 0, or IDEM_ENOMEM with *out empty; free with
 * idem_uri_options_free either way. The text of each item points into
 * query, which must outlive out. */
int idem_uri_options_parse(const char *query, idem_uri_options *out);
void idem_uri_options_free(idem_uri_options *o);

/* The name of the first option o gives twice, or NULL: a store refuses it
 * (which of "timeout=1s&timeout=2s" holds is nobody's guess). */
const char *idem_uri_options_repeated(const idem_uri_options *o);

#endif
