/* route.c - route settings, route tables and matching (route.h). */
#include "http/route.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "core/json_pointer.h"
#include "core/text.h"

/* ---- values ---- */

static gw_policy *policy_of(void *cfg, const setting *s) {
  return (gw_policy *)(void *)((char *)cfg + s->offset);
}

static int refuse(char *err, size_t len, const setting *s, const char *v, const char *what,
                  const char *form) {
  snprintf(err, len, "--%s: '%s' is not %s; use %s", s->name, v, what, form);
  return -1;
}

static int is_tchar(int c) { return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c)); }

static int is_token(const char *s, size_t n) {
  if (!n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!is_tchar((unsigned char)s[i]))
      return 0;
  return 1;
}

/* The next comma-separated item of *p, spaces trimmed, into out (cap
 * bytes): its length, or -1 when it does not fit; *p moves past it. Returns
 * -2 at the end of the list. */
static int next_item(const char **p, char *out, size_t cap) {
  if (!*p)
    return -2;
  const char *s = *p, *comma = strchr(s, ',');
  const char *e = comma ? comma : s + strlen(s);
  *p = comma ? comma + 1 : NULL;
  while (s < e && (*s == ' ' || *s == '\t'))
    s++;
  while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
    e--;
  if ((size_t)(e - s) >= cap)
    return -1;
  memcpy(out, s, (size_t)(e - s));
  out[e - s] = 0;
  return (int)(e - s);
}

/* Whether the request parser takes method m: any other is a 400 before
 * a route is looked at, so a route's list naming it could never match.
 * http_parser knows CONNECT, but the request parser refuses it (a tunnel
 * is not a request this gateway can forward). */
