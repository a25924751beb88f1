/* policy.c - pure decisions of the gateway (see policy.h). */
#include "http/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json_pointer.h"
#include "core/sha256.h"

int policy_method_has_semantics(const gw_policy *p, const char *method) {
  return p->mode != GW_MODE_OFF && gw_policy_has_method(p, method);
}

/* The key in header name: one header, a Structured Field string or token. */
static policy_key_result key_header(const gw_headers *h, const char *name, char *out,
                                    char *why, size_t whylen) {
  size_t len = 0;
  int count = 0;
  const char *v = gw_headers_get(h, name, &len, &count);
  if (!v)
    return POLICY_KEY_NONE;
  if (count > 1) {
    snprintf(why, whylen, "the %s header must appear once", name);
    return POLICY_KEY_BAD;
  }
  const char *reason = NULL;
  if (idem_key_parse(v, len, out, &reason) < 0) {
    snprintf(why, whylen, "%s", reason ? reason : "the key must be a string or token of 1 to 255 "
                                                  "printable ASCII characters");
    return POLICY_KEY_BAD;
  }
  return POLICY_KEY_OK;
}

policy_key_result policy_key(const gw_headers *h, char *out, const char **why) {
  static _Thread_local char buf[160];
  policy_key_result k = key_header(h, "Idempotency-Key", out, buf, sizeof buf);
  if (k == POLICY_KEY_BAD)
    *why = buf;
  return k;
}

/* A key taken as it is (a JSON string's bytes, a query value decoded). */
static policy_key_result key_plain(const char *v, size_t n, const char *what, char *out,
                                   char *why, size_t whylen) {
  if (!idem_key_valid(v, n)) {
    snprintf(why, whylen, "%s is not a valid key: 1 to 255 printable ASCII characters", what);
    return POLICY_KEY_BAD;
  }
  memcpy(out, v, n);
  out[n] = 0;
  return POLICY_KEY_OK;
}

