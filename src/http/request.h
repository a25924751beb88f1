/*
 * request.h - one client request as the gateway holds it once parsed, and
 * the incremental parser that builds it from bytes off a socket. The parser
 * has no I/O: conn.c feeds it, the fuzz target and unit tests feed it too.
 *
 * Bodies are buffered whole (up to --max-body) because the fingerprint covers
 * the body and the upstream gets a Content-Length: a chunked request body is
 * de-chunked here and sent upstream with its length.
 */
#ifndef IDEM_HTTP_REQUEST_H
#define IDEM_HTTP_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <http_parser.h>

#include "http/config.h"
#include "http/msg.h"

typedef struct {
  char method[24];
  int is_head;
  gw_buf target;
  gw_headers headers;
  gw_buf body;
  unsigned short http_major, http_minor;
  int keep_alive;       /* the client lets the connection live on */
  int expect_continue;  /* Expect: 100-continue */
  int upgrade;          /* asked for a protocol switch (not supported) */
} gw_request;

/* A request target's form (RFC 9112 3.2) as gw_target_check finds it. */
typedef struct {
  int absolute;              /* absolute form, to be sent on in origin form */
  size_t auth_off, auth_len; /* absolute form: its authority, host[:port] */
  size_t path_off;           /* absolute form: where path and query start */
} gw_target_form;

/*
 * Check the target t (len bytes) of a request with method m: origin form
 * ("/path?query"), "*" for OPTIONS only, or absolute form with an http or
 * https scheme and a host ("http://host:port/path?query", no userinfo);
 * authority form is CONNECT's only, which the gateway refuses anyway.
 * Returns NULL and fills *f, or a sentence saying why the target is refused.
 * The parser below rewrites an absolute-form target to origin form.
 */
const char *gw_target_check(const char *t, size_t len, enum http_method m, gw_target_form *f);

void gw_request_free(gw_request *r);
/* Empty r for the next request, keeping its buffers up to keep_max bytes
 * each (a connection's requests tend to look alike). */
void gw_request_reset(gw_request *r, size_t keep_max);

typedef enum {
  GW_PARSE_MORE = 0, /* every byte consumed, the request is not complete */
  GW_PARSE_HEAD,     /* head complete and the client waits for 100 Continue */
  GW_PARSE_DONE,     /* one request complete: take it; bytes may remain */
  GW_PARSE_ERROR     /* answer error_status and close the connection */
} gw_parse_result;

typedef struct {
  http_parser p;
  const gw_config *cfg;
  gw_request *cur;   /* the request being built */
  size_t head_bytes; /* the head's bytes so far: request line, header lines, blank line */
  size_t trailer_bytes; /* a chunked body's trailer fields so far, counted as the head's */
  int in_trailer_name;  /* the last trailer callback was a field name's */
  int started;       /* some byte of the current request arrived */
  int state;         /* internal: what the last callback decided */
  int error_status;  /* 400, 413, 431 */
  int chunked;       /* the current request has a chunked body */
  int in_body;       /* past the head: header callbacks now are trailers */
  /* the head's lines and the chunked body's framing, read again byte by
   * byte (reqparse.c, head_scan and chunk_scan): http_parser lets through
   * what a strict peer would not */
  int hd_state;
  int hd_lines;      /* lines of the head begun so far */
  int rl_sp;         /* the request line's spaces so far */
  int rl_bad;        /* two spaces in a row in it, or one first */
  uint64_t rl_tail;  /* its last 8 bytes, the version */
  int head_lf;       /* the head's last byte, its LF, is still to check */
  int ck_state;
  int ck_digits;     /* hex digits of the chunk size so far */
  uint64_t ck_left;  /* chunk size, then its data bytes still to skip */
  const char *error_detail;
} gw_reqparser;

void gw_reqparser_init(gw_reqparser *rp, const gw_config *cfg);
void gw_reqparser_free(gw_reqparser *rp);

/*
 * Feed bytes. *used tells how many were consumed: all of them for MORE and
 * ERROR; up to the end of the head for HEAD; up to the end of the request for
 * DONE (the rest belongs to pipelined requests: feed it again after taking).
 * After HEAD, keep feeding the same parser.
 */
gw_parse_result gw_reqparser_feed(gw_reqparser *rp, const char *data,
                                  size_t len, size_t *used);
/* The client closed its side: whether the current request is complete. */
gw_parse_result gw_reqparser_eof(gw_reqparser *rp);
/* Hand over the complete request (caller frees with gw_request_free + free). */
gw_request *gw_reqparser_take(gw_reqparser *rp);

#endif
