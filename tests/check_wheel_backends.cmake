# The Python wheel's plugins follow the toolchain found: configures the
# project as python/pyproject.toml does (its AUTO defaults, read from the
# file) in a scratch directory and checks that each GPU option came out ON
# exactly where this build's configure found what it needs (cuda.h for the
# cuda and ppu plugins, nvcc for their kernels, the HIP headers for rocm).
# Variables: SOURCE_DIR, SCRATCH_DIR, CUDA_HEADERS_FOUND, NVCC, HIP_INCLUDE_DIR,
# and GENERATOR.
file(READ "${SOURCE_DIR}/python/pyproject.toml" pyproject)
set(defines)
foreach(option HAL_WITH_CUDA HAL_CUDA_KERNELS HAL_WITH_ROCM)
  if(NOT pyproject MATCHES "cmake\\.define\\.${option} = { env = \"${option}\", default = \"([A-Z]+)\" }")
    message(FATAL_ERROR "python/pyproject.toml does not define ${option} from its variable with a default")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL "AUTO")
    message(FATAL_ERROR "python/pyproject.toml defaults ${option} to ${CMAKE_MATCH_1}, not AUTO")
  endif()
  list(APPEND defines "-D${option}=AUTO")
endforeach()

file(REMOVE_RECURSE "${SCRATCH_DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${SCRATCH_DIR}" -G "${GENERATOR}" ${defines}
          -DHAL_BUILD_PYTHON=OFF -DHAL_BUILD_TOOLS=OFF -DHAL_BUILD_TESTS=OFF
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring with the wheel's AUTO options failed:\n${output}")
endif()
file(STRINGS "${SCRATCH_DIR}/CMakeCache.txt" cache REGEX "^HAL_(WITH_CUDA|CUDA_KERNELS|WITH_ROCM):")
file(REMOVE_RECURSE "${SCRATCH_DIR}")

function(expect option found)
  set(wanted OFF)
  if(found)
    set(wanted ON)
  endif()
  if(NOT cache MATCHES "${option}:BOOL=${wanted}")
    message(FATAL_ERROR "the wheel's ${option} is not ${wanted} (the toolchain: ${found}); cache: ${cache}")
  endif()
  message(STATUS "${option}: ${wanted}, as the toolchain found says")
endfunction()
expect(HAL_WITH_CUDA "${CUDA_HEADERS_FOUND}")
if(CUDA_HEADERS_FOUND AND NVCC)
  expect(HAL_CUDA_KERNELS ON)
else()
  expect(HAL_CUDA_KERNELS OFF)
endif()
expect(HAL_WITH_ROCM "${HIP_INCLUDE_DIR}")
