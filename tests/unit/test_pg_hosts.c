/* test_pg_hosts.c - which hosts of a PostgreSQL URI the store looks up
 * itself, and the lists libpq then gets (store/postgres_hosts.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "unit.h"

#include "store/postgres.h"

static int parse(const char *conninfo, idem_pg_hosts *h) { return idem_pg_hosts_parse(conninfo, h); }

static void one_name_and_a_list_are_taken_over(void **state) {
  (void)state;
  idem_pg_hosts h;
  assert_int_equal(parse("postgres://u@db.example:5433/idem", &h), 1);
  assert_string_equal(h.name[0], "db.example");
  assert_null(h.port[0]); /* the URI's one port serves all */
  assert_false(h.numeric[0]);
  assert_true(idem_pg_hosts_looked_up(&h));
  idem_pg_hosts_free(&h);

  assert_int_equal(parse("postgres://u@pg1:5432,10.0.0.2:6432/idem?target_session_attrs=read-write", &h), 2);
  assert_string_equal(h.name[0], "pg1");
  assert_string_equal(h.name[1], "10.0.0.2");
  assert_string_equal(h.port[0], "5432");
  assert_string_equal(h.port[1], "6432");
  assert_false(h.numeric[0]);
  assert_true(h.numeric[1]);
  idem_pg_hosts_free(&h);

  assert_int_equal(parse("host=pg1,pg2 port=5432 dbname=idem", &h), 2);
  assert_null(h.port[0]);
  assert_null(h.port[1]);
  idem_pg_hosts_free(&h);

  assert_int_equal(parse("postgres://u@[::1]:5432/idem", &h), 1);
  assert_true(h.numeric[0]);
  assert_false(idem_pg_hosts_looked_up(&h));
  idem_pg_hosts_free(&h);
}

static void what_libpq_keeps(void **state) {
  (void)state;
  idem_pg_hosts h;
  const char *left[] = {
      "postgres://u@/idem?host=/var/run/postgresql",  /* a socket directory */
      "host=pg1,/tmp dbname=idem",                    /* one among names */
      "host=pg1 hostaddr=10.0.0.1 dbname=idem",       /* the URI's own address */
      "host=pg1,,pg2 dbname=idem",                    /* an empty entry */
      "host=pg1,pg2 port=1,2,3 dbname=idem",          /* ports that do not pair */
      "host=a,b,c,d,e,f,g,h,i dbname=idem",           /* more than IDEM_PG_HOSTS_MAX */
      "dbname=idem",                                  /* no host: libpq's default */
      "not a conninfo",
  };
  for (size_t i = 0; i < sizeof left / sizeof left[0]; i++) {
    assert_int_equal(parse(left[i], &h), 0);
    assert_int_equal(h.n, 0);
  }
}

static idem_pg_found found_of(const char *a, const char *b) {
  idem_pg_found f = {0};
  if (a)
    snprintf(f.addr[f.n++], sizeof f.addr[0], "%s", a);
  if (b)
    snprintf(f.addr[f.n++], sizeof f.addr[0], "%s", b);
  return f;
}

static void lists_pair_every_address_with_its_host_and_port(void **state) {
  (void)state;
  idem_pg_hosts h;
  assert_int_equal(parse("postgres://u@pg1:5432,pg2:6432/idem", &h), 2);
  idem_pg_found found[IDEM_PG_HOSTS_MAX] = {found_of("10.0.0.1", "::1"), found_of("10.0.0.2", NULL)};
  idem_slow_addrs slow = {0};
  idem_pg_lists l;
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), 3);
  assert_string_equal(l.hosts, "pg1,pg1,pg2");
  assert_string_equal(l.addrs, "10.0.0.1,::1,10.0.0.2");
  assert_string_equal(l.ports, "5432,5432,6432");

  /* pg1's first address timed out: it goes last, with its port */
  idem_slow_addrs_note(&slow, "10.0.0.1");
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), 3);
  assert_string_equal(l.hosts, "pg1,pg2,pg1");
  assert_string_equal(l.addrs, "::1,10.0.0.2,10.0.0.1");
  assert_string_equal(l.ports, "5432,6432,5432");

  /* a host that did not resolve is left out; none at all: nothing */
  found[0].n = 0;
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), 1);
  assert_string_equal(l.addrs, "10.0.0.2");
  found[1].n = 0;
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), 0);
  assert_string_equal(l.addrs, "");
  idem_pg_hosts_free(&h);
}

static void one_port_for_all_gives_no_port_list(void **state) {
  (void)state;
  idem_pg_hosts h;
  assert_int_equal(parse("host=pg1,pg2 port=5433 dbname=idem", &h), 2);
  idem_pg_found found[IDEM_PG_HOSTS_MAX] = {found_of("10.0.0.1", NULL), found_of("10.0.0.2", NULL)};
  idem_slow_addrs slow = {0};
  idem_pg_lists l;
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), 2);
  assert_string_equal(l.ports, "");
  idem_pg_hosts_free(&h);
}

/* More pairs than libpq is handed: the first IDEM_PG_ADDRS_MAX, whole. */
static void at_most_idem_pg_addrs_max_pairs(void **state) {
  (void)state;
  idem_pg_hosts h;
  assert_int_equal(parse("host=a,b,c,d,e,f,g,h dbname=idem", &h), 8);
  idem_pg_found found[IDEM_PG_HOSTS_MAX];
  for (int i = 0; i < 8; i++) {
    char x[32], y[32];
    snprintf(x, sizeof x, "10.0.%d.1", i);
    snprintf(y, sizeof y, "10.0.%d.2", i);
    found[i] = found_of(x, y);
    found[i].n = 2;
  }
  idem_slow_addrs slow = {0};
  idem_pg_lists l;
  assert_int_equal(idem_pg_hosts_lists(&h, found, &slow, &l), IDEM_PG_ADDRS_MAX);
  int commas = 0;
  for (const char *p = l.addrs; *p; p++)
    commas += *p == ',';
  assert_int_equal(commas, IDEM_PG_ADDRS_MAX - 1);
  assert_string_equal(l.addrs + strlen(l.addrs) - strlen("10.0.7.2"), "10.0.7.2");
  idem_pg_hosts_free(&h);
}

UNIT_TESTS(cmocka_unit_test(one_name_and_a_list_are_taken_over),
           cmocka_unit_test(what_libpq_keeps),
           cmocka_unit_test(lists_pair_every_address_with_its_host_and_port),
           cmocka_unit_test(one_port_for_all_gives_no_port_list),
           cmocka_unit_test(at_most_idem_pg_addrs_max_pairs))
