/* policy.c - pure decisions of the gateway (see policy.h). */
#include "http/policy.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/sha.h>

int policy_method_has_semantics(const gw_config *cfg, const char *method) {
  for (int i = 0; i < cfg->nmethods; i++)
    if (!strcmp(cfg->methods[i], method))
      return 1;
  return 0;
}

policy_key_result policy_key(const gw_headers *h, char *out, const char **why) {
  size_t len = 0;
  int count = 0;
  const char *v = gw_headers_get(h, "Idempotency-Key", &len, &count);
  if (!v)
    return POLICY_KEY_NONE;
  if (count > 1) {
    *why = "the Idempotency-Key header must appear once";
    return POLICY_KEY_BAD;
  }
  const char *reason = NULL;
  if (idem_key_parse(v, len, out, &reason) < 0) {
    *why = reason ? reason
                  : "Idempotency-Key must be a string or token of 1 to 255 "
                    "printable ASCII characters";
    return POLICY_KEY_BAD;
  }
  return POLICY_KEY_OK;
}

void policy_scope(const gw_config *cfg, const gw_headers *h, char out[65]) {
  out[0] = 0;
  if (!cfg->scope_header[0])
    return;
  size_t len = 0;
  const char *v = gw_headers_get(h, cfg->scope_header, &len, NULL);
  if (!v)
    return;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256((const unsigned char *)v, len, md);
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[64] = 0;
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
  static const char *const hop[] = {
      "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "TE",
      "Trailer", "Upgrade", "Content-Length"};
  for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
    if (gw_ieq(name, len, hop[i]))
      return 1;
  if (len >= 6 && !strncasecmp(name, "Proxy-", 6))
    return 1;
  return 0;
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
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 417: return "Expectation Failed";
  case 421: return "Misdirected Request";
  case 422: return "Unprocessable Content";
  case 423: return "Locked";
  case 425: return "Too Early";
  case 426: return "Upgrade Required";
  case 428: return "Precondition Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "Unknown";
  }
}

int policy_json_string(gw_buf *out, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  if (gw_buf_reserve(out, len + 2))
    return -1;
  if (gw_buf_append(out, "\"", 1))
    return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[7];
    const char *rep = NULL;
    size_t rlen = 2;
    switch (c) {
    case '"': rep = "\\\""; break;
    case '\\': rep = "\\\\"; break;
    case '\n': rep = "\\n"; break;
    case '\r': rep = "\\r"; break;
    case '\t': rep = "\\t"; break;
    default:
      if (c < 0x20 || c == 0x7f) {
        esc[0] = '\\'; esc[1] = 'u'; esc[2] = '0'; esc[3] = '0';
        esc[4] = hex[c >> 4]; esc[5] = hex[c & 15]; esc[6] = 0;
        rep = esc;
        rlen = 6;
      }
    }
    if (rep ? gw_buf_append(out, rep, rlen) : gw_buf_append(out, &s[i], 1))
      return -1;
  }
  return gw_buf_append(out, "\"", 1);
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
  return gw_buf_puts(headers, "Content-Type: application/problem+json\r\n");
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
  size_t clen = 0;
  const char *conn = gw_headers_get(h, "Connection", &clen, NULL);
  out->len = 0;
  for (size_t i = 0; i < h->n; i++) {
    const char *name = gw_header_name(h, i);
    size_t nlen = h->v[i].name_len;
    if (policy_hop_header(name, nlen) || !gw_is_token(name, nlen))
      continue;
    if (conn && gw_has_token(conn, clen, name, nlen))
      continue; /* named by Connection: hop-by-hop too */
    if (gw_buf_append(out, name, nlen) || gw_buf_append(out, ": ", 2) ||
        gw_buf_append(out, gw_header_value(h, i), h->v[i].value_len) ||
        gw_buf_append(out, "\r\n", 2))
      return -1;
  }
  /* an empty block still needs a valid pointer */
  return gw_buf_reserve(out, 1);
}
