#include "gpu_attention.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "attention_contract.hpp"
#include "last_error.hpp"
#include "math_attention_layout.h"

namespace hal::backend {
namespace {

constexpr std::int64_t int32_max = std::numeric_limits<std::int32_t>::max();
constexpr std::uint32_t row_threads = 128;  // HAL_MATH_ROW_THREADS in math_attention.cu
constexpr std::uint32_t copy_threads = 256;
constexpr std::uint32_t max_copy_blocks = 65535;

const char* implementation_name(hal_attention_implementation implementation) {
  switch (implementation) {
    case HAL_ATTENTION_FUSED: return "fused";
    case HAL_ATTENTION_FLASH: return "flash";
    case HAL_ATTENTION_MATH: return "math";
  }
  return "unknown";
}

void add_line(std::string& lines, const std::string& line) {
  if (!lines.empty()) lines += '\n';
  lines += line;
}

std::string join_lines(const std::string& lines, const char* separator) {
  std::string joined = lines;
  for (std::size_t at = joined.find('\n'); at != std::string::npos; at = joined.find('\n', at))
    joined.replace(at, 1, separator);
  return joined;
}

// What the kernels' argument struct cannot carry, and what no GPU path takes.
// libhal checked the call (hal/abi/attention_contract.hpp); these are the GPU
// kernels' own limits.
std::string parameter_reasons(const hal_attention_params_v1& params, bool backward) {
  std::string reasons;
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"batch", params.batch},           {"heads_q", params.heads_q},         {"heads_kv", params.heads_kv},
      {"seq_q", params.seq_q},           {"seq_kv", params.seq_kv},           {"head_dim_qk", params.head_dim_qk},
      {"head_dim_v", params.head_dim_v}, {"window_left", params.window_left}, {"window_right", params.window_right}};
  for (const auto& [name, value] : sizes)
    if (value > int32_max)
      add_line(reasons, std::string(name) + " " + std::to_string(value) + " exceeds the kernels' 32-bit limit (" +
                            std::to_string(int32_max) + ")");
  for (const abi::AttentionTensor tensor : abi::strided_attention_tensors(backward))
    if (const std::int64_t stride = abi::attention_strides(params, tensor).dim; stride != 1)
      add_line(reasons, std::string(abi::attention_tensor_name(tensor)) + " has dim stride " + std::to_string(stride) +
                            "; the GPU kernels need the head dimension contiguous (stride 1)");
  return reasons;
}

hal_kernel_tensor kernel_tensor(std::uint64_t address, const hal_tensor_strides_v1& strides) {
  return {address, strides.batch, strides.head, strides.seq};
}

// Call only when parameter_reasons is empty: every value fits.
hal_attention_kernel_args kernel_args(const hal_attention_params_v1& params, const AttentionAddresses& tensors) {
  hal_attention_kernel_args args{};
  args.q = kernel_tensor(tensors.q, params.q_strides);
  args.k = kernel_tensor(tensors.k, params.k_strides);
  args.v = kernel_tensor(tensors.v, params.v_strides);
  args.o = kernel_tensor(tensors.o, params.o_strides);
  args.grad_o = kernel_tensor(tensors.grad_o, params.grad_o_strides);
  args.grad_q = kernel_tensor(tensors.grad_q, params.grad_q_strides);
  args.grad_k = kernel_tensor(tensors.grad_k, params.grad_k_strides);
  args.grad_v = kernel_tensor(tensors.grad_v, params.grad_v_strides);
  args.lse = tensors.lse;
  args.key_ranges = tensors.key_ranges;
  args.dtype = static_cast<std::int32_t>(params.dtype);
  args.batch = static_cast<std::int32_t>(params.batch);
  args.heads_q = static_cast<std::int32_t>(params.heads_q);
  args.heads_kv = static_cast<std::int32_t>(params.heads_kv);
  args.seq_q = static_cast<std::int32_t>(params.seq_q);
  args.seq_kv = static_cast<std::int32_t>(params.seq_kv);
  args.head_dim_qk = static_cast<std::int32_t>(params.head_dim_qk);
  args.head_dim_v = static_cast<std::int32_t>(params.head_dim_v);
  args.causal = params.causal != 0 ? 1 : 0;
  args.window_left = static_cast<std::int32_t>(params.window_left);
  args.window_right = static_cast<std::int32_t>(params.window_right);
  args.mask_offset =
      params.alignment == HAL_MASK_BOTTOM_RIGHT ? static_cast<std::int32_t>(params.seq_kv - params.seq_q) : 0;
  args.scale = params.softmax_scale;
  return args;
}

