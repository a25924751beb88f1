/* reqparse.c - client requests from bytes, with the gateway's limits and
 * its refusal of ambiguous framing (see request.h). */
#include "http/request.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

enum { ST_NONE = 0, ST_HEAD, ST_DONE, ST_ERROR, ST_HEAD_DONE };

/* Where head_scan is on a line of the head. */
enum { HD_LINE_START = 0, HD_IN_LINE, HD_AFTER_CR };

/* Where chunk_scan is in a chunked body's framing (RFC 9112 7.1). */
enum {
  CK_OFF = 0,   /* not a chunked body, or not reached yet */
  CK_SIZE,      /* chunk-size: hex digits */
  CK_BWS,       /* whitespace after the size: only ';' or CR may follow */
  CK_EXT,       /* chunk-ext, up to CR */
  CK_SIZE_LF,   /* the LF of the size line's CRLF */
  CK_DATA,      /* ck_left bytes of data */
  CK_DATA_CR,   /* the CRLF after a chunk's data */
  CK_DATA_LF,
  CK_TRAILER,   /* at the start of a trailer line, or of the final CRLF */
  CK_FIELD,     /* in a trailer field line */
  CK_FIELD_LF,
  CK_END_LF,    /* the LF of the final CRLF */
  CK_END
};

void gw_request_free(gw_request *r) {
  if (!r)
    return;
  gw_buf_free(&r->target);
  gw_headers_free(&r->headers);
  gw_buf_free(&r->body);
}

void gw_request_reset(gw_request *r, size_t keep_max) {
  gw_buf target = r->target, body = r->body;
  gw_headers h = r->headers;
  gw_buf_recycle(&target, keep_max);
  gw_buf_recycle(&body, keep_max);
  if (h.text.cap > keep_max)
    gw_headers_free(&h);
  gw_headers_reset(&h);
  memset(r, 0, sizeof *r);
  r->target = target;
  r->body = body;
  r->headers = h;
}

static int refuse(gw_reqparser *rp, int status, const char *detail) {
  rp->state = ST_ERROR;
  rp->error_status = status;
  rp->error_detail = detail;
  return -1;
}

static gw_reqparser *of(http_parser *p) { return p->data; }

static int on_message_begin(http_parser *p) {
  gw_reqparser *rp = of(p);
  if (!rp->cur) {
    rp->cur = calloc(1, sizeof *rp->cur);
    if (!rp->cur)
      return refuse(rp, 503, "out of memory");
  }
  rp->head_bytes = 0;
  rp->trailer_bytes = 0;
  rp->in_trailer_name = 0;
  rp->started = 1;
  rp->in_body = 0;
  return 0;
}

static int count_head(gw_reqparser *rp, size_t len) {
  rp->head_bytes += len;
  if (rp->head_bytes > rp->cfg->max_header)
    return refuse(rp, 431, "the request line and headers exceed the gateway's limit");
  return 0;
}

/* rc of adding a piece of the head: out of memory is a 503. */
static int added(gw_reqparser *rp, int rc) { return rc ? refuse(rp, 503, "out of memory") : 0; }

/* The request line counts whole: "METHOD SP target SP HTTP/1.x CRLF", the
 * fixed parts with the target's first piece. */
#define VERSION_AND_CRLF (sizeof " HTTP/1.1\r\n" - 1)

static int on_url(http_parser *p, const char *at, size_t len) {
  gw_reqparser *rp = of(p);
  size_t line = rp->cur->target.len
                    ? 0
                    : strlen(http_method_str((enum http_method)p->method)) + 1 + VERSION_AND_CRLF;
  return count_head(rp, line + len) ? -1 : added(rp, gw_buf_append(&rp->cur->target, at, len));
}

/* Trailer fields (after a chunked body) are dropped, but held to
 * --max-header as the head is, counted the same way (field lines as
 * "Name: value" CRLF, and the blank line after them). http_parser's own
 * count of them depends on how the bytes arrive (a value that comes in one
 * read is skipped, not counted), so by it alone a trailer could pass or be
 * refused by the split of the reads. */
