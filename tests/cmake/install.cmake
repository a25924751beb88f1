# The install rules, header and pkg-config file, proven by building an
# example against an installed copy (shared and static).
if(NOT IDEM_SANITIZE)
  add_test(NAME install.pkg_config
    COMMAND ${SUPPORT}/install-check.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(install.pkg_config PROPERTIES TIMEOUT 300 LABELS install)
endif()

# The public boundary: libidem.so exports exactly the IDEM_API declarations
# of the installed headers, so internals can change without breaking users.
list(TRANSFORM IDEM_PUBLIC_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/ OUTPUT_VARIABLE public_headers)
add_test(NAME install.exports
  COMMAND ${PYTHON3} ${SUPPORT}/exports-check.py ${CMAKE_NM} $<TARGET_FILE:idem_shared> ${public_headers})
set_tests_properties(install.exports PROPERTIES TIMEOUT 60 LABELS install)
