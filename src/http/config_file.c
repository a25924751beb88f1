/* config_file.c - the YAML config file, read into settings as text
 * (config_file.h). libyaml's document API builds the node tree (with each
 * node's line); this file walks it once. */
#include "http/config_file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

typedef struct {
  yaml_document_t *doc;
  cf_doc *d;
  const setting_table *top, *route;
  char *err;
  size_t errlen;
} walker;

/* s into out (cap bytes), control characters escaped ("\n", "\t", "\r",
 * else "\xHH"; a C1 one, U+0080..U+009F, as "\u0085"): a value quoted in a
 * message (ttl: |, a key in double quotes) cannot break it across lines.
 * An escape that does not fit is left out whole. */
static void one_line(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 1 < cap; p++) {
    char esc[8] = {(char)*p, 0};
    if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
      snprintf(esc, sizeof esc, "\\u%04x", *++p);
    else if (*p == '\n' || *p == '\t' || *p == '\r')
      snprintf(esc, sizeof esc, "\\%c", *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r');
    else if (*p < 0x20 || *p == 0x7f)
      snprintf(esc, sizeof esc, "\\x%02x", *p);
    size_t n = strlen(esc);
    if (o + n >= cap)
      break;
    memcpy(out + o, esc, n);
    o += n;
  }
  if (cap)
    out[o] = 0;
}

static void verror(char *err, size_t errlen, const char *file, int line, const char *fmt,
                   va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  int off = snprintf(err, errlen, "%s:%d: ", file, line);
  if (off >= 0 && (size_t)off < errlen)
    one_line(err + off, errlen - (size_t)off, msg);
}

void cf_error(char *err, size_t errlen, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(err, errlen, file, line, fmt, ap);
  va_end(ap);
}

