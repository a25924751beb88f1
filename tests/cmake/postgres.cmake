# postgres.cmake - PostgreSQL store tests beyond the contract registration in
# tests/CMakeLists.txt. Every server is a throwaway one from with-postgres.sh.

if(NOT IDEM_POSTGRES)
  return()
endif()

# The contract suite opens the store with migrate=1: every open (and there
# are several at once) runs the migration under its advisory lock.
set_property(TEST contract.postgres contract.postgres_cached APPEND PROPERTY ENVIRONMENT
             "IDEM_TEST_PG_PARAMS=migrate=1")

# examples/pg_exactly_once.c: the in-transaction API, built with the tests.
add_executable(pg_exactly_once ${PROJECT_SOURCE_DIR}/examples/pg_exactly_once.c)
target_link_libraries(pg_exactly_once PRIVATE idem_internal)

# The example, end to end: a saga run twice writes each step once.
add_test(NAME example.pg_exactly_once
  COMMAND ${SUPPORT}/with-postgres.sh sh -c
    "$1 \"$2\" order-1 42 && $1 \"$2\" order-1 42 | grep -q 'charge: already done'"
    sh $<TARGET_FILE:pg_exactly_once> "{PG_URI}")
set_tests_properties(example.pg_exactly_once PROPERTIES TIMEOUT 120 LABELS example)

# tests/e2e/test_pg_*.py run themselves under with-postgres.sh; the crash
# test drives the example binary.
foreach(t test_pg_tx_crash test_pg_outage test_pg_gateways)
  if(TEST e2e.${t})
    set_property(TEST e2e.${t} APPEND PROPERTY ENVIRONMENT
      "IDEM_PG_EXAMPLE=$<TARGET_FILE:pg_exactly_once>")
  endif()
endforeach()

# What the contract cannot show, against a throwaway server (each also runs
# itself under with-postgres.sh when started by hand without
# IDEM_TEST_PG_URI): schema checks and migrations, URI options, the
# in-transaction API, a hung server, lock waits, a server restarted under
# load, host names looked up off the loop (postgres_store); and every
# statement against idem_transition(), case by case (postgres_mirror).
add_executable(postgres_store ${CMAKE_CURRENT_SOURCE_DIR}/postgres/postgres_store.c
                              ${CMAKE_CURRENT_SOURCE_DIR}/support/slow_dns.c)
add_executable(postgres_mirror ${CMAKE_CURRENT_SOURCE_DIR}/postgres/postgres_mirror.c)
target_include_directories(postgres_store PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
foreach(t postgres_store postgres_mirror)
  target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(${t} PRIVATE IDEM_TEST_SUPPORT="${SUPPORT}")
  target_link_libraries(${t} PRIVATE idem_internal PkgConfig::CMOCKA)
endforeach()
add_test(NAME postgres.store COMMAND ${SUPPORT}/with-postgres.sh $<TARGET_FILE:postgres_store>)
add_test(NAME postgres.mirror COMMAND ${SUPPORT}/with-postgres.sh $<TARGET_FILE:postgres_mirror>)
set_tests_properties(postgres.store postgres.mirror PROPERTIES TIMEOUT 300 LABELS "contract;postgres")
