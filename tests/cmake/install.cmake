# The install rules, header and pkg-config file, proven by building an
# example against an installed copy (shared and static).
if(NOT IDEM_SANITIZE)
  add_test(NAME install.pkg_config
    COMMAND ${SUPPORT}/install-check.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(install.pkg_config PROPERTIES TIMEOUT 300 LABELS install)
endif()
