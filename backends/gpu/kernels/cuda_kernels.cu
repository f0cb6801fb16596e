// The translation unit nvcc compiles into the CUDA plugin's fatbin: nvcc
// takes one source per fatbin, so the kernel files are included here.
#include "flash_attention.cu"
#include "gemm.cu"
#include "math_attention.cu"
#include "memory_test.cu"
#include "softmax.cu"
