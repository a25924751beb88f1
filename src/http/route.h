/*
 * route.h - per-route policy of `idem serve`: what one route's requests get
 * (gw_policy: methods, TTLs, key source, fingerprint, stored statuses,
 * replayed headers, mode), the routes that pick a policy by method and path
 * glob (first match wins, the defaults when none does), and the one table
 * in force.
 *
 * A table is immutable once built and reference-counted: a request holds
 * the table it started with until it ends, so a reload (SIGHUP) swaps the
 * table for new requests while requests in flight finish under the old
 * one. The process's current table sits behind a mutex and a generation
 * number: a worker compares the generation (one relaxed atomic load per
 * request) and takes the mutex only when it changed.
 *
 * The route settings are one settings table (GW_POLICY_ROWS): serve's flags
 * (--ttl, --key, --mode, ...) set the defaults through it, a config file's
 * `defaults:` and each route's keys go through the same rows.
 */
#ifndef IDEM_HTTP_ROUTE_H
#define IDEM_HTTP_ROUTE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/settings.h"

#define GW_MAX_METHODS 16
#define GW_POLICY_MAX_MEMBERS 16 /* fingerprint {json: [...]} */
#define GW_POLICY_MAX_DROP 16    /* replay_headers {drop: [...]} */
#define GW_ROUTES_MAX 1024

typedef enum { GW_KEY_HEADER = 0, GW_KEY_JSON, GW_KEY_QUERY } gw_key_kind;
typedef enum { GW_FP_RAW = 0, GW_FP_JSON, GW_FP_MEMBERS } gw_fp_kind;
typedef enum { GW_MODE_ENFORCE = 0, GW_MODE_SHADOW, GW_MODE_OFF } gw_mode;

/* One route's settings, compiled. */
typedef struct {
  char methods[GW_MAX_METHODS][16]; /* methods with idempotency semantics */
  int nmethods;
  int64_t ttl_ms, lock_ttl_ms, wait_ms;
  int require_key;
  gw_key_kind key_kind;
  char key_arg[256]; /* header name, JSON pointer or query parameter */
  gw_fp_kind fp_kind;
  char fp_members[GW_POLICY_MAX_MEMBERS][128]; /* JSON pointers */
  int nfp_members;
  uint64_t stored[7];   /* bit (status - 200): statuses 200..599 kept */
  char stored_text[96]; /* the list as given, normalised: "2xx,3xx,4xx" */
  char drop[GW_POLICY_MAX_DROP][64]; /* header names (a trailing * is a prefix) */
  int ndrop;
  gw_mode mode;
} gw_policy;

/* Parsers of the route settings' values (settings.h CUSTOM rows). Each
 * row's offset is that of the gw_policy in the struct being set. */
int gw_policy_parse_methods(void *cfg, const setting *s, const char *v, char *err, size_t len);
int gw_policy_parse_key(void *cfg, const setting *s, const char *v, char *err, size_t len);
int gw_policy_parse_fingerprint(void *cfg, const setting *s, const char *v, char *err,
                                size_t len);
int gw_policy_parse_statuses(void *cfg, const setting *s, const char *v, char *err, size_t len);
int gw_policy_parse_replay(void *cfg, const setting *s, const char *v, char *err, size_t len);
int gw_policy_parse_mode(void *cfg, const setting *s, const char *v, char *err, size_t len);

#define GW_PF(f) offsetof(gw_policy, f)
#define GW_DUR_MAX (100LL * 365 * 24 * 3600 * 1000) /* the store's own bound */