static int known_method(const char *m) {
  if (!strcmp(m, "CONNECT"))
    return 0;
#define KNOWN(num, name, string) \
  if (!strcmp(m, #string))       \
    return 1;
  HTTP_METHOD_MAP(KNOWN)
#undef KNOWN
  return 0;
}

int gw_parse_method_list(const char *list, char methods[][16], int max, int *n) {
  char m[16];
  int k = 0, len;
  for (const char *p = list; (len = next_item(&p, m, sizeof m)) != -2;) {
    if (len <= 0 || k == max)
      return -1;
    for (char *c = m; *c; c++)
      *c = (char)toupper((unsigned char)*c);
    if (!is_token(m, (size_t)len) || !known_method(m))
      return -1;
    int dup = 0;
    for (int i = 0; i < k; i++)
      dup |= !strcmp(methods[i], m);
    if (!dup)
      memcpy(methods[k++], m, sizeof m);
  }
  *n = k;
  return 0;
}

int gw_policy_parse_methods(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  gw_policy *p = policy_of(cfg, s);
  char form[96];
  snprintf(form, sizeof form, "comma-separated HTTP method names (e.g. POST,PATCH,PUT), at most %d",
           GW_MAX_METHODS);
  if (gw_parse_method_list(v, p->methods, GW_MAX_METHODS, &p->nmethods))
    return refuse(err, len, s, v, "a method list", form);
  return 0;
}

/* A query parameter name: what a client writes before '='. */
static int query_name_ok(const char *n) {
  if (!*n)
    return 0;
  for (; *n; n++)
    if ((unsigned char)*n <= 0x20 || (unsigned char)*n >= 0x7f || strchr("&=#?%+", *n))
      return 0;
  return 1;
}

int gw_policy_parse_key(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  gw_policy *p = policy_of(cfg, s);
  const char *arg = strchr(v, ':');
  arg = arg ? arg + 1 : "";
  int ok = strlen(arg) < sizeof p->key_arg;
  if (ok && !strncmp(v, "header:", 7) && is_token(arg, strlen(arg)))
    p->key_kind = GW_KEY_HEADER;
  else if (ok && !strncmp(v, "json:", 5) && arg[0] == '/' && json_pointer_valid(arg, strlen(arg)))
    p->key_kind = GW_KEY_JSON;
  else if (ok && !strncmp(v, "query:", 6) && query_name_ok(arg))
    p->key_kind = GW_KEY_QUERY;
  else
    return refuse(err, len, s, v, "a key source",
                  "header:NAME, json:/POINTER (RFC 6901, into a JSON body; e.g. "
                  "json:/order_id) or query:NAME");
  snprintf(p->key_arg, sizeof p->key_arg, "%s", arg);
  return 0;
}

int gw_policy_parse_fingerprint(void *cfg, const setting *s, const char *v, char *err,
                                size_t len) {
  gw_policy *p = policy_of(cfg, s);
  static const char form[] =
      "raw, json (canonical JSON) or json:/A,/B (only those members, RFC 6901 pointers; at "
      "most 16)";
  if (!strcmp(v, "raw") || !strcmp(v, "json")) {
    p->fp_kind = !strcmp(v, "raw") ? GW_FP_RAW : GW_FP_JSON;
    p->nfp_members = 0;
    return 0;
  }
  if (strncmp(v, "json:", 5))
    return refuse(err, len, s, v, "a fingerprint", form);
  int n = 0, ilen;
  char m[128];
  for (const char *it = v + 5; (ilen = next_item(&it, m, sizeof m)) != -2;) {
    if (ilen <= 0 || m[0] != '/' || n == GW_POLICY_MAX_MEMBERS ||
        !json_pointer_valid(m, (size_t)ilen))
      return refuse(err, len, s, v, "a fingerprint", form);
    for (int i = 0; i < n; i++)
      if (!strcmp(p->fp_members[i], m)) {
        snprintf(err, len, "--%s: '%s' names %s twice", s->name, v, m);
        return -1;
      }
    memcpy(p->fp_members[n++], m, sizeof m);
  }
  p->fp_kind = GW_FP_MEMBERS;
  p->nfp_members = n;
  return 0;
}

static void bit_set(uint64_t *bits, int status) {
  bits[(status - 200) / 64] |= 1ull << ((status - 200) % 64);
}

/* The statuses never kept, whatever a list says: the upstream did not
 * decide (timeout, conflict with a request in flight, too early, rate
 * limit), so a retry must be able to run. */
static int never_stored(int status) {
  return status == 408 || status == 409 || status == 425 || status == 429;
}

int gw_policy_parse_statuses(void *cfg, const setting *s, const char *v, char *err,
                             size_t len) {
  gw_policy *p = policy_of(cfg, s);
  static const char form[] = "a list of 2xx, 3xx, 4xx, 5xx or statuses from 200 to 599";
  uint64_t bits[7] = {0};
  char item[8], text[sizeof p->stored_text] = "";
  int ilen, n = 0;
  for (const char *it = v; (ilen = next_item(&it, item, sizeof item)) != -2; n++) {
    int cls = ilen == 3 && item[0] >= '2' && item[0] <= '5' && tolower((unsigned char)item[1]) == 'x' &&
              tolower((unsigned char)item[2]) == 'x';
    int code = ilen == 3 && isdigit((unsigned char)item[0]) && isdigit((unsigned char)item[1]) &&
                       isdigit((unsigned char)item[2])
                   ? atoi(item)
                   : 0;
    if (!cls && (code < 200 || code > 599))
      return refuse(err, len, s, v, "a status list", form);
    if (code && never_stored(code)) {
      snprintf(err, len,
               "--%s: %d is never stored (408, 409, 425 and 429 always release the key so "
               "that a retry runs)",
               s->name, code);
      return -1;
    }
    for (int st = cls ? (item[0] - '0') * 100 : code; st <= (cls ? (item[0] - '0') * 100 + 99 : code);
         st++)
      if (!never_stored(st))
        bit_set(bits, st);
    if (cls)
      item[1] = item[2] = 'x';
    size_t tl = strlen(text);
    snprintf(text + tl, sizeof text - tl, "%s%s", tl ? "," : "", item);
  }
  if (!n)
    return refuse(err, len, s, v, "a status list", form);
  memcpy(p->stored, bits, sizeof bits);
  snprintf(p->stored_text, sizeof p->stored_text, "%s", text);
  return 0;
}

int gw_policy_parse_replay(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  gw_policy *p = policy_of(cfg, s);
  static const char form[] = "all, or drop:NAME,NAME (header names; NAME* for a prefix; at most 16)";
  if (!strcmp(v, "all") || !strcmp(v, "drop:")) {
    p->ndrop = 0;
    return 0;
  }
  if (strncmp(v, "drop:", 5))
    return refuse(err, len, s, v, "a replay rule", form);
  int n = 0, ilen;
  char h[64];
  for (const char *it = v + 5; (ilen = next_item(&it, h, sizeof h)) != -2;) {
    size_t tl = ilen > 0 && h[ilen - 1] == '*' ? (size_t)ilen - 1 : (size_t)ilen;
    if (ilen <= 0 || n == GW_POLICY_MAX_DROP || (tl && !is_token(h, tl)) ||
        memchr(h, '*', tl))
      return refuse(err, len, s, v, "a replay rule", form);
    memcpy(p->drop[n++], h, sizeof h);
  }
  p->ndrop = n;
  return 0;
}

int gw_policy_parse_mode(void *cfg, const setting *s, const char *v, char *err, size_t len) {
  gw_policy *p = policy_of(cfg, s);
  if (!strcmp(v, "enforce"))
    p->mode = GW_MODE_ENFORCE;
  else if (!strcmp(v, "shadow"))
    p->mode = GW_MODE_SHADOW;
  else if (!strcmp(v, "off"))
    p->mode = GW_MODE_OFF;
  else
    return refuse(err, len, s, v, "a mode", "enforce, shadow or off");
  return 0;
}

static const setting policy_rows[] = {GW_POLICY_ROWS(0)};
const setting_table gw_policy_table = {"route", policy_rows,
                                       sizeof policy_rows / sizeof policy_rows[0]};

/* ---- values as text ---- */

static void join(char *out, size_t len, const char *prefix, const char (*items)[16],
                 size_t stride, int n) {
  size_t o = (size_t)snprintf(out, len, "%s", prefix);
  for (int i = 0; i < n && o < len; i++)
    o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "," : "",
                          (const char *)items + (size_t)i * stride);
}

void gw_policy_value(const gw_policy *p, const char *name, char *out, size_t len) {
  static const char *const key_kind[] = {"header", "json", "query"};
  static const char *const mode[] = {"enforce", "shadow", "off"};
  if (!strcmp(name, "methods"))
    join(out, len, "", p->methods, sizeof p->methods[0], p->nmethods);
  else if (!strcmp(name, "ttl"))
    settings_duration_text(p->ttl_ms, out, len);
  else if (!strcmp(name, "lock-ttl"))
    settings_duration_text(p->lock_ttl_ms, out, len);
  else if (!strcmp(name, "wait"))
    settings_duration_text(p->wait_ms, out, len);
  else if (!strcmp(name, "require-key"))
    snprintf(out, len, "%s", p->require_key ? "true" : "false");
  else if (!strcmp(name, "key"))
    snprintf(out, len, "%s:%s", key_kind[p->key_kind], p->key_arg);
  else if (!strcmp(name, "fingerprint"))
    p->fp_kind == GW_FP_MEMBERS
        ? join(out, len, "json:", (const char (*)[16])(const void *)p->fp_members,
               sizeof p->fp_members[0], p->nfp_members)
        : (void)snprintf(out, len, "%s", p->fp_kind == GW_FP_JSON ? "json" : "raw");
  else if (!strcmp(name, "store-statuses"))
    snprintf(out, len, "%s", p->stored_text);
  else if (!strcmp(name, "replay-headers"))
    p->ndrop ? join(out, len, "drop:", (const char (*)[16])(const void *)p->drop,
                    sizeof p->drop[0], p->ndrop)
             : (void)snprintf(out, len, "all");
  else if (!strcmp(name, "mode"))
    snprintf(out, len, "%s", mode[p->mode]);
  else if (len)
    out[0] = 0;
}

int gw_policy_has_method(const gw_policy *p, const char *method) {
  for (int i = 0; i < p->nmethods; i++)
    if (!strcmp(p->methods[i], method))
      return 1;
  return 0;
}

int gw_policy_stores(const gw_policy *p, int status) {
  if (status < 200 || status > 599)
    return 0;
  return (int)((p->stored[(status - 200) / 64] >> ((status - 200) % 64)) & 1);
}

/* ---- routes ---- */

gw_routes *gw_routes_new(int n) {
  gw_routes *t = calloc(1, sizeof *t + (size_t)n * sizeof t->routes[0]);
  if (!t)
    return NULL;
  atomic_init(&t->refs, 1);
  t->n = n;
  return t;
}

gw_routes *gw_routes_hold(gw_routes *t) {
  if (t)
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
  return t;
}

void gw_routes_release(gw_routes *t) {
  if (t && atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) == 1)
    free(t);
}

