/* route_dump.c - route tables as text, JSON and OpenAPI (route_dump.h). */
#include "http/route_dump.h"

#include <ctype.h>
#include <string.h>

#include "http/policy.h"

/* "lock-ttl" -> "lock_ttl": the file's spelling. */
static void key_name(const char *name, char *out, size_t len) {
  snprintf(out, len, "%s", name);
  for (char *c = out; *c; c++)
    if (*c == '-')
      *c = '_';
}

void gw_routes_print(const gw_routes *t, FILE *out) {
  for (int i = 0; i <= t->n; i++) {
    const gw_route *r = i < t->n ? &t->routes[i] : &t->defaults;
    char m[600];
    gw_route_match_text(r, m, sizeof m);
    if (i < t->n)
      fprintf(out, "route %d (line %d): %s\n", r->index, r->line, m);
    else
      fprintf(out, "defaults (requests no route matches):\n");
    for (size_t k = 0; k < gw_policy_table.n; k++) {
      char v[2048], key[64];
      key_name(gw_policy_table.rows[k].name, key, sizeof key);
      gw_policy_value(&r->policy, gw_policy_table.rows[k].name, v, sizeof v);
      fprintf(out, "  %-15s %s\n", key, v);
    }
  }
}

/* A comma-separated list as a JSON array of strings. */
static int json_list(gw_buf *o, const char *list) {
  int err = gw_buf_puts(o, "[");
  for (const char *p = list; *p && !err;) {
    size_t n = strcspn(p, ",");
    err |= (p != list && gw_buf_puts(o, ",")) || policy_json_string(o, p, n);
    p += n + (p[n] == ',');
  }
  return err || gw_buf_puts(o, "]");
}

/* One setting's value in the shape the file writes it. */
static int json_value(gw_buf *o, const char *name, const char *v) {
  if (!strcmp(name, "require-key"))
    return gw_buf_puts(o, v);
  if (!strcmp(name, "methods") || !strcmp(name, "store-statuses"))
    return json_list(o, v);
  if (!strcmp(name, "replay-headers"))
    return gw_buf_puts(o, "{\"drop\":") || json_list(o, strcmp(v, "all") ? v + 5 : "") ||
           gw_buf_puts(o, "}");
  if (!strcmp(name, "fingerprint") && !strncmp(v, "json:", 5))
    return gw_buf_puts(o, "{\"json\":") || json_list(o, v + 5) || gw_buf_puts(o, "}");
  return policy_json_string(o, v, strlen(v));
}

static int json_policy(gw_buf *o, const gw_policy *p) {
  int err = 0;
  for (size_t k = 0; k < gw_policy_table.n && !err; k++) {
    const char *name = gw_policy_table.rows[k].name;
    char v[2048], key[64];
    key_name(name, key, sizeof key);
    gw_policy_value(p, name, v, sizeof v);
    err |= gw_buf_printf(o, "%s\"%s\":", k ? "," : "", key) || json_value(o, name, v);
  }
  return err;
}

static int json_route(gw_buf *o, const gw_route *r) {
  char m[GW_MAX_METHODS * 17] = "";
  for (int i = 0; i < r->nmethods; i++)
    snprintf(m + strlen(m), sizeof m - strlen(m), "%s%s", i ? "," : "", r->methods[i]);
  int err = gw_buf_printf(o, "{\"index\":%d,\"line\":%d,\"match\":{\"methods\":", r->index, r->line);
  err |= r->nmethods ? json_list(o, m) : gw_buf_puts(o, "null");
  err |= gw_buf_puts(o, ",\"path\":");
  err |= r->path[0] ? policy_json_string(o, r->path, strlen(r->path)) : gw_buf_puts(o, "null");
  err |= gw_buf_puts(o, "},") || json_policy(o, &r->policy) || gw_buf_puts(o, "}");
  return err;
}

int gw_routes_json(const gw_routes *t, gw_buf *out) {
  int err = gw_buf_puts(out, "{\"source\":");
  err |= t->source[0] ? policy_json_string(out, t->source, strlen(t->source))
                      : gw_buf_puts(out, "null");
  err |= gw_buf_puts(out, ",\"routes\":[");
  for (int i = 0; i < t->n && !err; i++)
    err |= (i && gw_buf_puts(out, ",")) || json_route(out, &t->routes[i]);
  err |= gw_buf_puts(out, "],\"defaults\":{") || json_policy(out, &t->defaults.policy) ||
         gw_buf_puts(out, "}}\n");
  return err ? -1 : 0;
}

/* ---- OpenAPI ---- */

/* The glob as an OpenAPI path template: "*" segments become {p1}, {p2}...
 * 0, or -1 when it has other wildcards ("**", "?", "*" within a segment). */