static int count_trailer(gw_reqparser *rp, size_t len) {
  rp->trailer_bytes += len;
  if (rp->trailer_bytes > rp->cfg->max_header)
    return refuse(rp, 431, "the request's trailer exceeds the gateway's limit on headers");
  return 0;
}

/* Trailer fields are never forwarded as headers. */
static int on_header_field(http_parser *p, const char *at, size_t len) {
  gw_reqparser *rp = of(p);
  if (rp->in_body) {
    int fresh = !rp->in_trailer_name; /* ": " and CRLF once per field */
    rp->in_trailer_name = 1;
    return count_trailer(rp, len + (fresh ? 4 : 0));
  }
  /* ": " and CRLF count once per header, however the name arrives */
  int fresh = rp->cur->headers.n == 0 || rp->cur->headers.in_value;
  if (count_head(rp, len + (fresh ? 4 : 0)))
    return -1;
  return added(rp, gw_headers_on_field(&rp->cur->headers, at, len));
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  gw_reqparser *rp = of(p);
  if (rp->in_body) {
    rp->in_trailer_name = 0;
    return count_trailer(rp, len);
  }
  return count_head(rp, len) ? -1 : added(rp, gw_headers_on_value(&rp->cur->headers, at, len));
}

const char *gw_target_check(const char *t, size_t len, enum http_method m, gw_target_form *f) {
  memset(f, 0, sizeof *f);
  /* http_parser (not built strict) lets a TAB or a form feed into the
   * target: sent on in the request line, an upstream that splits it at
   * any whitespace reads another target and version (RFC 9112 3: a
   * request-target holds no whitespace; an invalid request line is a 400,
   * never corrected) */
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)t[i] <= ' ' || t[i] == 0x7f)
      return "a request target has no whitespace or control character";
  /* RFC 9112 3.2: no form of request-target has a fragment; one sent would
   * reach the upstream, and the fingerprint, as part of the path */
  if (memchr(t, '#', len))
    return "a request target has no fragment ('#')";
  if (len && t[0] == '/')
    return NULL;
  if (len && t[0] == '*')
    return len == 1 && m == HTTP_OPTIONS ? NULL : "the target \"*\" is for OPTIONS only";
  size_t colon = 0;
  while (colon < len && t[colon] != ':')
    colon++;
  if (len - colon < 3 || memcmp(t + colon, "://", 3))
    return "a host:port target (authority form) is for CONNECT only";
  if (!gw_ieq(t, colon, "http") && !gw_ieq(t, colon, "https"))
    return "an absolute target must use the http or https scheme";
  size_t a = colon + 3, end = a;
  while (end < len && t[end] != '/' && t[end] != '?' && t[end] != '#')
    end++;
  if (end == a || t[a] == ':')
    return "an absolute target must name a host";
  /* RFC 9110 4.2.4: userinfo in an http URI is deprecated; a recipient
   * should treat it as an error (it is a phishing device, and a password) */
  if (memchr(t + a, '@', end - a))
    return "an absolute target must not carry userinfo (user@host)";
  f->absolute = 1;
  f->auth_off = a;
  f->auth_len = end - a;
  f->path_off = end;
  return NULL;
}

/* RFC 9112 3.2.2: a proxy forwards an absolute-form request in origin form,
 * and the target's authority replaces the client's Host (for an HTTP/1.0
 * client without Host, becomes it). Done before anything reads the target
 * or Host: "http://h/a" and "/a" with Host h are then one request, with one
 * fingerprint, and the upstream never sees a full URI it did not expect. */