static int fail(walker *w, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(walker *w, const yaml_node_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(w->err, w->errlen, w->d->file, n ? (int)n->start_mark.line + 1 : 1, fmt, ap);
  va_end(ap);
  return -1;
}

static int line_of(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

/* A copy of s (n bytes) owned by the doc, or NULL. */
static char *keep(cf_doc *d, const char *s, size_t n) {
  if (d->nstrs == d->capstrs) {
    int cap = d->capstrs ? 2 * d->capstrs : 32;
    char **p = realloc(d->strs, (size_t)cap * sizeof *p);
    if (!p)
      return NULL;
    d->strs = p;
    d->capstrs = cap;
  }
  char *c = malloc(n + 1);
  if (!c)
    return NULL;
  memcpy(c, s, n);
  c[n] = 0;
  d->strs[d->nstrs++] = c;
  return c;
}

static yaml_node_t *node(walker *w, int id) { return yaml_document_get_node(w->doc, id); }

static int is_null(const yaml_node_t *n) {
  if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return 0;
  const char *v = (const char *)n->data.scalar.value;
  return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
         !strcmp(v, "NULL");
}

/* The scalar's text, or NULL (refused, with err) when it is not one. */
static const char *scalar(walker *w, const yaml_node_t *n, const char *what) {
  if (n->type != YAML_SCALAR_NODE || is_null(n)) {
    fail(w, n, "%s must be a value", what);
    return NULL;
  }
  if (strlen((const char *)n->data.scalar.value) != n->data.scalar.length) {
    fail(w, n, "%s holds a NUL byte", what);
    return NULL;
  }
  return (const char *)n->data.scalar.value;
}

/* Append text to the buffer (len bytes used of cap); -1 when it is full. */
static int put(char *buf, size_t cap, size_t *len, const char *s) {
  size_t n = strlen(s);
  if (*len + n >= cap)
    return -1;
  memcpy(buf + *len, s, n + 1);
  *len += n;
  return 0;
}

/* A scalar, or a list of scalars joined with commas, into buf. */
static int list_text(walker *w, const yaml_node_t *n, const char *what, char *buf, size_t cap,
                     size_t *len) {
  if (n->type != YAML_SEQUENCE_NODE) {
    const char *v = scalar(w, n, what);
    return v && !put(buf, cap, len, v) ? 0 : v ? fail(w, n, "%s is too long", what) : -1;
  }
  int first = 1;
  for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
       it++) {
    const yaml_node_t *e = node(w, *it);
    const char *v = e ? scalar(w, e, what) : NULL;
    if (!v)
      return -1;
    if (strchr(v, ','))
      return fail(w, e, "%s: '%s' holds a comma; write one item per list entry", what, v);
    if ((!first && put(buf, cap, len, ",")) || put(buf, cap, len, v))
      return fail(w, e, "%s is too long", what);
    first = 0;
  }
  return 0;
}

/* A setting's value as the text its flag takes (config_file.h). */
static const char *value_text(walker *w, const yaml_node_t *n, const char *key) {
  char buf[4096];
  size_t len = 0;
  buf[0] = 0;
  if (n->type == YAML_MAPPING_NODE) {
    yaml_node_pair_t *p = n->data.mapping.pairs.start;
    if (n->data.mapping.pairs.top - p != 1) {
      fail(w, n, "%s: a map here holds one key (e.g. {json: [/amount]})", key);
      return NULL;
    }
    const yaml_node_t *k = node(w, p->key), *v = node(w, p->value);
    const char *ks = k ? scalar(w, k, key) : NULL;
    if (!ks || !v || put(buf, sizeof buf, &len, ks) || put(buf, sizeof buf, &len, ":") ||
        list_text(w, v, key, buf, sizeof buf, &len))
      return NULL;
  } else if (list_text(w, n, key, buf, sizeof buf, &len)) {
    return NULL;
  }
  char *c = keep(w->d, buf, len);
  if (!c)
    fail(w, n, "out of memory");
  return c;
}

/* "admin_listen" -> "admin-listen" (the table's names have dashes). */
static void dashed(const char *key, char *out, size_t cap) {
  snprintf(out, cap, "%s", key);
  for (char *c = out; *c; c++)
    if (*c == '_')
      *c = '-';
}

static int add_item(walker *w, cf_item **items, int *n, const yaml_node_t *kn,
                    const yaml_node_t *vn, const setting *row) {
  const char *key = (const char *)kn->data.scalar.value;
  for (int i = 0; i < *n; i++) {
    const cf_item *first = &(*items)[i];
    if (strcmp(first->name, row->name))
      continue;
    /* named as on the line said; admin_listen then admin-listen: both */
    if (strcmp(first->key, key))
      return fail(w, kn, "%s is set twice (first at line %d, as %s)", key, first->line,
                  first->key);
    return fail(w, kn, "%s is set twice (first at line %d)", key, first->line);
  }
  /* a list where one value belongs (require_key: [true]) is a slip, not
   * that value: only the LIST settings (methods, store_statuses) take one */
  if (vn->type == YAML_SEQUENCE_NODE && (!row->form || strcmp(row->form, "LIST")))
    return fail(w, vn, "%s takes one value, not a list", key);
  const char *v = value_text(w, vn, key);
  if (!v)
    return -1;
  cf_item *p = realloc(*items, (size_t)(*n + 1) * sizeof *p);
  if (!p)
    return fail(w, kn, "out of memory");
  *items = p;
  p[*n].name = row->name;
  p[*n].key = keep(w->d, key, strlen(key));
  p[*n].value = v;
  p[*n].line = line_of(kn);
  if (!p[*n].key)
    return fail(w, kn, "out of memory");
  ++*n;
  return 0;
}

static const setting *find_row(const setting_table *t, const char *key) {
  char name[64];
  dashed(key, name, sizeof name);
  for (size_t i = 0; i < t->n; i++)
    if (!strcmp(t->rows[i].name, name))
      return &t->rows[i];
  return NULL;
}

/* The names of t's rows, with underscores, for "use one of" sentences. */
static void names_of(const setting_table *t, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (size_t i = 0; i < t->n; i++) {
    char k[64];
    if (!strcmp(t->rows[i].name, "config"))
      continue; /* a flag only: the file does not name itself */
    snprintf(k, sizeof k, "%s%s", len ? ", " : "", t->rows[i].name);
    for (char *c = k; *c; c++)
      if (*c == '-')
        *c = '_';
    if (put(out, cap, &len, k))
      return;
  }
}

/* Each key of a mapping, checked to be a scalar. */
#define EACH_PAIR(n, p) \
  for (yaml_node_pair_t *p = (n)->data.mapping.pairs.start; p < (n)->data.mapping.pairs.top; p++)

static const yaml_node_t *pair_key(walker *w, const yaml_node_pair_t *p, const char *where) {
  const yaml_node_t *k = node(w, p->key);
  if (!k || !scalar(w, k, where))
    return NULL;
  if (!node(w, p->value)) {
    fail(w, k, "%s has no value", (const char *)k->data.scalar.value);
    return NULL;
  }
  return k;
}

/* One key of a mapping and its value, checked. */
typedef struct {
  const yaml_node_t *k, *v;
  const char *key;
} cf_pair;

static int pair_at(walker *w, const yaml_node_pair_t *p, const char *where, cf_pair *out) {
  if (!(out->k = pair_key(w, p, where)))
    return -1;
  out->key = (const char *)out->k->data.scalar.value;
  out->v = node(w, p->value);
  return 0;
}

/* Route settings (a route's, or defaults:) into items. */
static int route_settings(walker *w, const yaml_node_t *map, cf_item **items, int *n,
                          const char *where, int skip_match) {
  EACH_PAIR(map, p) {
    cf_pair kv;
    if (pair_at(w, p, where, &kv))
      return -1;
    if (skip_match && !strcmp(kv.key, "match"))
      continue;
    const setting *row = find_row(w->route, kv.key);
    if (!row) {
      char names[512];
      names_of(w->route, names, sizeof names);
      return fail(w, kv.k, "%s is not a route setting (in %s: %s%s)", kv.key, where,
                  skip_match ? "match, " : "", names);
    }
    if (add_item(w, items, n, kv.k, kv.v, row))
      return -1;
  }
  return 0;
}

static int route_match(walker *w, const yaml_node_t *m, cf_route *r) {
  if (m->type != YAML_MAPPING_NODE)
    return fail(w, m, "match must be a map: {methods: [POST], path: /v1/orders/*}");
  r->match_line = line_of(m);
  EACH_PAIR(m, p) {
    cf_pair kv;
    if (pair_at(w, p, "match", &kv))
      return -1;
    const char **slot = !strcmp(kv.key, "path")      ? &r->path
                        : !strcmp(kv.key, "methods") ? &r->methods
                                                     : NULL;
    if (!slot)
      return fail(w, kv.k, "match takes methods and path, not %s", kv.key);
    if (*slot)
      return fail(w, kv.k, "match: %s is set twice", kv.key);
    if (slot == &r->path) {
      const char *s = scalar(w, kv.v, "match: path");
      if (!s)
        return -1;
      if (s[0] != '/' && strcmp(s, "*") && strcmp(s, "**"))
        return fail(w, kv.v, "match: path '%s' must start with / (a glob: * within a segment, ** "
                             "across segments)", s);
      if (strlen(s) >= 256)
        return fail(w, kv.v, "match: path is longer than 255 characters");
      *slot = keep(w->d, s, strlen(s));
    } else {
      *slot = value_text(w, kv.v, "match: methods");
    }
    if (!*slot)
      return -1;
  }
  return 0;
}

static int routes(walker *w, const yaml_node_t *seq) {
  if (seq->type != YAML_SEQUENCE_NODE)
    return fail(w, seq, "routes must be a list of routes (- match: {...})");
  long n = seq->data.sequence.items.top - seq->data.sequence.items.start;
  if (n > 1024)
    return fail(w, seq, "routes holds %ld routes; at most 1024", n);
  w->d->routes = calloc((size_t)n + 1, sizeof *w->d->routes);
  if (!w->d->routes)
    return fail(w, seq, "out of memory");
  for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
       it++) {
    const yaml_node_t *rn = node(w, *it);
    cf_route *r = &w->d->routes[w->d->nroutes++];
    if (!rn || rn->type != YAML_MAPPING_NODE)
      return fail(w, rn ? rn : seq, "a route must be a map (match: {...} and route settings)");
    r->line = line_of(rn);
    int seen_match = 0; /* the line of the route's match:, once read */
    EACH_PAIR(rn, p) {
      const yaml_node_t *k = pair_key(w, p, "route");
      if (!k)
        return -1;
      if (strcmp((const char *)k->data.scalar.value, "match"))
        continue;
      /* a second match: would be merged into the first, unseen */
      if (seen_match)
        return fail(w, k, "match is set twice (first at line %d)", seen_match);
      seen_match = line_of(k);
      if (route_match(w, node(w, p->value), r))
        return -1;
    }
    if (route_settings(w, rn, &r->items, &r->n, "a route", 1))
      return -1;
  }
  return 0;
}

