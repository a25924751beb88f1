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

static int header_ok(const cs_header *h) {
  if (!gw_is_token(h->name, strlen(h->name)))
    return 0;
  for (size_t i = 0; i < h->value_len; i++)
    if (h->value[i] == '\r' || h->value[i] == '\n' || h->value[i] == 0)
      return 0;
  return 1;
}

int cs_handler_head(const cs_config *cfg, const cs_msg *m, const char *key, uint64_t fence,
                    gw_buf *out) {
  int rc = gw_buf_printf(out, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n"
                              "Content-Length: %zu\r\nIdempotency-Key: ",
                         cfg->to_path, cfg->to_authority,
                         m->content_type && !strpbrk(m->content_type, "\r\n")
                             ? m->content_type
                             : "application/octet-stream",
                         m->body_len);
  rc = rc || put_key(out, key) || gw_buf_puts(out, "\r\n");
  if (fence)
    rc = rc || gw_buf_puts(out, "Idempotency-Fence: ") || gw_buf_u64(out, fence) ||
         gw_buf_puts(out, "\r\n");
  if (!strpbrk(m->id, "\r\n"))
    rc = rc || gw_buf_printf(out, "X-Idem-Message-Id: %s\r\n", m->id);
  rc = rc || gw_buf_printf(out, "X-Idem-Deliveries: %u\r\n", m->deliveries);
  for (size_t i = 0; i < m->nheaders && !rc; i++) {
    const cs_header *h = &m->headers[i];
    if (!header_ok(h))
      continue;
    rc = gw_buf_printf(out, "X-Idem-Header-%s: ", h->name) ||
         gw_buf_append(out, h->value, h->value_len) || gw_buf_puts(out, "\r\n");
  }
  return rc || gw_buf_puts(out, "\r\n") ? -1 : 0;
}

int cs_handler_kept_headers(const upstream_response *r, gw_buf *out) {
  return policy_replayable_headers(&r->headers, out);
}
