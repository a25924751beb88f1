# run.cmake - the README's first command: scripts/run.sh in a fresh copy of
# the tree, built and walked through as the README says, then stopped by
# SIGTERM (tests/support/run_check.py). It listens on the README's fixed
# ports 8080 to 8082; the other tests take free ephemeral ones.
if(NOT IDEM_SANITIZE)
  add_test(NAME run.newcomer COMMAND ${PYTHON3} ${SUPPORT}/run_check.py ${PROJECT_SOURCE_DIR})
  # 77: a port of the README's is taken by another program, not a failure
  set_tests_properties(run.newcomer PROPERTIES TIMEOUT 1200 LABELS run SKIP_RETURN_CODE 77)
endif()