static int origin_form(gw_reqparser *rp, enum http_method m) {
  gw_request *r = rp->cur;
  gw_target_form f;
  const char *why = gw_target_check(r->target.p, r->target.len, m, &f);
  if (why)
    return refuse(rp, 400, why);
  if (!f.absolute)
    return 0;
  char *t = r->target.p;
  if (gw_headers_set(&r->headers, "Host", t + f.auth_off, f.auth_len))
    return refuse(rp, 503, "out of memory");
  size_t rest = r->target.len - f.path_off, at = 0;
  if (!rest || t[f.path_off] != '/')
    t[at++] = '/'; /* an empty path is "/"; path_off is past "http://h" */
  memmove(t + at, t + f.path_off, rest);
  r->target.len = at + rest;
  t[r->target.len] = 0;
  return 0;
}

static int on_headers_complete(http_parser *p) {
  gw_reqparser *rp = of(p);
  gw_request *r = rp->cur;
  if (count_head(rp, 2)) /* the blank line that ends the head */
    return -1;
  gw_headers_done(&r->headers);
  rp->in_body = 1;
  /* keep the target NUL-terminated for callers that want a C string */
  if (gw_buf_append(&r->target, "", 1))
    return refuse(rp, 503, "out of memory");
  r->target.len--;
  const char *m = http_method_str((enum http_method)p->method);
  size_t mlen = strlen(m);
  if (mlen >= sizeof r->method)
    mlen = sizeof r->method - 1;
  memcpy(r->method, m, mlen);
  r->method[mlen] = 0;
  r->is_head = p->method == HTTP_HEAD;
  r->http_major = p->http_major;
  r->http_minor = p->http_minor;
  r->keep_alive = http_should_keep_alive(p);
  if (p->method == HTTP_CONNECT)
    return refuse(rp, 400, "CONNECT is not supported by this gateway");
  if (p->http_major != 1)
    return refuse(rp, 400, "only HTTP/1.0 and HTTP/1.1 are supported");

  /* RFC 9112 5.1: no whitespace between a field name and its colon. Read
   * leniently ("Content-Length : 5" as some other header) it is a classic
   * request-smuggling vector, so any name that is not a token is refused. */
  for (size_t i = 0; i < r->headers.n; i++)
    if (!gw_is_token(gw_header_name(&r->headers, i), r->headers.v[i].name_len))
      return refuse(rp, 400, "invalid header name (whitespace before the colon?)");
  /* RFC 9110 5.5: a NUL, CR or LF in a value is to be refused (or made a
   * space), never forwarded; http_parser let one through as the value's
   * first byte ("X-A: \x00evil"), as any other control character */
  if (!gw_headers_values_ok(&r->headers))
    return refuse(rp, 400, "a control character in a header value");

  /* RFC 9112 3.2: exactly one Host in HTTP/1.1, at most one in 1.0 */
  int nhost = 0;
  gw_headers_get(&r->headers, "Host", NULL, &nhost);
  if (nhost > 1 || (nhost == 0 && p->http_minor >= 1))
    return refuse(rp, 400, "an HTTP/1.1 request needs exactly one Host header");
  if (origin_form(rp, (enum http_method)p->method))
    return -1;

  /* Framing must be unambiguous (RFC 9112 6.3): one Content-Length, or
   * Transfer-Encoding ending in chunked, never both. http_parser checks most
   * of this; checking again here keeps the rule in one readable place. */
  int ncl = 0, te = gw_transfer_coding(&r->headers);
  gw_headers_get(&r->headers, "Content-Length", NULL, &ncl);
  if (ncl > 1)
    return refuse(rp, 400, "more than one Content-Length header");
  if (ncl && te)
    return refuse(rp, 400, "both Content-Length and Transfer-Encoding: ambiguous framing");
  if (te < 0)
    return refuse(rp, 400, "Transfer-Encoding other than a single 'chunked' is not supported");
  if (te && p->http_minor == 0)
    return refuse(rp, 400, "Transfer-Encoding in an HTTP/1.0 request");
  if (ncl && p->content_length > rp->cfg->max_body)
    return refuse(rp, 413, "the request body exceeds the gateway's limit");
  if (p->upgrade)
    r->upgrade = 1;
  rp->chunked = te != 0;
  rp->ck_state = rp->chunked ? CK_SIZE : CK_OFF;
  rp->ck_digits = 0;
  rp->ck_left = 0;

  size_t elen = 0;
  const char *expect = gw_headers_get(&r->headers, "Expect", &elen, NULL);
  if (expect && gw_ieq(expect, elen, "100-continue") && p->http_minor >= 1) {
    r->expect_continue = 1;
    rp->state = ST_HEAD;
  } else {
    rp->state = ST_HEAD_DONE;
  }
  /* Pause either way: gw_reqparser_feed learns where the head ends, which
   * head_scan and body_scan need. The pause comes before the head's last
   * byte (its LF), which http_parser takes again when it goes on. */
  rp->head_lf = 1;
  http_parser_pause(p, 1);
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  gw_reqparser *rp = of(p);
  gw_request *r = rp->cur;
  if (r->body.len + len > rp->cfg->max_body)
    return refuse(rp, 413, "the request body exceeds the gateway's limit");
  if (!r->body.cap && p->content_length != ULLONG_MAX &&
      p->content_length + len <= rp->cfg->max_body &&
      gw_buf_reserve(&r->body, (size_t)p->content_length + len))
    return refuse(rp, 503, "out of memory");
  /* the CRLF after a chunk's data, which http_parser built without strict
   * mode skips unread ("3\r\nabcXX0..."), is chunk_scan's to check */
  return gw_buf_append(&r->body, at, len) ? refuse(rp, 503, "out of memory") : 0;
}