// The plan for a shape, before there are tensors: it checks that the
// tensors are present, and their addresses change nothing else.
hal_kernel_plan flash_plan(const GpuPlatform& platform, std::uint32_t device, const hal_attention_params_v1& params,
                           bool backward) {
  constexpr std::uint64_t placeholder = 4096;
  AttentionAddresses present;
  present.q = present.k = present.v = present.o = present.lse = placeholder;
  present.grad_o = present.grad_q = present.grad_k = present.grad_v = placeholder;
  hal_kernel_plan plan{};
  const hal_attention_kernel_args args = kernel_args(params, present);
  const GpuDeviceLimits limits = platform.limits(device);
  hal_flash_attention_plan(&args, backward ? 1 : 0, limits.max_shared_bytes_per_block, limits.warp_size,
                           limits.flash_paths, &plan);
  return plan;
}

// The GEMMs' sizes: query rows of one key/value head's group, and how many such matrices.
struct MathShape {
  std::int64_t group_rows = 0;  // heads_q / heads_kv * seq_q
  std::int64_t matrices = 0;    // batch * heads_kv
};

MathShape math_shape(const hal_attention_params_v1& params) {
  return {params.heads_q / params.heads_kv * params.seq_q, params.batch * params.heads_kv};
}

std::uint64_t math_workspace_bytes(const hal_attention_params_v1& params, bool backward) {
  const hal_attention_kernel_args args = kernel_args(params, {});
  return static_cast<std::uint64_t>(hal_math_attention_layout_of(&args, backward ? 1 : 0).total) * sizeof(float);
}

hal_kernel_launch copy_launch(const char* kernel, std::int64_t elements) {
  const std::int64_t blocks =
      std::clamp<std::int64_t>((elements + copy_threads - 1) / copy_threads, 1, max_copy_blocks);
  return {kernel, {static_cast<std::uint32_t>(blocks), 1, 1}, {copy_threads, 1, 1}, 0};
}

hal_kernel_launch row_launch(const char* kernel, std::int64_t rows) {
  return {kernel, {static_cast<std::uint32_t>(rows), 1, 1}, {row_threads, 1, 1}, 0};
}

// Runs work(address) with `bytes` of device scratch (address 0 when none):
// the caller's when it gave some, else allocated here and freed
// stream-ordered after it on every path; a failed work's error wins over a
// failed release.
template <typename Work>
hal_status with_workspace(GpuPlatform& platform, hal_stream* stream, std::uint64_t bytes,
                          const AttentionAddresses& tensors, Work&& work) {
  if (tensors.workspace != 0) {
    if (tensors.workspace_bytes < bytes)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "the caller's attention workspace holds " +
                                                  std::to_string(tensors.workspace_bytes) + " bytes; this call needs " +
                                                  std::to_string(bytes) + " (ask workspace_size)");
    return work(tensors.workspace);
  }
  std::uint64_t address = 0;
  if (bytes != 0)
    if (hal_status status = platform.allocate_workspace(stream, bytes, &address); status != HAL_OK) return status;
  const hal_status status = work(address);
  if (address == 0) return status;
  if (status == HAL_OK) return platform.free_workspace(stream, address);
  hal_error_info_v1 error{};
  error.struct_size = sizeof(error);
  read_last_error(&error);
  const std::string message = error.message != nullptr ? error.message : "";
  const std::int64_t native_code = error.native_code;
  platform.free_workspace(stream, address);
  return fail(status, message, native_code);
}

}  // namespace

std::string GpuAttention::flash_reasons(std::uint32_t device, const hal_attention_params_v1& params,
                                        bool backward) const {
  std::string reasons;
  if (std::string kernels = platform_->kernels_unusable(device); !kernels.empty())
    add_line(reasons, "no usable kernels on this device: " + kernels);
  const std::string parameters = parameter_reasons(params, backward);
  if (!parameters.empty()) {
    add_line(reasons, parameters);
    return reasons;  // the plan cannot be asked about values it cannot hold
  }
  const hal_kernel_plan plan = flash_plan(*platform_, device, params, backward);
  if (plan.launch_count == 0)
    add_line(reasons, plan.why_not[0] != '\0' ? std::string(plan.why_not, strnlen(plan.why_not, sizeof(plan.why_not)))
                                              : "the flash launch plan has no launch for these params");
  return reasons;
}

