# The ppu backend against a fixture tree. Discovery needs nothing else; the
# backend (built with the CUDA backend) runs work on the fake CUDA driver,
# copied into the fixture SDK and started in its PPU identity.
add_executable(hal_ppu_tests ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp ${CMAKE_CURRENT_LIST_DIR}/ppu_test.cpp)
target_include_directories(hal_ppu_tests PRIVATE ${DOCTEST_INCLUDE_DIR})
target_link_libraries(hal_ppu_tests PRIVATE hal::hal hal_ppu_discovery hal_warnings)
add_dependencies(hal_ppu_tests hal_data)
set(HAL_PPU_TEST_ENVIRONMENT "HAL_CONFIG=;HAL_BACKEND_PATH=;HAL_BACKENDS_FORCE=")
add_test(NAME ppu_discovery_tests COMMAND hal_ppu_tests "--test-suite=ppu discovery")
set_tests_properties(ppu_discovery_tests PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${HAL_PPU_TEST_ENVIRONMENT}")
if(HAL_WITH_CUDA)
  hal_use_fake_libraries(hal_ppu_tests HAL_FAKE_CUDA_DRIVER_PATH fake_cuda_driver HAL_FAKE_HGML_PATH fake_hgml)
  add_dependencies(hal_ppu_tests hal_backend_ppu hal_backend_cuda)
  set(HAL_PPU_FAKE_ENVIRONMENT "${HAL_PPU_TEST_ENVIRONMENT};HAL_FAKE_CUDA_IDENTITY=ppu")
  if(TARGET fake_nccl)  # ACCL-P in the fixture: the fake NCCL-compatible library as libpccl
    hal_use_fake_libraries(hal_ppu_tests HAL_FAKE_NCCL_PATH fake_nccl)
  endif()
  add_test(NAME ppu_fixture_tests COMMAND hal_ppu_tests "--test-suite=ppu fixture")
  set_tests_properties(ppu_fixture_tests PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT "${HAL_PPU_FAKE_ENVIRONMENT}")
  add_test(NAME ppu_cuda_listed_once_tests COMMAND hal_ppu_tests "--test-suite=ppu and cuda")
  set_tests_properties(ppu_cuda_listed_once_tests PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT
    "${HAL_PPU_FAKE_ENVIRONMENT}")
  if(HAL_BUILD_TOOLS)
    # halinfo and halconform as users run them on the fixture PPU.
    target_link_libraries(hal_ppu_tests PRIVATE nlohmann_json::nlohmann_json)
    target_compile_definitions(hal_ppu_tests PRIVATE HAL_PPU_TEST_TOOLS HALINFO_PATH="$<TARGET_FILE:halinfo>"
                                                     HALCONFORM_PATH="$<TARGET_FILE:halconform>")
    add_dependencies(hal_ppu_tests halinfo halconform)
    add_test(NAME ppu_tools_tests COMMAND hal_ppu_tests "--test-suite=ppu tools")
    set_tests_properties(ppu_tools_tests PROPERTIES LABELS tools TIMEOUT 120 ENVIRONMENT "${HAL_PPU_FAKE_ENVIRONMENT}")
  endif()

  # The plugin must load where no PPU SDK library is installed.
  find_program(HAL_READELF readelf REQUIRED)
  add_test(NAME ppu_plugin_needs_no_vendor_library
    COMMAND ${CMAKE_COMMAND} -DREADELF=${HAL_READELF} -DPLUGIN=$<TARGET_FILE:hal_backend_ppu>
            -P ${CMAKE_CURRENT_LIST_DIR}/check_no_vendor_libraries.cmake)
  set_tests_properties(ppu_plugin_needs_no_vendor_library PROPERTIES LABELS unit)
endif()
