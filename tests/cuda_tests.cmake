# The CUDA backend against a fake driver, the shims, and the plugin's link
# dependencies. Included from tests/CMakeLists.txt when HAL_WITH_CUDA is ON.

include(${CMAKE_CURRENT_LIST_DIR}/gpu_suite_tests.cmake)

# The fake driver is named like the real one, alone in its directory, and
# never installed.
set(HAL_FAKE_CUDA_DRIVER_DIR ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_cuda_driver)
hal_add_fake_library(fake_cuda_driver fake_cuda_driver/fake_cuda_driver.cpp cuda .so.1 ${HAL_FAKE_CUDA_DRIVER_DIR})
# The flavour of a CUDA-compatible SDK's libcuda that stops before cuDeviceGetUuid_v2 (CUDA 11.4).
hal_add_fake_library(fake_cuda_driver_no_uuid_v2 fake_cuda_driver/fake_cuda_driver.cpp cuda .so.1
  ${HAL_FAKE_CUDA_DRIVER_DIR}/no_uuid_v2 HAL_FAKE_CUDA_NO_UUID_V2=1)
foreach(fake fake_cuda_driver fake_cuda_driver_no_uuid_v2)
  target_include_directories(${fake} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(${fake} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/fakes)
  target_link_libraries(${fake} PRIVATE hal_simt_kernels Threads::Threads)
endforeach()

# NVML and the PPU SDK's HGML, one source built with either prefix, each
# under its real soname alone in its directory.
set(HAL_FAKE_NVML_DIR ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_nvml)
hal_add_fake_library(fake_nvml fake_nvml/fake_nvml.cpp nvidia-ml .so.1 ${HAL_FAKE_NVML_DIR}/nvml)
hal_add_fake_library(fake_hgml fake_nvml/fake_nvml.cpp hgml .so ${HAL_FAKE_NVML_DIR}/hgml FAKE_NVML_HGML=1)
foreach(fake fake_nvml fake_hgml)
  target_link_libraries(${fake} PRIVATE Threads::Threads)
endforeach()

find_package(nlohmann_json 3 REQUIRED)  # the halconform reports the tests read
add_executable(hal_cuda_tests
  ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_shims_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_attention_test.cpp)
target_include_directories(hal_cuda_tests PRIVATE ${DOCTEST_INCLUDE_DIR})
target_link_libraries(hal_cuda_tests PRIVATE hal::hal hal_internal hal_shims hal_warnings Threads::Threads
  nlohmann_json::nlohmann_json)
target_compile_definitions(hal_cuda_tests PRIVATE
  HAL_FAKE_CUDA_DRIVER_PATH="$<TARGET_FILE:fake_cuda_driver>"
  HAL_FAKE_CUDA_DRIVER_DIR="${HAL_FAKE_CUDA_DRIVER_DIR}"
  HAL_FAKE_NCCL_PATH="$<TARGET_FILE:fake_nccl>"
  HAL_FAKE_NCCL_LEGACY_PATH="$<TARGET_FILE:fake_nccl_legacy>"
  HAL_FAKE_NVML_PATH="$<TARGET_FILE:fake_nvml>"
  HAL_TEST_CUDA_KERNELS_BUILT=$<BOOL:${HAL_CUDA_KERNELS}>
  HAL_TEST_CUDA_KERNEL_FATBIN="${HAL_CUDA_KERNEL_FATBIN}"
  HAL_TEST_BACKEND_CUDA=1
  HAL_TEST_GPU_PLUGIN_PATH="$<TARGET_FILE:hal_backend_cuda>")
add_dependencies(hal_cuda_tests fake_cuda_driver fake_cuda_driver_no_uuid_v2 fake_nccl fake_nccl_legacy fake_nvml hal_backend_cuda hal_backend_host hal_data)
if(TARGET halinfo)
  target_compile_definitions(hal_cuda_tests PRIVATE HALINFO_PATH="$<TARGET_FILE:halinfo>"
                                                    HALCONFORM_PATH="$<TARGET_FILE:halconform>")
  add_dependencies(hal_cuda_tests halinfo halconform)
endif()

# One process per driver identity: a driver's devices are fixed once cuInit ran.
set(HAL_CUDA_TEST_ENVIRONMENT "HAL_CONFIG=;HAL_BACKEND_PATH=;HAL_BACKENDS_FORCE=")
set(HAL_CUDA_FAKE_A100S "HAL_FAKE_CUDA_DEVICES=2;HAL_FAKE_CUDA_MEMORY=1G,512M;HAL_FAKE_CUDA_NAME=NVIDIA A100-SXM4-80GB,NVIDIA A100-SXM4-40GB")
hal_add_suite_test(cuda_fake_driver_tests hal_cuda_tests "cuda semantics,fake driver,shims"
  "${HAL_CUDA_TEST_ENVIRONMENT};${HAL_CUDA_FAKE_A100S}")
hal_add_suite_test(cuda_fake_interop_tests hal_cuda_tests "cuda interop"
  "${HAL_CUDA_TEST_ENVIRONMENT};${HAL_CUDA_FAKE_A100S}")
# A V100 (7.0): the image has no sm_70 cubin and its PTX is compute_90, so no kernels load.
hal_add_suite_test(cuda_fake_attention_tests hal_cuda_tests "gpu attention"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=1;HAL_FAKE_CUDA_COMPUTE_CAPABILITY=7.0")
hal_add_suite_test(cuda_fake_memory_test_tests hal_cuda_tests "cuda memory test"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=1")
hal_add_suite_test(cuda_fake_nvml_telemetry_tests hal_cuda_tests "nvml telemetry"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=2")
hal_add_suite_test(cuda_fake_halconform_tests hal_cuda_tests "halconform on cuda"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=2")
hal_add_suite_test(cuda_faithful_fake_driver_tests hal_cuda_tests "faithful fake driver"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=1")
hal_add_suite_test(cuda_fake_no_uuid_v2_tests hal_cuda_tests "driver without uuid v2"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_TEST_FAKE_CUDA_DRIVER=$<TARGET_FILE:fake_cuda_driver_no_uuid_v2>")
hal_add_suite_test(cuda_fake_ppu_tests hal_cuda_tests "ppu identity" "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_IDENTITY=ppu")
hal_add_suite_test(cuda_fake_no_device_tests hal_cuda_tests "no device"
  "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=0")
hal_add_suite_test(cuda_no_driver_tests hal_cuda_tests "no driver" "${HAL_CUDA_TEST_ENVIRONMENT};HAL_CUDA_DRIVER=")

hal_add_no_vendor_library_test(cuda_plugin_needs_no_nvidia_library hal_backend_cuda)

# cuBLAS's GEMM on the host in stream order, for the math path on the fake driver.
hal_add_fake_library(fake_cublas fake_cublas/fake_cublas.cpp cublas .so.13 ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_cublas)
target_include_directories(fake_cublas SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(fake_cublas PRIVATE ${CMAKE_DL_LIBS})

# Attention numerics on a real CUDA device against the host backend (label
# gpu: CI has no GPU; scripts/gpu-check.sh runs it). Without a usable device
# it exits 77 and ctest reports it skipped, with the reason in its output.
add_dependencies(hal_gpu_attention_numerics hal_backend_cuda)
add_test(NAME cuda_attention_numerics COMMAND hal_gpu_attention_numerics)
set_tests_properties(cuda_attention_numerics PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300
  ENVIRONMENT "HAL_CONFIG=;HAL_BACKEND_PATH=;HAL_BACKENDS_FORCE=;HAL_BACKENDS=host,cuda")
# The same program through the real CUDA backend on the fakes: the embedded
# image loads in the fake driver, whose cuLaunchKernel runs hal's kernels in
# the SIMT emulator, and the fake cuBLAS does math's GEMMs. Flash and math,
# every dtype, forward and backward, against the host backend; it fails when
# nothing was compared, so a path that silently stops running shows.
if(HAL_CUDA_KERNELS)
  add_test(NAME cuda_fake_attention_numerics COMMAND hal_gpu_attention_numerics --small --require flash,math)
  add_dependencies(hal_gpu_attention_numerics fake_cuda_driver fake_cublas)
  set_tests_properties(cuda_fake_attention_numerics PROPERTIES LABELS unit TIMEOUT 300 ENVIRONMENT
    "HAL_CONFIG=;HAL_BACKEND_PATH=;HAL_BACKENDS_FORCE=;HAL_BACKENDS=host,cuda;HAL_CUDA_DRIVER=$<TARGET_FILE:fake_cuda_driver>;HAL_CUBLAS=$<TARGET_FILE:fake_cublas>;HAL_CUDNN=/nonexistent/libcudnn.so.9")
endif()

# cuDNN's fused attention, driven directly on the fake driver and a fake cuDNN named like the real one.
if(HAL_CUDNN_INCLUDE_DIR)
  set(HAL_FAKE_CUDNN_DIR ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_cudnn)
  hal_add_fake_library(fake_cudnn fake_cudnn/fake_cudnn.cpp cudnn .so.9 ${HAL_FAKE_CUDNN_DIR})
  # NVRTC beside it, which cuDNN compiles its SDPA engines with: hal finds it and reports it.
  hal_add_fake_library(fake_nvrtc fake_nvrtc/fake_nvrtc.cpp nvrtc .so.13 ${CMAKE_CURRENT_BINARY_DIR}/fakes/fake_nvrtc)
  target_include_directories(fake_cudnn SYSTEM PRIVATE ${HAL_CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})

  add_executable(hal_cudnn_attention_tests
    ${CMAKE_CURRENT_LIST_DIR}/test_main.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cudnn_attention_test.cpp)
  target_include_directories(hal_cudnn_attention_tests PRIVATE ${DOCTEST_INCLUDE_DIR} ${CMAKE_CURRENT_LIST_DIR})
  # cudnn.h: the fake cuDNN's own rules are tested through its exported functions.
  target_include_directories(hal_cudnn_attention_tests SYSTEM PRIVATE ${HAL_CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(hal_cudnn_attention_tests PRIVATE hal_cuda_core hal_warnings Threads::Threads)
  hal_use_fake_libraries(hal_cudnn_attention_tests HAL_FAKE_CUDA_DRIVER_PATH fake_cuda_driver
    HAL_FAKE_CUDNN_PATH fake_cudnn HAL_FAKE_NVRTC_PATH fake_nvrtc)
  target_compile_definitions(hal_cudnn_attention_tests PRIVATE
    HAL_TEST_CUDNN_FRONTEND_BUILT=$<BOOL:${HAL_CUDNN_FRONTEND_INCLUDE_DIR}>)
  add_test(NAME cudnn_attention_tests COMMAND hal_cudnn_attention_tests)
  set_tests_properties(cudnn_attention_tests PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT
    "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_DEVICES=1;HAL_FAKE_CUDA_NAME=NVIDIA A100-SXM4-80GB")

  # The shipped quirks for cuDNN releases, matched through the plugin's cuDNN version axis.
  hal_use_fake_libraries(hal_cuda_tests HAL_FAKE_CUDNN_PATH fake_cudnn HAL_FAKE_NVRTC_PATH fake_nvrtc)
  target_compile_definitions(hal_cuda_tests PRIVATE
    HAL_TEST_CUDNN_FRONTEND_BUILT=$<BOOL:${HAL_CUDNN_FRONTEND_INCLUDE_DIR}>)
  add_test(NAME cuda_cudnn_quirk_tests COMMAND hal_cuda_tests "--test-suite=cudnn quirks")
  # Under the sanitizers, LeakSanitizer's own tracer faults (signal 11) at this process's exit while scanning
  # threads' thread-local storage (seen in fresh-clone builds; use_tls=0 avoids it). Its leak check here does not
  # take thread-local storage as a root, which can only report more leaks, never hide one.
  set(hal_quirk_test_lsan "")
  if(HAL_SANITIZE)
    set(hal_quirk_test_lsan ";LSAN_OPTIONS=use_tls=0")
  endif()
  set_tests_properties(cuda_cudnn_quirk_tests PROPERTIES LABELS unit TIMEOUT 60 ENVIRONMENT
    "${HAL_CUDA_TEST_ENVIRONMENT};HAL_FAKE_CUDA_IDENTITY=h100${hal_quirk_test_lsan}")
endif()

# The frontend's calls into cuDNN and the CUDA runtime are dlsym'd, never linked.
if(HAL_CUDNN_FRONTEND_INCLUDE_DIR AND HAL_CUDNN_INCLUDE_DIR)
  find_program(HAL_NM nm REQUIRED)
  add_test(NAME cudnn_attention_links_no_vendor_symbol
    COMMAND ${CMAKE_COMMAND} -DNM=${HAL_NM} "-DOBJECT=$<FILTER:$<TARGET_OBJECTS:hal_cuda_core>,INCLUDE,cudnn_attention>"
            -P ${CMAKE_CURRENT_LIST_DIR}/check_no_vendor_symbols.cmake)
  set_tests_properties(cudnn_attention_links_no_vendor_symbol PROPERTIES LABELS unit)
endif()