std::string GpuAttention::math_reasons(std::uint32_t device, const hal_attention_params_v1& params,
                                       bool backward) const {
  std::string reasons;
  if (std::string kernels = platform_->kernels_unusable(device); !kernels.empty())
    add_line(reasons, "no usable kernels on this device: " + kernels);
  if (std::string gemm = platform_->gemm_unavailable(device); !gemm.empty()) add_line(reasons, gemm);
  const std::string parameters = parameter_reasons(params, backward);
  if (!parameters.empty()) {
    add_line(reasons, parameters);
    return reasons;
  }
  const MathShape shape = math_shape(params);
  if (shape.group_rows > int32_max || shape.matrices > int32_max ||
      params.batch * params.heads_q * params.seq_q > int32_max)
    add_line(reasons, "heads_q / heads_kv * seq_q = " + std::to_string(shape.group_rows) +
                          " and batch * heads_kv = " + std::to_string(shape.matrices) +
                          " must fit the GEMMs' 32-bit sizes, and batch * heads_q * "
                          "seq_q the softmax grid; use flash for this shape");
  return reasons;
}

std::string GpuAttention::supports(std::uint32_t device, hal_attention_implementation implementation,
                                   const hal_attention_params_v1& params, bool backward) const {
  switch (implementation) {
    case HAL_ATTENTION_FLASH: return flash_reasons(device, params, backward);
    case HAL_ATTENTION_MATH: return math_reasons(device, params, backward);
    case HAL_ATTENTION_FUSED: {
      FusedAttention* fused = platform_->fused_attention();
      if (fused == nullptr) return "not available (" + platform_->fused_unavailable() + ")";
      if (std::string why = fused->unavailable(); !why.empty()) return "not available (" + why + ")";
      if (hal_attention_key_ranges(&params) != 0)
        return "per-query key ranges are not passed to the vendor's fused attention (its padding masks are not "
               "wired in); flash and math take them";
      return fused->supports(device, params, backward);
    }
  }
  return "unknown attention implementation " + std::to_string(static_cast<int>(implementation)) +
         "; use fused (0), flash (1) or math (2)";
}

hal_status GpuAttention::workspace_size(std::uint32_t device, hal_attention_implementation implementation,
                                        const hal_attention_params_v1& params, bool backward,
                                        std::uint64_t* bytes) const {
  *bytes = 0;
  if (const std::string reasons = supports(device, implementation, params, backward); !reasons.empty())
    return fail(HAL_ERROR_UNSUPPORTED, std::string(platform_->backend_name()) + " " +
                                           implementation_name(implementation) +
                                           " attention cannot run these params: " + join_lines(reasons, "; "));
  switch (implementation) {
    case HAL_ATTENTION_FLASH: *bytes = flash_plan(*platform_, device, params, backward).workspace_bytes; break;
    case HAL_ATTENTION_MATH: *bytes = math_workspace_bytes(params, backward); break;
    case HAL_ATTENTION_FUSED: return platform_->fused_attention()->workspace_size(device, params, backward, bytes);
  }
  return succeed();
}

hal_status GpuAttention::run_flash(hal_stream* stream, const hal_attention_params_v1& params,
                                   const AttentionAddresses& tensors, bool backward) {
  hal_attention_kernel_args args = kernel_args(params, tensors);
  hal_kernel_plan plan{};
  const GpuDeviceLimits limits = platform_->limits(platform_->stream_device(stream));
  hal_flash_attention_plan(&args, backward ? 1 : 0, limits.max_shared_bytes_per_block, limits.warp_size,
                           limits.flash_paths, &plan);
  if (plan.launch_count == 0 || plan.launch_count > HAL_KERNEL_PLAN_MAX_LAUNCHES)
    return fail(HAL_ERROR_UNSUPPORTED, std::string(platform_->backend_name()) + " flash attention: " +
                                           (plan.why_not[0] != '\0' ? plan.why_not : "the plan has no launches"));
  return with_workspace(*platform_, stream, plan.workspace_bytes, tensors, [&](std::uint64_t workspace) {
    args.workspace = workspace;
    for (std::uint32_t i = 0; i < plan.launch_count; ++i)
      if (hal_status status = platform_->launch(stream, plan.launches[i], &args, sizeof(args)); status != HAL_OK)
        return status;
    return succeed();
  });
}

