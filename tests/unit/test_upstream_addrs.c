/* test_upstream_addrs.c - an upstream host with several addresses
 * (upstream.c): a connection refused at one address goes on to the next
 * within the same request, the pool then stays with the address that
 * answered, and a request fails as unreachable only once every address
 * refused. The upstreams are libuv listeners on the test's own loop. And
 * a body of 4 GiB, one more than a uv_buf_t's len holds, goes to libuv as
 * two pieces (gateway.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <uv.h>

#include "http/gateway.h"
#include "http/upstream.h"
#include "unit.h"

#define ANSWER "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"

typedef struct {
  uv_tcp_t listener;
  int port, accepted, open;
} server;

typedef struct {
  uv_tcp_t tcp;
  uv_write_t w;
  int answered;
} peer;

static void peer_closed(uv_handle_t *h) { free(h->data); }

static void peer_alloc(uv_handle_t *h, size_t size, uv_buf_t *buf) {
  static char slab[4096];
  (void)h;
  (void)size;
  *buf = uv_buf_init(slab, sizeof slab);
}

static void peer_wrote(uv_write_t *w, int status) {
  (void)status;
  uv_close((uv_handle_t *)w->handle, peer_closed);
}

/* Any bytes of the request: answer, then close (the answer says so). */
static void peer_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  peer *p = s->data;
  (void)buf;
  if (n < 0) {
    if (!p->answered)
      uv_close((uv_handle_t *)s, peer_closed);
    return;
  }
  if (n == 0 || p->answered)
    return;
  p->answered = 1;
  uv_read_stop(s);
  uv_buf_t out = uv_buf_init(ANSWER, sizeof ANSWER - 1);
  uv_write(&p->w, s, &out, 1, peer_wrote);
}

static void on_connection(uv_stream_t *l, int status) {
  server *srv = l->data;
  assert_int_equal(status, 0);
  peer *p = calloc(1, sizeof *p);
  assert_non_null(p);
  uv_tcp_init(l->loop, &p->tcp);
  p->tcp.data = p;
  assert_int_equal(uv_accept(l, (uv_stream_t *)&p->tcp), 0);
  srv->accepted++;
  uv_read_start((uv_stream_t *)&p->tcp, peer_alloc, peer_read);
}

/* A listener on 127.0.0.1:port (0: any free port). */
static void server_open(uv_loop_t *loop, server *srv, int port) {
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof got;
  uv_ip4_addr("127.0.0.1", port, &a);
  uv_tcp_init(loop, &srv->listener);
  srv->listener.data = srv;
  assert_int_equal(uv_tcp_bind(&srv->listener, (const struct sockaddr *)&a, 0), 0);
  assert_int_equal(uv_listen((uv_stream_t *)&srv->listener, 16, on_connection), 0);
  uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&got, &len);
  srv->port = ntohs(((struct sockaddr_in *)&got)->sin_port);
  srv->open = 1;
}

static void server_close(server *srv) {
  if (srv->open)
    uv_close((uv_handle_t *)&srv->listener, NULL);
  srv->open = 0;
}

/* A port nothing listens on: one a listener had, closed again. */
static int refusing_port(uv_loop_t *loop) {
  server s = {0};
  server_open(loop, &s, 0);
  server_close(&s);
  uv_run(loop, UV_RUN_NOWAIT);
  return s.port;
}

static void addr_add(upstream_addrs *addrs, int port) {
  uv_ip4_addr("127.0.0.1", port, (struct sockaddr_in *)&addrs->addr[addrs->n++]);
}

typedef struct {
  upstream_response resp;
  int done;
} call;

static void on_answer(void *arg, upstream_response *resp) {
  call *c = arg;
  (void)resp;
  c->done = 1;
}

/* One POST through pool; runs the loop until its answer. */
static void send_one(uv_loop_t *loop, upstream_pool *pool, call *c) {
  static const char req[] = "POST /x HTTP/1.1\r\nHost: u\r\nContent-Length: 1\r\n\r\nx";
  static const upstream_stream buffered = {.past_limit = 1}; /* 2 bytes: never past */
  static uv_buf_t buf;
  buf = uv_buf_init((char *)req, sizeof req - 1);
  memset(c, 0, sizeof *c);
  upstream_send(pool, &buf, 1, 0, 0, &buffered, &c->resp, on_answer, c);
  while (!c->done)
    uv_run(loop, UV_RUN_ONCE);
}

static void pool_closed(void *arg) { *(int *)arg = 1; }

static void pool_close(uv_loop_t *loop, upstream_pool *pool) {
  int closed = 0;
  upstream_pool_close(pool, pool_closed, &closed);
  while (!closed)
    uv_run(loop, UV_RUN_ONCE);
}

