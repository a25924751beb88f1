# redis.cmake - Redis store tests beyond the contract registration in
# tests/CMakeLists.txt. Every server is a throwaway one from with-redis.sh.

if(NOT IDEM_REDIS)
  return()
endif()

# What the contract cannot show: the layout in Redis, AUTH and SELECT, the
# script cache flushed, a killed connection, a paused server, LIST paging.
add_executable(redis_store ${CMAKE_CURRENT_SOURCE_DIR}/redis/redis_store.c
                           ${CMAKE_CURRENT_SOURCE_DIR}/support/slow_dns.c)
target_include_directories(redis_store PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(redis_store PRIVATE idem_internal PkgConfig::CMOCKA)
add_test(NAME redis.store COMMAND ${SUPPORT}/with-redis.sh $<TARGET_FILE:redis_store> "{REDIS_URI}")
set_tests_properties(redis.store PROPERTIES TIMEOUT 300 LABELS "contract;redis")

# tests/e2e/test_redis_*.py start their own redis-server (they kill and
# restart it) through tests/e2e/redis_server.py.

# wait_replicas=N against a replica the test starts itself.
add_executable(redis_wait ${CMAKE_CURRENT_SOURCE_DIR}/redis/redis_wait.c)
target_include_directories(redis_wait PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(redis_wait PRIVATE idem_internal PkgConfig::CMOCKA)
add_test(NAME redis.wait COMMAND ${SUPPORT}/with-redis.sh $<TARGET_FILE:redis_wait> "{REDIS_URI}")
set_tests_properties(redis.wait PROPERTIES TIMEOUT 300 LABELS "contract;redis")

# The contract on LMDB with a Redis shared by gateways as the cache tier.
add_test(NAME contract.lmdb_redis_cached
         COMMAND ${SUPPORT}/with-redis.sh ${SUPPORT}/with-tempdir.sh $<TARGET_FILE:contract>
                 "lmdb:{TMP}/store" "{REDIS_URI}")
set_tests_properties(contract.lmdb_redis_cached PROPERTIES TIMEOUT 600 LABELS "contract;cache;redis")
