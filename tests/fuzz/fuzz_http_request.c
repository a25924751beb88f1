/* fuzz_http_request.c - the gateway's request parser (src/http/reqparse.c)
 * on arbitrary bytes. Properties: no crash, leak or UB; every complete
 * request respects the limits; and the same bytes fed whole, split in two,
 * and one byte at a time give the same requests and the same verdict,
 * accepted or refused (a parser that depends on how TCP cuts the stream is a
 * smuggling bug); an accepted target is in origin form, or "*", and finds
 * the same route as that path behind "/./" or "/x/../" (routes match the
 * normalised path, route.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/config.c"
#include "http/msg.c"
#include "http/reqparse.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  int nreq;
  uint64_t digest; /* over method, target, headers, body of every request */
  gw_parse_result last;
  int error_status;
  int heads;
} verdict;

static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return (h ^ n) * 1099511628211ull;
}

static gw_config cfg;
static gw_routes *routes;

static void check_route(const gw_request *r) {
  if (r->target.p[0] != '/' || r->target.len > 4096)
    return;
  char alt[4096 + 8];
  const gw_route *want = gw_routes_match(routes, r->method, r->target.p, r->target.len);
  static const char *const prefixes[] = {"/.", "/x/.."};
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(prefixes[i]);
    memcpy(alt, prefixes[i], n);
    memcpy(alt + n, r->target.p, r->target.len);
    if (gw_routes_match(routes, r->method, alt, n + r->target.len) != want)
      abort();
  }
}

static void check(const gw_request *r) {
  if (r->body.len > cfg.max_body || !r->method[0] || !r->target.p ||
      r->target.p[r->target.len] != 0)
    abort();
  /* what goes upstream is origin form (absolute form was rewritten) or "*" */
  if (r->target.p[0] != '/' && strcmp(r->target.p, "*"))
    abort();
  for (size_t i = 0; i < r->headers.n; i++)
    if (!gw_is_token(gw_header_name(&r->headers, i), r->headers.v[i].name_len))
      abort();
  check_route(r);
}

/* Feed data in pieces: cut after the first `first` bytes, then `step` at a
 * time (0: the rest at once). */
static verdict run(const uint8_t *data, size_t size, size_t first, size_t step) {
  verdict v = {0, 1469598103934665603ull, GW_PARSE_MORE, 0, 0};
  gw_reqparser rp;
  gw_reqparser_init(&rp, &cfg);
  size_t off = 0;
  while (off < size && v.last != GW_PARSE_ERROR) {
    size_t n = size - off;
    if (off == 0 && first && first < n)
      n = first;
    else if (off && step && step < n)
      n = step;
    size_t pos = 0;
    while (pos < n) {
      size_t used = 0;
      gw_parse_result r = gw_reqparser_feed(&rp, (const char *)data + off + pos,
                                            n - pos, &used);
      if (used > n - pos)
        abort();
      if (used == 0 && r != GW_PARSE_DONE && r != GW_PARSE_HEAD)
        abort(); /* no progress */
      pos += used;
      v.last = r;
      if (r == GW_PARSE_ERROR) {
        v.error_status = rp.error_status;
        if (v.error_status != 400 && v.error_status != 413 &&
            v.error_status != 431 && v.error_status != 503)
          abort();
        break;
      }
      if (r == GW_PARSE_HEAD)
        v.heads++;
      if (r == GW_PARSE_DONE) {
        gw_request *req = gw_reqparser_take(&rp);
        check(req);
        v.nreq++;
        v.digest = mix(v.digest, req->method, strlen(req->method));
        v.digest = mix(v.digest, req->target.p, req->target.len);
        v.digest = mix(v.digest, req->headers.text.p, req->headers.text.len);
        v.digest = mix(v.digest, req->body.p, req->body.len);
        v.digest = mix(v.digest, &req->keep_alive, sizeof req->keep_alive);
        gw_request_free(req);
        free(req);
        if (v.nreq > 1000)
          break;
      }
    }
    off += n;
  }
  if (v.last != GW_PARSE_ERROR && gw_reqparser_eof(&rp) == GW_PARSE_DONE) {
    gw_request *req = gw_reqparser_take(&rp);
    check(req);
    v.nreq++;
    gw_request_free(req);
    free(req);
  }
  gw_reqparser_free(&rp);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    gw_config_init(&cfg);
    cfg.max_body = 4096;
    cfg.max_header = 2048;
    http_parser_set_max_header_size((uint32_t)cfg.max_header + 1024);
    static const char *const globs[] = {"/v1/payments/*", "/v1/**", "/a?c/*/d", ""};
    routes = gw_routes_new(4);
    for (int i = 0; i < 4; i++) {
      snprintf(routes->routes[i].path, sizeof routes->routes[i].path, "%s", globs[i]);
      routes->routes[i].index = i + 1;
    }
    ready = 1;
  }
  verdict whole = run(data, size, 0, 0);
  size_t cut = size ? (size_t)data[0] % (size + 1) : 0;
  verdict split = run(data, size, cut, 0);
  verdict bytes = run(data, size, 1, 1);
  const verdict *vs[] = {&split, &bytes};
  /* Which refusal wins may depend on the cut (http_parser reports a value
   * when it ends or at the end of a buffer, so a 431 count and a bad byte
   * can race); whether the bytes are refused, and what came before, may not. */
  for (int i = 0; i < 2; i++)
    if (vs[i]->nreq != whole.nreq || vs[i]->digest != whole.digest ||
        (vs[i]->last == GW_PARSE_ERROR) != (whole.last == GW_PARSE_ERROR))
      abort();
  return 0;
}