static int top_level(walker *w, const yaml_node_t *root) {
  if (root->type != YAML_MAPPING_NODE)
    return fail(w, root, "the file must be a map of settings (listen: ..., routes: ...)");
  int seen_defaults = 0, seen_routes = 0;
  EACH_PAIR(root, p) {
    cf_pair kv;
    if (pair_at(w, p, "the file", &kv))
      return -1;
    if (!strcmp(kv.key, "defaults")) {
      if (seen_defaults++)
        return fail(w, kv.k, "defaults is set twice");
      if (kv.v->type != YAML_MAPPING_NODE)
        return fail(w, kv.v, "defaults must be a map of route settings");
      if (route_settings(w, kv.v, &w->d->top, &w->d->ntop, "defaults", 0))
        return -1;
      continue;
    }
    if (!strcmp(kv.key, "routes")) {
      if (seen_routes++)
        return fail(w, kv.k, "routes is set twice");
      if (routes(w, kv.v))
        return -1;
      continue;
    }
    const setting *row = find_row(w->top, kv.key);
    if (!row || !strcmp(row->name, "config")) {
      char names[1024];
      names_of(w->top, names, sizeof names);
      return fail(w, kv.k, "unknown key %s (the file takes defaults, routes and %s)", kv.key,
                  names);
    }
    if (add_item(w, &w->d->top, &w->d->ntop, kv.k, kv.v, row))
      return -1;
  }
  return 0;
}

