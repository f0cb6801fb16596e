// cuDNN's fused attention through the cuDNN frontend's SDPA graph. The only
// file that includes the frontend (it is slow to compile). cuDNN decides what
// it supports: each shape's graph is built, checked and planned by cuDNN
// itself, and its own message is the reason when it cannot.
#include "cudnn_attention.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attention_contract.hpp"
#include "cuda_backend.hpp"
#include "dtype_codes.hpp"

#if HAL_WITH_CUDNN_FRONTEND
#include <cudnn_frontend.h>

// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: the frontend resolves every cuDNN
// function with dlsym on this handle and keeps the pointers for the life of
// the process. It is the frontend's own global; it is set once to the cuDNN
// the shim opened (which is never unloaded), see bind_frontend().
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace hal::cuda {
namespace {

#if HAL_WITH_CUDNN_FRONTEND

// Reasons that need no cuDNN call: what cuDNN's SDPA never takes.
std::string reasons_before_cudnn(const hal_attention_params_v1& params, bool backward, std::size_t cudnn_version) {
  std::string reasons;
  auto add = [&](const std::string& reason) { shims::append_listed(reasons, reason, "\n"); };
  if (params.dtype == HAL_DTYPE_F32)
    add("dtype f32: cuDNN's fused attention takes f16 or bf16 only (flash and math take f32)");
  else if (params.dtype != HAL_DTYPE_F16 && params.dtype != HAL_DTYPE_BF16)
    add(std::string("dtype ") + abi::dtype_name(params.dtype) + " is not f16 or bf16, the types cuDNN's fused attention takes");
  for (const auto& [name, value] : {std::pair{"head_dim_qk", params.head_dim_qk}, {"head_dim_v", params.head_dim_v}})
    if (value % 8 != 0)
      add(std::string(name) + " (" + std::to_string(value) +
          ") is not a multiple of 8, which cuDNN's fused attention needs for aligned rows");
  for (const abi::AttentionTensor tensor : abi::strided_attention_tensors(backward))
    if (const std::int64_t stride = abi::attention_strides(params, tensor).dim; stride != 1)
      add(std::string(abi::attention_tensor_name(tensor)) + " has head-dimension stride " + std::to_string(stride) +
          "; cuDNN's fused attention needs it 1 (contiguous rows)");
  // Grouped-query attention came with cuDNN 8.9.7; the shim loads cuDNN 9, but
  // a library that reports an older version is taken at its word.
  if (params.heads_kv != params.heads_q && cudnn_version < 8907)
    add("grouped-query attention (heads_q " + std::to_string(params.heads_q) + ", heads_kv " +
        std::to_string(params.heads_kv) + ") needs cuDNN 8.9.7 or later; this is " +
        shims::Cudnn::format_version(cudnn_version));
  return reasons;
}

namespace fe = cudnn_frontend;

// Tensor ids in the graphs' variant packs.
enum TensorId : std::int64_t { q_id = 1, k_id, v_id, o_id, lse_id, grad_o_id, grad_q_id, grad_k_id, grad_v_id };

struct Plan {
  std::string reasons;  // empty: cuDNN built a plan for it
  bool lasting = true;  // false: a failure that may pass next time (a context or handle that failed)
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace_bytes = 0;
};

// Binds the frontend to the cuDNN this context opened. The frontend's symbol
// cache is process-wide, so a second, different cuDNN cannot be used.
std::string bind_frontend(const shims::Cudnn& cudnn) {
  static std::mutex mutex;
  static std::string bound_path;
  std::lock_guard lock(mutex);
  if (fe::cudnn_dlhandle == nullptr) {
    fe::cudnn_dlhandle = cudnn.native_handle();
    bound_path = cudnn.path();
  }
  if (fe::cudnn_dlhandle == cudnn.native_handle()) return {};
  return "this process already drives cuDNN at " + bound_path + " through the cuDNN frontend, whose symbols are "
         "process-wide; it cannot also use " + cudnn.path() + ": point HAL_CUDNN at one library";
}

// "<step> failed: <frontend message>", the message usually cuDNN's own.
std::string describe(const char* step, const fe::error_t& error) {
  std::string message = error.err_msg;
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return std::string(step) + ": " + (message.empty() ? "no message" : message);
}

// Key j is kept for query i when d = j - (i + offset) lies within the band;
// cuDNN's left bound counts the diagonal (it keeps d > -left), hence + 1.
template <typename Attributes>
void set_mask(Attributes& attributes, const hal_attention_params_v1& params) {
  std::int64_t right = params.causal ? 0 : -1;
  if (params.window_right >= 0) right = right < 0 ? params.window_right : std::min(right, params.window_right);
  if (right < 0 && params.window_left < 0) return;
  attributes.set_diagonal_alignment(params.alignment == HAL_MASK_BOTTOM_RIGHT ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                                                             : fe::DiagonalAlignment_t::TOP_LEFT);
  // A band wider than both sequences masks nothing more; clamped so it fits cuDNN's int.
  const std::int64_t widest = params.seq_q + params.seq_kv;
  if (params.window_left >= 0)
    attributes.set_diagonal_band_left_bound(static_cast<int>(std::min(params.window_left, widest) + 1));
  if (right >= 0) attributes.set_diagonal_band_right_bound(static_cast<int>(std::min(right, widest)));
}

std::vector<std::int64_t> strides_of(const hal_tensor_strides_v1& strides) {
  return {strides.batch, strides.head, strides.seq, strides.dim};
}

class CudnnAttention final : public backend::FusedAttention {
 public:
  // Made before the devices are discovered; handles_ grows on first use.
  explicit CudnnAttention(const Context& context) : context_(context) {}

  ~CudnnAttention() override {
    for (cudnnHandle_t handle : handles_)
      if (handle != nullptr) (void)fe::detail::destroy_handle(handle);
  }

  std::string unavailable() const override { return missing_library(); }

  std::string supports(std::uint32_t device, const hal_attention_params_v1& params, bool backward) override {
    // cuDNN refuses, at execute, tensors that are not 16-byte aligned (a
    // view at an odd offset into a framework's buffer): decline them here so
    // the runtime picks another implementation and says why.
    if (const std::uint32_t alignment = hal_attention_address_alignment(&params);
        alignment != 0 && alignment < tensor_alignment)
      return "the call's tensor addresses are only " + std::to_string(alignment) + "-byte aligned; cuDNN's fused "
             "attention needs every tensor at a multiple of " + std::to_string(tensor_alignment) + " bytes";
    std::lock_guard lock(mutex_);
    return plan_for(device, params, backward).reasons;
  }

  hal_status workspace_size(std::uint32_t device, const hal_attention_params_v1& params, bool backward,
                            std::uint64_t* bytes) override {
    if (bytes == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "workspace_size needs bytes");
    std::lock_guard lock(mutex_);
    const Plan& plan = plan_for(device, params, backward);
    if (!plan.reasons.empty()) return unsupported(plan);
    *bytes = static_cast<std::uint64_t>(plan.workspace_bytes);
    return succeed();
  }

  hal_status forward(hal_stream* stream, const hal_attention_params_v1& params,
                     const backend::AttentionAddresses& tensors) override {
    std::unordered_map<std::int64_t, void*> pack = {
        {q_id, address(tensors.q)}, {k_id, address(tensors.k)}, {v_id, address(tensors.v)}, {o_id, address(tensors.o)}};
    if (params.return_lse) pack[lse_id] = address(tensors.lse);
    return execute(stream, params, false, pack, tensors);
  }

  hal_status backward(hal_stream* stream, const hal_attention_params_v1& params,
                      const backend::AttentionAddresses& tensors) override {
    std::unordered_map<std::int64_t, void*> pack = {
        {q_id, address(tensors.q)},           {k_id, address(tensors.k)},           {v_id, address(tensors.v)},
        {o_id, address(tensors.o)},           {lse_id, address(tensors.lse)},       {grad_o_id, address(tensors.grad_o)},
        {grad_q_id, address(tensors.grad_q)}, {grad_k_id, address(tensors.grad_k)}, {grad_v_id, address(tensors.grad_v)}};
    return execute(stream, params, true, pack, tensors);
  }

 private:
  static void* address(std::uint64_t device_address) { return reinterpret_cast<void*>(device_address); }
  static constexpr std::uint32_t tensor_alignment = 16;  // bytes, for every tensor cuDNN reads or writes

  static hal_status unsupported(const Plan& plan) {
    return fail(HAL_ERROR_UNSUPPORTED, "cuDNN's fused attention cannot run these parameters: " + plan.reasons);
  }

  // Everything that changes the graph: the shape, dtype, mask, scale and strides.
  static std::vector<std::int64_t> key_of(std::uint32_t device, const hal_attention_params_v1& params, bool backward) {
    std::vector<std::int64_t> key = {device,           backward,           params.batch,       params.heads_q,
                                     params.heads_kv,  params.seq_q,       params.seq_kv,      params.head_dim_qk,
                                     params.head_dim_v, params.dtype,      params.causal,      params.alignment,
                                     params.window_left, params.window_right, std::bit_cast<std::int32_t>(params.softmax_scale),
                                     params.return_lse};
    std::vector<const hal_tensor_strides_v1*> tensors = {&params.q_strides, &params.k_strides, &params.v_strides,
                                                         &params.o_strides};
    if (backward)
      tensors.insert(tensors.end(),
                     {&params.grad_o_strides, &params.grad_q_strides, &params.grad_k_strides, &params.grad_v_strides});
    for (const auto* strides : tensors) {
      const auto values = strides_of(*strides);
      key.insert(key.end(), values.begin(), values.end());
    }
    return key;
  }

  // The plan for these parameters, built on first use and kept, with the
  // failures cuDNN would give again (it has no engine for the graph); one
  // that may pass later (no context, no handle) is asked again next time.
  // Caller holds mutex_.
  const Plan& plan_for(std::uint32_t device, const hal_attention_params_v1& params, bool backward) {
    auto key = key_of(device, params, backward);
    if (auto found = plans_.find(key); found != plans_.end() && found->second.lasting) return found->second;
    Plan plan;
    plan.reasons = build(plan, device, params, backward);
    auto& kept = plans_[std::move(key)];
    kept = std::move(plan);
    return kept;
  }

  // Why cuDNN's SDPA cannot run for want of a library, empty when both are there: cuDNN, and NVRTC, which cuDNN
  // compiles its SDPA engines with when a graph is built (a profile that does not ask for NVRTC does without).
  std::string missing_library() const {
    if (!context_.cudnn) return "cuDNN is not loaded: " + context_.cudnn_status;
    if (!context_.nvrtc && context_.profile.runtime_compiler_absent.empty())
      return "cuDNN compiles its SDPA engines with NVRTC at run time, and NVRTC is not loaded: " + context_.nvrtc_status;
    return {};
  }

  // Builds plan.graph; returns the reasons it cannot run, empty when it can.
  std::string build(Plan& plan, std::uint32_t device, const hal_attention_params_v1& params, bool backward) {
    if (device >= context_.devices.size())
      return "device index " + std::to_string(device) + " is out of range; there are " +
             std::to_string(context_.devices.size()) + " CUDA devices";
    if (std::string missing = missing_library(); !missing.empty()) return missing;
    const shims::Cudnn& cudnn = *context_.cudnn;
    if (std::string conflict = bind_frontend(cudnn); !conflict.empty()) return conflict;
    const std::size_t version = cudnn.api().cudnnGetVersion();
    const std::string library = "cuDNN " + shims::Cudnn::format_version(version) + " (" + cudnn.path() + ")";
    if (std::string reasons = reasons_before_cudnn(params, backward, version); !reasons.empty()) return reasons;
    if (std::string reason = runtime_needed(params, backward, version); !reason.empty()) return library + ": " + reason;
    // cuDNN builds and finalizes graphs on the device of the current context.
    const backend::CurrentDevice scope = context_.current_device(device);
    if (!scope) {
      plan.lasting = false;
      return "cannot make the context of cuda:" + std::to_string(device) + " current: " + backend::last_error_message();
    }
    cudnnHandle_t handle = nullptr;
    if (std::string reason = handle_for(device, &handle); !reason.empty()) {
      plan.lasting = false;
      return library + ": " + reason;
    }
    try {
      return build_graph(plan, handle, *context_.devices[device], params, backward, library);
    } catch (const std::exception& error) {
      return library + ": the cuDNN frontend failed: " + error.what();
    }
  }

  // The frontend initializes parts of the backward workspace through the CUDA
  // runtime on some cuDNN releases (the dQ accumulator before 9.6.0; the
  // sequence lengths of a padding-mask workaround up to 9.15.0 when seq_kv is
  // not a multiple of 128). hal otherwise needs no libcudart; these cases do.
  std::string runtime_needed(const hal_attention_params_v1& params, bool backward, std::size_t version) {
    const bool needs_runtime = backward && (version < 90600 || (version <= 91500 && params.seq_kv % 128 != 0));
    if (!needs_runtime) return {};
    if (!cuda_runtime_.is_open()) {
      shims::LibraryRequest request;
      request.display_name = "CUDA runtime";
      request.sonames = {"libcudart.so.13", "libcudart.so.12"};
      request.never_unload = true;  // the frontend keeps what it resolves
      shims::LibraryLoad load = shims::load_library(request);
      if (!load.loaded())
        return "this backward pass needs the CUDA runtime (libcudart), with which the cuDNN frontend clears part of "
               "the workspace on this cuDNN release, and none was found (tried: " +
               load.describe_attempts() + "); upgrade cuDNN to 9.16 or later or install the CUDA runtime";
      // Kept open so that the frontend's dlopen by soname finds this one.
      cuda_runtime_ = std::move(load.library);
    }
    return {};
  }

  // The device's cuDNN handle, created on first use. Caller holds mutex_ and has made the device current.
  std::string handle_for(std::uint32_t device, cudnnHandle_t* handle) {
    if (handles_.size() < context_.devices.size()) handles_.resize(context_.devices.size(), nullptr);
    if (handles_[device] == nullptr) {
      cudnnHandle_t created = nullptr;  // binds to the current context, which build() made the device's
      const cudnnStatus_t status = fe::detail::create_handle(&created);
      if (status != CUDNN_STATUS_SUCCESS)
        return std::string("cudnnCreate failed on cuda:") + std::to_string(device) + ": " +
               fe::detail::get_error_string(status) + " " + fe::detail::get_last_error_string_();
      handles_[device] = created;
    }
    *handle = handles_[device];
    return {};
  }

  std::string build_graph(Plan& plan, cudnnHandle_t handle, const CudaDevice& device,
                          const hal_attention_params_v1& params, bool backward, const std::string& library) {
    const std::int64_t b = params.batch, hq = params.heads_q, hkv = params.heads_kv, sq = params.seq_q,
                       skv = params.seq_kv, dqk = params.head_dim_qk, dv = params.head_dim_v;
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(params.dtype == HAL_DTYPE_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    // Given, the frontend does not ask the CUDA runtime for it.
    if (device.compute_major > 0) graph->set_sm_version(device.compute_major * 10 + device.compute_minor);

    auto tensor = [&](const char* name, TensorId id, std::vector<std::int64_t> dims,
                      const hal_tensor_strides_v1& strides) {
      return graph->tensor(
          fe::graph::Tensor_attributes().set_name(name).set_uid(id).set_dim(std::move(dims)).set_stride(
              strides_of(strides)));
    };
    // LSE: f32, contiguous [batch, heads_q, seq_q] (cuDNN's stats, with a unit last axis).
    const std::vector<std::int64_t> lse_dims = {b, hq, sq, 1}, lse_strides = {hq * sq, sq, 1, 1};
    auto q = tensor("Q", q_id, {b, hq, sq, dqk}, params.q_strides);
    auto k = tensor("K", k_id, {b, hkv, skv, dqk}, params.k_strides);
    auto v = tensor("V", v_id, {b, hkv, skv, dv}, params.v_strides);
    if (!backward) {
      fe::graph::SDPA_attributes attributes;
      attributes.set_name("hal_sdpa").set_generate_stats(params.return_lse != 0).set_attn_scale(params.softmax_scale);
      set_mask(attributes, params);
      auto [o, stats] = graph->sdpa(q, k, v, attributes);
      o->set_output(true).set_uid(o_id).set_dim({b, hq, sq, dv}).set_stride(strides_of(params.o_strides));
      if (params.return_lse)
        stats->set_output(true).set_uid(lse_id).set_data_type(fe::DataType_t::FLOAT).set_dim(lse_dims).set_stride(
            lse_strides);
    } else {
      auto o = tensor("O", o_id, {b, hq, sq, dv}, params.o_strides);
      auto grad_o = tensor("dO", grad_o_id, {b, hq, sq, dv}, params.grad_o_strides);
      auto stats = graph->tensor(fe::graph::Tensor_attributes()
                                     .set_name("LSE")
                                     .set_uid(lse_id)
                                     .set_dim(lse_dims)
                                     .set_stride(lse_strides)
                                     .set_data_type(fe::DataType_t::FLOAT));
      fe::graph::SDPA_backward_attributes attributes;
      attributes.set_name("hal_sdpa_backward").set_attn_scale(params.softmax_scale);
      set_mask(attributes, params);
      auto [grad_q, grad_k, grad_v] = graph->sdpa_backward(q, k, v, o, grad_o, stats, attributes);
      grad_q->set_output(true).set_uid(grad_q_id).set_dim({b, hq, sq, dqk}).set_stride(
          strides_of(params.grad_q_strides));
      grad_k->set_output(true).set_uid(grad_k_id).set_dim({b, hkv, skv, dqk}).set_stride(
          strides_of(params.grad_k_strides));
      grad_v->set_output(true).set_uid(grad_v_id).set_dim({b, hkv, skv, dv}).set_stride(
          strides_of(params.grad_v_strides));
    }

    const auto failed = [&](const char* step, const fe::error_t& error) {
      return library + " cannot run this attention (" + describe(step, error) + ")";
    };
    if (auto error = graph->validate(); error.is_bad()) return failed("graph validation", error);
    if (auto error = graph->build_operation_graph(handle); error.is_bad()) return failed("operation graph", error);
    if (auto error = graph->create_execution_plans({fe::HeurMode_t::A}); error.is_bad())
      return failed("execution plans", error);
    if (auto error = graph->check_support(handle); error.is_bad()) return failed("support check", error);
    if (auto error = graph->build_plans(handle); error.is_bad()) return failed("plan build", error);
    if (auto error = graph->get_workspace_size(plan.workspace_bytes); error.is_bad())
      return failed("workspace size", error);
    plan.graph = std::move(graph);
    return {};
  }

  hal_status execute(hal_stream* stream, const hal_attention_params_v1& params, bool backward,
                     std::unordered_map<std::int64_t, void*>& pack, const backend::AttentionAddresses& tensors) {
    if (stream == nullptr || stream->context != &context_)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "the stream is null or belongs to another CUDA backend");
    for (const auto& [id, pointer] : pack) {
      if (pointer == nullptr)
        return fail(HAL_ERROR_INVALID_ARGUMENT,
                    "tensor #" + std::to_string(id) + " of the fused attention call has no device address");
      if (reinterpret_cast<std::uintptr_t>(pointer) % tensor_alignment != 0)
        return fail(HAL_ERROR_UNSUPPORTED, "tensor #" + std::to_string(id) + " of the fused attention call is at " +
                                               std::to_string(reinterpret_cast<std::uintptr_t>(pointer)) +
                                               ", not a multiple of " + std::to_string(tensor_alignment) +
                                               " bytes as cuDNN needs; use flash for unaligned tensors");
    }
    std::lock_guard lock(mutex_);  // also serializes use of the handle, whose stream is state
    const Plan& plan = plan_for(stream->device, params, backward);
    if (!plan.reasons.empty()) return unsupported(plan);
    const backend::CurrentDevice scope = context_.current_device(stream->device);
    if (!scope) return scope.status();
    cudnnHandle_t handle = handles_[stream->device];
    const auto cuda_stream = reinterpret_cast<cudaStream_t>(stream->handle);
    try {
      if (const cudnnStatus_t status = fe::detail::set_stream(handle, cuda_stream); status != CUDNN_STATUS_SUCCESS)
        return fail(HAL_ERROR_INTERNAL, std::string("cudnnSetStream failed: ") + fe::detail::get_error_string(status),
                    status);
      Workspace workspace(context_, stream->device, stream->handle);
      void* scratch = address(tensors.workspace);  // the caller's, when it gave one
      if (scratch != nullptr && tensors.workspace_bytes < static_cast<std::uint64_t>(plan.workspace_bytes))
        return fail(HAL_ERROR_INVALID_ARGUMENT, "the caller's attention workspace holds " +
                                                    std::to_string(tensors.workspace_bytes) + " bytes; cuDNN's plan needs " +
                                                    std::to_string(plan.workspace_bytes) + " (ask workspace_size)");
      if (scratch == nullptr) {
        if (hal_status status = workspace.allocate(plan.workspace_bytes); status != HAL_OK) return status;
        scratch = workspace.pointer();
      }
      const fe::error_t result = plan.graph->execute(handle, pack, scratch);
      if (hal_status status = workspace.release(); status != HAL_OK) return status;
      if (result.is_bad())
        return fail(HAL_ERROR_INTERNAL, "cuDNN's fused attention " + std::string(backward ? "backward" : "forward") +
                                            " failed: " + describe("execute", result));
    } catch (const std::exception& error) {
      return fail(HAL_ERROR_INTERNAL, std::string("the cuDNN frontend failed: ") + error.what());
    }
    return succeed();
  }

  // One call's workspace (allocate_scratch: stream-ordered where the device
  // has memory pools), released when the call is done with it.
  class Workspace {
   public:
    Workspace(const Context& context, std::uint32_t device, CUstream stream)
        : context_(context), device_(device), stream_(stream) {}
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    ~Workspace() { (void)release(); }

    hal_status allocate(std::int64_t bytes) {
      if (bytes <= 0) return HAL_OK;
      return allocate_scratch(context_, device_, stream_, static_cast<std::size_t>(bytes), &address_,
                              "cuDNN attention workspace");
    }
    void* pointer() const { return reinterpret_cast<void*>(address_); }
    hal_status release() {
      if (address_ == 0) return HAL_OK;
      return release_scratch(context_, device_, stream_, std::exchange(address_, 0), "the cuDNN attention workspace");
    }

   private:
    const Context& context_;
    std::uint32_t device_;
    CUstream stream_;
    CUdeviceptr address_ = 0;
  };

  const Context& context_;
  std::mutex mutex_;  // plans_, handles_, cuda_runtime_, and each handle's stream while it executes
  std::map<std::vector<std::int64_t>, Plan> plans_;
  std::vector<cudnnHandle_t> handles_;  // per device; created on first use
  shims::SharedLibrary cuda_runtime_;   // only when a backward pass needs it, see runtime_needed()
};

#else  // !HAL_WITH_CUDNN_FRONTEND

constexpr const char* not_built_reason =
    "built without the cuDNN frontend headers: run scripts/install-deps.sh and rebuild";

// Built without the frontend: never eligible, and says how to get it.
class CudnnAttention final : public backend::FusedAttention {
 public:
  explicit CudnnAttention(const Context&) {}
  std::string unavailable() const override { return not_built_reason; }
  std::string supports(std::uint32_t, const hal_attention_params_v1&, bool) override { return not_built_reason; }
  hal_status workspace_size(std::uint32_t, const hal_attention_params_v1&, bool, std::uint64_t*) override {
    return fail(HAL_ERROR_UNSUPPORTED, std::string("cuDNN's fused attention is ") + not_built_reason);
  }
  hal_status forward(hal_stream*, const hal_attention_params_v1&, const backend::AttentionAddresses&) override {
    return fail(HAL_ERROR_UNSUPPORTED, std::string("cuDNN's fused attention is ") + not_built_reason);
  }
  hal_status backward(hal_stream*, const hal_attention_params_v1&, const backend::AttentionAddresses&) override {
    return fail(HAL_ERROR_UNSUPPORTED, std::string("cuDNN's fused attention is ") + not_built_reason);
  }
};

#endif

}  // namespace

std::unique_ptr<backend::FusedAttention> make_cudnn_attention(const Context& context) {
  return std::make_unique<CudnnAttention>(context);
}

}  // namespace hal::cuda