int gw_glob_match(const char *g, const char *s, size_t len) {
  /* The classic iterative wildcard matcher, with two backtracking points:
   * on a mismatch the last "*" takes one more character unless that is a
   * "/" (a "*" stays in its segment), else the last "**" does, and the
   * "*" after it starts over. Past a "*" that cannot extend, no earlier "*"
   * could help: each "/" of the glob is bound to one of the path. */
  const char *one = NULL, *any = NULL;
  size_t i = 0, one_i = 0, any_i = 0;
  while (i < len) {
    if (*g == '*') {
      if (g[1] == '*') {
        while (*g == '*')
          g++;
        any = g;
        any_i = i;
        one = NULL;
      } else {
        one = ++g;
        one_i = i;
      }
      continue;
    }
    if (*g && (*g == s[i] || (*g == '?' && s[i] != '/'))) {
      g++;
      i++;
      continue;
    }
    if (one && s[one_i] != '/') {
      g = one;
      i = ++one_i;
      continue;
    }
    if (any) {
      one = NULL;
      g = any;
      i = ++any_i;
      continue;
    }
    return 0;
  }
  while (*g == '*')
    g++;
  return *g == 0;
}

static int unreserved(int c) {
  return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* Whether the path has what route_path changes: a %XX, a ";", a "\\", a
 * "/." or a "//". */
static int needs_normal(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] == '%' || p[i] == ';' || p[i] == '\\' ||
        (i && p[i - 1] == '/' && (p[i] == '.' || p[i] == '/')))
      return 1;
  return 0;
}