static policy_key_result key_json(const gw_policy *p, const gw_request *r, char *out, char *why,
                                  size_t whylen) {
  char *v = NULL;
  size_t n = 0;
  json_ptr_type t;
  if (!r->body.len)
    return POLICY_KEY_NONE;
  int rc = json_pointer_get(r->body.p, r->body.len, p->key_arg, strlen(p->key_arg), &v, &n, &t);
  policy_key_result k;
  char what[300];
  snprintf(what, sizeof what, "the JSON body's value at %s", p->key_arg);
  /* A body that is not JSON is refused, not taken as one without a key:
   * a client's parser may read it (a member given twice, a BOM), and its
   * retries would each run, unkeyed. */
  if (rc == IDEM_EJSON)
    k = POLICY_KEY_NOT_JSON;
  else if (rc == IDEM_ENOTFOUND)
    k = POLICY_KEY_NONE; /* no such member: no key */
  else if (rc) {
    snprintf(why, whylen, "%s: %s", what, idem_strerror(rc));
    k = POLICY_KEY_BAD;
  } else if (t != JSON_PTR_STRING && t != JSON_PTR_NUMBER) {
    snprintf(why, whylen, "%s is not a string or a number", what);
    k = POLICY_KEY_BAD;
  } else {
    k = key_plain(v, n, what, out, why, whylen);
  }
  free(v);
  return k;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static policy_key_result key_query(const gw_policy *p, const gw_request *r, char *out, char *why,
                                   size_t whylen) {
  const char *t = r->target.p ? r->target.p : "", *end = t + r->target.len;
  const char *q = memchr(t, '?', r->target.len);
  size_t nlen = strlen(p->key_arg);
  const char *val = NULL, *vend = NULL;
  for (const char *it = q ? q + 1 : end; it < end;) {
    const char *amp = memchr(it, '&', (size_t)(end - it));
    const char *pe = amp ? amp : end;
    if ((size_t)(pe - it) > nlen && !memcmp(it, p->key_arg, nlen) && it[nlen] == '=') {
      if (val) {
        snprintf(why, whylen, "the query parameter %s must appear once", p->key_arg);
        return POLICY_KEY_BAD;
      }
      val = it + nlen + 1;
      vend = pe;
    } else if ((size_t)(pe - it) == nlen && !memcmp(it, p->key_arg, nlen)) {
      val = vend = pe; /* "?key" or "?key&": empty */
    }
    it = pe + 1;
  }
  if (!val)
    return POLICY_KEY_NONE;
  char dec[IDEM_KEY_MAX + 2], what[300];
  size_t n = 0;
  snprintf(what, sizeof what, "the query parameter %s", p->key_arg);
  for (const char *c = val; c < vend; c++) {
    int hi, lo;
    char ch = *c;
    if (ch == '%' && vend - c > 2 && (hi = hexval(c[1])) >= 0 && (lo = hexval(c[2])) >= 0) {
      ch = (char)(hi * 16 + lo);
      c += 2;
    } else if (ch == '+') {
      ch = ' ';
    }
    if (n == sizeof dec - 1)
      return key_plain(dec, n, what, out, why, whylen); /* too long: refused there */
    dec[n++] = ch;
  }
  return key_plain(dec, n, what, out, why, whylen);
}

policy_key_result policy_route_key(const gw_policy *p, const gw_request *r, char *out,
                                   char *why, size_t whylen) {
  switch (p->key_kind) {
  case GW_KEY_JSON:
    return key_json(p, r, out, why, whylen);
  case GW_KEY_QUERY:
    return key_query(p, r, out, why, whylen);
  case GW_KEY_HEADER:
  default:
    return key_header(&r->headers, p->key_arg, out, why, whylen);
  }
}

void policy_key_source_text(const gw_policy *p, char *out, size_t len) {
  if (p->key_kind == GW_KEY_JSON)
    snprintf(out, len, "a key at %s in a JSON body", p->key_arg);
  else if (p->key_kind == GW_KEY_QUERY)
    snprintf(out, len, "a query parameter %s", p->key_arg);
  else
    snprintf(out, len, "an %s header", p->key_arg);
}

/* {"/a":<value at /a>,...}: the listed members of a JSON body, each
 * canonical, in the order of the list; absent ones left out. */
static int members_text(const gw_policy *p, const gw_request *r, gw_buf *out) {
  int err = gw_buf_puts(out, "{");
  for (int i = 0; i < p->nfp_members && !err; i++) {
    const char *ptr = p->fp_members[i];
    char *v = NULL, *canon = NULL;
    size_t n = 0, cn = 0;
    json_ptr_type t;
    int rc = r->body.len ? json_pointer_get(r->body.p, r->body.len, ptr, strlen(ptr), &v, &n, &t)
                         : IDEM_ENOTFOUND;
    if (rc == IDEM_ENOTFOUND)
      continue;
    if (rc)
      return rc;
    err |= (out->len > 1 && gw_buf_puts(out, ",")) || policy_json_string(out, ptr, strlen(ptr)) ||
           gw_buf_puts(out, ":");
    if (t == JSON_PTR_STRING)
      err |= policy_json_string(out, v, n);
    else if (!(rc = idem_json_canonical(v, n, &canon, &cn)))
      err |= gw_buf_append(out, canon, cn);
    free(v);
    free(canon);
    if (rc)
      return rc;
  }
  return err || gw_buf_puts(out, "}") ? IDEM_ENOMEM : 0;
}

int policy_fingerprint(const gw_policy *p, const gw_request *r, uint8_t out[IDEM_FINGERPRINT_LEN]) {
  const char *target = r->target.p ? r->target.p : "";
  if (p->fp_kind == GW_FP_MEMBERS) {
    gw_buf b = {0};
    int rc = members_text(p, r, &b);
    if (!rc)
      rc = idem_fingerprint(r->method, target, b.p, b.len, 0, out);
    gw_buf_free(&b);
    return rc;
  }
  unsigned flags = p->fp_kind == GW_FP_JSON && r->body.len ? IDEM_FP_CANONICAL_JSON : 0;
  return idem_fingerprint(r->method, target, r->body.p, r->body.len, flags, out);
}

int policy_scope(const gw_config *cfg, const gw_headers *h, char out[65]) {
  out[0] = 0;
  if (!cfg->scope_header[0])
    return 0;
  size_t len = 0;
  int count = 0;
  const char *v = gw_headers_get(h, cfg->scope_header, &len, &count);
  if (!v)
    return 0;
  if (count > 1)
    return IDEM_EINVAL;
  /* never the unscoped space instead */
  return idem_sha256_hex(v, len, out) ? IDEM_ENOMEM : 0;
}

int policy_kept_headers(const gw_policy *p, const gw_buf *block, gw_buf *out) {
  out->len = 0;
  for (size_t i = 0; i < block->len;) {
    const char *line = block->p + i, *nl = memchr(line, '\n', block->len - i);
    size_t llen = nl ? (size_t)(nl - line) + 1 : block->len - i;
    const char *colon = memchr(line, ':', llen);
    size_t nlen = colon ? (size_t)(colon - line) : 0;
    int drop = 0;
    for (int k = 0; k < p->ndrop && !drop; k++) {
      size_t dl = strlen(p->drop[k]);
      int prefix = dl && p->drop[k][dl - 1] == '*';
      drop = prefix ? nlen >= dl - 1 && !strncasecmp(line, p->drop[k], dl - 1)
                    : nlen == dl && !strncasecmp(line, p->drop[k], dl);
    }
    if (!drop && gw_buf_append(out, line, llen))
      return -1;
    i += llen;
  }
  return gw_buf_reserve(out, 1);
}

int policy_status_stored(int status) {
  if (status < 200 || status > 499)
    return 0;
  switch (status) {
  case 408: /* the upstream timed the request out: nothing ran for sure */
  case 409: /* conflict with current state: may succeed on retry */
  case 425: /* too early */
  case 429: /* rate limited */
    return 0;
  default:
    return 1;
  }
}

int policy_hop_header(const char *name, size_t len) {
  /* written out, not looped over a table: gw_ieq then knows each length at
   * compile time, and a name of another length costs one compare each */
  return gw_ieq(name, len, "Connection") || gw_ieq(name, len, "Keep-Alive") ||
         gw_ieq(name, len, "Transfer-Encoding") || gw_ieq(name, len, "TE") ||
         gw_ieq(name, len, "Trailer") || gw_ieq(name, len, "Upgrade") ||
         gw_ieq(name, len, "Content-Length") ||
         (len >= 6 && !strncasecmp(name, "Proxy-", 6)); /* Proxy-Connection too */
}

int policy_request_header_dropped(const char *name, size_t len) {
  return policy_hop_header(name, len) || gw_ieq(name, len, "Expect") ||
         gw_ieq(name, len, "Idempotency-Fence");
}

const char *policy_reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 203: return "Non-Authoritative Information";
  case 204: return "No Content";
  case 205: return "Reset Content";
  case 206: return "Partial Content";
  case 207: return "Multi-Status";
  case 208: return "Already Reported";
  case 226: return "IM Used";
  case 300: return "Multiple Choices";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 402: return "Payment Required";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 407: return "Proxy Authentication Required";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 421: return "Misdirected Request";
  case 422: return "Unprocessable Content";
  case 423: return "Locked";
  case 425: return "Too Early";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 451: return "Unavailable For Legal Reasons";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  case 506: return "Variant Also Negotiates";
  case 507: return "Insufficient Storage";
  case 508: return "Loop Detected";
  case 511: return "Network Authentication Required";
  default: return "Unknown";
  }
}

