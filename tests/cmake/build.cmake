# Builds beyond this one, run only on request (ctest -L build; .ci/run does):
# the tree configured with -DIDEM_REDIS=OFF -DIDEM_POSTGRES=OFF builds, links
# neither hiredis nor libpq, and refuses their URIs by name.
add_test(NAME build.without_network_stores
  COMMAND ${SUPPORT}/build-without-stores.sh ${PROJECT_SOURCE_DIR} ${CMAKE_COMMAND} ${CMAKE_C_COMPILER})
set_tests_properties(build.without_network_stores PROPERTIES TIMEOUT 1200 LABELS build)
