/*
 * respparse.h - an upstream's answer to one request, parsed apart from the
 * connection that carries it (upstream.c), as reqparse.c does for requests,
 * so that the fuzzer and the unit tests reach all of it.
 *
 * http_parser does the framing. This adds what a strict peer checks on
 * top (the status line's shape; of the 1xx only 100 and 103, skipped as
 * interim), the body buffered in resp->body up to max_response, and the
 * switch to streaming (stream->on_head once, then stream->on_data) for a
 * pass-through answer or one that grows past max_response.
 */
#ifndef IDEM_HTTP_RESPPARSE_H
#define IDEM_HTTP_RESPPARSE_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#include "http/upstream.h"

#define GW_STATUS_PREFIX 13 /* "HTTP/1.1 200 ": what the status line check reads */

typedef enum {
  GW_RESP_MORE,  /* all of it taken, the answer goes on */
  GW_RESP_DONE,  /* a final answer is complete; what follows it was not taken */
  GW_RESP_ERROR  /* not a valid answer (UP_BAD_RESPONSE), or out of memory */
} gw_resp_result;

typedef struct {
  http_parser p;
  upstream_response *resp;
  const upstream_stream *stream;
  void *arg;          /* the stream callbacks' */
  void *conn;         /* put in resp->conn when streaming starts */
  uint64_t max_response;
  int is_head;        /* the answer has no body */
  int in_body;        /* header callbacks now carry trailers: dropped */
  int msg_done;
  int streaming;      /* the head went to stream->on_head */
  char sl[GW_STATUS_PREFIX]; /* the start of the current answer's status line */
  unsigned sl_len;
} gw_respparser;

/* Ready for the answer to one request; resp's headers and body are reset
 * when it begins. */
void gw_respparser_start(gw_respparser *rp, upstream_response *resp, const upstream_stream *stream,
                         void *arg, void *conn, uint64_t max_response, int is_head);

/* Feed the next bytes: *used says how many were taken. */
gw_resp_result gw_respparser_feed(gw_respparser *rp, const char *data, size_t len, size_t *used);

/* The connection ended: GW_RESP_DONE when that completes a final answer
 * (one delimited by the end of the connection), else GW_RESP_MORE (the
 * answer was cut). */
gw_resp_result gw_respparser_eof(gw_respparser *rp);

/* Whether the connection may carry another request after a done answer. */
int gw_respparser_keep_alive(const gw_respparser *rp);

/* How long the connection may wait in the pool after a done answer, in ms:
 * max_ms, or less when the answer says in "Keep-Alive: timeout=N" that the
 * upstream closes connections idle for N seconds: then a second under that
 * (as undici does), so that the gateway drops the connection before the
 * upstream closes it, and never sends a request that crosses that close
 * (for a keyed request, a 502 with its lease kept: it may have run). 0: not
 * at all (N of 1 or less). */
uint64_t gw_respparser_idle_ms(const gw_respparser *rp, uint64_t max_ms);

#endif
