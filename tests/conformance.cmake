# Conformance suite tests: the library (unit, also under ASan+UBSan), halconform
# end to end on the host backend and on fake backends that crash, hang,
# overclaim or compute wrong results, and the report formats.

# Fake backends wrap the host plugin; their own directory keeps them out of
# every other test unless HAL_BACKEND_PATH names it.
set(HAL_FAKE_BACKEND_DIR ${CMAKE_CURRENT_BINARY_DIR}/fake_backends)
set(HAL_FAKE_BACKENDS "")
foreach(mode crash hang overclaim bitflip zerotime nostreams lazy badmemory eccrise throttle)
  string(TOUPPER ${mode} upper_mode)
  add_library(hal_backend_fake_${mode} MODULE fakes/fake_backend.c)
  target_include_directories(hal_backend_fake_${mode} PRIVATE ${PROJECT_SOURCE_DIR}/hal/include)
  target_compile_definitions(hal_backend_fake_${mode} PRIVATE FAKE_${upper_mode} FAKE_NAME="fake_${mode}"
    HAL_HOST_PLUGIN_PATH="$<TARGET_FILE:hal_backend_host>")
  target_link_libraries(hal_backend_fake_${mode} PRIVATE hal_warnings ${CMAKE_DL_LIBS})
  set_target_properties(hal_backend_fake_${mode} PROPERTIES
    PREFIX "lib" OUTPUT_NAME "hal_backend_fake_${mode}" LIBRARY_OUTPUT_DIRECTORY ${HAL_FAKE_BACKEND_DIR}
    C_VISIBILITY_PRESET hidden)
  add_dependencies(hal_backend_fake_${mode} hal_backend_host)
  list(APPEND HAL_FAKE_BACKENDS hal_backend_fake_${mode})
endforeach()

# A plugin without the device memory test sub-table, for the API's unsupported case.
target_compile_definitions(hal_core_tests PRIVATE HAL_FAKE_BADMEMORY_PLUGIN="$<TARGET_FILE:hal_backend_fake_badmemory>")
add_dependencies(hal_core_tests hal_backend_fake_badmemory)

add_executable(conformance_tests test_main.cpp conformance_test.cpp attention_reference_test.cpp)
target_include_directories(conformance_tests PRIVATE ${DOCTEST_INCLUDE_DIR})
target_link_libraries(conformance_tests PRIVATE hal_conformance hal_internal hal_warnings)
target_compile_definitions(conformance_tests PRIVATE HAL_PROFILE_DIR="${PROJECT_SOURCE_DIR}/data/profiles")
add_dependencies(conformance_tests hal_backend_host)
add_test(NAME conformance_tests COMMAND conformance_tests)
set_tests_properties(conformance_tests PROPERTIES LABELS unit ENVIRONMENT "HAL_BACKENDS=host;HAL_CONFIG=")

if(HAL_BUILD_TOOLS)
  add_executable(halconform_tests test_main.cpp halconform_test.cpp)
  target_include_directories(halconform_tests PRIVATE ${DOCTEST_INCLUDE_DIR})
  target_link_libraries(halconform_tests PRIVATE hal_conformance hal_warnings)
  target_compile_definitions(halconform_tests PRIVATE
    HALCONFORM_PATH="$<TARGET_FILE:halconform>" HALINFO_PATH="$<TARGET_FILE:halinfo>"
    HAL_FAKE_BACKEND_DIR="${HAL_FAKE_BACKEND_DIR}")
  add_dependencies(halconform_tests halconform halinfo ${HAL_FAKE_BACKENDS})
  add_test(NAME halconform_tests COMMAND halconform_tests)
  set_tests_properties(halconform_tests PROPERTIES LABELS tools ENVIRONMENT "HAL_BACKENDS=;HAL_CONFIG=")

  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME conformance_reports_valid
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_conformance_reports.py
        $<TARGET_FILE:halconform> ${HAL_FAKE_BACKEND_DIR} ${CMAKE_CURRENT_BINARY_DIR}/conformance_reports)
    set_tests_properties(conformance_reports_valid PROPERTIES LABELS tools ENVIRONMENT "HAL_BACKENDS=;HAL_CONFIG=")
  endif()
endif()
