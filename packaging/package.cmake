# package.cmake - the Debian package (included by CMakeLists.txt):
#   scripts/package.sh     (or: cmake -DIDEM_PACKAGE=ON -DCMAKE_INSTALL_PREFIX=/usr; cpack -G DEB)
# gives idem_VERSION_ARCH.deb: the binary, libidem (shared, static, header,
# pkg-config file), the man pages idem(1) and idem-COMMAND(1) made from the
# binary's --help (packaging/man.py), /etc/idem/idem.yaml (a conffile) and
# the idem.service systemd unit.

find_program(PYTHON3_FOR_MAN python3 REQUIRED)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/man/idem.1.gz
  COMMAND ${PYTHON3_FOR_MAN} ${PROJECT_SOURCE_DIR}/packaging/man.py $<TARGET_FILE:idem>
          ${CMAKE_BINARY_DIR}/man
  DEPENDS idem ${PROJECT_SOURCE_DIR}/packaging/man.py
  COMMENT "man pages from idem --help")
add_custom_target(man ALL DEPENDS ${CMAKE_BINARY_DIR}/man/idem.1.gz)
install(DIRECTORY ${CMAKE_BINARY_DIR}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        FILES_MATCHING PATTERN "*.1.gz")
install(FILES packaging/idem.service DESTINATION lib/systemd/system)
# /etc is absolute: only a package build puts files there
install(FILES packaging/idem.yaml DESTINATION /etc/idem)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idem)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "idem developers <idem@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "idempotency gateway: a retried request or redelivered message takes effect once")
set(CPACK_PACKAGE_DESCRIPTION "idem serve is an HTTP reverse proxy that gives an API
Idempotency-Key semantics; idem consume does the same for messages from
Redis Streams, RabbitMQ and NATS JetStream. Records live in LMDB (default),
Redis or PostgreSQL. Includes libidem, its header and pkg-config file.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # idem_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON) # Depends: from dpkg-shlibdeps
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/conffiles ${PROJECT_SOURCE_DIR}/packaging/postinst
    ${PROJECT_SOURCE_DIR}/packaging/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_WARN_ON_ABSOLUTE_INSTALL_DESTINATION OFF)
include(CPack)
