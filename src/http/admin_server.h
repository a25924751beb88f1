/*
 * admin_server.h - the small HTTP/1.1 server behind the operator listeners
 * (`idem serve --admin-listen`: admin.c; `idem consume --admin-listen`:
 * cs_admin.c). It owns connections, parsing, keep-alive, timeouts and the
 * connection limit; its owner only routes a parsed request and answers it,
 * at once or later (a store operation).
 *
 * Timeouts, as on the main listener: a request must arrive within
 * client_timeout_ms of its first byte (or of the accept), a connection may
 * wait idle_timeout_ms for its next request, and a peer that takes no byte
 * of an answer for send_timeout_ms is closed. At most GW_ADMIN_MAX_CONNS
 * connections are open; past that a new one is accepted and closed at
 * once, so a flood costs nothing and a probe fails fast.
 */
#ifndef IDEM_HTTP_ADMIN_SERVER_H
#define IDEM_HTTP_ADMIN_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#define GW_ADMIN_MAX_CONNS 64

/* The key both listeners' /readyz reads: one nobody uses, so that the
 * store's "not found" is the good answer and nothing is written. */
#define GW_ADMIN_READY_PROBE_KEY "idem-readyz-probe"

typedef struct gw_admin_server gw_admin_server;
typedef struct gw_admin_req gw_admin_req;

typedef struct {
  int64_t client_timeout_ms, idle_timeout_ms, send_timeout_ms;
  /* A whole request arrived: answer it with gw_admin_reply (now or later;
   * the connection waits, and a stop waits for it). */
  void (*route)(void *arg, gw_admin_req *r);
  void *arg;
  size_t req_data_size; /* bytes of gw_admin_req_data per connection */
} gw_admin_opts;

/* Serve on fd, an already bound and listening socket; NULL on failure. */
gw_admin_server *gw_admin_server_open_fd(uv_loop_t *loop, int fd, const gw_admin_opts *o);

/* Bind and listen on host:*port (numeric; port 0: one the system picks,
 * written back to *port); NULL with a libuv error in *err. */
gw_admin_server *gw_admin_server_listen(uv_loop_t *loop, const char *host, int *port,
                                        const gw_admin_opts *o, int *err);

/* Stop accepting and close idle connections (those awaiting an answer
 * close once it is written); done runs once every handle is closed. */
void gw_admin_server_stop(gw_admin_server *s, void (*done)(void *arg), void *arg);

/* The request: its http_parser method (HTTP_GET, ...) and its target
 * (path and query, NUL-terminated). */
int gw_admin_req_method(const gw_admin_req *r);
const char *gw_admin_req_target(const gw_admin_req *r, size_t *len);
/* The owner's opts.req_data_size bytes for this request (zeroed at accept). */
void *gw_admin_req_data(gw_admin_req *r);

/* Answer r (once). A HEAD gets the head only; 204 gets no body. */
void gw_admin_reply(gw_admin_req *r, int status, const char *ctype, const char *body, size_t len);

/* Answer with a problem+json body (policy_problem). */
void gw_admin_reply_problem(gw_admin_req *r, int status, const char *slug, const char *title,
                            const char *detail);

#endif
