/* respparse.c - an upstream's answer to one request (see respparse.h). */
#include "http/respparse.h"

#include <ctype.h>
#include <limits.h>
#include <string.h>

static gw_respparser *of(http_parser *p) { return p->data; }

static int on_begin(http_parser *p) {
  gw_respparser *rp = of(p);
  gw_headers_reset(&rp->resp->headers);
  rp->resp->body.len = 0;
  rp->in_body = 0;
  return 0;
}

static int on_field(http_parser *p, const char *at, size_t len) {
  gw_respparser *rp = of(p);
  return rp->in_body ? 0 : gw_headers_on_field(&rp->resp->headers, at, len);
}

static int on_value(http_parser *p, const char *at, size_t len) {
  gw_respparser *rp = of(p);
  return rp->in_body ? 0 : gw_headers_on_value(&rp->resp->headers, at, len);
}

static void start_streaming(gw_respparser *rp) {
  rp->streaming = 1;
  rp->resp->conn = rp->conn;
  rp->stream->on_head(rp->arg, rp->resp);
}

/* RFC 9112 4: status-line = HTTP-version SP 3DIGIT SP [reason-phrase].
 * http_parser also reads "HTTP/1.1 20", "HTTP/1.1 0200" or two spaces as a
 * status, which is not what a strict peer would read: so the first bytes of
 * the line are checked here. A CR or LF right after the digits (no SP before
 * an empty reason) is tolerated, as most clients do. */
static int status_line_ok(const char *s, size_t n) {
  if (n != GW_STATUS_PREFIX || memcmp(s, "HTTP/1.", 7) || !isdigit((unsigned char)s[7]) ||
      s[8] != ' ')
    return 0;
  for (int i = 9; i < 12; i++)
    if (!isdigit((unsigned char)s[i]))
      return 0;
  return s[12] == ' ' || s[12] == '\r' || s[12] == '\n';
}

/* Whether an answer head may go on: a well-formed status line, a status
 * in 100-599, and of the 1xx only 100 and 103, which are interim (102 is
 * obsolete and 104-199 undefined, so neither can be known to be interim or
 * final). 101 never is: the gateway forwards no Upgrade, so nothing asked
 * for a protocol switch. */
static int status_acceptable(const gw_respparser *rp, int status) {
  if (!status_line_ok(rp->sl, rp->sl_len) || status < 100 || status > 599)
    return 0;
  return status >= 200 || status == 100 || status == 103;
}

/* Keep the first bytes of an answer's status line (see status_line_ok);
 * data starts where the parser is. */
static void collect_status_line(gw_respparser *rp, const char *data, size_t len) {
  for (size_t i = 0; i < len && rp->sl_len < GW_STATUS_PREFIX; i++) {
    if (rp->sl_len == 0 && (data[i] == '\r' || data[i] == '\n'))
      continue; /* http_parser skips empty lines before the status line */
    rp->sl[rp->sl_len++] = data[i];
  }
}

static int on_headers_complete(http_parser *p) {
  gw_respparser *rp = of(p);
  gw_headers_done(&rp->resp->headers);
  rp->in_body = 1;
  rp->resp->status = p->status_code;
  /* a coding other than chunked (gzip, chunked) would reach the client
   * unannounced once the body is out of its chunks; a control character
   * in a value (RFC 9110 5.5) is refused as any other malformed head */
  if (!status_acceptable(rp, p->status_code) || gw_transfer_coding(&rp->resp->headers) < 0 ||
      !gw_headers_values_ok(&rp->resp->headers))
    return -1; /* UP_BAD_RESPONSE, before any of it reaches a client */
  if (p->status_code >= 200)
    rp->resp->head_ns = uv_hrtime(); /* the access log's upstream_ms ends here */
  /* RFC 9112 6.3: an answer to HEAD, and any 1xx, 204 or 304, ends with
   * its head whatever its Content-Length says (a 304 may carry the
   * length of the representation, RFC 9110 8.6): http_parser would wait
   * for that many body bytes otherwise. */
  int no_body = rp->is_head || p->status_code < 200 || p->status_code == 204 ||
                p->status_code == 304;
  if (!rp->stream->past_limit && p->status_code >= 200) {
    start_streaming(rp);
    return no_body ? 1 : 0;
  }
  if (p->content_length != ULLONG_MAX && p->status_code >= 200 && !no_body) {
    if (p->content_length > rp->max_response) {
      start_streaming(rp);
      return 0;
    }
    if (gw_buf_reserve(&rp->resp->body, (size_t)p->content_length))
      return -1;
  }
  return no_body ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  gw_respparser *rp = of(p);
  if (rp->streaming) {
    rp->stream->on_data(rp->arg, at, len);
    return 0;
  }
  if (rp->resp->body.len + len > rp->max_response) {
    start_streaming(rp);
    rp->stream->on_data(rp->arg, at, len);
    return 0;
  }
  return gw_buf_append(&rp->resp->body, at, len);
}