hal_status GpuAttention::run_math(hal_stream* stream, const hal_attention_params_v1& params,
                                  const AttentionAddresses& tensors, bool backward) {
  hal_attention_kernel_args args = kernel_args(params, tensors);
  if (!backward) args.grad_o.address = 0;  // the kernels tell forward from backward by it
  const hal_math_attention_layout layout = hal_math_attention_layout_of(&args, backward ? 1 : 0);
  const std::uint64_t bytes = static_cast<std::uint64_t>(layout.total) * sizeof(float);
  return with_workspace(*platform_, stream, bytes, tensors, [&](std::uint64_t workspace) {
    args.workspace = workspace;
    return run_math_steps(stream, params, args, layout, backward);
  });
}

hal_status GpuAttention::run_math_steps(hal_stream* stream, const hal_attention_params_v1& params,
                                        const hal_attention_kernel_args& args, const hal_math_attention_layout& layout,
                                        bool backward) {
  auto at = [&](std::int64_t offset) { return args.workspace + static_cast<std::uint64_t>(offset) * sizeof(float); };
  auto launch = [&](const hal_kernel_launch& kernel) { return platform_->launch(stream, kernel, &args, sizeof(args)); };

  const MathShape shape = math_shape(params);
  const std::int64_t rows = shape.group_rows, keys = params.seq_kv, dqk = params.head_dim_qk, dv = params.head_dim_v;
  const std::int64_t query_rows = params.batch * params.heads_q * params.seq_q;
  const std::int64_t key_rows = params.batch * params.heads_kv * params.seq_kv;
  // Row-major GEMM over the batch * heads_kv matrices; strides are one matrix.
  auto gemm = [&](bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t a,
                  std::int64_t a_rows, std::int64_t a_columns, std::int64_t b, std::int64_t b_rows,
                  std::int64_t b_columns, std::int64_t c, float alpha) {
    StridedBatchedGemm g;
    g.transpose_a = transpose_a;
    g.transpose_b = transpose_b;
    g.m = m, g.n = n, g.k = k;
    g.a = at(a), g.b = at(b), g.c = at(c);
    g.lda = a_columns, g.ldb = b_columns, g.ldc = n;
    g.stride_a = a_rows * a_columns, g.stride_b = b_rows * b_columns, g.stride_c = m * n;
    g.batch = shape.matrices;
    g.alpha = alpha;
    return platform_->strided_batched_gemm(stream, g);
  };

  std::int64_t packed = query_rows * dqk + key_rows * (dqk + dv) + (backward ? query_rows * dv : 0);
  if (hal_status s = launch(copy_launch("hal_math_attention_pack_inputs", packed)); s != HAL_OK) return s;
  // S = Q K^T (unscaled; the softmax kernel scales and masks).
  if (hal_status s = gemm(false, true, rows, keys, dqk, layout.q, rows, dqk, layout.k, keys, dqk, layout.scores, 1.0f);
      s != HAL_OK)
    return s;
  if (hal_status s = launch(row_launch("hal_math_attention_softmax_forward", query_rows)); s != HAL_OK) return s;
  if (!backward) {
    // O = P V
    if (hal_status s =
            gemm(false, false, rows, dv, keys, layout.scores, rows, keys, layout.v, keys, dv, layout.o_or_grad_o, 1.0f);
        s != HAL_OK)
      return s;
    return launch(copy_launch("hal_math_attention_store_outputs", query_rows * dv));
  }
  // dP = dO V^T, then dS = P * (dP - rowsum(dP * P)) in place.
  if (hal_status s =
          gemm(false, true, rows, keys, dv, layout.o_or_grad_o, rows, dv, layout.v, keys, dv, layout.grad_scores, 1.0f);
      s != HAL_OK)
    return s;
  if (hal_status s = launch(row_launch("hal_math_attention_softmax_backward", query_rows)); s != HAL_OK) return s;
  // dV = P^T dO; dQ = scale dS K; dK = scale dS^T Q. The sums over a group's
  // query heads fall out of the packed layout.
  if (hal_status s = gemm(true, false, keys, dv, rows, layout.scores, rows, keys, layout.o_or_grad_o, rows, dv,
                          layout.grad_v, 1.0f);
      s != HAL_OK)
    return s;
  if (hal_status s = gemm(false, false, rows, dqk, keys, layout.grad_scores, rows, keys, layout.k, keys, dqk,
                          layout.grad_q, params.softmax_scale);
      s != HAL_OK)
    return s;
  if (hal_status s = gemm(true, false, keys, dqk, rows, layout.grad_scores, rows, keys, layout.q, rows, dqk,
                          layout.grad_k, params.softmax_scale);
      s != HAL_OK)
    return s;
  return launch(copy_launch("hal_math_attention_store_outputs", query_rows * dqk + key_rows * (dqk + dv)));
}

