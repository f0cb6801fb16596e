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

std::vector<std::string> implementation_reasons(hal_attention_implementation implementation,
                                                const hal_attention_params_v1& params, bool backward) {
  if (implementation == HAL_ATTENTION_FUSED) return {"the host backend has no fused attention kernel"};
  if (implementation != HAL_ATTENTION_FLASH && implementation != HAL_ATTENTION_MATH)
    return {"unknown attention implementation " + std::to_string(implementation)};
  return check_attention_params(params, backward);
}

// The flash kernels' instruction set, chosen once per process (the CPU and
// HAL_HOST_ISA do not change under a running program), not on every call.
FlashIsa flash_isa() {
  static const FlashIsa isa = flash_selected_isa();
  return isa;
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
    return fail(HAL_ERROR_UNSUPPORTED, implementation_reasons(implementation, *params, backward).front());
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
                   false, attention_flops(*params, backward) < kSmallAttentionFlops});
  return succeed();
}

hal_status supports(hal_backend_context*, std::uint32_t, hal_attention_implementation implementation,
                    const hal_attention_params_v1* params, std::int32_t backward, char* reasons,
                    std::size_t capacity) {
  if (params == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "supports needs params");
  write_reasons(implementation_reasons(implementation, *params, backward != 0), reasons, capacity);
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

hal_status forward(hal_stream* stream, hal_attention_implementation implementation,
                   const hal_attention_params_v1* params, hal_tensor_ref_v1 q, hal_tensor_ref_v1 k,
                   hal_tensor_ref_v1 v, hal_tensor_ref_v1 o, hal_tensor_ref_v1 lse) {
  if (stream == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "attention forward needs a stream");
  return enqueue_kernel(stream, stream->context, implementation, params, false, keep_alive({q, k, v, o, lse}),
                        [=](const hal_attention_params_v1& p, ThreadPool& pool) {
                          float* lse_out = p.return_lse ? static_cast<float*>(address(lse)) : nullptr;
                          if (implementation == HAL_ATTENTION_FLASH)
                            flash_forward(p, address(q), address(k), address(v), address(o), lse_out, pool, flash_isa());
                          else
                            math_forward(p, address(q), address(k), address(v), address(o), lse_out, pool);
                        });
}

hal_status backward(hal_stream* stream, hal_attention_implementation implementation,
                    const hal_attention_params_v1* params, hal_tensor_ref_v1 q, hal_tensor_ref_v1 k,
                    hal_tensor_ref_v1 v, hal_tensor_ref_v1 o, hal_tensor_ref_v1 grad_o, hal_tensor_ref_v1 lse,
                    hal_tensor_ref_v1 grad_q, hal_tensor_ref_v1 grad_k, hal_tensor_ref_v1 grad_v) {
  if (stream == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "attention backward needs a stream");
  return enqueue_kernel(
      stream, stream->context, implementation, params, true,
      keep_alive({q, k, v, o, grad_o, lse, grad_q, grad_k, grad_v}),
      [=](const hal_attention_params_v1& p, ThreadPool& pool) {
        const auto* lse_in = static_cast<const float*>(address(lse));
        if (implementation == HAL_ATTENTION_FLASH)
          flash_backward(p, address(q), address(k), address(v), address(o), address(grad_o), lse_in, address(grad_q),
                         address(grad_k), address(grad_v), pool, flash_isa());
        else
          math_backward(p, address(q), address(k), address(v), address(o), address(grad_o), lse_in, address(grad_q),
                        address(grad_k), address(grad_v), pool);
      });
}

}  // namespace

const hal_attention_v1 attention_table = {
    sizeof(hal_attention_v1), supports, workspace_size, forward, backward,
};

}  // namespace hal::host
