/* fuzz_http_response.c - an upstream's answer (src/http/respparse.c) on
 * arbitrary bytes, buffered (a keyed request's answer, up to a small
 * --max-response, streaming past it) and streamed (pass-through).
 * Properties: no crash, leak or UB; a done answer has a final status
 * (200-599); a buffered body never passes the limit; on_head runs at most
 * once and before any on_data; and the same bytes fed whole and one byte at
 * a time give the same verdict, status, headers and body (a parser that
 * depends on how TCP cuts the stream reads another answer than the one
 * sent). The first input byte picks the mode and HEAD. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/msg.c"
#include "http/respparse.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RESPONSE 256

#define BASIS 1469598103934665603ull

typedef struct {
  int heads;        /* on_head calls */
  uint64_t body;    /* over the body: what was buffered at on_head, then on_data's */
  int data_before_head;
} sink;

/* FNV-1a over bytes: the same for the same bytes however they are cut. */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static void on_head(void *arg, upstream_response *resp) {
  sink *s = arg;
  s->heads++;
  s->body = mix(s->body, resp->body.p, resp->body.len); /* buffered before streaming */
}

static void on_data(void *arg, const char *data, size_t len) {
  sink *s = arg;
  if (!s->heads)
    s->data_before_head = 1;
  s->body = mix(s->body, data, len);
}

typedef struct {
  gw_resp_result last;
  int status;
  uint64_t digest;
} verdict;

static verdict run(const uint8_t *data, size_t size, size_t step, int past_limit, int is_head) {
  upstream_stream stream = {.on_head = on_head, .on_data = on_data, .past_limit = past_limit};
  sink s = {0, BASIS, 0};
  upstream_response resp;
  memset(&resp, 0, sizeof resp);
  gw_respparser rp;
  gw_respparser_start(&rp, &resp, &stream, &s, NULL, MAX_RESPONSE, is_head);
  verdict v = {GW_RESP_MORE, 0, 0};
  size_t off = 0;
  while (off < size && v.last == GW_RESP_MORE) {
    size_t n = step && step < size - off ? step : size - off, used = 0;
    v.last = gw_respparser_feed(&rp, (const char *)data + off, n, &used);
    if (used > n || (used == 0 && v.last == GW_RESP_MORE))
      abort(); /* past the input, or no progress */
    off += used;
  }
  if (v.last == GW_RESP_MORE)
    v.last = gw_respparser_eof(&rp);
  if (s.heads > 1 || s.data_before_head || (!rp.streaming && resp.body.len > MAX_RESPONSE))
    abort();
  if (v.last == GW_RESP_DONE && (resp.status < 200 || resp.status > 599))
    abort();
  if (v.last == GW_RESP_DONE) {
    /* the Keep-Alive timeout read from any header bytes stays in bounds */
    if (gw_respparser_idle_ms(&rp, 15000) > 15000)
      abort();
    v.status = resp.status;
    uint64_t body = rp.streaming ? s.body : mix(BASIS, resp.body.p, resp.body.len);
    v.digest = mix(mix(BASIS, &body, sizeof body), resp.headers.text.p, resp.headers.text.len);
  }
  gw_headers_free(&resp.headers);
  gw_buf_free(&resp.body);
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  int past_limit = data[0] & 1, is_head = (data[0] >> 1) & 1;
  data++;
  size--;
  verdict whole = run(data, size, 0, past_limit, is_head);
  verdict bytes = run(data, size, 1, past_limit, is_head);
  if (whole.last != bytes.last || whole.status != bytes.status || whole.digest != bytes.digest)
    abort();
  return 0;
}
