// The GPU attention engine's math path (backends/gpu/gpu_attention.cpp)
// end to end on the CPU: its launches of the math_attention.cu kernels and
// its strided-batched GEMMs (the ROCm backend's hal_gemm_f32_strided_batched
// kernel in one case, a host GEMM in the others) run in the SIMT emulator, on the cases and f64 reference of
// flash_attention_cases.hpp (GQA, MQA, both causal alignments, windows,
// fully masked rows, odd head dims, strided tensors; f32, f16, bf16). What
// this cannot check: the vendor APIs (cuBLAS, the module loaders), which only
// a GPU run exercises.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "emulated_kernels.hpp"
#include "flash_attention_cases.hpp"
#include "gemm_launch.hpp"
#include "gpu_attention.hpp"
#include "last_error.hpp"

namespace {

namespace backend = hal::backend;

// Host memory is device memory here; streams are never dereferenced.
class EmulatedPlatform final : public backend::GpuPlatform {
 public:
  std::string backend_name() const override { return "simt"; }
  std::uint32_t device_count() const override { return 1; }
  std::string kernels_missing(std::uint32_t) const override { return {}; }
  std::string kernels_unusable(std::uint32_t) const override { return {}; }
  backend::GpuDeviceLimits limits(std::uint32_t) const override { return {64 * 1024, 32}; }
  std::uint32_t stream_device(hal_stream*) const override { return 0; }

  hal_status launch(hal_stream*, const hal_kernel_launch& launch, const void* arguments,
                    std::size_t argument_bytes) override {
    launched.push_back(launch.kernel);
    const std::string name = launch.kernel;
    REQUIRE(argument_bytes == (name == "hal_gemm_f32_strided_batched" ? sizeof(hal_gemm_kernel_args)
                                                                      : sizeof(hal_attention_kernel_args)));
    void* parameters[] = {const_cast<void*>(arguments)};
    const std::string error = hal_simt::run_kernel(
        name, parameters,
        {{launch.grid[0], launch.grid[1], launch.grid[2]}, {launch.block[0], launch.block[1], launch.block[2]},
         launch.shared_bytes});
    return error.empty() ? HAL_OK : backend::fail(HAL_ERROR_INTERNAL, name + ": " + error);
  }