hal_status GpuAttention::run(hal_stream* stream, hal_attention_implementation implementation,
                             const hal_attention_params_v1& params, const AttentionAddresses& tensors, bool backward) {
  switch (implementation) {
    case HAL_ATTENTION_FLASH: return run_flash(stream, params, tensors, backward);
    case HAL_ATTENTION_MATH: return run_math(stream, params, tensors, backward);
    case HAL_ATTENTION_FUSED:
      return backward ? platform_->fused_attention()->backward(stream, params, tensors)
                      : platform_->fused_attention()->forward(stream, params, tensors);
  }
  return fail(HAL_ERROR_INVALID_ARGUMENT, "unknown attention implementation");
}

// Declared at discovery, which loads no kernels: what needs them is claimed
// when they may load, and supports() refuses once loading them failed.
void GpuAttention::describe(std::uint32_t device, DeviceDescription& description) const {
  const std::string kernels = platform_->kernels_missing(device);
  const std::string no_kernels = "no usable kernels on this device: " + kernels;
  if (!kernels.empty())
    description.add_bool("attention.flash", false, no_kernels);
  else
    description.add_bool("attention.flash", true,
                         "the flash kernels of backends/gpu/kernels; supports() gives the limits of each shape");
  description.add_bool("attention.borrowed_addresses", true,
                       "attention takes device addresses it did not allocate (a framework's tensors)");
  description.add_bool("attention.key_ranges", true,
                       "per-query key ranges (padding, packed sequences) in the flash and math kernels");

  const std::string gemm = platform_->gemm_unavailable(device);
  if (!kernels.empty() || !gemm.empty()) {
    std::string why = kernels.empty() ? std::string() : no_kernels;
    if (!gemm.empty()) why += (why.empty() ? "" : "; ") + gemm;
    description.add_bool("attention.math", false, why);
  } else {
    description.add_bool("attention.math", true,
                         "batched f32 GEMMs with the softmax kernels of backends/gpu/kernels (scores materialized)");
  }

  FusedAttention* fused = const_cast<GpuPlatform&>(*platform_).fused_attention();
  if (fused == nullptr)
    description.add_bool("attention.fused", false, "not available (" + platform_->fused_unavailable() + ")");
  else if (const std::string why = fused->unavailable(); !why.empty())
    description.add_bool("attention.fused", false, "not available (" + why + ")");
  else
    description.add_bool("attention.fused", true, "the vendor library's fused attention; supports() gives its limits");
}

namespace gpu_attention_entry {
namespace {

void write_reasons(const std::string& reasons, char* text, std::size_t capacity) {
  if (text == nullptr || capacity == 0) return;
  const std::size_t length = std::min(reasons.size(), capacity - 1);
  std::memcpy(text, reasons.data(), length);
  text[length] = '\0';
}

hal_status check_call(GpuAttention* engine, std::uint32_t device, const hal_attention_params_v1* params,
                      const char* what) {
  if (engine == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + " needs the backend context");
  if (params == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + " needs params");
  const std::uint32_t count = engine->platform().device_count();
  if (device >= count)
    return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + ": device " + std::to_string(device) +
                                                " does not exist (the backend has " + std::to_string(count) + ")");
  return HAL_OK;
}

}  // namespace

hal_status supports(GpuAttention* engine, std::uint32_t device, hal_attention_implementation implementation,
                    const hal_attention_params_v1* params, bool backward, char* reasons, std::size_t capacity) {
  if (hal_status status = check_call(engine, device, params, "attention supports"); status != HAL_OK) return status;
  try {
    write_reasons(engine->supports(device, implementation, *params, backward), reasons, capacity);
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, "out of host memory while checking attention support");
  }
  return succeed();
}

hal_status workspace_size(GpuAttention* engine, std::uint32_t device, hal_attention_implementation implementation,
                          const hal_attention_params_v1* params, bool backward, std::uint64_t* bytes) {
  if (hal_status status = check_call(engine, device, params, "attention workspace_size"); status != HAL_OK)
    return status;
  if (bytes == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "attention workspace_size needs out");
  try {
    return engine->workspace_size(device, implementation, *params, backward, bytes);
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, "out of host memory while sizing the attention workspace");
  }
}