static int path_template(const char *glob, char *out, size_t len) {
  size_t o = 0;
  int n = 0;
  if (glob[0] != '/')
    return -1;
  for (const char *p = glob; *p;) {
    const char *seg = p + 1, *end = strchr(seg, '/');
    size_t sl = end ? (size_t)(end - seg) : strlen(seg);
    int w;
    if (sl == 1 && seg[0] == '*')
      w = snprintf(out + o, len - o, "/{p%d}", ++n);
    else if (memchr(seg, '*', sl) || memchr(seg, '?', sl) || memchr(seg, '{', sl))
      return -1;
    else
      w = snprintf(out + o, len - o, "/%.*s", (int)sl, seg);
    if (w < 0 || (size_t)w >= len - o)
      return -1;
    o += (size_t)w;
    p = seg + sl;
  }
  return 0;
}

/* the rest of a response object: its problem+json content */
static const char problem_ref[] =
    "\"content\":{\"application/problem+json\":{\"schema\":{\"$ref\":"
    "\"#/components/schemas/IdemProblem\"}}}}";

/* The operation object of a method under route r's policy. */
static int openapi_operation(gw_buf *o, const gw_route *r, const char *template) {
  const gw_policy *p = &r->policy;
  char src[300];
  policy_key_source_text(p, src, sizeof src);
  int err = gw_buf_puts(o, "{\"parameters\":[");
  if (p->key_kind != GW_KEY_JSON) {
    err |= gw_buf_puts(o, "{\"name\":") || policy_json_string(o, p->key_arg, strlen(p->key_arg)) ||
           gw_buf_printf(o, ",\"in\":\"%s\",\"required\":%s,\"description\":\"The idempotency "
                            "key: 1 to 255 printable ASCII characters.\",\"schema\":{\"type\":"
                            "\"string\",\"minLength\":1,\"maxLength\":255}}",
                         p->key_kind == GW_KEY_QUERY ? "query" : "header",
                         p->require_key ? "true" : "false");
  }
  for (int i = 1; template && strstr(template, "{p") && !err; i++) {
    char name[16];
    snprintf(name, sizeof name, "{p%d}", i);
    if (!strstr(template, name))
      break;
    err |= gw_buf_printf(o, "%s{\"name\":\"p%d\",\"in\":\"path\",\"required\":true,\"schema\":"
                            "{\"type\":\"string\"}}",
                         (p->key_kind != GW_KEY_JSON || i > 1) ? "," : "", i);
  }
  char ttl[32], fp[1200];
  gw_policy_value(p, "ttl", ttl, sizeof ttl);
  gw_policy_value(p, "fingerprint", fp, sizeof fp);
  err |= gw_buf_puts(o, "],\"responses\":{\"400\":") ||
         gw_buf_printf(o, "{\"description\":\"The key is malformed%s (urn:idem:problem:invalid-"
                          "key%s).\",",
                       p->require_key ? ", or missing" : "",
                       p->require_key ? ", key-required" : "") ||
         gw_buf_puts(o, problem_ref) ||
         gw_buf_puts(o, ",\"409\":{\"description\":\"A request with this key is still being "
                        "processed (urn:idem:problem:request-in-progress); retry after "
                        "Retry-After.\",\"headers\":{\"Retry-After\":{\"schema\":{\"type\":"
                        "\"integer\"}}},") ||
         gw_buf_puts(o, problem_ref) ||
         gw_buf_puts(o, ",\"422\":{\"description\":\"The key was used with a different request "
                        "(urn:idem:problem:key-reused).\",") ||
         gw_buf_puts(o, problem_ref) || gw_buf_puts(o, "}");
  err |= gw_buf_puts(o, ",\"x-idem-key\":") || policy_json_string(o, src, strlen(src)) ||
         gw_buf_puts(o, ",\"x-idem-fingerprint\":") || policy_json_string(o, fp, strlen(fp)) ||
         gw_buf_printf(o, ",\"x-idem-ttl\":\"%s\",\"x-idem-mode\":\"%s\"}", ttl,
                       p->mode == GW_MODE_SHADOW ? "shadow" : "enforce");
  return err;
}

/* Whether glob k matches every path that glob g matches. Tried on two
 * paths of g: each of its wildcards as one character, then as three ("**"
 * as two segments). A sample, not a proof, but right for what routes are
 * written with: whole "*" segments, a trailing "**", literal segments. */
static int glob_covers(const char *k, const char *g) {
  if (!k[0])
    return 1; /* no path: every path */
  for (int wide = 0; wide < 2; wide++) {
    char s[1200];
    size_t n = 0;
    for (const char *p = g[0] ? g : "**"; *p && n + 8 < sizeof s; p++) {
      const char *w = NULL;
      if (p[0] == '*' && p[1] == '*')
        for (w = wide ? "\1/\1\1" : "\1"; p[1] == '*';)
          p++;
      else if (*p == '*')
        w = wide ? "\1\1\1" : "\1";
      else if (*p == '?')
        w = "\1";
      if (!w)
        s[n++] = *p;
      for (; w && *w; w++)
        s[n++] = *w;
    }
    if (!gw_glob_match(k, s, n))
      return 0;
  }
  return 1;
}