/* In place: runs of "/" as one, and each segment's ";parameters" gone
 * (nginx merges slashes; Tomcat and Spring drop path parameters). Returns
 * the new length. */
static size_t merge_segments(char *path, size_t n) {
  size_t w = 0;
  for (size_t r = 0; r < n; r++) {
    if (path[r] == ';') {
      while (r + 1 < n && path[r + 1] != '/')
        r++;
      continue;
    }
    if (path[r] == '/' && w && path[w - 1] == '/')
      continue;
    path[w++] = path[r];
  }
  return w;
}

/* RFC 3986 5.2.4 on path[0..n), in place: "." and ".." segments go, each
 * ".." with the segment before it. Returns the new length. */
static size_t remove_dot_segments(char *path, size_t n) {
  size_t r = 0, w = 0;
  while (r < n) {
    size_t e = r + 1;
    while (e < n && path[e] != '/')
      e++;
    size_t seg = e - r - 1;
    int dot = seg == 1 && path[r + 1] == '.';
    int dotdot = seg == 2 && path[r + 1] == '.' && path[r + 2] == '.';
    if (dot || dotdot) {
      if (dotdot)
        while (w > 0 && path[--w] != '/')
          ;
      if (e == n)
        path[w++] = '/'; /* "/a/." and "/a/b/.." end in a slash */
    } else {
      memmove(path + w, path + r, e - r);
      w += e - r;
    }
    r = e;
  }
  return w;
}

/* The path routes are matched against, as the upstream will read it:
 * percent-encoded unreserved characters decoded (RFC 3986 6.2.2.2: "%70"
 * is "p") and the others' hex digits in upper case (6.2.2.1: "%2f" is
 * "%2F", as route globs are kept), a "\\" read as "/" (as the WHATWG URL parser of browsers and
 * Node reads it in an http URL), repeated slashes merged and path
 * parameters dropped, then dot-segments removed. Otherwise
 * "/v1/%70ayments/p1", "/internal/../v1/payments/p1" or
 * "/x\\..\\v1/payments/p1" would slip past a payments route to the
 * defaults, or to a route with mode off. Encoded reserved characters
 * ("%2F") stay as they are. out has room for n bytes; returns its length. */
