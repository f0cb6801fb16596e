// Attention on a GPU backend (CUDA, ROCm), written once: flash through the
// launch plan of backends/gpu/kernels, math as batched f32 GEMMs around the
// small kernels of backends/gpu/kernels/math_attention.cu, fused through a
// vendor library's FusedAttention. It reaches the vendor API through a
// GpuPlatform (how to launch a kernel, allocate scratch, multiply matrices),
// which VendorPlatform<V> implements once over a backend's Vendor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "attention_kernels.h"
#include "device_description.hpp"
#include "fused_attention.hpp"
#include "hal/backend_abi.h"
#include "math_attention_layout.h"

namespace hal::backend {

struct GpuDeviceLimits {
  std::uint32_t max_shared_bytes_per_block = 0;  // the opt-in maximum where the API has one
  std::uint32_t warp_size = 0;
  // The optional flash kernels (HAL_FLASH_PATH_*) in the platform's kernel
  // image: what was compiled for it, not what the warp width suggests.
  std::uint32_t flash_paths = 0;
};

// Row-major f32 C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C,
// `batch` times with element strides between the matrices. `transpose_a`
// means A is stored [k, m]; leading dimensions are the stored row lengths.
struct StridedBatchedGemm {
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::uint64_t a = 0, b = 0, c = 0;  // device addresses
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::int64_t batch = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// What the engine needs from a vendor API, made from the backend's Vendor by
// VendorPlatform<V> (gpu_plugin.hpp). Every call names the device by the
// backend's index; streams and tensors are the backend's own handles.
class GpuPlatform {
 public:
  virtual ~GpuPlatform() = default;
  virtual std::string backend_name() const = 0;  // "cuda", "ppu", "rocm": prefixes messages
  virtual std::uint32_t device_count() const = 0;
  // Why the device can never have the embedded kernels, known without
  // loading them (which needs its context); empty when they may load.
  virtual std::string kernels_missing(std::uint32_t device) const = 0;
  // Empty when the device loaded the embedded kernels (loading them the
  // first time it is asked); otherwise why not (the driver's own error where
  // it gave one).
  virtual std::string kernels_unusable(std::uint32_t device) const = 0;
  virtual GpuDeviceLimits limits(std::uint32_t device) const = 0;
  virtual std::uint32_t stream_device(hal_stream* stream) const = 0;
  // Launches the named kernel of the device's loaded image with `arguments`
  // as its only by-value parameter.
  virtual hal_status launch(hal_stream* stream, const hal_kernel_launch& launch, const void* arguments,
                            std::size_t argument_bytes) = 0;
  // Stream-ordered where the API allows it; otherwise synchronous.
  virtual hal_status allocate_workspace(hal_stream* stream, std::uint64_t bytes, std::uint64_t* address) = 0;
  virtual hal_status free_workspace(hal_stream* stream, std::uint64_t address) = 0;
  // The device address of a tensor (buffer address + offset); fails for a
  // null buffer or one of another device.
  virtual hal_status device_address(hal_stream* stream, const hal_tensor_ref_v1& tensor, std::uint64_t* address) = 0;
  // After work on the stream used the tensor: imported memory is released only once that work has passed.
  virtual hal_status note_use(hal_stream* stream, const hal_tensor_ref_v1& tensor) = 0;
  // Empty when strided_batched_gemm can run on the device; otherwise why not.
  virtual std::string gemm_unavailable(std::uint32_t device) const = 0;
  virtual hal_status strided_batched_gemm(hal_stream* stream, const StridedBatchedGemm& gemm) = 0;
  // The vendor's fused attention, or null with fused_unavailable() saying why.
  virtual FusedAttention* fused_attention() = 0;
  virtual std::string fused_unavailable() const = 0;
};

class GpuAttention {
 public:
  explicit GpuAttention(std::unique_ptr<GpuPlatform> platform) : platform_(std::move(platform)) {}

  // Reasons, one per line; empty when eligible.
  std::string supports(std::uint32_t device, hal_attention_implementation implementation,
                       const hal_attention_params_v1& params, bool backward) const;
  hal_status workspace_size(std::uint32_t device, hal_attention_implementation implementation,
                            const hal_attention_params_v1& params, bool backward, std::uint64_t* bytes) const;
  hal_status run(hal_stream* stream, hal_attention_implementation implementation, const hal_attention_params_v1& params,
                 const AttentionAddresses& tensors, bool backward);
  // attention.flash / .math / .fused for the device, with what decided them.
  void describe(std::uint32_t device, DeviceDescription& description) const;

