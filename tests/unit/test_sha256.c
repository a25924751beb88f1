/* test_sha256.c - the SHA-256 fetched once (core/sha256.h): FIPS 180-2
 * answers, one implementation for every thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "core/sha256.h"

static void expect_digest(const char *text, const char *want) {
  unsigned char md[IDEM_SHA256_LEN];
  char got[2 * IDEM_SHA256_LEN + 1];
  assert_int_equal(idem_sha256_digest(text, strlen(text), md), 0);
  for (int i = 0; i < IDEM_SHA256_LEN; i++)
    snprintf(got + 2 * i, 3, "%02x", md[i]);
  assert_string_equal(got, want);
}

static void test_known_answers(void **state) {
  (void)state;
  expect_digest("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_digest("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expect_digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_hex(void **state) {
  (void)state;
  char out[2 * IDEM_SHA256_LEN + 1];
  memset(out, 'x', sizeof out);
  assert_int_equal(idem_sha256_hex("abc", 3, out), 0);
  assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void *fetch_in_thread(void *arg) {
  *(const EVP_MD **)arg = idem_sha256();
  return NULL;
}

static void test_one_implementation_for_all_threads(void **state) {
  (void)state;
  enum { N = 8 };
  pthread_t t[N];
  const EVP_MD *seen[N];
  for (int i = 0; i < N; i++)
    assert_int_equal(pthread_create(&t[i], NULL, fetch_in_thread, &seen[i]), 0);
  for (int i = 0; i < N; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  const EVP_MD *md = idem_sha256();
  assert_non_null(md);
  assert_int_equal(EVP_MD_get_size(md), IDEM_SHA256_LEN);
  for (int i = 0; i < N; i++)
    assert_ptr_equal(seen[i], md);
}

UNIT_TESTS(cmocka_unit_test(test_known_answers), cmocka_unit_test(test_hex),
           cmocka_unit_test(test_one_implementation_for_all_threads))
