# The ROCm backend against a fake HIP runtime, and the plugin's link
# dependencies. Included from tests/CMakeLists.txt when HAL_WITH_ROCM is ON.

include(${CMAKE_CURRENT_LIST_DIR}/gpu_suite_tests.cmake)

# Two fakes, each alone in its directory under its real soname, never
# installed: ROCm 6's exports, and ROCm 5's (no hipLaunchHostFunc).
set(HAL_FAKE_HIP_RUNTIME_DIR ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_hip_runtime)
hal_add_fake_library(fake_hip_runtime_rocm6 fake_hip_runtime/fake_hip_runtime.cpp amdhip64 .so.6
  ${HAL_FAKE_HIP_RUNTIME_DIR}/rocm6)
hal_add_fake_library(fake_hip_runtime_rocm5 fake_hip_runtime/fake_hip_runtime.cpp amdhip64 .so.5
  ${HAL_FAKE_HIP_RUNTIME_DIR}/rocm5 FAKE_HIP_ROCM5)
foreach(variant rocm6 rocm5)
  target_include_directories(fake_hip_runtime_${variant} SYSTEM PRIVATE ${HAL_HIP_INCLUDE_DIR})
  target_include_directories(fake_hip_runtime_${variant} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fakes)
  target_link_libraries(fake_hip_runtime_${variant} PRIVATE hal_simt_kernels Threads::Threads)
endforeach()

# A fake AMD SMI (libamd_smi.so) and a fake ROCm 5 rocm_smi
# (librocm_smi64.so.5) from one source, each alone in its directory.
set(HAL_FAKE_AMD_SMI_DIR ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_amd_smi)
hal_add_fake_library(fake_amd_smi fake_amd_smi/fake_amd_smi.cpp amd_smi .so ${HAL_FAKE_AMD_SMI_DIR}/amd_smi)
hal_add_fake_library(fake_rocm_smi fake_amd_smi/fake_amd_smi.cpp rocm_smi64 .so.5 ${HAL_FAKE_AMD_SMI_DIR}/rocm_smi
  FAKE_ROCM_SMI)

add_executable(hal_rocm_tests ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp ${CMAKE_CURRENT_LIST_DIR}/rocm_backend_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_attention_test.cpp ${CMAKE_CURRENT_LIST_DIR}/rocm_telemetry_test.cpp)
target_include_directories(hal_rocm_tests PRIVATE ${DOCTEST_INCLUDE_DIR})
target_link_libraries(hal_rocm_tests PRIVATE hal::hal hal_internal hal_warnings Threads::Threads)
get_property(rocm_code_object_architectures GLOBAL PROPERTY HAL_ROCM_CODE_OBJECT_ARCHITECTURES)
set(HAL_ROCM_KERNELS_BUILT OFF)
if(rocm_code_object_architectures)
  set(HAL_ROCM_KERNELS_BUILT ON)
endif()
target_compile_definitions(hal_rocm_tests PRIVATE
  HAL_FAKE_HIP_RUNTIME_PATH="$<TARGET_FILE:fake_hip_runtime_rocm6>"
  HAL_FAKE_HIP_ROCM5_RUNTIME_PATH="$<TARGET_FILE:fake_hip_runtime_rocm5>"
  HAL_FAKE_HIP_RUNTIME_DIR="${HAL_FAKE_HIP_RUNTIME_DIR}/rocm6"
  HAL_FAKE_AMD_SMI_PATH="$<TARGET_FILE:fake_amd_smi>"
  HAL_FAKE_ROCM_SMI_DIR="${HAL_FAKE_AMD_SMI_DIR}/rocm_smi"
  HAL_HOST_PLUGIN_PATH="$<TARGET_FILE:hal_backend_host>"
  HAL_ROCM_CODE_OBJECT_ARCHITECTURES="${rocm_code_object_architectures}"
  HAL_TEST_BACKEND_CUDA=0
  HAL_TEST_ROCM_KERNELS_BUILT=$<BOOL:${HAL_ROCM_KERNELS_BUILT}>
  HAL_TEST_GPU_PLUGIN_PATH="$<TARGET_FILE:hal_backend_rocm>")
if(TARGET halinfo)
  target_compile_definitions(hal_rocm_tests PRIVATE HALINFO_PATH="$<TARGET_FILE:halinfo>")
  add_dependencies(hal_rocm_tests halinfo)
endif()
add_dependencies(hal_rocm_tests fake_hip_runtime_rocm6 fake_hip_runtime_rocm5 fake_amd_smi fake_rocm_smi
  hal_backend_rocm hal_backend_host)