static int on_message_complete(http_parser *p) {
  gw_reqparser *rp = of(p);
  rp->state = ST_DONE;
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

void gw_reqparser_init(gw_reqparser *rp, const gw_config *cfg) {
  memset(rp, 0, sizeof *rp);
  rp->cfg = cfg;
  http_parser_init(&rp->p, HTTP_REQUEST);
  rp->p.data = rp;
}

void gw_reqparser_free(gw_reqparser *rp) {
  if (rp->cur) {
    gw_request_free(rp->cur);
    free(rp->cur);
    rp->cur = NULL;
  }
}

/*
 * Read the framing of a chunked body again, as the bytes http_parser took:
 * it lets through a size line with any byte after its CR ("2\rXab"), any
 * byte in a chunk extension (a bare LF, a NUL), and any byte after the CR
 * of the final CRLF ("0\r\n\rX"), as well as a final empty line of a bare
 * LF. A front proxy that reads any of these as a strict peer does (a bare
 * LF ending the line) sees another body, and the bytes after it as another
 * request: the gap a smuggled request needs. So each line of the framing
 * must end in CRLF, and a chunk extension holds no control character but
 * HTAB. Data bytes are skipped by count. Returns 0, or -1 refused.
 */
static int chunk_scan(gw_reqparser *rp, const char *d, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)d[i];
    switch (rp->ck_state) {
    case CK_SIZE: {
      int digit = idem_hexval(c);
      if (digit >= 0) {
        rp->ck_digits++;
        if (rp->ck_left < ((uint64_t)1 << 59)) /* larger is http_parser's error */
          rp->ck_left = rp->ck_left * 16 + (uint64_t)digit;
        break;
      }
      if (!rp->ck_digits)
        return refuse(rp, 400, "invalid chunk size in a chunked body");
      if (c == '\r')
        rp->ck_state = CK_SIZE_LF;
      else if (c == ';')
        rp->ck_state = CK_EXT;
      else if (c == ' ' || c == '\t')
        rp->ck_state = CK_BWS;
      else
        return refuse(rp, 400, "invalid chunk size in a chunked body");
      break;
    }
    case CK_BWS:
      if (c == ';')
        rp->ck_state = CK_EXT;
      else if (c == '\r')
        rp->ck_state = CK_SIZE_LF;
      else if (c != ' ' && c != '\t')
        return refuse(rp, 400, "invalid chunk size in a chunked body");
      break;
    case CK_EXT:
      if (c == '\r')
        rp->ck_state = CK_SIZE_LF;
      else if ((c < 0x20 && c != '\t') || c == 0x7f)
        return refuse(rp, 400, "a control character in a chunk extension");
      break;
    case CK_SIZE_LF:
      if (c != '\n')
        return refuse(rp, 400, "a chunk size line not ended by CRLF");
      rp->ck_state = rp->ck_left ? CK_DATA : CK_TRAILER;
      break;
    case CK_DATA: {
      uint64_t skip = n - i < rp->ck_left ? n - i : rp->ck_left;
      rp->ck_left -= skip;
      i += (size_t)skip - 1;
      if (!rp->ck_left)
        rp->ck_state = CK_DATA_CR;
      break;
    }
    case CK_DATA_CR:
    case CK_DATA_LF:
      if (c != (rp->ck_state == CK_DATA_CR ? '\r' : '\n'))
        return refuse(rp, 400, "chunk data not followed by CRLF");
      if (rp->ck_state == CK_DATA_LF) {
        rp->ck_digits = 0;
        rp->ck_state = CK_SIZE;
      } else {
        rp->ck_state = CK_DATA_LF;
      }
      break;
    case CK_TRAILER:
    case CK_FIELD:
      if (c == '\r')
        rp->ck_state = rp->ck_state == CK_TRAILER ? CK_END_LF : CK_FIELD_LF;
      else if (c == '\n')
        return refuse(rp, 400, "a line of a chunked body's trailer not ended by CRLF");
      else
        rp->ck_state = CK_FIELD;
      break;
    case CK_FIELD_LF:
    case CK_END_LF:
      if (c != '\n')
        return refuse(rp, 400, "a line of a chunked body's trailer not ended by CRLF");
      /* the blank line that ends the trailer counts, as the head's does */
      if (rp->ck_state == CK_END_LF && count_trailer(rp, 2))
        return -1;
      rp->ck_state = rp->ck_state == CK_FIELD_LF ? CK_TRAILER : CK_END;
      break;
    default: /* CK_END: http_parser stops at the end of the message */
      return refuse(rp, 400, "malformed chunked body");
    }
  }
  return 0;
}

