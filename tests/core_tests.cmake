# Unit tests of the core objects (memory, streams, events) on the host backend.
# Included from tests/CMakeLists.txt.
find_package(doctest REQUIRED)

add_executable(hal_core_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_memory_test_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stream_event_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/public_api_test.cpp)
target_link_libraries(hal_core_tests PRIVATE hal::hal hal_internal doctest::doctest hal_warnings Threads::Threads)
# The host plugin is loaded at run time, so nothing else makes it build first.
add_dependencies(hal_core_tests hal_backend_host)

add_test(NAME core_tests COMMAND hal_core_tests)
# Only the host plugin: the tests must not depend on what hardware is present.
set_tests_properties(core_tests PROPERTIES ENVIRONMENT "HAL_BACKENDS=host" TIMEOUT 60 LABELS unit)

# Interop and DLPack on the host backend: imported memory, views, and tensors
# exchanged without a copy.
add_executable(hal_interop_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/interop_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dlpack_test.cpp)
target_link_libraries(hal_interop_tests PRIVATE hal::hal hal_conformance doctest::doctest hal_warnings Threads::Threads)
add_dependencies(hal_interop_tests hal_backend_host)
add_test(NAME interop_host_tests COMMAND hal_interop_tests --test-suite=interop)
add_test(NAME dlpack_host_tests COMMAND hal_interop_tests --test-suite=dlpack)
set_tests_properties(interop_host_tests dlpack_host_tests PROPERTIES
  ENVIRONMENT "HAL_BACKENDS=host;HAL_CONFIG=" TIMEOUT 120 LABELS unit)

# Telemetry: the host's sysfs/procfs parsers on fixture trees (tests/data), the
# API over the host plugin, health rules and the health monitor.
add_executable(hal_telemetry_tests ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp ${CMAKE_CURRENT_LIST_DIR}/telemetry_test.cpp)
target_link_libraries(hal_telemetry_tests PRIVATE hal::hal hal_host_telemetry doctest::doctest hal_warnings
  Threads::Threads)
target_compile_definitions(hal_telemetry_tests PRIVATE HAL_TEST_DATA_DIR="${CMAKE_CURRENT_LIST_DIR}/data")
add_dependencies(hal_telemetry_tests hal_backend_host)
add_test(NAME telemetry_host_tests COMMAND hal_telemetry_tests)
set_tests_properties(telemetry_host_tests PROPERTIES ENVIRONMENT "HAL_BACKENDS=host;HAL_CONFIG=" TIMEOUT 60 LABELS unit)
