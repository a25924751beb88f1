/* test_codec.c - the record encoding round-trips, and every truncated or
 * damaged byte string is refused with an error, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "idem/idem.h"

static idem_record sample(void) {
  idem_record r = {.state = IDEM_STATE_COMPLETED, .fence = 0x0102030405060708ull,
                   .locked_until = -1, .expires_at = 1700000000123, .created_at = 17,
                   .updated_at = INT64_MAX,
                   .response = {.status = 201, .headers = "A: b\r\n", .headers_len = 6,
                                .body = "x\0y", .body_len = 3}};
  for (int i = 0; i < IDEM_FINGERPRINT_LEN; i++)
    r.fingerprint[i] = (uint8_t)(i * 9);
  return r;
}

static uint8_t *encode(const idem_record *r, size_t *len) {
  *len = idem_record_encoded_len(r);
  uint8_t *buf = malloc(*len);
  assert_non_null(buf);
  idem_record_encode(r, buf);
  return buf;
}

static void round_trip(void **state) {
  (void)state;
  idem_record r = sample(), d;
  size_t len;
  uint8_t *buf = encode(&r, &len);
  assert_int_equal(len, 86 + 6 + 3);
  assert_int_equal(idem_record_decode(buf, len, &d), 0);
  assert_int_equal(d.state, r.state);
  assert_true(d.fence == r.fence);
  assert_true(d.locked_until == -1 && d.expires_at == r.expires_at);
  assert_true(d.created_at == 17 && d.updated_at == INT64_MAX);
  assert_memory_equal(d.fingerprint, r.fingerprint, IDEM_FINGERPRINT_LEN);
  assert_int_equal(d.response.status, 201);
  assert_int_equal(d.response.headers_len, 6);
  assert_memory_equal(d.response.headers, "A: b\r\n", 6);
  assert_int_equal(d.response.body_len, 3);
  assert_memory_equal(d.response.body, "x\0y", 3);
  assert_ptr_equal(d.response.body, buf + 86 + 6); /* zero copy */
  free(buf);
}

static void empty_response_decodes_to_null_parts(void **state) {
  (void)state;
  idem_record r = {.state = IDEM_STATE_PROCESSING, .fence = 1}, d;
  size_t len;
  uint8_t *buf = encode(&r, &len);
  assert_int_equal(idem_record_decode(buf, len, &d), 0);
  assert_null(d.response.body);
  assert_null(d.response.headers);
  free(buf);
}

static void every_truncation_is_refused(void **state) {
  (void)state;
  idem_record r = sample(), d;
  size_t len;
  uint8_t *buf = encode(&r, &len);
  for (size_t n = 0; n < len; n++) {
    uint8_t *cut = malloc(n ? n : 1); /* exact size, so ASan sees any overread */
    memcpy(cut, buf, n);
    assert_int_equal(idem_record_decode(cut, n, &d), IDEM_ECORRUPT);
    free(cut);
  }
  uint8_t *longer = calloc(len + 1, 1);
  memcpy(longer, buf, len);
  assert_int_equal(idem_record_decode(longer, len + 1, &d), IDEM_ECORRUPT);
  free(longer);
  free(buf);
}

static void damaged_fields_are_refused(void **state) {
  (void)state;
  idem_record r = sample(), d;
  size_t len;
  uint8_t *buf = encode(&r, &len);
  struct {
    size_t at;
    uint8_t value;
    int err;
  } cases[] = {
      {0, 'X', IDEM_ECORRUPT},  {1, 'X', IDEM_ECORRUPT}, {2, 2, IDEM_EVERSION},
      {2, 0, IDEM_EVERSION},    {3, 4, IDEM_ECORRUPT},   {3, 255, IDEM_ECORRUPT},
      {76, 99, IDEM_ECORRUPT},  {77, 0xff, IDEM_ECORRUPT}, /* status 99, 65481 */
      {78, 7, IDEM_ECORRUPT},   {81, 0x80, IDEM_ECORRUPT}, /* headers length */
      {82, 0xff, IDEM_ECORRUPT}, {85, 0xff, IDEM_ECORRUPT}, /* body length */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t saved = buf[cases[i].at];
    buf[cases[i].at] = cases[i].value;
    if (idem_record_decode(buf, len, &d) != cases[i].err)
      fail_msg("byte %zu = %u not refused", cases[i].at, cases[i].value);
    buf[cases[i].at] = saved;
  }
  assert_int_equal(idem_record_decode(NULL, 0, &d), IDEM_ECORRUPT);
  free(buf);
}

static void copy_is_deep(void **state) {
  (void)state;
  idem_record r = sample(), copy;
  r.scope = "tenant";
  r.key = "key-1";
  assert_int_equal(idem_record_copy(NULL, &r), IDEM_EINVAL);
  assert_int_equal(idem_record_copy(&copy, NULL), IDEM_EINVAL);
  assert_int_equal(idem_record_copy(&copy, &r), 0);
  assert_ptr_not_equal(copy.response.body, r.response.body);
  assert_memory_equal(copy.response.body, "x\0y", 3);
  assert_string_equal(copy.scope, "tenant");
  assert_string_equal(copy.key, "key-1");
  idem_record_clear(&copy);
  assert_null(copy.key);
  idem_record_clear(&copy); /* twice is harmless */
}

/* Like idem_record_copy, idem_result_copy returns 0 or an IDEM_E* code
 * (README: "Functions return 0 or a negative IDEM_E* code"): a NULL
 * argument is IDEM_EINVAL, not a crash. */
static void result_copy_refuses_null(void **state) {
  (void)state;
  idem_result res = {.outcome = IDEM_CLAIMED, .fence = 3}, copy = {0};
  assert_int_equal(idem_result_copy(NULL, &res), IDEM_EINVAL);
  assert_int_equal(idem_result_copy(&copy, NULL), IDEM_EINVAL);
  assert_int_equal(idem_result_copy(&copy, &res), 0);
  assert_int_equal(copy.fence, 3);
  idem_result_clear(&copy);
}

UNIT_TESTS(cmocka_unit_test(round_trip),
           cmocka_unit_test(empty_response_decodes_to_null_parts),
           cmocka_unit_test(every_truncation_is_refused),
           cmocka_unit_test(damaged_fields_are_refused),
           cmocka_unit_test(copy_is_deep),
           cmocka_unit_test(result_copy_refuses_null))