/* The line of byte at of text, as libyaml counts them: "\n", "\r\n" and
 * a lone "\r" each end one. */
static unsigned long line_at(const char *text, size_t at) {
  unsigned long line = 1;
  for (size_t i = 0; i < at; i++)
    line += text[i] == '\n' || (text[i] == '\r' && (i + 1 == at || text[i + 1] != '\n'));
  return line;
}

/* libyaml's reason for YAML that does not parse, with a hint for the two
 * slips it words least clearly: a tab where YAML wants spaces, and a bare
 * value with ": " in it or a trailing ':' (store: memory:), which YAML reads
 * as a map where none is allowed. */
static void yaml_error(const yaml_parser_t *parser, const char *text, size_t len,
                       const char *name, char *err, size_t errlen) {
  const char *why = parser->problem ? parser->problem : "not YAML", *hint = "";
  size_t at = parser->problem_mark.index;
  unsigned long line = (unsigned long)parser->problem_mark.line + 1;
  /* a reader (encoding) error has no mark, only the byte's offset */
  if (parser->error == YAML_READER_ERROR)
    line = line_at(text, parser->problem_offset < len ? parser->problem_offset : len);
  else if (at < len && text[at] == '\t')
    hint = " (a tab: YAML indents with spaces)";
  else if (strstr(why, "mapping values are not allowed"))
    hint = " (quote a value that holds ': ' or ends with ':', e.g. store: \"memory:\")";
  snprintf(err, errlen, "%s:%lu: %s%s%s%s", name, line, why, parser->context ? " " : "",
           parser->context ? parser->context : "", hint);
}

/* The file holds one document: what follows a second "---" would be
 * silently left out, so it is an error (as is YAML there that does not
 * parse). 0, or -1 with err set. */
static int only_document(yaml_parser_t *parser, const char *text, size_t len, const char *name,
                         char *err, size_t errlen) {
  yaml_document_t next;
  if (!yaml_parser_load(parser, &next)) {
    yaml_error(parser, text, len, name, err, errlen);
    return -1;
  }
  const yaml_node_t *root = yaml_document_get_root_node(&next);
  int more = root && !(root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0);
  if (more)
    snprintf(err, errlen, "%s:%lu: a second YAML document (after ---): the file holds one", name,
             (unsigned long)next.start_mark.line + 1);
  yaml_document_delete(&next);
  return more ? -1 : 0;
}

/* Lists and maps nested deeper than CF_MAX_DEPTH, refused where the first
 * one too deep starts. libyaml's scanner takes time quadratic in the depth
 * (a line of 40k "[" took 2 s) and a reload runs on the loop that serves
 * the admin listener; the settings nest 5 deep at most (routes, a route,
 * match, methods). A pass over the events of its own, which stops at the
 * first one too deep; YAML that does not parse is left to the load after
 * it, which says why. 0, or -1 with err set. */