/* The request line, whole: METHOD SP target SP HTTP/d.d (RFC 9112 3).
 * http_parser takes "HXXP/1.1" for the version, and two spaces for one. */
static int version_ok(const char *v) {
  return !memcmp(v, "HTTP/", 5) && v[5] >= '0' && v[5] <= '9' && v[6] == '.' && v[7] >= '0' &&
         v[7] <= '9';
}

/* The line from s to e, all of it at hand (the usual case). */
static int request_line_text_ok(const char *s, const char *e) {
  const char *sp1 = memchr(s, ' ', (size_t)(e - s));
  const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(e - sp1 - 1)) : NULL;
  /* the 8 bytes after the second space are the version, and hold none */
  return sp1 > s && sp2 > sp1 + 1 && e - sp2 == 9 && version_ok(sp2 + 1);
}

/* The line as counted by request_line_byte, when it came in pieces. */
static int request_line_ok(const gw_reqparser *rp) {
  uint64_t t = rp->rl_tail;
  char v[8];
  for (int k = 7; k >= 0; k--, t >>= 8)
    v[k] = (char)(t & 0xff);
  return rp->rl_sp == 2 && !rp->rl_bad && version_ok(v);
}

/* The request line's bytes, one at a time (it may come in pieces): its
 * spaces, two in a row, and its last 8 bytes (the version). */
static void request_line_byte(gw_reqparser *rp, char c) {
  rp->rl_bad |= c == ' ' && (rp->rl_tail & 0xff) == ' ';
  rp->rl_sp += c == ' ';
  rp->rl_tail = rp->rl_tail << 8 | (unsigned char)c;
}

