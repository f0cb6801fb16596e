# Fake NCCL-compatible libraries, each alone in its directory under its real
# soname, built into the build tree only and never installed:
#   nccl/libnccl.so.2    NCCL 2.28 on the fake CUDA driver's streams
#   legacy/libnccl.so.2  NCCL 2.8: no ncclAlltoAll/Gather/Scatter, no
#                        ncclCommInitRankConfig, no bf16 or avg
#   rccl/librccl.so.1    RCCL's spelling (ncclAllToAll) on the fake HIP runtime's streams
include(${PROJECT_SOURCE_DIR}/tests/fakes/fakes.cmake)
set(HAL_FAKE_NCCL_DIR ${PROJECT_BINARY_DIR}/tests/fakes/fake_nccl)
function(hal_add_fake_nccl target directory name suffix)
  hal_add_fake_library(${target} fake_nccl/fake_nccl.cpp ${name} ${suffix} ${HAL_FAKE_NCCL_DIR}/${directory} ${ARGN})
  target_link_libraries(${target} PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
endfunction()
if(HAL_WITH_CUDA)
  hal_add_fake_nccl(fake_nccl nccl nccl .so.2)
  hal_add_fake_nccl(fake_nccl_legacy legacy nccl .so.2 FAKE_NCCL_LEGACY)
endif()
if(HAL_WITH_ROCM)
  hal_add_fake_nccl(fake_rccl rccl rccl .so.1 FAKE_NCCL_HIP)
endif()
