# Test registration the GPU backends' test files share (cuda_tests.cmake,
# rocm_tests.cmake).
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/fakes/fakes.cmake)
set(HAL_GPU_SUITE_TESTS_DIR ${CMAKE_CURRENT_LIST_DIR})
find_program(HAL_READELF readelf REQUIRED)

# One doctest test suite (or comma-separated suites) of `executable` as a
# unit test in its own process, with `environment` (a list of NAME=VALUE):
# the fakes read their identity once per process.
function(hal_add_suite_test name executable suites environment)
  add_test(NAME ${name} COMMAND ${executable} "--test-suite=${suites}")
  set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${environment}")
endfunction()

# The plugin must load where none of its vendor's libraries is installed.
function(hal_add_no_vendor_library_test name plugin_target)
  add_test(NAME ${name}
    COMMAND ${CMAKE_COMMAND} -DREADELF=${HAL_READELF} -DPLUGIN=$<TARGET_FILE:${plugin_target}>
            -P ${HAL_GPU_SUITE_TESTS_DIR}/check_no_vendor_libraries.cmake)
  set_tests_properties(${name} PROPERTIES LABELS unit)
endfunction()