static size_t route_path(const char *p, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int hi = i + 2 < n && p[i] == '%' ? idem_hexval((unsigned char)p[i + 1]) : -1;
    int lo = hi >= 0 ? idem_hexval((unsigned char)p[i + 2]) : -1;
    if (lo >= 0 && unreserved(hi * 16 + lo)) {
      out[o++] = (char)(hi * 16 + lo);
      i += 2;
    } else if (lo >= 0) {
      out[o++] = '%';
      out[o++] = (char)toupper((unsigned char)p[i + 1]);
      out[o++] = (char)toupper((unsigned char)p[i + 2]);
      i += 2;
    } else {
      out[o++] = p[i] == '\\' ? '/' : p[i];
    }
  }
  return o && out[0] == '/' ? remove_dot_segments(out, merge_segments(out, o)) : o;
}

void gw_glob_upper_escapes(char *glob) {
  for (; *glob; glob++)
    if (glob[0] == '%' && idem_hexval((unsigned char)glob[1]) >= 0 &&
        idem_hexval((unsigned char)glob[2]) >= 0) {
      glob[1] = (char)toupper((unsigned char)glob[1]);
      glob[2] = (char)toupper((unsigned char)glob[2]);
      glob += 2;
    }
}

int gw_glob_reachable(const char *glob, char *out, size_t len) {
  size_t n = strlen(glob);
  char normal[sizeof ((gw_route *)0)->path];
  if (n >= sizeof normal || !needs_normal(glob, n))
    return 0;
  size_t m = route_path(glob, n, normal);
  if (m == n && !memcmp(normal, glob, n))
    return 0; /* "%2F" stays as it is */
  snprintf(out, len, "%.*s", (int)m, normal);
  return -1;
}

static const gw_route *match_path(const gw_routes *t, const char *method, const char *path,
                                  size_t plen) {
  for (int i = 0; i < t->n; i++) {
    const gw_route *r = &t->routes[i];
    if (r->nmethods) {
      int m = 0;
      for (int k = 0; k < r->nmethods && !m; k++)
        m = !strcmp(r->methods[k], method);
      if (!m)
        continue;
    }
    if (!r->path[0] || gw_glob_match(r->path, path, plen) ||
        (plen > 1 && path[plen - 1] == '/' && gw_glob_match(r->path, path, plen - 1)))
      return r; /* "/v1/orders/" is "/v1/orders" too, as most frameworks read it */
  }
  return &t->defaults;
}

const gw_route *gw_routes_match(const gw_routes *t, const char *method, const char *target,
                                size_t target_len) {
  size_t plen = 0; /* the path: up to the query or a fragment */
  while (plen < target_len && target[plen] != '?' && target[plen] != '#')
    plen++;
  if (!t->n || !needs_normal(target, plen))
    return match_path(t, method, target, plen);
  char small[1024], *path = plen <= sizeof small ? small : malloc(plen);
  if (!path)
    return &t->defaults; /* out of memory for a long path: as if no route matched */
  const gw_route *r = match_path(t, method, path, route_path(target, plen, path));
  if (path != small)
    free(path);
  return r;
}

void gw_route_match_text(const gw_route *r, char *out, size_t len) {
  char m[GW_MAX_METHODS * 17];
  if (r->nmethods)
    join(m, sizeof m, "", r->methods, sizeof r->methods[0], r->nmethods);
  else
    snprintf(m, sizeof m, "*");
  snprintf(out, len, "%s %s", m, r->path[0] ? r->path : "*");
}

/* ---- the current table ---- */

static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static gw_routes *current;
static atomic_uint generation;

void gw_routes_publish(gw_routes *t) {
  pthread_mutex_lock(&current_lock);
  gw_routes *old = current;
  current = t;
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  pthread_mutex_unlock(&current_lock);
  gw_routes_release(old);
}

gw_routes *gw_routes_current(void) {
  pthread_mutex_lock(&current_lock);
  gw_routes *t = gw_routes_hold(current);
  pthread_mutex_unlock(&current_lock);
  return t;
}

unsigned gw_routes_generation(void) {
  return atomic_load_explicit(&generation, memory_order_acquire);
}
