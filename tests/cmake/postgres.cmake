# postgres.cmake - PostgreSQL store tests beyond the contract registration in
# tests/CMakeLists.txt. Every server is a throwaway one from with-postgres.sh.

if(NOT IDEM_POSTGRES)
  return()
endif()

# The contract suite opens the store with migrate=1: every open (and there
# are several at once) runs the migration under its advisory lock.
set_property(TEST contract.postgres APPEND PROPERTY ENVIRONMENT "IDEM_TEST_PG_PARAMS=migrate=1")

# examples/pg_exactly_once.c: the in-transaction API, built with the tests.
add_executable(pg_exactly_once ${PROJECT_SOURCE_DIR}/examples/pg_exactly_once.c)
target_link_libraries(pg_exactly_once PRIVATE idem_static)

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

# tests/unit/test_pg_*.c need a server: they run themselves again under
# with-postgres.sh when IDEM_TEST_PG_URI is unset.
# test_pg_store checks reconnections look host names up off the loop
if(TARGET test_pg_store)
  target_sources(test_pg_store PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support/slow_dns.c)
  target_include_directories(test_pg_store PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
endif()
foreach(t test_pg_store test_pg_mirror)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE IDEM_TEST_SUPPORT="${SUPPORT}")
    set_tests_properties(unit.${t} PROPERTIES LABELS "unit;postgres")
  endif()
endforeach()
