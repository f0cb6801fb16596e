# Unit tests for the machine topology (hwloc) and the configuration file.
# Include from tests/CMakeLists.txt: include(topo_config.cmake)

foreach(hal_test topology_test config_test)
  add_executable(${hal_test} test_main.cpp ${hal_test}.cpp)
  target_include_directories(${hal_test} PRIVATE ${DOCTEST_INCLUDE_DIR})
  target_link_libraries(${hal_test} PRIVATE hal::hal hal_warnings)
  add_test(NAME ${hal_test} COMMAND ${hal_test})
  set_tests_properties(${hal_test} PROPERTIES LABELS unit)
endforeach()

# The config test checks that docs/config.md documents every schema key.
target_compile_definitions(config_test PRIVATE HAL_CONFIG_DOC_PATH="${PROJECT_SOURCE_DIR}/docs/config.md")