static int depth_ok(const char *text, size_t len, const char *name, char *err, size_t errlen) {
  yaml_parser_t parser;
  yaml_event_t ev;
  int depth = 0, rc = 0;
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  while (!rc && yaml_parser_parse(&parser, &ev)) {
    yaml_event_type_t type = ev.type;
    if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
      if (++depth > CF_MAX_DEPTH) {
        cf_error(err, errlen, name, (int)ev.start_mark.line + 1,
                 "lists and maps nested deeper than %d levels; a setting needs 5 at most",
                 CF_MAX_DEPTH);
        rc = -1;
      }
    } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
      depth--;
    }
    yaml_event_delete(&ev);
    if (type == YAML_STREAM_END_EVENT)
      break;
  }
  yaml_parser_delete(&parser);
  return rc;
}

int cf_parse(const char *text, size_t len, const char *name, const setting_table *top,
             const setting_table *route, cf_doc **out, char *err, size_t errlen) {
  cf_doc *d = calloc(1, sizeof *d);
  if (!d || !(d->file = strdup(name))) {
    free(d);
    snprintf(err, errlen, "%s: out of memory", name);
    return -1;
  }
  yaml_parser_t parser;
  yaml_document_t doc;
  walker w = {&doc, d, top, route, err, errlen};
  int rc = -1;
  if (depth_ok(text, len, name, err, errlen)) {
    cf_free(d);
    return -1;
  }
  yaml_parser_initialize(&parser);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    yaml_error(&parser, text, len, name, err, errlen);
    yaml_parser_delete(&parser);
    cf_free(d);
    return -1;
  }
  const yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root)
    snprintf(err, errlen, "%s:1: the file is empty", name);
  else
    rc = top_level(&w, root);
  yaml_document_delete(&doc);
  if (!rc)
    rc = only_document(&parser, text, len, name, err, errlen);
  yaml_parser_delete(&parser);
  if (rc) {
    cf_free(d);
    return -1;
  }
  *out = d;
  return 0;
}

int cf_load(const char *file, const setting_table *top, const setting_table *route,
            cf_doc **out, char *err, size_t errlen) {
  FILE *f = fopen(file, "rb");
  if (!f) {
    snprintf(err, errlen, "%s: %s", file, strerror(errno));
    return CF_UNREADABLE;
  }
  char *buf = malloc(CF_MAX_BYTES + 1);
  errno = 0;
  size_t n = buf ? fread(buf, 1, CF_MAX_BYTES + 1, f) : 0;
  int bad = !buf || ferror(f), why = buf ? errno : ENOMEM; /* a directory: EISDIR */
  fclose(f);
  int rc = -1;
  if (bad) {
    snprintf(err, errlen, "%s: cannot read it: %s", file, why ? strerror(why) : "read error");
    rc = CF_UNREADABLE;
  } else if (n > CF_MAX_BYTES)
    snprintf(err, errlen, "%s: larger than 1 MiB", file);
  else
    rc = cf_parse(buf, n, file, top, route, out, err, errlen);
  free(buf);
  return rc;
}

void cf_free(cf_doc *d) {
  if (!d)
    return;
  for (int i = 0; i < d->nroutes; i++)
    free(d->routes[i].items);
  free(d->routes);
  free(d->top);
  for (int i = 0; i < d->nstrs; i++)
    free(d->strs[i]);
  free(d->strs);
  free(d->file);
  free(d);
}

const cf_item *cf_top(const cf_doc *d, const char *name) {
  for (int i = 0; d && i < d->ntop; i++)
    if (!strcmp(d->top[i].name, name))
      return &d->top[i];
  return NULL;
}

void cf_item_error(const char *file, const cf_item *it, const char *msg, char *err,
                   size_t errlen) {
  size_t nl = strlen(it->name);
  /* settings.c names the flag: "--NAME..." becomes the key as written */
  if (!strncmp(msg, "--", 2) && !strncmp(msg + 2, it->name, nl))
    cf_error(err, errlen, file, it->line, "%s%s", it->key, msg + 2 + nl);
  else
    cf_error(err, errlen, file, it->line, "%s: %s", it->key, msg);
}