  GpuPlatform& platform() { return *platform_; }

 private:
  std::string flash_reasons(std::uint32_t device, const hal_attention_params_v1& params, bool backward) const;
  std::string math_reasons(std::uint32_t device, const hal_attention_params_v1& params, bool backward) const;
  hal_status run_flash(hal_stream* stream, const hal_attention_params_v1& params, const AttentionAddresses& tensors,
                       bool backward);
  hal_status run_math(hal_stream* stream, const hal_attention_params_v1& params, const AttentionAddresses& tensors,
                      bool backward);
  hal_status run_math_steps(hal_stream* stream, const hal_attention_params_v1& params,
                            const hal_attention_kernel_args& args, const hal_math_attention_layout& layout,
                            bool backward);
  std::unique_ptr<GpuPlatform> platform_;
};

// Resolves the tensors of a call to device addresses (0 for a null buffer
// where the tensor is optional) and runs the engine; the C entry points of
// a backend's attention table, given how to find its engine.
template <GpuAttention* (*FromContext)(hal_backend_context*), GpuAttention* (*FromStream)(hal_stream*)>
struct GpuAttentionTable {
  static hal_status supports(hal_backend_context* context, std::uint32_t device,
                             hal_attention_implementation implementation, const hal_attention_params_v1* params,
                             std::int32_t backward, char* reasons, std::size_t capacity);
  static hal_status workspace_size(hal_backend_context* context, std::uint32_t device,
                                   hal_attention_implementation implementation, const hal_attention_params_v1* params,
                                   std::int32_t backward, std::uint64_t* bytes);
  static hal_status forward(hal_stream* stream, const hal_attention_call_v1* call);
  static hal_status backward(hal_stream* stream, const hal_attention_call_v1* call);
  static constexpr hal_attention_v3 table{sizeof(hal_attention_v3), supports, workspace_size, forward, backward};
};

// The non-template parts of the table entries.
namespace gpu_attention_entry {
hal_status supports(GpuAttention* engine, std::uint32_t device, hal_attention_implementation implementation,
                    const hal_attention_params_v1* params, bool backward, char* reasons, std::size_t capacity);
hal_status workspace_size(GpuAttention* engine, std::uint32_t device, hal_attention_implementation implementation,
                          const hal_attention_params_v1* params, bool backward, std::uint64_t* bytes);
hal_status run(GpuAttention* engine, hal_stream* stream, const hal_attention_call_v1* call, bool backward);
}  // namespace gpu_attention_entry

template <GpuAttention* (*C)(hal_backend_context*), GpuAttention* (*S)(hal_stream*)>
hal_status GpuAttentionTable<C, S>::supports(hal_backend_context* context, std::uint32_t device,
                                             hal_attention_implementation implementation,
                                             const hal_attention_params_v1* params, std::int32_t backward,
                                             char* reasons, std::size_t capacity) {
  return gpu_attention_entry::supports(context == nullptr ? nullptr : C(context), device, implementation, params,
                                       backward != 0, reasons, capacity);
}

template <GpuAttention* (*C)(hal_backend_context*), GpuAttention* (*S)(hal_stream*)>
hal_status GpuAttentionTable<C, S>::workspace_size(hal_backend_context* context, std::uint32_t device,
                                                   hal_attention_implementation implementation,
                                                   const hal_attention_params_v1* params, std::int32_t backward,
                                                   std::uint64_t* bytes) {
  return gpu_attention_entry::workspace_size(context == nullptr ? nullptr : C(context), device, implementation, params,
                                             backward != 0, bytes);
}

template <GpuAttention* (*C)(hal_backend_context*), GpuAttention* (*S)(hal_stream*)>
hal_status GpuAttentionTable<C, S>::forward(hal_stream* stream, const hal_attention_call_v1* call) {
  return gpu_attention_entry::run(stream == nullptr ? nullptr : S(stream), stream, call, false);
}

template <GpuAttention* (*C)(hal_backend_context*), GpuAttention* (*S)(hal_stream*)>
hal_status GpuAttentionTable<C, S>::backward(hal_stream* stream, const hal_attention_call_v1* call) {
  return gpu_attention_entry::run(stream == nullptr ? nullptr : S(stream), stream, call, true);
}

}  // namespace hal::backend
