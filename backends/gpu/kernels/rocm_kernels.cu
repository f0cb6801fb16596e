// The translation unit hipcc compiles into the ROCm plugin's code object:
// one source per code object, so the kernel files are included here.
#include "flash_attention.cu"
#include "gemm.cu"
#include "math_attention.cu"
#include "memory_test.cu"