static int on_complete(http_parser *p) {
  gw_respparser *rp = of(p);
  rp->msg_done = 1;
  http_parser_pause(p, 1); /* one answer per feed: the caller decides on the rest */
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_begin,
    .on_header_field = on_field,
    .on_header_value = on_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_complete,
};

void gw_respparser_start(gw_respparser *rp, upstream_response *resp, const upstream_stream *stream,
                         void *arg, void *conn, uint64_t max_response, int is_head) {
  memset(rp, 0, sizeof *rp);
  http_parser_init(&rp->p, HTTP_RESPONSE);
  rp->p.data = rp;
  rp->resp = resp;
  rp->stream = stream;
  rp->arg = arg;
  rp->conn = conn;
  rp->max_response = max_response;
  rp->is_head = is_head;
}

gw_resp_result gw_respparser_feed(gw_respparser *rp, const char *data, size_t len, size_t *used) {
  size_t taken = 0;
  while (taken < len) {
    if (rp->sl_len < GW_STATUS_PREFIX)
      collect_status_line(rp, data + taken, len - taken);
    size_t n = http_parser_execute(&rp->p, &settings, data + taken, len - taken);
    enum http_errno e = HTTP_PARSER_ERRNO(&rp->p);
    taken += n;
    if (e != HPE_OK && e != HPE_PAUSED) {
      *used = taken;
      return GW_RESP_ERROR;
    }
    if (!rp->msg_done)
      break;
    rp->msg_done = 0;
    http_parser_pause(&rp->p, 0);
    if (rp->resp->status == 100 || rp->resp->status == 103) {
      rp->sl_len = 0;
      continue; /* interim answer (100 Continue, 103): the real one follows */
    }
    *used = taken;
    return GW_RESP_DONE;
  }
  *used = taken;
  return GW_RESP_MORE;
}

gw_resp_result gw_respparser_eof(gw_respparser *rp) {
  if (HTTP_PARSER_ERRNO(&rp->p) == HPE_PAUSED)
    http_parser_pause(&rp->p, 0);
  http_parser_execute(&rp->p, &settings, NULL, 0);
  return rp->msg_done && rp->resp->status >= 200 ? GW_RESP_DONE : GW_RESP_MORE;
}

int gw_respparser_keep_alive(const gw_respparser *rp) {
  return http_should_keep_alive(&rp->p) && rp->p.upgrade == 0;
}

/* The seconds of "timeout=N" in a Keep-Alive value (RFC 2068 19.7.1.1:
 * comma-separated parameters, the value a number, quoted or not), or -1. */
static long keep_alive_timeout(const char *v, size_t len) {
  size_t i = 0;
  while (i < len) {
    while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
      i++;
    size_t name = i;
    while (i < len && v[i] != '=' && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
      i++;
    int is_timeout = gw_ieq(v + name, i - name, "timeout");
    while (i < len && (v[i] == ' ' || v[i] == '\t'))
      i++;
    if (i < len && v[i] == '=') {
      i++;
      while (i < len && (v[i] == ' ' || v[i] == '\t'))
        i++;
      int quoted = i < len && v[i] == '"';
      i += (size_t)quoted;
      long n = -1;
      while (i < len && isdigit((unsigned char)v[i]) && n < 1000000)
        n = (n < 0 ? 0 : n * 10) + (v[i++] - '0');
      if (quoted && i < len && v[i] == '"')
        i++;
      if (is_timeout && n >= 0 && (i == len || v[i] == ',' || v[i] == ' ' || v[i] == '\t'))
        return n;
    }
    while (i < len && v[i] != ',')
      i++; /* the rest of a parameter that is not timeout=N */
  }
  return -1;
}

uint64_t gw_respparser_idle_ms(const gw_respparser *rp, uint64_t max_ms) {
  size_t len = 0;
  const char *v = gw_headers_get(&rp->resp->headers, "Keep-Alive", &len, NULL);
  long secs = v ? keep_alive_timeout(v, len) : -1;
  if (secs < 0)
    return max_ms;
  uint64_t ms = secs > 1 ? (uint64_t)(secs - 1) * 1000u : 0;
  return ms < max_ms ? ms : max_ms;
}
