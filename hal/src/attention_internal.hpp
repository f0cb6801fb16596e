// Internal: attention helpers shared by attention.cpp and attention_select.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hal/attention.hpp"
#include "hal/backend_abi.h"
#include "hal/capabilities.hpp"

namespace hal::detail {

constexpr AttentionImplementation all_attention_implementations[] = {
    AttentionImplementation::fused, AttentionImplementation::flash, AttentionImplementation::math};

enum class AttentionTensor { q, k, v, o, lse, grad_o, grad_q, grad_k, grad_v };
const char* attention_tensor_name(AttentionTensor tensor);
// Bytes from the tensor's first element to one past its last.
std::uint64_t attention_tensor_bytes(const hal_attention_params_v1& params, AttentionTensor tensor);

// effective_capability with a call's own overrides ("attention.flash=false")
// as the top layer (capabilities.cpp).
EffectiveCapability effective_capability(const Device& device, const std::string& key,
                                         const std::vector<std::string>& per_call_overrides);

}  // namespace hal::detail