static int matches_method(const gw_route *r, const char *m) {
  for (int k = 0; k < r->nmethods; k++)
    if (!strcmp(r->methods[k], m))
      return 1;
  return !r->nmethods;
}

/* Whether route i publishes an operation for method m: it matches m, has
 * idempotency semantics for it, is not off, and no earlier route takes m
 * on its paths (first match wins, as serve matches: PUT on a path can go
 * to one route and POST to a later one). The defaults (i == t->n) take
 * what no route does. */
static int publishes(const gw_routes *t, int i, const char *m) {
  const gw_route *r = i < t->n ? &t->routes[i] : &t->defaults;
  if (r->policy.mode == GW_MODE_OFF || !matches_method(r, m))
    return 0;
  for (int k = 0; k < i && i < t->n; k++)
    if (matches_method(&t->routes[k], m) && glob_covers(t->routes[k].path, r->path))
      return 0;
  return 1;
}

/* Route i's operations (each method it publishes) into o, after *n
 * written; with o NULL, only counted. */
static int openapi_operations(gw_buf *o, const gw_routes *t, int i, const char *template,
                              int *n) {
  const gw_route *r = i < t->n ? &t->routes[i] : &t->defaults;
  int err = 0;
  for (int k = 0; k < r->policy.nmethods && !err; k++) {
    const char *m = r->policy.methods[k];
    if (!publishes(t, i, m))
      continue;
    char lower[16];
    for (size_t c = 0; c < sizeof lower; c++)
      lower[c] = (char)tolower((unsigned char)m[c]);
    if (o)
      err |= gw_buf_printf(o, "%s\"%s\":", *n ? "," : "", lower) ||
             openapi_operation(o, r, template);
    ++*n;
  }
  return err;
}

/* The operations of every route with route i's glob, whose first route
 * it is, into o (NULL: only counted in *n). */
static int openapi_path_ops(gw_buf *o, const gw_routes *t, int i, const char *template, int *n) {
  int err = 0;
  for (int k = i; k < t->n && !err; k++)
    if (!strcmp(t->routes[k].path, t->routes[i].path))
      err |= openapi_operations(o, t, k, template, n);
  return err;
}

/* Whether route i's glob is that of an earlier route: its operations are
 * in that route's path item. */
static int listed_before(const gw_routes *t, int i) {
  for (int k = 0; k < i; k++)
    if (!strcmp(t->routes[k].path, t->routes[i].path))
      return 1;
  return 0;
}

int gw_routes_openapi(const gw_routes *t, gw_buf *out) {
  int err = gw_buf_puts(out, "{\"openapi\":\"3.1.0\",\"info\":{\"title\":\"Idempotency policy "
                             "(idem serve)\",\"version\":\"1\"},\"paths\":{");
  int first = 1;
  for (int i = 0; i < t->n && !err; i++) {
    const gw_route *r = &t->routes[i];
    char tpl[600];
    int n = 0;
    if (!r->path[0] || listed_before(t, i) || path_template(r->path, tpl, sizeof tpl) ||
        openapi_path_ops(NULL, t, i, tpl, &n) || !n)
      continue; /* no template, or nothing published on it (mode off) */
    n = 0;
    err |= gw_buf_printf(out, "%s", first ? "" : ",") || policy_json_string(out, tpl, strlen(tpl)) ||
           gw_buf_puts(out, ":{") || openapi_path_ops(out, t, i, tpl, &n) || gw_buf_puts(out, "}");
    first = 0;
  }
  err |= gw_buf_puts(out, "},\"x-idem-routes\":[");
  first = 1;
  for (int i = 0; i <= t->n && !err; i++) {
    const gw_route *r = i < t->n ? &t->routes[i] : &t->defaults;
    char tpl[600], m[600];
    int n = 0;
    if (r->policy.mode == GW_MODE_OFF ||
        (i < t->n && r->path[0] && !path_template(r->path, tpl, sizeof tpl)))
      continue; /* off, or a path item above */
    if (i < t->n && (openapi_operations(NULL, t, i, NULL, &n) || !n))
      continue; /* it decides for no method it has semantics for */
    gw_route_match_text(r, m, sizeof m);
    if (i == t->n)
      snprintf(m, sizeof m, "defaults");
    n = 0;
    err |= gw_buf_printf(out, "%s{\"match\":", first ? "" : ",") ||
           policy_json_string(out, m, strlen(m)) || gw_buf_puts(out, ",\"operations\":{") ||
           openapi_operations(out, t, i, NULL, &n) || gw_buf_puts(out, "}}");
    first = 0;
  }
  err |= gw_buf_puts(out,
                     "],\"components\":{\"schemas\":{\"IdemProblem\":{\"type\":\"object\","
                     "\"description\":\"RFC 9457 problem details\",\"properties\":{\"type\":"
                     "{\"type\":\"string\"},\"title\":{\"type\":\"string\"},\"status\":{\"type\":"
                     "\"integer\"},\"detail\":{\"type\":\"string\"}}}}}}\n");
  return err ? -1 : 0;
}
