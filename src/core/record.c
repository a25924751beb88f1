/* record.c - the record's binary encoding and its memory.
 *
 * Layout, version 1, integers little-endian:
 *   0  'I' 'D' magic        2  version (1)       3  state
 *   4  fence u64           12  locked_until i64  20  expires_at i64
 *  28  created_at i64      36  updated_at i64    44  fingerprint[32]
 *  76  status u16          78  headers_len u32   82  body_len u32
 *  86  headers, then body: exactly headers_len + body_len bytes
 * Scope and key are not inside: they are the store's key for the value.
 */
#include <stdlib.h>
#include <string.h>

#include "idem/idem.h"

#define RECORD_MAGIC0 'I'
#define RECORD_MAGIC1 'D'
#define RECORD_VERSION 1
#define RECORD_HEADER_LEN 86

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t idem_record_encoded_len(const idem_record *rec) {
  return RECORD_HEADER_LEN + rec->response.headers_len + rec->response.body_len;
}

void idem_record_encode(const idem_record *rec, uint8_t *buf) {
  buf[0] = RECORD_MAGIC0;
  buf[1] = RECORD_MAGIC1;
  buf[2] = RECORD_VERSION;
  buf[3] = (uint8_t)rec->state;
  put_u64(buf + 4, rec->fence);
  put_u64(buf + 12, (uint64_t)rec->locked_until);
  put_u64(buf + 20, (uint64_t)rec->expires_at);
  put_u64(buf + 28, (uint64_t)rec->created_at);
  put_u64(buf + 36, (uint64_t)rec->updated_at);
  memcpy(buf + 44, rec->fingerprint, IDEM_FINGERPRINT_LEN);
  buf[76] = (uint8_t)(rec->response.status & 0xff);
  buf[77] = (uint8_t)((rec->response.status >> 8) & 0xff);
  put_u32(buf + 78, (uint32_t)rec->response.headers_len);
  put_u32(buf + 82, (uint32_t)rec->response.body_len);
  if (rec->response.headers_len)
    memcpy(buf + RECORD_HEADER_LEN, rec->response.headers, rec->response.headers_len);
  if (rec->response.body_len)
    memcpy(buf + RECORD_HEADER_LEN + rec->response.headers_len, rec->response.body,
           rec->response.body_len);
}

int idem_record_decode(const uint8_t *buf, size_t len, idem_record *rec) {
  if (!buf || !rec || len < 3 || buf[0] != RECORD_MAGIC0 || buf[1] != RECORD_MAGIC1)
    return IDEM_ECORRUPT;
  if (buf[2] != RECORD_VERSION)
    return IDEM_EVERSION;
  if (len < RECORD_HEADER_LEN || buf[3] > IDEM_STATE_FAILED)
    return IDEM_ECORRUPT;
  int status = buf[76] | buf[77] << 8;
  uint64_t headers_len = get_u32(buf + 78), body_len = get_u32(buf + 82);
  if (headers_len + body_len != len - RECORD_HEADER_LEN)
    return IDEM_ECORRUPT;
  if (status != 0 && (status < 100 || status > 999))
    return IDEM_ECORRUPT;
  memset(rec, 0, sizeof *rec);
  rec->state = (idem_state)buf[3];
  rec->fence = get_u64(buf + 4);
  rec->locked_until = (int64_t)get_u64(buf + 12);
  rec->expires_at = (int64_t)get_u64(buf + 20);
  rec->created_at = (int64_t)get_u64(buf + 28);
  rec->updated_at = (int64_t)get_u64(buf + 36);
  memcpy(rec->fingerprint, buf + 44, IDEM_FINGERPRINT_LEN);
  rec->response.status = status;
  rec->response.headers_len = (size_t)headers_len;
  rec->response.headers = headers_len ? (const char *)buf + RECORD_HEADER_LEN : NULL;
  rec->response.body_len = (size_t)body_len;
  rec->response.body = body_len ? (const char *)buf + RECORD_HEADER_LEN + headers_len : NULL;
  return 0;
}

/* malloc'd copy of len bytes plus a NUL, so text fields stay C strings. */
static int dup_bytes(const char *src, size_t len, const char **dst) {
  *dst = NULL;
  if (!src)
    return 0;
  char *p = malloc(len + 1);
  if (!p)
    return IDEM_ENOMEM;
  memcpy(p, src, len);
  p[len] = '\0';
  *dst = p;
  return 0;
}

int idem_record_copy(idem_record *dst, const idem_record *src) {
  if (!dst || !src)
    return IDEM_EINVAL;
  *dst = *src;
  dst->scope = dst->key = dst->response.headers = dst->response.body = NULL;
  if (dup_bytes(src->scope, src->scope ? strlen(src->scope) : 0, &dst->scope) ||
      dup_bytes(src->key, src->key ? strlen(src->key) : 0, &dst->key) ||
      dup_bytes(src->response.headers, src->response.headers_len, &dst->response.headers) ||
      dup_bytes(src->response.body, src->response.body_len, &dst->response.body)) {
    idem_record_clear(dst);
    return IDEM_ENOMEM;
  }
  return 0;
}

void idem_record_clear(idem_record *rec) {
  if (!rec)
    return;
  free((void *)rec->scope);
  free((void *)rec->key);
  free((void *)rec->response.headers);
  free((void *)rec->response.body);
  memset(rec, 0, sizeof *rec);
}

const char *idem_state_name(idem_state state) {
  static const char *const names[] = {[IDEM_STATE_UNSEEN] = "unseen",
                                      [IDEM_STATE_PROCESSING] = "processing",
                                      [IDEM_STATE_COMPLETED] = "completed",
                                      [IDEM_STATE_FAILED] = "failed"};
  return (unsigned)state < sizeof names / sizeof names[0] ? names[state] : "invalid";
}

const char *idem_outcome_name(idem_outcome outcome) {
  static const char *const names[] = {[IDEM_CLAIMED] = "claimed", [IDEM_REPLAY] = "replay",
                                      [IDEM_MISMATCH] = "mismatch", [IDEM_BUSY] = "busy"};
  unsigned i = (unsigned)outcome;
  return i < sizeof names / sizeof names[0] && names[i] ? names[i] : "none";
}

int idem_result_copy(idem_result *dst, const idem_result *src) {
  if (!dst || !src)
    return IDEM_EINVAL;
  *dst = *src;
  dst->record = NULL;
  dst->records = NULL;
  if (src->record) {
    dst->record = calloc(1, sizeof *dst->record);
    if (!dst->record || idem_record_copy(dst->record, src->record))
      goto oom;
  }
  if (src->records && src->count) {
    dst->records = calloc(src->count, sizeof *dst->records);
    if (!dst->records)
      goto oom;
    for (size_t i = 0; i < src->count; i++)
      if (idem_record_copy(&dst->records[i], &src->records[i]))
        goto oom;
  }
  return 0;
oom:
  idem_result_clear(dst);
  return IDEM_ENOMEM;
}

void idem_result_clear(idem_result *res) {
  if (!res)
    return;
  if (res->record) {
    idem_record_clear(res->record);
    free(res->record);
  }
  if (res->records) {
    for (size_t i = 0; i < res->count; i++)
      idem_record_clear(&res->records[i]);
    free(res->records);
  }
  res->record = NULL;
  res->records = NULL;
}
