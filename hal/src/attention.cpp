// Attention parameters: defaults resolved, the one check (hal/abi), the ABI form.
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "abi.hpp"
#include "attention_internal.hpp"

namespace hal {

std::string_view to_string(AttentionImplementation implementation) {
  switch (implementation) {
    case AttentionImplementation::fused: return "fused";
    case AttentionImplementation::flash: return "flash";
    case AttentionImplementation::math: return "math";
  }
  return "unknown";
}

std::optional<AttentionImplementation> parse_attention_implementation(std::string_view text) {
  for (auto implementation : detail::all_attention_implementations)
    if (to_string(implementation) == text) return implementation;
  return std::nullopt;
}

namespace detail {
namespace {

hal_tensor_strides_v1 contiguous_strides(const abi::AttentionExtents& extents, AttentionLayout layout) {
  if (layout == AttentionLayout::bshd)
    return {extents.seq * extents.heads * extents.dim, extents.dim, extents.heads * extents.dim, 1};
  return {extents.heads * extents.seq * extents.dim, extents.seq * extents.dim, extents.dim, 1};
}

hal_tensor_strides_v1 to_abi(const TensorStrides& strides) {
  return {strides.batch, strides.head, strides.seq, strides.dim};
}

}  // namespace

hal_attention_params_v1 to_abi(const AttentionParams& request) {
  const auto& [batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v, dtype, layout, causal, alignment,
               window_left, window_right, softmax_scale, return_lse, key_ranges, q_strides, k_strides, v_strides, o_strides,
               grad_o_strides, grad_q_strides, grad_k_strides, grad_v_strides] = request;
  hal_attention_params_v1 params{};
  params.struct_size = sizeof(params);
  params.batch = batch;
  params.heads_q = heads_q;
  params.heads_kv = heads_kv == 0 ? heads_q : heads_kv;
  params.seq_q = seq_q;
  params.seq_kv = seq_kv == 0 ? seq_q : seq_kv;
  params.head_dim_qk = head_dim_qk;
  params.head_dim_v = head_dim_v == 0 ? head_dim_qk : head_dim_v;
  params.dtype = to_abi(dtype);
  params.causal = causal ? 1 : 0;
  params.alignment = to_abi(alignment);
  params.window_left = window_left;
  params.window_right = window_right;
  // 1/sqrt(head_dim) by default; a non-positive head_dim is reported as such below, not as its scale.
  params.softmax_scale =
      softmax_scale.value_or(params.head_dim_qk > 0 ? 1.0f / std::sqrt(static_cast<float>(params.head_dim_qk)) : 1.0f);
  params.return_lse = return_lse ? 1 : 0;
  params.key_ranges = key_ranges ? 1 : 0;

  auto strides_for = [&](const std::optional<TensorStrides>& explicit_strides, AttentionTensor tensor,
                         const hal_tensor_strides_v1* fallback) {
    if (explicit_strides) return to_abi(*explicit_strides);
    if (fallback != nullptr) return *fallback;
    return contiguous_strides(abi::attention_extents(params, tensor), layout);
  };
  params.q_strides = strides_for(q_strides, AttentionTensor::q, nullptr);
  params.k_strides = strides_for(k_strides, AttentionTensor::k, nullptr);
  params.v_strides = strides_for(v_strides, AttentionTensor::v, nullptr);
  params.o_strides = strides_for(o_strides, AttentionTensor::o, nullptr);
  // Gradients default to the layout of the tensor they belong to.
  params.grad_o_strides = strides_for(grad_o_strides, AttentionTensor::grad_o, &params.o_strides);
  params.grad_q_strides = strides_for(grad_q_strides, AttentionTensor::grad_q, &params.q_strides);
  params.grad_k_strides = strides_for(grad_k_strides, AttentionTensor::grad_k, &params.k_strides);
  params.grad_v_strides = strides_for(grad_v_strides, AttentionTensor::grad_v, &params.v_strides);
  // The one check of a call, before any plugin sees it (gradient strides too:
  // they default to the forward tensors' and a backward call reuses them).
  // The verdict depends on these bytes alone, and a thread's calls mostly
  // repeat one shape: the last set found valid is not judged again.
  thread_local hal_attention_params_v1 last_valid{};
  if (std::memcmp(&params, &last_valid, sizeof(params)) == 0) return params;
  if (const std::vector<std::string> problems = abi::attention_problems(params, /*backward=*/true); !problems.empty()) {
    std::string message = "attention parameters are not valid: ";
    for (std::size_t i = 0; i < problems.size(); ++i) message += (i == 0 ? "" : "; ") + problems[i];
    throw Error(StatusCode::invalid_argument, message);
  }
  std::memcpy(&last_valid, &params, sizeof(params));
  return params;
}

}  // namespace detail

AttentionParams AttentionParams::resolved() const {
  const hal_attention_params_v1 abi = detail::to_abi(*this);
  auto strides = [](const hal_tensor_strides_v1& s) { return TensorStrides{s.batch, s.head, s.seq, s.dim}; };
  AttentionParams result = *this;
  result.heads_kv = abi.heads_kv;
  result.seq_kv = abi.seq_kv;
  result.head_dim_v = abi.head_dim_v;
  result.softmax_scale = abi.softmax_scale;
  result.q_strides = strides(abi.q_strides);
  result.k_strides = strides(abi.k_strides);
  result.v_strides = strides(abi.v_strides);
  result.o_strides = strides(abi.o_strides);
  result.grad_o_strides = strides(abi.grad_o_strides);
  result.grad_q_strides = strides(abi.grad_q_strides);
  result.grad_k_strides = strides(abi.grad_k_strides);
  result.grad_v_strides = strides(abi.grad_v_strides);
  return result;
}

double AttentionParams::flops(bool backward) const { return abi::attention_flops(detail::to_abi(*this), backward); }

std::string AttentionParams::describe() const {
  std::ostringstream text;
  text << "b=" << batch << " hq=" << heads_q << " hkv=" << (heads_kv == 0 ? heads_q : heads_kv) << " sq=" << seq_q
       << " skv=" << (seq_kv == 0 ? seq_q : seq_kv) << " d=" << head_dim_qk << "/"
       << (head_dim_v == 0 ? head_dim_qk : head_dim_v) << " " << to_string(dtype) << " "
       << (layout == AttentionLayout::bshd ? "bshd" : "bhsd");
  if (causal) text << " causal(" << (alignment == MaskAlignment::top_left ? "top_left" : "bottom_right") << ")";
  if (window_left >= 0 || window_right >= 0) text << " window(" << window_left << "," << window_right << ")";
  if (key_ranges) text << " key_ranges";
  return text.str();
}

}  // namespace hal
