#include "attention/attention_internal.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace hal::host {

void require_valid_params(const hal_attention_params_v1& params, bool backward) {
  const std::vector<std::string> problems = attention_problems(params, backward);
  if (problems.empty()) return;
  std::string message;
  for (const std::string& problem : problems) {
    if (!message.empty()) message += '\n';
    message += problem;
  }
  throw std::invalid_argument(message);
}

void require_pointer(const void* pointer, const char* name) {
  if (pointer == nullptr) throw std::invalid_argument(std::string(name) + " is null");
}

CallScratch::CallScratch(std::size_t count) {
  if (count > kReusedScratchFloats) {
    own_ = AlignedBuffer<float>(count);
    data_ = own_.data();
    return;
  }
  thread_local AlignedBuffer<float> kept{0};
  thread_local std::size_t capacity = 0;
  if (count > capacity) {
    kept = AlignedBuffer<float>(count);
    capacity = count;
  }
  data_ = kept.data();
}

void require_key_ranges(const hal_attention_params_v1& params, const std::int32_t* key_ranges) {
  const bool announced = hal_attention_key_ranges(&params) != 0;
  if (announced && key_ranges == nullptr) throw std::invalid_argument("params announce key ranges but key_ranges is null");
  if (!announced && key_ranges != nullptr)
    throw std::invalid_argument("key_ranges is given but params.key_ranges is 0; set it to use them");
}

void require_forward_call(const hal_attention_params_v1& params, const std::int32_t* key_ranges, const void* q,
                          const void* k, const void* v, const void* o) {
  require_valid_params(params, false);
  require_key_ranges(params, key_ranges);
  require_pointer(q, "q");
  require_pointer(k, "k");
  require_pointer(v, "v");
  require_pointer(o, "o");
}

void require_backward_call(const hal_attention_params_v1& params, const std::int32_t* key_ranges, const void* q,
                           const void* k, const void* v, const void* grad_o, const void* grad_q, const void* grad_k,
                           const void* grad_v) {
  require_valid_params(params, true);
  require_key_ranges(params, key_ranges);
  require_pointer(q, "q");
  require_pointer(k, "k");
  require_pointer(v, "v");
  require_pointer(grad_o, "grad_o");
  require_pointer(grad_q, "grad_q");
  require_pointer(grad_k, "grad_k");
  require_pointer(grad_v, "grad_v");
}

}  // namespace hal::host
