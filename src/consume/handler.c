/* handler.c - the request to the handler and the kept answer (handler.h). */
#include "consume/handler.h"

#include <string.h>

#include "http/policy.h"

static int key_is_token(const char *key) {
  return key[0] != '"' && !strchr(key, ' ');
}

static int put_key(gw_buf *out, const char *key) {
  if (key_is_token(key))
    return gw_buf_puts(out, key);
  if (gw_buf_append(out, "\"", 1))
    return -1;
  for (const char *p = key; *p; p++)
    if ((*p == '"' || *p == '\\') ? gw_buf_append(out, "\\", 1) || gw_buf_append(out, p, 1)
                                  : gw_buf_append(out, p, 1))
      return -1;
  return gw_buf_append(out, "\"", 1);
}

/* A value an HTTP server takes (RFC 9110 field-value): tabs, spaces,
 * visible characters and bytes past ASCII. Not CR or LF (another line),
 * and no other control character either: a strict server (Go's, Node's)
 * refuses the request with a 400, which would be kept as the handler's
 * answer to a message it never saw. */
static int field_value_ok(const char *v, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)v[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      return 0;
  }
  return 1;
}

static int header_ok(const cs_header *h) {
  return gw_is_token(h->name, strlen(h->name)) && field_value_ok(h->value, h->value_len);
}

/* Appended piece by piece, as the gateway's heads are (http/conn.c): this
 * runs for every message. */
int cs_handler_head(const cs_config *cfg, const cs_msg *m, const char *key, uint64_t fence,
                    gw_buf *out) {
  /* an empty type is none: "Content-Type: " says nothing a server can use */
  const char *type = m->content_type && *m->content_type &&
                             field_value_ok(m->content_type, strlen(m->content_type))
                         ? m->content_type
                         : "application/octet-stream";
  int rc = gw_buf_puts(out, "POST ") || gw_buf_puts(out, cfg->to_path) ||
           gw_buf_puts(out, " HTTP/1.1\r\nHost: ") || gw_buf_puts(out, cfg->to_authority) ||
           gw_buf_puts(out, "\r\nContent-Type: ") || gw_buf_puts(out, type) ||
           gw_buf_puts(out, "\r\nContent-Length: ") || gw_buf_u64(out, m->body_len) ||
           gw_buf_puts(out, "\r\nIdempotency-Key: ") || put_key(out, key) ||
           gw_buf_puts(out, "\r\n");
  if (fence)
    rc = rc || gw_buf_puts(out, "Idempotency-Fence: ") || gw_buf_u64(out, fence) ||
         gw_buf_puts(out, "\r\n");
  if (field_value_ok(m->id, strlen(m->id)))
    rc = rc || gw_buf_header(out, "X-Idem-Message-Id", 17, m->id, strlen(m->id));
  rc = rc || gw_buf_puts(out, "X-Idem-Deliveries: ") || gw_buf_u64(out, m->deliveries) ||
       gw_buf_puts(out, "\r\n");
  for (size_t i = 0; i < m->nheaders && !rc; i++) {
    const cs_header *h = &m->headers[i];
    if (!header_ok(h))
      continue;
    rc = gw_buf_puts(out, "X-Idem-Header-") ||
         gw_buf_header(out, h->name, strlen(h->name), h->value, h->value_len);
  }
  return rc || gw_buf_puts(out, "\r\n") ? -1 : 0;
}

int cs_handler_kept_headers(const upstream_response *r, gw_buf *out) {
  return policy_replayable_headers(&r->headers, out);
}
