/* test_lookup.c - the order in which a name's addresses are tried
 * (store/lookup.c): addresses that timed out go last. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "store/lookup.h"

static void set(idem_addr_text *addrs, const char *const *ips, int n) {
  for (int i = 0; i < n; i++)
    snprintf(addrs[i], sizeof addrs[i], "%s", ips[i]);
}

static void assert_order(idem_addr_text *addrs, const char *const *want, int n) {
  for (int i = 0; i < n; i++)
    assert_string_equal(addrs[i], want[i]);
}

/* The lookup gave ips (n of them): the order slow puts them in is want. */
static void expect_order(const idem_slow_addrs *slow, const char *const *ips,
                         const char *const *want, int n) {
  idem_addr_text a[IDEM_LOOKUP_MAX];
  set(a, ips, n);
  idem_slow_addrs_last(slow, a, n);
  assert_order(a, want, n);
}

static void nothing_slow_keeps_the_lookup_order(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  const char *ips[] = {"10.0.0.1", "::1", "10.0.0.3"};
  expect_order(&slow, ips, ips, 3);
}

static void an_address_that_timed_out_goes_last(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  const char *ips[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  idem_slow_addrs_note(&slow, "10.0.0.1");
  const char *want[] = {"10.0.0.2", "10.0.0.3", "10.0.0.1"};
  expect_order(&slow, ips, want, 3);
  /* it answered later: its own turn again */
  idem_slow_addrs_forget(&slow, "10.0.0.1");
  expect_order(&slow, ips, ips, 3);
  assert_int_equal(slow.n, 0);
}

/* Two dead addresses before a good one: each attempt times out on one of
 * them, and the third attempt reaches the good one (with only the last
 * timeout remembered, the two dead ones would take turns forever). */
static void two_dead_addresses_do_not_hide_a_third(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  const char *ips[] = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  idem_addr_text a[3];
  const char *tried[3];
  for (int attempt = 0; attempt < 3; attempt++) {
    set(a, ips, 3); /* every attempt looks the name up again */
    idem_slow_addrs_last(&slow, a, 3);
    tried[attempt] = strcmp(a[0], "10.0.0.1") == 0   ? "10.0.0.1"
                     : strcmp(a[0], "10.0.0.2") == 0 ? "10.0.0.2"
                                                     : "10.0.0.3";
    if (strcmp(a[0], "10.0.0.3") != 0)
      idem_slow_addrs_note(&slow, a[0]); /* dead: the attempt times out */
  }
  assert_string_equal(tried[0], "10.0.0.1");
  assert_string_equal(tried[1], "10.0.0.2");
  assert_string_equal(tried[2], "10.0.0.3");
  /* the one that timed out longest ago comes before the other */
  const char *want[] = {"10.0.0.3", "10.0.0.1", "10.0.0.2"};
  expect_order(&slow, ips, want, 3);
}

static void a_timeout_again_moves_it_behind_the_others(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  idem_slow_addrs_note(&slow, "10.0.0.1");
  idem_slow_addrs_note(&slow, "10.0.0.2");
  idem_slow_addrs_note(&slow, "10.0.0.1");
  assert_int_equal(slow.n, 2);
  assert_string_equal(slow.addr[0], "10.0.0.2");
  assert_string_equal(slow.addr[1], "10.0.0.1");
}

static void a_full_list_forgets_the_oldest(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  char ip[32];
  for (int i = 0; i < IDEM_LOOKUP_MAX + 2; i++) {
    snprintf(ip, sizeof ip, "10.0.1.%d", i);
    idem_slow_addrs_note(&slow, ip);
  }
  assert_int_equal(slow.n, IDEM_LOOKUP_MAX);
  assert_string_equal(slow.addr[0], "10.0.1.2");
  snprintf(ip, sizeof ip, "10.0.1.%d", IDEM_LOOKUP_MAX + 1);
  assert_string_equal(slow.addr[IDEM_LOOKUP_MAX - 1], ip);
}

/* Addresses in the list that the lookup no longer gives are left out, and
 * no address is lost or doubled. */
static void only_the_lookups_addresses_come_out(void **state) {
  (void)state;
  idem_slow_addrs slow = {0};
  idem_slow_addrs_note(&slow, "10.9.9.9");
  idem_slow_addrs_note(&slow, "10.0.0.2");
  const char *ips[] = {"10.0.0.2", "10.0.0.4"};
  const char *want[] = {"10.0.0.4", "10.0.0.2"};
  expect_order(&slow, ips, want, 2);
}

UNIT_TESTS(cmocka_unit_test(nothing_slow_keeps_the_lookup_order),
           cmocka_unit_test(an_address_that_timed_out_goes_last),
           cmocka_unit_test(two_dead_addresses_do_not_hide_a_third),
           cmocka_unit_test(a_timeout_again_moves_it_behind_the_others),
           cmocka_unit_test(a_full_list_forgets_the_oldest),
           cmocka_unit_test(only_the_lookups_addresses_come_out))
