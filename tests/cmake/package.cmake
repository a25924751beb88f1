# package.cmake - the Debian package (scripts/package.sh): built in a
# temporary directory, taken apart, its binary run against the example
# config, its systemd unit verified (tests/support/package_check.py).
if(NOT IDEM_SANITIZE)
  add_test(NAME package.deb COMMAND ${PYTHON3} ${SUPPORT}/package_check.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(package.deb PROPERTIES TIMEOUT 900 LABELS package)
endif()
