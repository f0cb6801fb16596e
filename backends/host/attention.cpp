// The host backend's attention sub-table: math and flash on the CPU.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "host_backend.hpp"

namespace hal::host {
namespace {

ThreadPool& attention_pool(hal_backend_context* context) {
  std::lock_guard lock(context->attention_pool_mutex);
  // Started on first use so that loading the backend (halinfo) stays fast.
  if (!context->attention_pool) context->attention_pool = std::make_unique<ThreadPool>();
  return *context->attention_pool;
}

void write_reasons(const std::vector<std::string>& reasons, char* text, std::size_t capacity) {
  if (text == nullptr || capacity == 0) return;
  std::string joined;
  for (const auto& reason : reasons) joined += reason + "\n";
  const std::size_t length = std::min(joined.size(), capacity - 1);
  std::memcpy(text, joined.data(), length);
  text[length] = '\0';
}

// Why an implementation cannot run a call; libhal checked the call itself.
std::vector<std::string> implementation_reasons(hal_attention_implementation implementation) {
  if (implementation == HAL_ATTENTION_FUSED) return {"the host backend has no fused attention kernel"};
  if (implementation != HAL_ATTENTION_FLASH && implementation != HAL_ATTENTION_MATH)
    return {"unknown attention implementation " + std::to_string(implementation)};
  return {};  // flash and math take every valid call
}

// A buffer's bytes, or a borrowed address (no buffer: the offset is the address).
void* address(const hal_tensor_ref_v1& tensor) {
  return tensor.buffer == nullptr ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(tensor.offset))
                                  : static_cast<std::uint8_t*>(tensor.buffer->allocation->data) + tensor.offset;
}

// Keeps every buffer of the call alive until the stream ran it.
std::vector<std::shared_ptr<Allocation>> keep_alive(std::initializer_list<hal_tensor_ref_v1> tensors) {
  std::vector<std::shared_ptr<Allocation>> kept;
  for (const auto& tensor : tensors)
    if (tensor.buffer != nullptr) kept.push_back(tensor.buffer->allocation);
  return kept;
}

template <typename Kernel>
hal_status enqueue_kernel(hal_stream* stream, hal_backend_context* context, hal_attention_implementation implementation,
                          const hal_attention_params_v1* params, bool backward,
                          std::vector<std::shared_ptr<Allocation>> buffers, Kernel kernel) {
  // libhal checked the call and asked supports() for these params before
  // choosing this implementation; the kernels keep their own guard.
  if (stream == nullptr || params == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "attention needs a stream and params");
  if (implementation != HAL_ATTENTION_FLASH && implementation != HAL_ATTENTION_MATH)
    return fail(HAL_ERROR_UNSUPPORTED, implementation_reasons(implementation).front());
  // Run by the enqueuing thread when the stream is idle: a small call, or one
  // from a thread whose OpenMP team would run it (a framework's thread; on
  // the stream's worker it would run on the pool, beside the team's threads).
  const bool inline_when_idle =
      attention_flops(*params, backward) < kSmallAttentionFlops || attention_pool(context).uses_openmp_team();
  stream->enqueue({[context, copy = *params, buffers = std::move(buffers), kernel](hal_status, std::string& message) {
                     try {
                       kernel(copy, attention_pool(context));
                       return HAL_OK;
                     } catch (const std::invalid_argument& error) {
                       message = std::string("attention: ") + error.what();
                       return HAL_ERROR_INVALID_ARGUMENT;
                     } catch (const std::bad_alloc&) {
                       message = "attention: out of host memory for its workspace";
                       return HAL_ERROR_OUT_OF_MEMORY;
                     }
                   },
                   false, inline_when_idle});
  return succeed();
}

hal_status supports(hal_backend_context*, std::uint32_t, hal_attention_implementation implementation,
                    const hal_attention_params_v1* params, std::int32_t /*backward*/, char* reasons,
                    std::size_t capacity) {
  if (params == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "supports needs params");
  write_reasons(implementation_reasons(implementation), reasons, capacity);
  return succeed();
}

hal_status workspace_size(hal_backend_context* context, std::uint32_t, hal_attention_implementation implementation,
                          const hal_attention_params_v1* params, std::int32_t backward, std::uint64_t* bytes) {
  if (params == nullptr || bytes == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "workspace_size needs params and out");
  *bytes = implementation == HAL_ATTENTION_MATH
               ? math_workspace_bytes(*params, backward != 0)
               : flash_workspace_bytes(*params, backward != 0, attention_pool(context).thread_count());
  return succeed();
}

// key_ranges: the call's int32 key-range tensor, or an empty reference.
hal_status enqueue_forward(hal_stream* stream, hal_attention_implementation implementation,
                           const hal_attention_params_v1* params, const hal_tensor_ref_v1* t,
                           hal_tensor_ref_v1 key_ranges) {
  const hal_tensor_ref_v1 q = t[0], k = t[1], v = t[2], o = t[3], lse = t[4];
  return enqueue_kernel(stream, stream->context, implementation, params, false,
                        keep_alive({q, k, v, o, lse, key_ranges}),
                        [=](const hal_attention_params_v1& p, ThreadPool& pool) {
                          float* lse_out = p.return_lse ? static_cast<float*>(address(lse)) : nullptr;
                          const auto* ranges = static_cast<const std::int32_t*>(address(key_ranges));
                          if (implementation == HAL_ATTENTION_FLASH)
                            flash_forward(p, address(q), address(k), address(v), address(o), lse_out, pool,
                                          flash_selected_isa(), FlashForwardTiling::automatic, ranges);
                          else
                            math_forward(p, address(q), address(k), address(v), address(o), lse_out, pool, ranges);
                        });
}

hal_status enqueue_backward(hal_stream* stream, hal_attention_implementation implementation,
                            const hal_attention_params_v1* params, const hal_tensor_ref_v1* t,
                            hal_tensor_ref_v1 key_ranges) {
  const hal_tensor_ref_v1 q = t[0], k = t[1], v = t[2], o = t[3], grad_o = t[4], lse = t[5], grad_q = t[6],
                          grad_k = t[7], grad_v = t[8];
  return enqueue_kernel(
      stream, stream->context, implementation, params, true,
      keep_alive({q, k, v, o, grad_o, lse, grad_q, grad_k, grad_v, key_ranges}),
      [=](const hal_attention_params_v1& p, ThreadPool& pool) {
        const auto* lse_in = static_cast<const float*>(address(lse));
        const auto* ranges = static_cast<const std::int32_t*>(address(key_ranges));
        if (implementation == HAL_ATTENTION_FLASH)
          flash_backward(p, address(q), address(k), address(v), address(o), address(grad_o), lse_in, address(grad_q),
                         address(grad_k), address(grad_v), pool, flash_selected_isa(), ranges);
        else
          math_backward(p, address(q), address(k), address(v), address(o), address(grad_o), lse_in, address(grad_q),
                        address(grad_k), address(grad_v), pool, ranges);
      });
}

// libhal checked the call; what stays is the host's own limit: its scratch
// is host memory of its own, so a caller's workspace is refused.
hal_status enqueue(hal_stream* stream, const hal_attention_call_v1* call, bool backward) {
  if (stream == nullptr || call == nullptr || call->params == nullptr || call->tensors == nullptr ||
      call->tensor_count != hal_attention_tensor_count(call->params, backward ? 1 : 0))
    return fail(HAL_ERROR_INVALID_ARGUMENT, std::string("attention ") + (backward ? "backward" : "forward") +
                                                " needs a stream and a call with its params and tensors");
  if (call->workspace.buffer != nullptr || call->workspace.offset != 0)
    return fail(HAL_ERROR_UNSUPPORTED,
                "the host backend's attention takes no caller workspace (its scratch is host memory of its own); "
                "leave AttentionOptions::workspace empty");
  const hal_tensor_ref_v1 key_ranges =
      hal_attention_key_ranges(call->params) != 0 ? call->tensors[call->tensor_count - 1] : hal_tensor_ref_v1{};
  return backward ? enqueue_backward(stream, call->implementation, call->params, call->tensors, key_ranges)
                  : enqueue_forward(stream, call->implementation, call->params, call->tensors, key_ranges);
}

hal_status forward(hal_stream* stream, const hal_attention_call_v1* call) { return enqueue(stream, call, false); }
hal_status backward(hal_stream* stream, const hal_attention_call_v1* call) { return enqueue(stream, call, true); }

}  // namespace

const hal_attention_v3 attention_table = {sizeof(hal_attention_v3), supports, workspace_size, forward, backward};

}  // namespace hal::host
