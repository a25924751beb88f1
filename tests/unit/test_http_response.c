/* test_http_response.c - an upstream's answers (src/http/respparse.c): the
 * status line checks, interim answers, HEAD, an answer ended by the
 * connection's end, the body buffered up to the limit and streamed past
 * it, keep-alive; each fed whole and one byte at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/msg.c"
#include "http/respparse.c"

typedef struct {
  int heads;
  size_t buffered_at_head; /* resp->body.len when on_head ran */
  char streamed[512];
  size_t nstreamed;
} sink;

static void on_head(void *arg, upstream_response *resp) {
  sink *s = arg;
  s->heads++;
  s->buffered_at_head = resp->body.len;
}

static void on_data(void *arg, const char *data, size_t len) {
  sink *s = arg;
  assert_true(s->nstreamed + len <= sizeof s->streamed);
  memcpy(s->streamed + s->nstreamed, data, len);
  s->nstreamed += len;
}

typedef struct {
  gw_resp_result r;
  size_t used; /* bytes taken until done, error or the end */
  int keep_alive;
  upstream_response resp;
  sink s;
} outcome;

/* Feed text whole (step 0) or step bytes at a time; then the end of the
 * connection, if nothing was decided before it. */
static void run(const char *text, size_t step, int past_limit, int is_head, outcome *o) {
  static upstream_stream stream;
  stream = (upstream_stream){.on_head = on_head, .on_data = on_data, .past_limit = past_limit};
  memset(o, 0, sizeof *o);
  gw_respparser rp;
  gw_respparser_start(&rp, &o->resp, &stream, &o->s, NULL, 16, is_head);
  size_t len = strlen(text);
  o->r = GW_RESP_MORE;
  while (o->used < len && o->r == GW_RESP_MORE) {
    size_t n = step && step < len - o->used ? step : len - o->used, used;
    o->r = gw_respparser_feed(&rp, text + o->used, n, &used);
    o->used += used;
  }
  if (o->r == GW_RESP_MORE)
    o->r = gw_respparser_eof(&rp);
  o->keep_alive = o->r == GW_RESP_DONE && gw_respparser_keep_alive(&rp);
}

static void done(outcome *o) {
  gw_headers_free(&o->resp.headers);
  gw_buf_free(&o->resp.body);
}

/* Both ways of feeding give result r, status and body (buffered or streamed). */
static void expect(const char *text, int past_limit, int is_head, gw_resp_result r, int status,
                   const char *body) {
  for (size_t step = 0; step <= 1; step++) {
    outcome o;
    run(text, step, past_limit, is_head, &o);
    assert_int_equal(o.r, r);
    if (r == GW_RESP_DONE) {
      assert_int_equal(o.resp.status, status);
      char all[512];
      size_t n = o.s.heads ? o.s.buffered_at_head : o.resp.body.len;
      memcpy(all, o.resp.body.p ? o.resp.body.p : "", n);
      memcpy(all + n, o.s.streamed, o.s.nstreamed);
      assert_int_equal(n + o.s.nstreamed, strlen(body));
      assert_memory_equal(all, body, strlen(body));
    }
    done(&o);
  }
}