/* The route settings as settings-table rows, for a gw_policy at offset B. */
#define GW_POLICY_ROWS(B)                                                                      \
  {"methods", "LIST", SETTING_CUSTOM, (B), "POST,PATCH", 0, 0, gw_policy_parse_methods,        \
   "methods with semantics"},                                                                  \
  {"ttl", "DUR", SETTING_DURATION, (B) + GW_PF(ttl_ms), "24h", 1, GW_DUR_MAX, NULL,           \
   "how long a completed record is kept"},                                                     \
  {"lock-ttl", "DUR", SETTING_DURATION, (B) + GW_PF(lock_ttl_ms), "30s", 1, GW_DUR_MAX, NULL, \
   "processing lease"},                                                                        \
  {"require-key", NULL, SETTING_SWITCH, (B) + GW_PF(require_key), NULL, 0, 0, NULL,           \
   "400 when a request of those methods has no key"},                                          \
  {"wait", "DUR", SETTING_DURATION, (B) + GW_PF(wait_ms), "0", 0, GW_DUR_MAX, NULL,           \
   "wait that long for an in-flight duplicate and\nreplay its answer (0: 409 at once)"},       \
  {"key", "SOURCE", SETTING_CUSTOM, (B), "header:Idempotency-Key", 0, 0, gw_policy_parse_key,  \
   "where the key is: header:NAME, json:/POINTER\n(into a JSON body) or query:NAME"},          \
  {"fingerprint", "FORM", SETTING_CUSTOM, (B), "raw", 0, 0, gw_policy_parse_fingerprint,       \
   "what makes two requests the same: raw (the body's\nbytes), json (canonical JSON) or "      \
   "json:/A,/B\n(only those members)"},                                                        \
  {"store-statuses", "LIST", SETTING_CUSTOM, (B), "2xx,3xx,4xx", 0, 0,                         \
   gw_policy_parse_statuses,                                                                   \
   "upstream statuses kept for replay: 2xx..5xx or\nSTATUS (never 408, 409, 425, 429)"},      \
  {"replay-headers", "RULE", SETTING_CUSTOM, (B), "all", 0, 0, gw_policy_parse_replay, \
   "headers of a kept answer that are replayed:\nall, or drop:Set-Cookie,..."},               \
  {"mode", "MODE", SETTING_CUSTOM, (B), "enforce", 0, 0, gw_policy_parse_mode,                 \
   "enforce, shadow (count what enforce would do,\nblock nothing) or off"}

/* The route rows alone, over a gw_policy (offset 0). */
extern const setting_table gw_policy_table;

/* The text of one route setting's value (name as in the table, "lock-ttl"),
 * in the form its flag takes. */
void gw_policy_value(const gw_policy *p, const char *name, char *out, size_t len);

/* Parse "POST,PATCH" (case-folded to upper case, tokens) into methods:
 * 0, or -1. */
int gw_parse_method_list(const char *list, char methods[][16], int max, int *n);

/* Whether method (as on the wire) is in p's methods. */
int gw_policy_has_method(const gw_policy *p, const char *method);

/* Whether status is kept for replay under p. */
int gw_policy_stores(const gw_policy *p, int status);

/* ---- routes ---- */

typedef struct {
  int index;      /* 1-based position in routes:; 0 for the defaults */
  int line;       /* where it starts in the file; 0 for the defaults */
  char path[256]; /* glob over the request path; "" matches every path */
  char methods[GW_MAX_METHODS][16]; /* the methods it matches; none: all */
  int nmethods;
  gw_policy policy;
} gw_route;

typedef struct gw_routes {
  atomic_int refs;
  char source[512]; /* the config file, "" for none */
  int n;
  gw_route defaults; /* for requests that no route matches */
  gw_route routes[];
} gw_routes;

/* A table of n routes, one reference held by the caller, routes zeroed. */
gw_routes *gw_routes_new(int n);
gw_routes *gw_routes_hold(gw_routes *t);
void gw_routes_release(gw_routes *t); /* NULL is fine */

/* The route for a request: the first whose methods and path glob match
 * (target's query ignored), else the defaults. */
const gw_route *gw_routes_match(const gw_routes *t, const char *method, const char *target,
                                size_t target_len);

/* Whether path[0..len) matches glob: "*" matches a run of characters
 * other than "/", "**" any run, "?" one character other than "/"; other
 * characters match themselves. */
int gw_glob_match(const char *glob, const char *path, size_t len);

/* In place: the hex digits of each %XX in a route's path glob in upper case,
 * as requests' paths are matched (RFC 3986 6.2.2.1: "%2f" is "%2F"). */
void gw_glob_upper_escapes(char *glob);

/* Whether a request's path can ever match glob (after
 * gw_glob_upper_escapes): 0; or -1, with out set to what such a path is
 * matched as (route paths are read with "//" merged, ";parameters" and
 * dot-segments removed, "\\" as "/", "%70" as "p"), so that a glob
 * written otherwise ("/v1//payments") would never match anything. */
int gw_glob_reachable(const char *glob, char *out, size_t len);

/* A route's match, as text: "POST,PUT /v1/payments/(glob)", or "*" for any. */
void gw_route_match_text(const gw_route *r, char *out, size_t len);

/* ---- the table in force (process-wide) ---- */

/* Make t the current table; the current table takes over the caller's
 * reference to t, and drops its hold on the previous one. */
void gw_routes_publish(gw_routes *t);
/* The current table, held (release it), or NULL before any publish. */
gw_routes *gw_routes_current(void);
/* Bumped by every publish. */
unsigned gw_routes_generation(void);

#endif