hal_status run(GpuAttention* engine, hal_stream* stream, const hal_attention_call_v1* call, bool backward) {
  const char* what = backward ? "attention backward" : "attention forward";
  if (stream == nullptr || engine == nullptr || call == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + " needs a stream and a call");
  GpuPlatform& platform = engine->platform();
  const std::uint32_t device = platform.stream_device(stream);
  const hal_attention_params_v1* params = call->params;
  if (hal_status status = check_call(engine, device, params, what); status != HAL_OK) return status;
  const hal_attention_implementation implementation = call->implementation;
  const hal_tensor_ref_v1* tensors = call->tensors;
  const bool ranges = hal_attention_key_ranges(params) != 0;
  const std::size_t expected = hal_attention_tensor_count(params, backward ? 1 : 0);
  if (tensors == nullptr || call->tensor_count != expected)
    return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + (ranges ? " with key ranges" : "") + " takes " +
                                                std::to_string(expected) + " tensors, not " +
                                                std::to_string(call->tensor_count));
  try {
    if (const std::string reasons = engine->supports(device, implementation, *params, backward); !reasons.empty())
      return fail(HAL_ERROR_UNSUPPORTED, std::string(platform.backend_name()) + " " +
                                             implementation_name(implementation) + " " + what +
                                             " cannot run these params: " + join_lines(reasons, "; "));
    // ABI order: forward q, k, v, o, lse; backward q, k, v, o, grad_o, lse, grad_q, grad_k, grad_v.
    static constexpr const char* forward_names[] = {"q", "k", "v", "o", "lse"};
    static constexpr const char* backward_names[] = {"q", "k", "v", "o", "grad_o", "lse", "grad_q", "grad_k", "grad_v"};
    const char* const* names = backward ? backward_names : forward_names;
    AttentionAddresses addresses;
    std::uint64_t* slots_forward[] = {&addresses.q, &addresses.k, &addresses.v, &addresses.o, &addresses.lse};
    std::uint64_t* slots_backward[] = {&addresses.q,      &addresses.k,      &addresses.v,
                                       &addresses.o,      &addresses.grad_o, &addresses.lse,
                                       &addresses.grad_q, &addresses.grad_k, &addresses.grad_v};
    std::uint64_t* const* slots = backward ? slots_backward : slots_forward;
    if (ranges) {
      const hal_tensor_ref_v1& key_ranges = tensors[expected - 1];
      if (key_ranges.buffer == nullptr && key_ranges.offset == 0)
        return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) +
                                                    ": the params announce key ranges, but their "
                                                    "tensor is empty");
      if (hal_status status = platform.device_address(stream, key_ranges, &addresses.key_ranges); status != HAL_OK)
        return status;
    }
    for (std::size_t i = 0; i < expected - (ranges ? 1u : 0u); ++i) {
      const bool is_lse = std::strcmp(names[i], "lse") == 0;
      // LSE is optional in forward (return_lse 0) and in math backward, which recomputes it.
      const bool optional = is_lse && (!backward ? params->return_lse == 0 : implementation == HAL_ATTENTION_MATH);
      if (tensors[i].buffer == nullptr && tensors[i].offset == 0) {  // no tensor (else a borrowed address)
        if (optional) continue;
        return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(what) + ": tensor " + names[i] + " has no buffer" +
                                                    (is_lse ? " (forward with return_lse needs one; flash and fused "
                                                              "backward read it)"
                                                            : ""));
      }
      if (is_lse && !backward && params->return_lse == 0) continue;
      if (hal_status status = platform.device_address(stream, tensors[i], slots[i]); status != HAL_OK) return status;
    }
    if (call->workspace.buffer != nullptr || call->workspace.offset != 0) {
      if (hal_status status = platform.device_address(stream, call->workspace, &addresses.workspace); status != HAL_OK)
        return status;
      addresses.workspace_bytes = call->workspace_bytes;
    }
    if (hal_status status = engine->run(stream, implementation, *params, addresses, backward); status != HAL_OK)
      return status;
    for (std::size_t i = 0; i < expected; ++i)
      if (hal_status status = platform.note_use(stream, tensors[i]); status != HAL_OK) return status;
    return platform.note_use(stream, call->workspace);
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, std::string("out of host memory in ") + what);
  }
}

}  // namespace gpu_attention_entry
}  // namespace hal::backend