# One process per runtime identity: the fake reads it once.
set(HAL_ROCM_TEST_ENVIRONMENT "HAL_CONFIG=;HAL_BACKEND_PATH=;HAL_BACKENDS_FORCE=;HAL_FAKE_HIP_FAIL=")
set(HAL_ROCM_FAKE_MI200S "HAL_FAKE_HIP_DEVICES=2;HAL_FAKE_HIP_MEMORY=1G,512M;HAL_FAKE_HIP_NAME=AMD Instinct MI210,AMD Instinct MI100;HAL_FAKE_HIP_ARCH=gfx90a:sramecc+:xnack-,gfx908:sramecc+:xnack-;HAL_FAKE_HIP_UUID=0123456789abcdef0011223344556677,fedcba98765432100011223344556677")
hal_add_suite_test(rocm_fake_runtime_tests hal_rocm_tests "fake runtime"
  "${HAL_ROCM_TEST_ENVIRONMENT};${HAL_ROCM_FAKE_MI200S}")
hal_add_suite_test(rocm_fake_interop_tests hal_rocm_tests "rocm interop"
  "${HAL_ROCM_TEST_ENVIRONMENT};${HAL_ROCM_FAKE_MI200S}")
hal_add_suite_test(rocm_fake_attention_tests hal_rocm_tests "gpu attention"
  "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_DEVICES=1")
hal_add_suite_test(rocm_fake_foreign_architecture_tests hal_rocm_tests "foreign architecture"
  "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_ARCH=gfx942:sramecc+:xnack+;HAL_FAKE_HIP_NAME=AMD Instinct MI300X;HAL_FAKE_HIP_MANAGED=1")
hal_add_suite_test(rocm_fake_rdna_tests hal_rocm_tests "rdna code object"
  "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_ARCH=gfx1030;HAL_FAKE_HIP_NAME=AMD Radeon RX 6900 XT;HAL_FAKE_HIP_CODE_OBJECTS=1")
# Flash and math through the real ROCm backend on the fake runtime, which
# loads the embedded code object (gfx90a entry) and runs hal's kernels in
# the SIMT emulator; against the host backend, as on the CUDA fakes.
if(HAL_HIPCC AND HAL_ROCM_ARCHITECTURES MATCHES "gfx90a")
  add_dependencies(hal_gpu_attention_numerics hal_backend_rocm fake_hip_runtime_rocm6)
  add_test(NAME rocm_fake_attention_numerics COMMAND hal_gpu_attention_numerics --small --device rocm:0 --require flash,math)
  set_tests_properties(rocm_fake_attention_numerics PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT
    "${HAL_ROCM_TEST_ENVIRONMENT};HAL_BACKENDS=host,rocm;HAL_HIP_RUNTIME=$<TARGET_FILE:fake_hip_runtime_rocm6>;HAL_FAKE_HIP_CODE_OBJECTS=1;HAL_FAKE_HIP_DEVICES=1")
endif()
# The memory test kernel from the embedded code object's gfx90a entry, run in the SIMT emulator.
if(HAL_HIPCC AND HAL_ROCM_ARCHITECTURES MATCHES "gfx90a")
  hal_add_suite_test(rocm_fake_memory_test_tests hal_rocm_tests "rocm memory test"
    "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_DEVICES=1;HAL_FAKE_HIP_CODE_OBJECTS=1")
endif()
hal_add_suite_test(rocm_fake_rocm5_tests hal_rocm_tests "rocm5 runtime" "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_MANAGED=0")
hal_add_suite_test(rocm_fake_no_device_tests hal_rocm_tests "no device"
  "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_DEVICES=0")
# Two GPUs the HIP runtime numbers c1, c2 and the fake SMI libraries list
# in the other order; the tests point HAL_AMD_SMI and HAL_ROCM_SMI at them.
hal_add_suite_test(rocm_fake_amd_smi_tests hal_rocm_tests "amd smi telemetry"
  "${HAL_ROCM_TEST_ENVIRONMENT};HAL_FAKE_HIP_DEVICES=2;HAL_FAKE_HIP_PCI_BUS_ID=0000:C1:00.0,0000:C2:00.0;HAL_AMD_SMI=/nonexistent/libamd_smi.so;HAL_ROCM_SMI=/nonexistent/librocm_smi64.so")
hal_add_suite_test(rocm_no_runtime_tests hal_rocm_tests "no runtime" "${HAL_ROCM_TEST_ENVIRONMENT};HAL_HIP_RUNTIME=")

hal_add_no_vendor_library_test(rocm_plugin_needs_no_rocm_library hal_backend_rocm)
