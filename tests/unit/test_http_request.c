/* test_http_request.c - client request parsing, limits and framing rules
 * (src/http/reqparse.c), fed whole, split, and one byte at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/config.c"
#include "http/msg.c"
#include "http/reqparse.c"

static gw_config cfg;

static int setup(void **state) {
  (void)state;
  gw_config_init(&cfg);
  cfg.max_body = 64;
  cfg.max_header = 1024;
  http_parser_set_max_header_size((uint32_t)cfg.max_header + 1024);
  return 0;
}

typedef struct {
  gw_request *req[8];
  int n;
  int heads; /* GW_PARSE_HEAD seen */
  gw_parse_result last;
  int error_status;
} outcome;

/* Feed text in pieces of step bytes (0: whole), collecting requests. */
static void run(const char *text, size_t len, size_t step, outcome *o) {
  gw_reqparser rp;
  gw_reqparser_init(&rp, &cfg);
  memset(o, 0, sizeof *o);
  size_t off = 0;
  while (off < len) {
    size_t chunk = step && step < len - off ? step : len - off;
    size_t pos = 0;
    while (pos < chunk) {
      size_t used = 0;
      gw_parse_result r = gw_reqparser_feed(&rp, text + off + pos, chunk - pos, &used);
      o->last = r;
      pos += used;
      if (r == GW_PARSE_ERROR) {
        o->error_status = rp.error_status;
        gw_reqparser_free(&rp);
        return;
      }
      if (r == GW_PARSE_HEAD)
        o->heads++;
      if (r == GW_PARSE_DONE && o->n < 8)
        o->req[o->n++] = gw_reqparser_take(&rp);
    }
    off += chunk;
  }
  gw_reqparser_free(&rp);
}

static void release(outcome *o) {
  for (int i = 0; i < o->n; i++) {
    gw_request_free(o->req[i]);
    free(o->req[i]);
  }
}

#define S(lit) lit, sizeof(lit) - 1

static void test_pipelined_in_order(void **state) {
  (void)state;
  static const char text[] =
      "POST /a?x=1 HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k1\r\nContent-Length: 3\r\n\r\nabc"
      "GET /b HTTP/1.1\r\nHost: h\r\n\r\n"
      "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhe\r\n3;ext=1\r\nllo\r\n0\r\nX-Trailer: t\r\n\r\n";
  size_t steps[] = {0, 1, 2, 7, 50};
  for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
    outcome o;
    run(S(text), steps[s], &o);
    assert_int_equal(o.n, 3);
    assert_string_equal(o.req[0]->method, "POST");
    assert_string_equal(o.req[0]->target.p, "/a?x=1");
    assert_int_equal(o.req[0]->body.len, 3);
    assert_memory_equal(o.req[0]->body.p, "abc", 3);
    size_t len = 0;
    const char *k = gw_headers_get(&o.req[0]->headers, "idempotency-key", &len, NULL);
    assert_non_null(k);
    assert_int_equal(len, 2);
    assert_true(o.req[0]->keep_alive);
    assert_string_equal(o.req[1]->method, "GET");
    assert_string_equal(o.req[1]->target.p, "/b");
    assert_int_equal(o.req[1]->body.len, 0);
    assert_int_equal(o.req[2]->body.len, 5);
    assert_memory_equal(o.req[2]->body.p, "hello", 5);
    release(&o);
  }
}

static void expect_error(const char *text, size_t len, int status) {
  size_t steps[] = {0, 1};
  for (size_t s = 0; s < 2; s++) {
    outcome o;
    run(text, len, steps[s], &o);
    if (o.last != GW_PARSE_ERROR || o.error_status != status)
      fail_msg("want %d for %.*s (step %zu), got result %d status %d", status,
               (int)len, text, steps[s], o.last, o.error_status);
    release(&o);
  }
}

/* Each of good[0..n) is a request whose body is "abc": taken, and the
 * request after it too, whole or fed in steps of 1 to 3 bytes. */
