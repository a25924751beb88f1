/*
 * config_file.h - the YAML config file of `idem serve --config FILE`, read
 * with libyaml into settings as text, each with the line it came from:
 *
 *   listen: 127.0.0.1:8081        top level: any serve setting (admin_listen
 *   defaults: {ttl: 24h, ...}     is --admin-listen), `defaults:` (route
 *   routes:                       settings only) and `routes:`
 *     - match: {methods: [POST], path: /v1/payments/{glob}}
 *       ttl: 7d
 *
 * A value becomes the text its flag would take: a scalar as it is, a list
 * joined with commas ([POST, PATCH] is "POST,PATCH"), a one-key map as
 * "key:value" ({json: [/a, /b]} is "json:/a,/b"). Names are checked here
 * against the tables (unknown keys, route-only keys where they do not
 * belong, a setting given twice); values are parsed later by the same
 * table rows as the flags. Errors are "FILE:LINE: reason".
 */
#ifndef IDEM_HTTP_CONFIG_FILE_H
#define IDEM_HTTP_CONFIG_FILE_H

#include <stddef.h>

#include "core/settings.h"

#define CF_MAX_BYTES (1u << 20)
#define CF_MAX_DEPTH 64 /* lists and maps within each other */

typedef struct {
  const char *name;  /* the table's name: "admin-listen" */
  const char *key;   /* as written: "admin_listen" */
  const char *value; /* as flag text */
  int line;
} cf_item;

typedef struct {
  int line;
  const char *path;    /* NULL: every path */
  const char *methods; /* NULL: every method; else "POST,PUT" */
  int match_line;
  cf_item *items;
  int n;
} cf_route;

typedef struct cf_doc {
  char *file;
  cf_item *top; /* top-level and defaults: settings, in file order */
  int ntop;
  cf_route *routes;
  int nroutes;
  char **strs; /* every string above, freed with the doc */
  int nstrs, capstrs;
} cf_doc;

/* Read and check FILE: 0 with *out (cf_free it), or -1 with err, or
 * CF_UNREADABLE when it cannot be opened or read (err says why). top is
 * every top-level setting (serve's table), route the route settings. */
#define CF_UNREADABLE (-2)
int cf_load(const char *file, const setting_table *top, const setting_table *route,
            cf_doc **out, char *err, size_t errlen);

/* The same from text in memory; name stands for the file in errors. */
int cf_parse(const char *text, size_t len, const char *name, const setting_table *top,
             const setting_table *route, cf_doc **out, char *err, size_t errlen);

void cf_free(cf_doc *d);

/* The value of top-level setting name (the table's name), or NULL. */
const cf_item *cf_top(const cf_doc *d, const char *name);

/* "FILE:LINE: " and the message, with control characters in it escaped
 * ("\n"), so that a value quoted in it keeps the message on one line. */
void cf_error(char *err, size_t errlen, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Rewrite a settings error ("--lock-ttl: '3x' is not ...") for item it of
 * file: "FILE:LINE: lock_ttl: '3x' is not ...". */
void cf_item_error(const char *file, const cf_item *it, const char *msg, char *err,
                   size_t errlen);

#endif