/* The first CR or LF in [p, end), or end. */
static const char *line_end(const char *p, const char *end) {
  const char *lf = memchr(p, '\n', (size_t)(end - p)), *stop = lf ? lf : end;
  const char *cr = memchr(p, '\r', (size_t)(stop - p));
  return cr ? cr : stop;
}

/*
 * Read the bytes of a request head again: http_parser (not built strict)
 * takes any byte after a CR as if it were the LF ("Host: h\r\n\rX" ends
 * the head), and joins a line that starts with a space or tab to the one
 * before (obs-fold). A front proxy that reads either otherwise sees other
 * headers, or another end of the head, and the body as another request.
 * RFC 9112 5.2 lets a server refuse obs-fold with a 400; a CR not followed
 * by LF is no line ending at all. A bare LF still ends a line (RFC 9112 2.2).
 * Inside a header line it jumps to the line's end (memchr): only the
 * request line is read byte by byte. Returns 0, or -1 refused.
 */
static int head_scan(gw_reqparser *rp, const char *d, size_t n) {
  const char *p = d, *end = d + n, *rl_start = NULL; /* the request line, begun here */
  while (p < end) {
    char c = *p;
    switch (rp->hd_state) {
    case HD_AFTER_CR:
      if (c != '\n')
        return refuse(rp, 400, "a CR not followed by LF in the request head");
      rp->hd_state = HD_LINE_START;
      p++;
      break;
    case HD_LINE_START:
      if ((c == ' ' || c == '\t') && rp->hd_lines)
        return refuse(rp, 400, "a header line folded onto the one before (obs-fold)");
      if (c != '\r' && c != '\n' && ++rp->hd_lines == 1) {
        /* empty lines before the request line are skipped */
        rl_start = p;
        rp->rl_bad = c == ' ';
        rp->rl_sp = c == ' ';
        rp->rl_tail = (unsigned char)c;
      }
      rp->hd_state = c == '\r' ? HD_AFTER_CR : c == '\n' ? HD_LINE_START : HD_IN_LINE;
      p++;
      break;
    default: { /* HD_IN_LINE */
      const char *e = line_end(p, end);
      if (rp->hd_lines == 1) {
        int whole = rl_start && e < end;
        for (const char *q = p; !whole && q < e; q++)
          request_line_byte(rp, *q);
        if (e < end && !(whole ? request_line_text_ok(rl_start, e) : request_line_ok(rp)))
          return refuse(rp, 400, "a malformed request line (METHOD SP target SP HTTP/1.x)");
      }
      if (e < end)
        rp->hd_state = *e == '\r' ? HD_AFTER_CR : HD_LINE_START;
      p = e < end ? e + 1 : end;
    }
    }
  }
  return 0;
}

/* The bytes after the head, up to the end of the request: first the head's
 * last byte again, which must be its LF; then a chunked body's framing. */
static int body_scan(gw_reqparser *rp, const char *d, size_t n) {
  if (n && rp->head_lf) {
    if (*d != '\n')
      return refuse(rp, 400, "a CR not followed by LF in the request head");
    rp->head_lf = 0;
    d++;
    n--;
  }
  return rp->ck_state != CK_OFF ? chunk_scan(rp, d, n) : 0;
}

static const char *parser_detail(enum http_errno e) {
  switch (e) {
  case HPE_INVALID_CHUNK_SIZE: return "invalid chunk size in a chunked body";
  case HPE_INVALID_CONTENT_LENGTH: return "invalid Content-Length";
  case HPE_UNEXPECTED_CONTENT_LENGTH:
    return "duplicate Content-Length, or Content-Length with Transfer-Encoding";
  case HPE_INVALID_TRANSFER_ENCODING: return "invalid Transfer-Encoding";
  case HPE_INVALID_METHOD: return "invalid or unsupported method";
  case HPE_INVALID_VERSION: return "invalid HTTP version";
  case HPE_INVALID_URL: return "invalid request target";
  case HPE_INVALID_HEADER_TOKEN: return "invalid character in a header";
  default: return "malformed HTTP request";
  }
}

