# lmdb.cmake - LMDB store tests beyond the contract registration in
# tests/CMakeLists.txt (contract.lmdb). No server: each works in temp dirs.

# What the contract cannot show: bad paths and foreign files, durability
# across a reopen, group commit, a full map, the expiry index and sweeper,
# handles sharing one environment.
add_executable(lmdb_store ${CMAKE_CURRENT_SOURCE_DIR}/lmdb/lmdb_store.c)
target_include_directories(lmdb_store PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(lmdb_store PRIVATE idem_internal PkgConfig::CMOCKA)
add_test(NAME lmdb.store COMMAND lmdb_store)
set_tests_properties(lmdb.store PROPERTIES TIMEOUT 300 LABELS "contract;lmdb")

# Crash safety: a child claiming and completing is killed with SIGKILL at
# random moments; every acknowledged record must survive (60 cycles, ~5-15 s).
add_executable(lmdb_crash ${CMAKE_CURRENT_SOURCE_DIR}/lmdb/lmdb_crash.c)
target_include_directories(lmdb_crash PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(lmdb_crash PRIVATE idem_internal)
add_test(NAME lmdb.crash COMMAND ${SUPPORT}/with-tempdir.sh $<TARGET_FILE:lmdb_crash> "{TMP}" 100)
set_tests_properties(lmdb.crash PROPERTIES TIMEOUT 300 LABELS "crash;lmdb")