static void loop_close(uv_loop_t *loop) {
  uv_run(loop, UV_RUN_DEFAULT); /* the closes still pending */
  assert_int_equal(uv_loop_close(loop), 0);
}

static const upstream_options opts = {.max_response = 1 << 20, .timeout_ms = 5000};

static void test_a_refused_address_goes_on_to_the_next(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  server good = {0};
  upstream_addrs addrs = {.n = 0};
  addr_add(&addrs, refusing_port(&loop));
  server_open(&loop, &good, 0);
  addr_add(&addrs, good.port);
  upstream_pool *pool = upstream_pool_new_opts(&loop, &opts, &addrs);
  assert_non_null(pool);
  call c;
  send_one(&loop, pool, &c);
  assert_int_equal(c.resp.kind, UP_OK);
  assert_int_equal(c.resp.status, 200);
  assert_int_equal(good.accepted, 1);
  upstream_response_free(&c.resp);
  pool_close(&loop, pool);
  server_close(&good);
  loop_close(&loop);
}

/* Once an address answered, new connections go there first: the one that
 * refused is not tried again, even once it would answer. */
static void test_the_pool_stays_with_the_address_that_answered(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  server first = {0}, second = {0};
  upstream_addrs addrs = {.n = 0};
  int port = refusing_port(&loop);
  addr_add(&addrs, port);
  server_open(&loop, &second, 0);
  addr_add(&addrs, second.port);
  upstream_pool *pool = upstream_pool_new_opts(&loop, &opts, &addrs);
  call c;
  send_one(&loop, pool, &c);
  assert_int_equal(c.resp.kind, UP_OK);
  upstream_response_free(&c.resp);
  server_open(&loop, &first, port); /* the first address answers now */
  for (int i = 0; i < 3; i++) {     /* each answer closes its connection */
    send_one(&loop, pool, &c);
    assert_int_equal(c.resp.kind, UP_OK);
    upstream_response_free(&c.resp);
  }
  assert_int_equal(first.accepted, 0);
  assert_int_equal(second.accepted, 4);
  pool_close(&loop, pool);
  server_close(&first);
  server_close(&second);
  loop_close(&loop);
}

static void test_every_address_refused_is_unreachable(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  upstream_addrs addrs = {.n = 0};
  addr_add(&addrs, refusing_port(&loop));
  addr_add(&addrs, refusing_port(&loop));
  upstream_pool *pool = upstream_pool_new_opts(&loop, &opts, &addrs);
  call c;
  send_one(&loop, pool, &c);
  assert_int_equal(c.resp.kind, UP_CONNECT_FAILED);
  upstream_response_free(&c.resp);
  pool_close(&loop, pool);
  loop_close(&loop);
}

static void test_resolve_keeps_every_address(void **state) {
  (void)state;
  upstream_addrs addrs;
  assert_int_equal(upstream_resolve("127.0.0.1", 80, "test", &addrs), 0);
  assert_int_equal(addrs.n, 1);
  assert_int_equal(addrs.addr[0].ss_family, AF_INET);
  assert_int_equal(ntohs(((struct sockaddr_in *)&addrs.addr[0])->sin_port), 80);
  assert_int_equal(upstream_resolve("::1", 8080, "test", &addrs), 0);
  assert_int_equal(addrs.n, 1);
  assert_int_equal(addrs.addr[0].ss_family, AF_INET6);
  assert_int_equal(upstream_resolve("localhost", 80, "test", &addrs), 0);
  assert_in_range(addrs.n, 1, UPSTREAM_ADDRS_MAX);
  assert_int_equal(upstream_resolve("no-such-host.invalid", 80, "test (expected)", &addrs), -1);
  assert_int_equal(addrs.n, 0);
}

static void test_a_4gib_body_goes_as_two_pieces(void **state) {
  (void)state;
  char *base = (char *)(uintptr_t)0x10000; /* an address only: nothing is read */
  uv_buf_t b[2];
  assert_int_equal(gw_bufs_put(b, base, 5), 1);
  assert_int_equal(b[0].len, 5);
  assert_int_equal(gw_bufs_put(b, base, UINT_MAX), 1);
  assert_int_equal(b[0].len, UINT_MAX);
  size_t four = (size_t)4 << 30; /* --max-body's most; cast to unsigned it was 0 */
  assert_int_equal(gw_bufs_put(b, base, four), 2);
  assert_ptr_equal(b[1].base, base + b[0].len);
  assert_true((size_t)b[0].len + b[1].len == four);
}

UNIT_TESTS(cmocka_unit_test(test_a_4gib_body_goes_as_two_pieces),
           cmocka_unit_test(test_a_refused_address_goes_on_to_the_next),
           cmocka_unit_test(test_the_pool_stays_with_the_address_that_answered),
           cmocka_unit_test(test_every_address_refused_is_unreachable),
           cmocka_unit_test(test_resolve_keeps_every_address))
