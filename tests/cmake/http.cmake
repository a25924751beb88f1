# HTTP gateway: unit tests that compile parts of src/http/ in (they are not
# in libidem) and need the packaged HTTP parser.
foreach(t test_http_request test_http_response)
  if(TARGET ${t})
    target_include_directories(${t} PRIVATE ${HTTP_PARSER_INCLUDE})
    target_link_libraries(${t} PRIVATE ${HTTP_PARSER_LIB})
  endif()
endforeach()

# The route table and the config file (src/http/route.c, config_file.c, on
# libyaml) are linked into every test that compiles config.c in, and into
# the route and config tests.
foreach(t test_http_config test_http_policy test_http_request test_spool test_route
          test_route_config test_access_log)
  if(TARGET ${t})
    target_sources(${t} PRIVATE ${PROJECT_SOURCE_DIR}/src/http/route.c
                                ${PROJECT_SOURCE_DIR}/src/http/config_file.c)
    target_include_directories(${t} PRIVATE ${HTTP_PARSER_INCLUDE})
    target_link_libraries(${t} PRIVATE ${HTTP_PARSER_LIB} PkgConfig::YAML)
  endif()
endforeach()

# The upstream pool (src/http/upstream.c, with the answer parser under it).
if(TARGET test_upstream_addrs)
  target_sources(test_upstream_addrs PRIVATE ${PROJECT_SOURCE_DIR}/src/http/upstream.c
                                             ${PROJECT_SOURCE_DIR}/src/http/respparse.c
                                             ${PROJECT_SOURCE_DIR}/src/http/msg.c)
  target_include_directories(test_upstream_addrs PRIVATE ${HTTP_PARSER_INCLUDE})
  target_link_libraries(test_upstream_addrs PRIVATE ${HTTP_PARSER_LIB})
endif()
