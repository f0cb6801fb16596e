// cuBLAS (libcublas.so.13 or .12), resolved at run time: the handle
// lifecycle and the strided-batched GEMM the GPU attention's math path runs
// on the CUDA backend. Types come from the toolkit's header; nothing links it.
#pragma once

#include <cublas_api.h>

#include <string>

#include "vendor_library.hpp"

namespace hal::shims {

// X(field, type, requirement, names...), as symbol_table.hpp lists functions.
#define HAL_CUBLAS_FUNCTIONS(X)                                                                                        \
  X(cublasCreate, cublasStatus_t (*)(cublasHandle_t* handle), required, "cublasCreate_v2")                             \
  X(cublasDestroy, cublasStatus_t (*)(cublasHandle_t handle), required, "cublasDestroy_v2")                            \
  X(cublasSetStream, cublasStatus_t (*)(cublasHandle_t handle, cudaStream_t stream), required, "cublasSetStream_v2")   \
  X(cublasGetVersion, cublasStatus_t (*)(cublasHandle_t handle, int* version), required, "cublasGetVersion_v2")        \
  X(cublasGemmStridedBatchedEx, cublasStatus_t (*)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type, int lda, long long stride_a, const void* b, cudaDataType b_type, int ldb, long long stride_b, const void* beta, void* c, cudaDataType c_type, int ldc, long long stride_c, int batch_count, cublasComputeType_t compute_type, cublasGemmAlgo_t algorithm), required) \
  /* The version without a handle. */                                                                                  \
  X(cublasGetProperty, cublasStatus_t (*)(libraryPropertyType type, int* value), optional)                             \
  X(cublasGetStatusString, const char* (*)(cublasStatus_t status), optional)

struct CublasApi {
  HAL_SYMBOL_FIELDS(HAL_CUBLAS_FUNCTIONS)
};

class Cublas : public VendorLibrary {
 public:
  // configured: the backend option `cublas` (HAL_CUBLAS sets it).
  static LoadResult<Cublas> load(const ConfiguredPath& configured);

  const CublasApi& api() const { return api_; }
  // "13.0.2" from cublasGetProperty; "" when the library lacks it.
  std::string version() const;
  // "CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is not supported)" or the number.
  std::string describe(cublasStatus_t status) const;

 private:
  CublasApi api_;
};

}  // namespace hal::shims
