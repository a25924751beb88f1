# LMDB store: tests beyond the contract suite (contract.lmdb is registered in
# tests/CMakeLists.txt).

# Crash safety: a child claiming and completing is killed with SIGKILL at
# random moments; every acknowledged record must survive (60 cycles, ~5-15 s).
add_executable(lmdb_crash ${CMAKE_CURRENT_SOURCE_DIR}/crash/lmdb_crash.c)
target_include_directories(lmdb_crash PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(lmdb_crash PRIVATE idem_static)
add_test(NAME lmdb.crash COMMAND ${SUPPORT}/with-tempdir.sh $<TARGET_FILE:lmdb_crash> "{TMP}" 60)
set_tests_properties(lmdb.crash PROPERTIES TIMEOUT 300 LABELS crash)