gw_parse_result gw_reqparser_feed(gw_reqparser *rp, const char *data,
                                  size_t len, size_t *used) {
  if (rp->state == ST_ERROR) {
    *used = len;
    return GW_PARSE_ERROR;
  }
  rp->state = ST_NONE;
  if (HTTP_PARSER_ERRNO(&rp->p) == HPE_PAUSED)
    http_parser_pause(&rp->p, 0);
  int in_head = !rp->in_body;
  size_t n = http_parser_execute(&rp->p, &settings, data, len);
  if (rp->state != ST_ERROR && in_head)
    head_scan(rp, data, n);
  else if (rp->state != ST_ERROR)
    body_scan(rp, data, n);
  if (rp->state == ST_HEAD_DONE) {
    /* paused where the head ends (on_headers_complete): the rest is body */
    rp->state = ST_NONE;
    http_parser_pause(&rp->p, 0);
    size_t more = http_parser_execute(&rp->p, &settings, data + n, len - n);
    if (rp->state != ST_ERROR)
      body_scan(rp, data + n, more);
    n += more;
  }
  /* http_parser ended a chunked body where a strict reading did not */
  if (rp->state == ST_DONE && rp->ck_state != CK_OFF && rp->ck_state != CK_END)
    refuse(rp, 400, "malformed chunked body");
  enum http_errno e = HTTP_PARSER_ERRNO(&rp->p);
  if (rp->state == ST_ERROR) {
    *used = len;
    return GW_PARSE_ERROR;
  }
  if (e != HPE_OK && e != HPE_PAUSED) {
    *used = len;
    rp->state = ST_ERROR;
    rp->error_status = e == HPE_HEADER_OVERFLOW ? 431 : 400;
    rp->error_detail = e == HPE_HEADER_OVERFLOW
                           ? "the request headers exceed the gateway's limit"
                           : parser_detail(e);
    return GW_PARSE_ERROR;
  }
  *used = n;
  if (rp->state == ST_DONE)
    return GW_PARSE_DONE;
  if (rp->state == ST_HEAD)
    return GW_PARSE_HEAD;
  if (rp->p.upgrade && rp->cur) {
    /* http_parser stops at the end of an Upgrade request: we do not switch
     * protocols, the request is answered and the connection closed. */
    rp->state = ST_DONE;
    rp->cur->upgrade = 1;
    rp->cur->keep_alive = 0;
    return GW_PARSE_DONE;
  }
  *used = len;
  return GW_PARSE_MORE;
}

gw_parse_result gw_reqparser_eof(gw_reqparser *rp) {
  if (rp->state == ST_ERROR)
    return GW_PARSE_ERROR;
  rp->state = ST_NONE;
  if (HTTP_PARSER_ERRNO(&rp->p) == HPE_PAUSED)
    http_parser_pause(&rp->p, 0);
  http_parser_execute(&rp->p, &settings, NULL, 0);
  return rp->state == ST_DONE ? GW_PARSE_DONE : GW_PARSE_MORE;
}

gw_request *gw_reqparser_take(gw_reqparser *rp) {
  gw_request *r = rp->cur;
  rp->cur = NULL;
  rp->started = 0;
  rp->head_bytes = 0;
  rp->trailer_bytes = 0;
  rp->in_trailer_name = 0;
  rp->chunked = 0;
  rp->in_body = 0;
  rp->ck_state = CK_OFF;
  rp->hd_state = HD_LINE_START;
  rp->hd_lines = 0;
  rp->rl_sp = rp->rl_bad = 0;
  rp->rl_tail = 0;
  rp->head_lf = 0;
  rp->state = ST_NONE;
  return r;
}