  // NaN-filled, so a kernel that reads scratch it never wrote shows.
  hal_status allocate_workspace(hal_stream*, std::uint64_t bytes, std::uint64_t* address) override {
    workspaces.emplace_back(bytes / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
    largest_workspace = std::max(largest_workspace, bytes);
    *address = reinterpret_cast<std::uint64_t>(workspaces.back().data());
    return HAL_OK;
  }
  hal_status free_workspace(hal_stream*, std::uint64_t) override {
    ++frees;
    return HAL_OK;
  }
  hal_status device_address(hal_stream*, const hal_tensor_ref_v1&, std::uint64_t*) override {
    return backend::fail(HAL_ERROR_INTERNAL, "not used: the test passes addresses");
  }
  hal_status note_use(hal_stream*, const hal_tensor_ref_v1&) override {
    return backend::fail(HAL_ERROR_INTERNAL, "not used: the test passes addresses");
  }
  std::string gemm_unavailable(std::uint32_t) const override { return {}; }
  backend::FusedAttention* fused_attention() override { return nullptr; }
  std::string fused_unavailable() const override { return "the emulated platform has no fused attention"; }

  hal_status strided_batched_gemm(hal_stream* stream, const backend::StridedBatchedGemm& gemm) override {
    ++gemm_count;
    if (!emulate_gemm) return host_gemm(gemm);
    const hal_gemm_kernel_args args = backend::gemm_kernel_arguments(gemm);
    // Fewer z blocks than matrices: the kernel's loop over the rest is exercised too.
    const hal_kernel_launch launch = backend::gemm_kernel_launch(gemm, 2);
    return this->launch(stream, launch, &args, sizeof(args));
  }

  // The same product on the host: the emulated kernel costs a context
  // switch per thread and barrier, so only one case runs it.
  static hal_status host_gemm(const backend::StridedBatchedGemm& gemm) {
    for (std::int64_t matrix = 0; matrix < gemm.batch; ++matrix) {
      const float* a = reinterpret_cast<const float*>(gemm.a) + matrix * gemm.stride_a;
      const float* b = reinterpret_cast<const float*>(gemm.b) + matrix * gemm.stride_b;
      float* c = reinterpret_cast<float*>(gemm.c) + matrix * gemm.stride_c;
      for (std::int64_t row = 0; row < gemm.m; ++row)
        for (std::int64_t column = 0; column < gemm.n; ++column) {
          double sum = 0.0;
          for (std::int64_t i = 0; i < gemm.k; ++i)
            sum += static_cast<double>(gemm.transpose_a ? a[i * gemm.lda + row] : a[row * gemm.lda + i]) *
                   (gemm.transpose_b ? b[column * gemm.ldb + i] : b[i * gemm.ldb + column]);
          float& out = c[row * gemm.ldc + column];
          out = gemm.alpha * static_cast<float>(sum) + (gemm.beta == 0.0f ? 0.0f : gemm.beta * out);
        }
    }
    return HAL_OK;
  }

  bool emulate_gemm = false;
  int gemm_count = 0;
  std::vector<std::string> launched;
  std::vector<std::vector<float>> workspaces;
  std::uint64_t largest_workspace = 0;
  int frees = 0;
};

hal_tensor_strides_v1 strides_of(const hal_kernel_tensor& tensor) {
  return {tensor.batch_stride, tensor.head_stride, tensor.seq_stride, 1};
}

// The ABI params the engine gets for the kernel args a case builds.
hal_attention_params_v1 params_of(const hal_attention_kernel_args& args, bool bottom_right) {
  hal_attention_params_v1 params{};
  params.struct_size = sizeof(params);
  params.batch = args.batch, params.heads_q = args.heads_q, params.heads_kv = args.heads_kv;
  params.seq_q = args.seq_q, params.seq_kv = args.seq_kv;
  params.head_dim_qk = args.head_dim_qk, params.head_dim_v = args.head_dim_v;
  params.dtype = static_cast<hal_dtype>(args.dtype);
  params.causal = args.causal;
  params.alignment = bottom_right ? HAL_MASK_BOTTOM_RIGHT : HAL_MASK_TOP_LEFT;
  params.window_left = args.window_left, params.window_right = args.window_right;
  params.softmax_scale = args.scale;
  params.return_lse = 1;
  params.key_ranges = args.key_ranges != 0 ? 1 : 0;
  params.q_strides = strides_of(args.q), params.k_strides = strides_of(args.k);
  params.v_strides = strides_of(args.v), params.o_strides = strides_of(args.o);
  params.grad_o_strides = strides_of(args.grad_o), params.grad_q_strides = strides_of(args.grad_q);
  params.grad_k_strides = strides_of(args.grad_k), params.grad_v_strides = strides_of(args.grad_v);
  return params;
}

// The cases that cover each feature once: every fiber switch of the
// emulator costs a system call, so all of them would take half a minute.
bool covered(const std::string& name) {
  for (const char* chosen : {"MHA, no mask, f32, d64", "GQA, causal top-left, f16, d128",
                             "MQA, causal bottom-right, bf16, d64",
                             "causal bottom-right, seq_q > seq_kv (masked rows), f32", "sliding window 7/3, f16",
                             "odd head dims 40/72, f32", "key ranges, no band, f32"})
    if (name == chosen) return true;
  return false;
}

}  // namespace

// Every covered shape through the engine's math path; with caller_workspace
// the engine gets the scratch from the call (hal_attention_call_v1.workspace) and must
// allocate none of its own.
void check_math_path(bool caller_workspace) {
  int cases = 0;
  for (const flash_cases::Shape& shape : flash_cases::shapes()) {
    if (!covered(shape.name)) continue;
    ++cases;
    auto owned = std::make_unique<EmulatedPlatform>();
    EmulatedPlatform& platform = *owned;
    platform.emulate_gemm = cases == 1;  // the ROCm GEMM kernel itself, on the first (smallest) case
    backend::GpuAttention engine(std::move(owned));
    hal_stream* stream = reinterpret_cast<hal_stream*>(&platform);  // opaque, never dereferenced
    std::string engine_reasons;
    const flash_cases::RunPlan run = [&](const hal_attention_kernel_args& args, const std::vector<flash_cases::Buffer>&,
                                         bool backward, std::uint32_t, std::string* first_kernel) -> std::string {
      const hal_attention_params_v1 params = params_of(args, shape.bottom_right);
      engine_reasons += engine.supports(0, HAL_ATTENTION_MATH, params, backward);
      backend::AttentionAddresses tensors;
      tensors.q = args.q.address, tensors.k = args.k.address, tensors.v = args.v.address;
      tensors.o = args.o.address, tensors.lse = args.lse, tensors.key_ranges = args.key_ranges;
      if (backward) {
        tensors.grad_o = args.grad_o.address, tensors.grad_q = args.grad_q.address;
        tensors.grad_k = args.grad_k.address, tensors.grad_v = args.grad_v.address;
      }
      std::uint64_t expected_workspace = 0;
      if (engine.workspace_size(0, HAL_ATTENTION_MATH, params, backward, &expected_workspace) != HAL_OK)
        return "workspace_size failed";
      platform.largest_workspace = 0;
      std::vector<float> scratch;  // the caller's, NaN-filled like the platform's
      if (caller_workspace) {
        scratch.assign(expected_workspace / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
        tensors.workspace = reinterpret_cast<std::uint64_t>(scratch.data());
        tensors.workspace_bytes = expected_workspace - 4;  // one float short: refused by name
        if (expected_workspace >= 4 &&
            engine.run(stream, HAL_ATTENTION_MATH, params, tensors, backward) != HAL_ERROR_INVALID_ARGUMENT)
          return "a workspace one float short was not refused";
        tensors.workspace_bytes = expected_workspace;
      }
      const hal_status status = engine.run(stream, HAL_ATTENTION_MATH, params, tensors, backward);
      if (status != HAL_OK) {
        hal_error_info_v1 error{};
        error.struct_size = sizeof(error);
        backend::read_last_error(&error);
        return error.message != nullptr ? error.message : "failed";
      }
      if (!caller_workspace && platform.largest_workspace != expected_workspace)
        return "workspace_size differs from the allocation";
      if (caller_workspace && !platform.workspaces.empty()) return "the engine allocated beside the caller's workspace";
      *first_kernel = "math";
      return "";
    };
    const flash_cases::Result result = flash_cases::run_case(shape, 0, run);
    const std::string summary = result.summary(shape);
    CAPTURE(summary);
    CHECK(engine_reasons.empty());
    REQUIRE(result.error.empty());
    CHECK(result.masked_rows_wrong == 0);
    CHECK(result.passed());
    // Every workspace was released (none was taken with the caller's), and the backward ran its five GEMMs.
    CHECK(platform.frees == (caller_workspace ? 0 : 2));
    CHECK(platform.gemm_count == 2 + 5);
    if (platform.emulate_gemm)
      CHECK(std::count(platform.launched.begin(), platform.launched.end(), "hal_gemm_f32_strided_batched") == 7);
    MESSAGE(summary);
  }
  CHECK(cases == 7);  // the names above still exist
}

TEST_CASE("the math attention path matches an f64 reference in the SIMT emulator") { check_math_path(false); }

TEST_CASE("in the caller's workspace the math path allocates nothing and still matches the reference") {
  check_math_path(true);
}
