/* uri_options.c - see uri_options.h. */
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"
#include "store/uri_options.h"

int idem_uri_options_parse(const char *query, idem_uri_options *out) {
  size_t len = strlen(query), most = 1;
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < len; i++)
    most += query[i] == '&';
  out->buf = malloc(len + 1);
  out->items = calloc(most, sizeof *out->items);
  if (out->buf == NULL || out->items == NULL) {
    idem_uri_options_free(out);
    return IDEM_ENOMEM;
  }
  memcpy(out->buf, query, len + 1);
  for (char *item = out->buf, *end; item != NULL; item = end ? end + 1 : NULL) {
    end = strchr(item, '&');
    if (end)
      *end = '\0';
    if (*item == '\0')
      continue;
    idem_uri_option *o = &out->items[out->n++];
    char *eq = strchr(item, '=');
    if (eq)
      *eq = '\0';
    o->name = item;
    o->value = eq ? eq + 1 : NULL;
    o->text = query + (item - out->buf);
    o->text_len = end ? (size_t)(end - item) : strlen(o->text);
  }
  return 0;
}

const char *idem_uri_options_repeated(const idem_uri_options *o) {
  for (size_t i = 1; i < o->n; i++)
    for (size_t k = 0; k < i; k++)
      if (!strcmp(o->items[i].name, o->items[k].name))
        return o->items[i].name;
  return NULL;
}

void idem_uri_options_free(idem_uri_options *o) {
  free(o->items);
  free(o->buf);
  memset(o, 0, sizeof *o);
}
