# postgres.cmake - PostgreSQL store tests beyond the contract registration in
# tests/CMakeLists.txt. Every server is a throwaway one from with-postgres.sh.

# The contract suite opens the store with migrate=1: every open (and there
# are several at once) runs the migration under its advisory lock.
set_property(TEST contract.postgres APPEND PROPERTY ENVIRONMENT "IDEM_TEST_PG_PARAMS=migrate=1")
