# HTTP gateway: unit tests that compile parts of src/http/ in (they are not
# in libidem) and need the packaged HTTP parser.
if(TARGET test_http_request)
  target_include_directories(test_http_request PRIVATE ${HTTP_PARSER_INCLUDE})
  target_link_libraries(test_http_request PRIVATE ${HTTP_PARSER_LIB})
endif()
