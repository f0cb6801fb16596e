// A test double of libcublas.so.13 (see README.md): the handful of calls the
// CUDA backend makes, with cuBLAS's argument checks, the GEMM computed on
// the host in the handle's stream order through the loaded driver's
// cuLaunchHostFunc (the fake driver's, in the tests).
#include <cublas_api.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstring>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

using LaunchHostFunc = CUresult (*)(CUstream, CUhostFn, void*);

// The driver the process already loaded; cuBLAS has no use without one.
LaunchHostFunc driver_launch_host_func() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return nullptr;
  auto* function = reinterpret_cast<LaunchHostFunc>(dlsym(driver, "cuLaunchHostFunc"));
  dlclose(driver);  // the NOLOAD reference only; the process's own stays
  return function;
}

// One strided-batched single-precision GEMM, column-major as cuBLAS is.
struct Gemm {
  bool transpose_a = false, transpose_b = false, tf32 = false;
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, batch = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 0.0f, beta = 0.0f;
  const float* a = nullptr;
  const float* b = nullptr;
  float* c = nullptr;
};

// TF32 keeps 10 mantissa bits of each input (round to nearest even).
float to_tf32(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0xfffu + ((bits >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&value, &bits, 4);
  return value;
}

void run_gemm(void* data) {
  auto* gemm = static_cast<Gemm*>(data);
  auto input = [&](float value) { return gemm->tf32 ? to_tf32(value) : value; };
  for (int matrix = 0; matrix < gemm->batch; ++matrix) {
    const float* a = gemm->a + matrix * gemm->stride_a;
    const float* b = gemm->b + matrix * gemm->stride_b;
    float* c = gemm->c + matrix * gemm->stride_c;
    for (int column = 0; column < gemm->n; ++column)
      for (int row = 0; row < gemm->m; ++row) {
        float sum = 0.0f;
        for (int i = 0; i < gemm->k; ++i) {
          const float left = gemm->transpose_a ? a[row * gemm->lda + i] : a[i * gemm->lda + row];
          const float right = gemm->transpose_b ? b[i * gemm->ldb + column] : b[column * gemm->ldb + i];
          sum += input(left) * input(right);
        }
        float& out = c[column * gemm->ldc + row];
        // beta == 0 never reads C, so uninitialized (NaN) output is overwritten, as cuBLAS does.
        out = gemm->alpha * sum + (gemm->beta == 0.0f ? 0.0f : gemm->beta * out);
      }
  }
  delete gemm;
}

}  // namespace

FAKE_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (driver_launch_host_func() == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = 130000;
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = 13; break;
    case MINOR_VERSION: *value = 0; break;
    case PATCH_LEVEL: *value = 0; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

FAKE_EXPORT const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown error";
  }
}

// f32 in and out with f32 (or TF32) compute, host-pointer alpha and beta;
// other types are CUBLAS_STATUS_NOT_SUPPORTED here.
FAKE_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                      const void* a, cudaDataType a_type, int lda, long long stride_a,
                                                      const void* b, cudaDataType b_type, int ldb, long long stride_b,
                                                      const void* beta, void* c, cudaDataType c_type, int ldc,
                                                      long long stride_c, int batch_count,
                                                      cublasComputeType_t compute_type, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto valid_operation = [](cublasOperation_t operation) { return operation == CUBLAS_OP_N || operation == CUBLAS_OP_T; };
  const bool transpose_a = transa == CUBLAS_OP_T, transpose_b = transb == CUBLAS_OP_T;
  auto at_least = [](int value) { return value > 1 ? value : 1; };
  if (!valid_operation(transa) || !valid_operation(transb) || m < 0 || n < 0 || k < 0 || batch_count < 0 ||
      lda < at_least(transpose_a ? k : m) || ldb < at_least(transpose_b ? n : k) || ldc < at_least(m) ||
      alpha == nullptr || beta == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a_type != CUDA_R_32F || b_type != CUDA_R_32F || c_type != CUDA_R_32F ||
      (compute_type != CUBLAS_COMPUTE_32F && compute_type != CUBLAS_COMPUTE_32F_FAST_TF32))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  const LaunchHostFunc launch = driver_launch_host_func();
  if (launch == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* gemm = new Gemm{transpose_a, transpose_b, compute_type == CUBLAS_COMPUTE_32F_FAST_TF32,
                        m, n, k, lda, ldb, ldc, batch_count, stride_a, stride_b, stride_c,
                        *static_cast<const float*>(alpha), *static_cast<const float*>(beta),
                        static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(c)};
  if (launch(reinterpret_cast<CUstream>(handle->stream), run_gemm, gemm) != CUDA_SUCCESS) {
    delete gemm;
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}