/* ascii: bytes from 0x80 too are written \u00XX (as Latin-1), so that any
 * bytes give valid JSON; else they pass as they are (UTF-8 text). */
static int json_plain(unsigned char c, int ascii) {
  return c >= 0x20 && c != '"' && c != '\\' && c != 0x7f && !(ascii && c >= 0x80);
}

static int json_quote(gw_buf *out, const char *s, size_t len, int ascii) {
  static const char hex[] = "0123456789abcdef";
  if (gw_buf_reserve(out, len + 2) || gw_buf_append(out, "\"", 1))
    return -1;
  size_t i = 0;
  while (i < len) {
    size_t run = i;
    while (run < len && json_plain((unsigned char)s[run], ascii))
      run++;
    if (run > i && gw_buf_append(out, s + i, run - i)) /* a run of plain bytes at once */
      return -1;
    if ((i = run) == len)
      break;
    unsigned char c = (unsigned char)s[i++];
    char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    const char *rep = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                      : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
    if (rep ? gw_buf_append(out, rep, 2) : gw_buf_append(out, esc, 6))
      return -1;
  }
  return gw_buf_append(out, "\"", 1);
}

int policy_json_string(gw_buf *out, const char *s, size_t len) {
  return json_quote(out, s, len, 0);
}

int policy_json_ascii(gw_buf *out, const char *s, size_t len) {
  return json_quote(out, s, len, 1);
}

int policy_not_kept(gw_buf *headers, gw_buf *body, int status, const char *why) {
  char detail[256];
  snprintf(detail, sizeof detail,
           "the request ran once and the upstream answered %d, but its answer %s and was "
           "not kept",
           status, why);
  if (policy_problem(body, 502, "upstream-response-not-stored", "Upstream response not stored",
                     detail))
    return -1;
  /* the gateway's own answer: its Date is when it was made, as a replay's
   * is when the first answer was */
  return gw_buf_puts(headers, "Content-Type: application/problem+json\r\n") ||
         gw_buf_puts(headers, gw_date_header());
}

const char *policy_not_kept_why(int err) {
  switch (err) {
  case IDEM_EFULL: return "did not fit in the store, which is full";
  case IDEM_ETOOBIG: return "was larger than the store keeps";
  default: return NULL;
  }
}

int policy_problem(gw_buf *out, int status, const char *slug, const char *title,
                   const char *detail) {
  if (gw_buf_printf(out, "{\"type\":\"urn:idem:problem:%s\",\"title\":", slug) ||
      policy_json_string(out, title, strlen(title)) ||
      gw_buf_printf(out, ",\"status\":%d,\"detail\":", status) ||
      policy_json_string(out, detail, strlen(detail)) ||
      gw_buf_puts(out, "}\n"))
    return -1;
  return 0;
}

int policy_replayable_headers(const gw_headers *h, gw_buf *out) {
  /* Connection may come in several field lines: what each names is
   * hop-by-hop (RFC 9110 7.6.1), not only what the first one does */
  gw_list conn;
  gw_headers_list(h, "Connection", &conn);
  out->len = 0;
  for (size_t i = 0; i < h->n; i++) {
    const char *name = gw_header_name(h, i);
    size_t nlen = h->v[i].name_len;
    if (policy_hop_header(name, nlen) || !gw_is_token(name, nlen))
      continue;
    if (gw_headers_list_has(&conn, name, nlen))
      continue; /* named by Connection: hop-by-hop too */
    if (nlen == 19 && !strncasecmp(name, "Idempotent-Replayed", 19))
      continue; /* the gateway's to say: a replay adds its own */
    if (gw_buf_header(out, name, nlen, gw_header_value(h, i), h->v[i].value_len))
      return -1;
  }
  /* an empty block still needs a valid pointer */
  return gw_buf_reserve(out, 1);
}
