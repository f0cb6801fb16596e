# Unit tests for topology (hwloc) and the configuration file. Include from the
# top-level CMakeLists.txt after the `hal` target exists and enable_testing().

find_path(HAL_DOCTEST_INCLUDE_DIR doctest/doctest.h REQUIRED)

foreach(hal_test topology_test config_test)
  add_executable(${hal_test} ${CMAKE_CURRENT_LIST_DIR}/${hal_test}.cpp)
  target_include_directories(${hal_test} SYSTEM PRIVATE ${HAL_DOCTEST_INCLUDE_DIR})
  target_link_libraries(${hal_test} PRIVATE hal)
  add_test(NAME ${hal_test} COMMAND ${hal_test})
endforeach()

# The test checks that every schema key is documented.
target_compile_definitions(config_test PRIVATE
    HAL_CONFIG_DOC_PATH="${CMAKE_CURRENT_LIST_DIR}/../docs/config.md")