static void expect_abc_then_next(const char *const *good, size_t n) {
  for (size_t g = 0; g < n; g++)
    for (size_t step = 0; step < 4; step++) {
      outcome o;
      char text[512];
      int len = snprintf(text, sizeof text, "%sGET /next HTTP/1.1\r\nHost: h\r\n\r\n", good[g]);
      run(text, (size_t)len, step, &o);
      if (o.n != 2 || o.req[0]->body.len != 3 || memcmp(o.req[0]->body.p, "abc", 3))
        fail_msg("case %zu step %zu: %d requests, error %d", g, step, o.n, o.error_status);
      assert_string_equal(o.req[1]->target.p, "/next");
      release(&o);
    }
}

static void test_ambiguous_framing(void **state) {
  (void)state;
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\na"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"), 400);
  expect_error(S("GARBAGE\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\rX0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\nContent-Length: 0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length : 3\r\n\r\nabc"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc"), 400);
  expect_error(S("GET / HTTP/2.0\r\n\r\n"), 400);
  expect_error(S("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"), 400);
}

/* The framing of a chunked body, line by line: what http_parser lets
 * through and a strict peer reads otherwise is a 400; a valid body passes
 * whole or fed byte by byte, with Expect too. */
static void test_chunk_framing_strict(void **state) {
  (void)state;
#define CHUNKED_HEAD "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
  expect_error(S(CHUNKED_HEAD "2\rXab\r\n0\r\n\r\n"), 400);
  expect_error(S(CHUNKED_HEAD "2;a\nb\r\nab\r\n0\r\n\r\n"), 400);
  expect_error(S(CHUNKED_HEAD "2;a\x01\r\nab\r\n0\r\n\r\n"), 400);
  expect_error(S(CHUNKED_HEAD "2\r\nab\r\n0\rX\r\n"), 400);
  expect_error(S(CHUNKED_HEAD "2\r\nab\r\n0\r\n\rX"), 400);
  expect_error(S(CHUNKED_HEAD "2\r\nab\r\n0\r\n\n"), 400);
  expect_error(S(CHUNKED_HEAD "2\r\nab\r\n0\r\nX-T: 1\n\r\n"), 400);
  expect_error(S(CHUNKED_HEAD "2 x\r\nab\r\n0\r\n\r\n"), 400);
  static const char *const good[] = {
      CHUNKED_HEAD "2 ;a=\"q\tv\"\r\nab\r\n1;b\r\nc\r\n0;z\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\nab\r\n1\r\nc\r\n0\r\n\r\n",
  };
  expect_abc_then_next(good, sizeof good / sizeof good[0]);
#undef CHUNKED_HEAD
}

/* The head's lines: a CR followed by anything but LF, anywhere in the
 * head (its last line too), and obs-fold are a 400; bare LF still ends a
 * line, and empty lines before the request line are skipped. */
static void test_head_lines_strict(void **state) {
  (void)state;
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\rXok"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\n\rContent-Length: 2\r\n\r\nok"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\n Content-Length: 2\r\n\r\nok"), 400);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n\tb\r\nContent-Length: 0\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\n\rX"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: h\n\rX"), 400);
  /* a request line http_parser reads leniently: another version, two spaces */
  expect_error(S("GET / HTaP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET /  HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400);
  expect_error(S(" GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.10\r\nHost: h\r\n\r\n"), 400);
  /* a control character as a value's first byte, which http_parser lets by */
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: \x01evil\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost:\x0bh\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\nX-A:\x7f\r\n\r\n"), 400);
  /* elsewhere in a value http_parser refuses them itself (what
   * gw_headers_values_ok counts on) */
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: ev\x01il\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: evil\x7f\r\n\r\n"), 400);
  expect_error(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: e\x00vil\r\n\r\n"), 400);
  static const char *const good[] = {
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
      "\r\n\nPOST / HTTP/1.1\nHost: h\nContent-Length: 3\n\nabc",
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: h\r\nX-A: a b\t c\r\nContent-Length: 3\n\nabc",
  };
  expect_abc_then_next(good, sizeof good / sizeof good[0]);
}

static void test_limits(void **state) {
  (void)state;
  char big[2048];
  int n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX-Big: %01500d\r\n\r\n", 0);
  expect_error(big, (size_t)n, 431);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 65\r\n\r\n"), 413);
  expect_error(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                 "30\r\n012345678901234567890123456789012345678901234567\r\n"
                 "30\r\n012345678901234567890123456789012345678901234567\r\n0\r\n\r\n"),
               413);
  /* exactly the limit passes */
  char ok[256];
  n = snprintf(ok, sizeof ok, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 64\r\n\r\n%064d", 7);
  outcome o;
  run(ok, (size_t)n, 0, &o);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.req[0]->body.len, 64);
  release(&o);
}

/* A chunked body's trailer is held to --max-header (1024 here) as the head
 * is, whether it comes in one read or a byte at a time: http_parser's own
 * count skips a value that arrives whole, so by it a 1,500-byte trailer
 * passed in one read and was refused byte by byte. */
static void test_trailer_is_held_to_max_header(void **state) {
  (void)state;
  char text[4096];
  int n = snprintf(text, sizeof text,
                   "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "3\r\nabc\r\n0\r\nX-T: %01500d\r\n\r\n", 0);
  expect_error(text, (size_t)n, 431);
  n = snprintf(text, sizeof text,
               "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
               "3\r\nabc\r\n0\r\nX-T: %0900d\r\n\r\n", 0);
  for (size_t step = 0; step < 2; step++) {
    outcome o;
    run(text, (size_t)n, step, &o);
    assert_int_equal(o.n, 1); /* within the limit: taken, its trailer dropped */
    assert_int_equal(o.req[0]->body.len, 3);
    release(&o);
  }
}

/* The trailer is counted as the head is: its field lines and the blank
 * line after them, so a trailer of exactly --max-header passes and one
 * byte more is 431, whatever the split of the reads. */
static void test_trailer_counts_its_blank_line(void **state) {
  (void)state;
  static const char fmt[] = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "3\r\nabc\r\n0\r\nX-T: %0*d\r\n\r\n";
  char text[2048];
  /* "X-T: " + value + CRLF + CRLF: 1024 bytes with a value of 1015 */
  int n = snprintf(text, sizeof text, fmt, 1015, 0);
  for (size_t step = 0; step <= 7; step += 7) {
    outcome o;
    run(text, (size_t)n, step, &o);
    assert_int_equal(o.n, 1);
    release(&o);
  }
  n = snprintf(text, sizeof text, fmt, 1016, 0);
  expect_error(text, (size_t)n, 431);
}

/* A head of len bytes whose last header is padded to fit. */
static int padded_head(char *buf, size_t cap, const char *method, size_t len) {
  static const char fixed[] = " /p HTTP/1.1\r\nHost: h\r\nX-Pad: \r\n\r\n";
  size_t pad = len - strlen(method) - (sizeof fixed - 1);
  return snprintf(buf, cap, "%s /p HTTP/1.1\r\nHost: h\r\nX-Pad: %0*d\r\n\r\n", method, (int)pad, 0);
}

/* --max-header bounds the whole head: request line, header lines and the
 * blank line, whatever the method's length. */
static void test_max_header_is_the_whole_head(void **state) {
  (void)state;
  static const char *const methods[] = {"GET", "DELETE"};
  char buf[2048];
  for (size_t i = 0; i < 2; i++) {
    int n = padded_head(buf, sizeof buf, methods[i], 1024);
    assert_int_equal(n, 1024);
    for (size_t step = 0; step <= 7; step += 7) {
      outcome o;
      run(buf, (size_t)n, step, &o);
      assert_int_equal(o.n, 1);
      release(&o);
    }
    n = padded_head(buf, sizeof buf, methods[i], 1025);
    assert_int_equal(n, 1025);
    expect_error(buf, (size_t)n, 431);
  }
}

static void test_expect_continue_and_versions(void **state) {
  (void)state;
  static const char text[] =
      "POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi";
  outcome o;
  run(S(text), 0, &o);
  assert_int_equal(o.heads, 1);
  assert_int_equal(o.n, 1);
  assert_true(o.req[0]->expect_continue);
  assert_memory_equal(o.req[0]->body.p, "hi", 2);
  release(&o);

  run(S("GET / HTTP/1.0\r\n\r\n"), 0, &o);
  assert_int_equal(o.n, 1);
  assert_false(o.req[0]->keep_alive);
  release(&o);
  run(S("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), 0, &o);
  assert_true(o.req[0]->keep_alive);
  release(&o);
  run(S("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"), 0, &o);
  assert_false(o.req[0]->keep_alive);
  assert_int_equal(o.req[0]->http_minor, 1);
  release(&o);
  run(S("HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n"), 0, &o);
  assert_true(o.req[0]->is_head);
  release(&o);
}

static void test_trailers_dropped(void **state) {
  (void)state;
  /* a trailer must never turn into a header forwarded upstream */
  static const char text[] =
      "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "1\r\na\r\n0\r\nContent-Length : 9\r\nX-T: v\r\n\r\n";
  outcome o;
  run(S(text), 0, &o);
  assert_int_equal(o.n, 1);
  assert_int_equal(o.req[0]->headers.n, 2);
  assert_null(gw_headers_get(&o.req[0]->headers, "X-T", NULL, NULL));
  release(&o);
}

/* One request, fed whole and byte by byte: its target and Host afterwards. */
static void expect_target(const char *text, size_t len, const char *target, const char *host) {
  size_t steps[] = {0, 1};
  for (size_t s = 0; s < 2; s++) {
    outcome o;
    run(text, len, steps[s], &o);
    if (o.n != 1)
      fail_msg("%.*s: no request (status %d)", (int)len, text, o.error_status);
    const gw_request *r = o.req[0];
    size_t hlen = 0;
    int nhost = 0;
    const char *h = gw_headers_get(&r->headers, "Host", &hlen, &nhost);
    if (strcmp(r->target.p, target) || r->target.len != strlen(target) || nhost != 1 ||
        hlen != strlen(host) || memcmp(h, host, hlen))
      fail_msg("%.*s: target '%s' host '%.*s' (%d), want '%s' '%s'", (int)len, text,
               r->target.p, (int)hlen, h ? h : "", nhost, target, host);
    release(&o);
  }
}

static void test_target_check(void **state) {
  (void)state;
  gw_target_form f;
  assert_null(gw_target_check(S("/a?b"), HTTP_POST, &f));
  assert_false(f.absolute);
  /* whitespace an upstream may split the request line at */
  assert_non_null(gw_target_check(S("/a\tb"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("/a\fb"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("http://h/a\tb"), HTTP_GET, &f));
  expect_error(S("GET /a\tHTTP/1.0 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  assert_null(gw_target_check(S("*"), HTTP_OPTIONS, &f));
  assert_false(f.absolute);
  assert_null(gw_target_check(S("http://h.example:81/a?q=1"), HTTP_POST, &f));
  assert_true(f.absolute);
  assert_int_equal(f.auth_off, 7);
  assert_int_equal(f.auth_len, 12);
  assert_int_equal(f.path_off, 19);
  assert_null(gw_target_check(S("HTTPS://[::1]:8443"), HTTP_GET, &f));
  assert_int_equal(f.auth_len, 10);
  assert_int_equal(f.path_off, 18);
  /* refused: each with a reason */
  assert_non_null(gw_target_check(S("*"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("*x"), HTTP_OPTIONS, &f));
  assert_non_null(gw_target_check(S("ftp://h/a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("httpx://h/a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("/a#frag"), HTTP_POST, &f));
  assert_non_null(gw_target_check(S("/a?q=1#f"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("h.example:443"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("http:/a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("http:///a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("http://:80/a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S("http://user:pw@h/a"), HTTP_GET, &f));
  assert_non_null(gw_target_check(S(""), HTTP_GET, &f));
}

static void test_absolute_form_rewritten(void **state) {
  (void)state;
  expect_target(S("POST http://evil.example/a?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
                "/a?q=1", "evil.example");
  expect_target(S("GET http://h HTTP/1.1\r\nHost: x\r\n\r\n"), "/", "h");
  expect_target(S("GET HTTPS://h:8443?x=1 HTTP/1.1\r\nHost: x\r\n\r\n"), "/?x=1", "h:8443");
  /* an HTTP/1.0 request may come without Host: it gets the target's */
  expect_target(S("GET http://h10/p HTTP/1.0\r\n\r\n"), "/p", "h10");
  /* origin form and OPTIONS * go on as they are */
  expect_target(S("GET /o?x HTTP/1.1\r\nHost: x\r\n\r\n"), "/o?x", "x");
  expect_target(S("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"), "*", "x");

  expect_error(S("POST ftp://h/a HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"), 400);
  expect_error(S("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET h.example:80 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  expect_error(S("GET http://u@h/a HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
  /* the Host rules hold for absolute form too (RFC 9112 3.2) */
  expect_error(S("GET http://h/a HTTP/1.1\r\n\r\n"), 400);
}

/* Every byte against RFC 9110's tchar, written out as the grammar has it. */
static void test_token_bytes(void **state) {
  (void)state;
  for (int c = 0; c < 256; c++) {
    char s[3] = {'a', (char)c, 'b'};
    int want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c && strchr("!#$%&'*+-.^_`|~", c));
    assert_int_equal(gw_is_token(s, sizeof s), want);
    assert_int_equal(gw_is_token(s + 1, 1), want);
  }
  assert_false(gw_is_token("", 0));
  assert_true(gw_is_token("Idempotency-Key", 15));
  assert_false(gw_is_token("Bad Name", 8));
  assert_false(gw_is_token("Name:", 5));
}

/* gw_ieq and the inline buffer appends (msg.h): lengths decide first. */
static void test_buffer_and_names(void **state) {
  (void)state;
  assert_true(gw_ieq("content-LENGTH", 14, "Content-Length"));
  assert_false(gw_ieq("Content-Lengt", 13, "Content-Length"));
  assert_false(gw_ieq("Content-Lengths", 15, "Content-Length"));
  gw_buf b = {0};
  for (int i = 0; i < 100; i++) /* grows past the first 256 bytes */
    assert_int_equal(gw_buf_header(&b, "X-N", 3, "v", 1), 0);
  assert_int_equal(b.len, 100 * strlen("X-N: v\r\n"));
  assert_memory_equal(b.p + 99 * 8, "X-N: v\r\n", 8);
  assert_int_equal(gw_buf_puts(&b, ""), 0);
  assert_int_equal(gw_buf_u64(&b, 18446744073709551615u), 0);
  assert_memory_equal(b.p + 800, "18446744073709551615", 20);
  assert_int_equal(b.len, 820);
  gw_buf_free(&b);
}

static void test_eof_and_partial(void **state) {
  (void)state;
  gw_reqparser rp;
  gw_reqparser_init(&rp, &cfg);
  size_t used = 0;
  assert_int_equal(gw_reqparser_feed(&rp, S("POST / HTTP/1.1\r\nContent-Len"), &used), GW_PARSE_MORE);
  assert_true(rp.started);
  assert_int_equal(gw_reqparser_eof(&rp), GW_PARSE_MORE);
  gw_reqparser_free(&rp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipelined_in_order),
      cmocka_unit_test(test_ambiguous_framing),
      cmocka_unit_test(test_chunk_framing_strict),
      cmocka_unit_test(test_head_lines_strict),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_max_header_is_the_whole_head),
      cmocka_unit_test(test_trailer_is_held_to_max_header),
      cmocka_unit_test(test_trailer_counts_its_blank_line),
      cmocka_unit_test(test_expect_continue_and_versions),
      cmocka_unit_test(test_trailers_dropped),
      cmocka_unit_test(test_eof_and_partial),
      cmocka_unit_test(test_token_bytes),
      cmocka_unit_test(test_buffer_and_names),
      cmocka_unit_test(test_target_check),
      cmocka_unit_test(test_absolute_form_rewritten),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