static void test_status_lines(void **state) {
  (void)state;
  expect("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1, 0, GW_RESP_DONE, 200, "ok");
  expect("HTTP/1.1 204\r\n\r\n", 1, 0, GW_RESP_DONE, 204, "");
  expect("HTTP/1.1 20 OK\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1 0200 OK\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1  200 OK\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1 101 Switching\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1 102 Processing\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1 600 Nope\r\nContent-Length: 0\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  /* a control character as a value's first byte, which http_parser lets by */
  expect("HTTP/1.1 200 OK\r\nX-A: \x01v\r\nContent-Length: 0\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
  expect("HTTP/1.1 200 OK\r\nX-A:\x7f\r\nContent-Length: 0\r\n\r\n", 1, 0, GW_RESP_ERROR, 0, "");
}

static void test_interim_answers_are_skipped(void **state) {
  (void)state;
  expect("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
         "HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nnew",
         1, 0, GW_RESP_DONE, 201, "new");
}

static void test_head_and_end_of_connection(void **state) {
  (void)state;
  /* HEAD: a Content-Length but no body */
  expect("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", 1, 1, GW_RESP_DONE, 200, "");
  /* no length: the body runs to the end of the connection */
  expect("HTTP/1.1 200 OK\r\n\r\nall of it", 1, 0, GW_RESP_DONE, 200, "all of it");
  /* cut short of its length: not an answer */
  expect("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 1, 0, GW_RESP_MORE, 0, "");
}

static void test_buffered_up_to_the_limit_then_streamed(void **state) {
  (void)state;
  /* the limit is 16: a declared length past it streams from the head */
  expect("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n01234567890123456789", 1, 0, GW_RESP_DONE,
         200, "01234567890123456789");
  /* chunked, growing past it: what was buffered is found at on_head */
  expect("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
         "a\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n",
         1, 0, GW_RESP_DONE, 200, "0123456789abcdefghij");
  /* pass-through: streamed from the head whatever its size */
  expect("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", 0, 0, GW_RESP_DONE, 200, "hi");
  outcome o;
  run("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", 0, 0, 0, &o);
  assert_int_equal(o.s.heads, 1);
  assert_int_equal(o.s.nstreamed, 2);
  assert_int_equal(o.resp.body.len, 0);
  done(&o);
}

static void test_keep_alive_and_what_follows(void **state) {
  (void)state;
  outcome o;
  const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\n";
  run(two, 0, 1, 0, &o);
  assert_int_equal(o.r, GW_RESP_DONE);
  assert_int_equal(o.used, strlen("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"));
  assert_true(o.keep_alive);
  done(&o);
  run("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na", 0, 1, 0, &o);
  assert_int_equal(o.r, GW_RESP_DONE);
  assert_false(o.keep_alive);
  done(&o);
  run("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\na", 0, 1, 0, &o);
  assert_false(o.keep_alive);
  done(&o);
}

/* The pool time an answer allows: the pool's 15 s unless Keep-Alive's
 * timeout says the upstream closes sooner, then a second under it. */
static uint64_t idle_of(const char *text) {
  static upstream_stream stream;
  stream = (upstream_stream){.on_head = on_head, .on_data = on_data, .past_limit = 1};
  upstream_response resp = {0};
  sink s = {0};
  gw_respparser rp;
  gw_respparser_start(&rp, &resp, &stream, &s, NULL, 16, 0);
  size_t used;
  assert_int_equal(gw_respparser_feed(&rp, text, strlen(text), &used), GW_RESP_DONE);
  uint64_t ms = gw_respparser_idle_ms(&rp, 15000);
  gw_headers_free(&resp.headers);
  gw_buf_free(&resp.body);
  return ms;
}

static void test_keep_alive_timeout_shortens_the_pool_time(void **state) {
  (void)state;
#define ANSWER(h) "HTTP/1.1 200 OK\r\n" h "Content-Length: 1\r\n\r\na"
  assert_int_equal(idle_of(ANSWER("")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=5\r\n")), 4000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=5, max=100\r\n")), 4000);
  assert_int_equal(idle_of(ANSWER("keep-alive: max=100, Timeout = \"3\"\r\n")), 2000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=60\r\n")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=1\r\n")), 0);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=0\r\n")), 0);
  /* what is not timeout=N changes nothing */
  assert_int_equal(idle_of(ANSWER("Keep-Alive: max=5\r\n")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=soon\r\n")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=5s\r\n")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeouts=2\r\n")), 15000);
  assert_int_equal(idle_of(ANSWER("Keep-Alive: timeout=99999999999999999999\r\n")), 15000);
#undef ANSWER
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_lines),
      cmocka_unit_test(test_interim_answers_are_skipped),
      cmocka_unit_test(test_head_and_end_of_connection),
      cmocka_unit_test(test_buffered_up_to_the_limit_then_streamed),
      cmocka_unit_test(test_keep_alive_and_what_follows),
      cmocka_unit_test(test_keep_alive_timeout_shortens_the_pool_time),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
