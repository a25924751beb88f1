/* unit.h - what every cmocka test file ends with, written once:
 *   UNIT_TESTS(cmocka_unit_test(test_a), cmocka_unit_test(test_b))
 * is its main: run them all, exit non-zero on a failure. */
#ifndef IDEM_TESTS_UNIT_H
#define IDEM_TESTS_UNIT_H

#define UNIT_TESTS(...)                                                                            \
  int main(void) {                                                                                 \
    const struct CMUnitTest tests[] = {__VA_ARGS__};                                               \
    return cmocka_run_group_tests(tests, NULL, NULL);                                              \
  }

#endif
