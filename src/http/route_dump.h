/*
 * route_dump.h - a route table told to people and programs: the effective
 * policy per route as text (idem config check), as JSON (GET /policy on
 * the admin listener), and as an OpenAPI 3.1 fragment (idem config
 * openapi): the idempotency key parameter and the 400/409/422 answers of
 * every route that enforces.
 */
#ifndef IDEM_HTTP_ROUTE_DUMP_H
#define IDEM_HTTP_ROUTE_DUMP_H

#include <stdio.h>

#include "http/msg.h"
#include "http/route.h"

/* Each route (then the defaults) with every setting's effective value. */
void gw_routes_print(const gw_routes *t, FILE *out);

/* {"source": FILE|null, "routes": [{"index", "line", "match": {"methods",
 * "path"}, SETTING: VALUE...}], "defaults": {SETTING: VALUE...}}; setting
 * names as in the file (lock_ttl). 0, or -1 out of memory. */
int gw_routes_json(const gw_routes *t, gw_buf *out);

/* An OpenAPI 3.1 document (JSON) with a path item per glob that is a path
 * template ("*" as a whole segment becomes {p1}, ...); routes with other
 * globs are listed under x-idem-routes. A method's operation is the route
 * that serve would match first for it (so routes of one glob share a path
 * item); routes in mode off publish none, and shadow the routes after
 * them as they do in serve. 0, or -1 out of memory. */
int gw_routes_openapi(const gw_routes *t, gw_buf *out);

#endif
