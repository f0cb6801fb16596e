// Attention parameters: defaults, validation, and the tensors' extents.
#include "attention_internal.hpp"

#include "abi.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

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

struct Extents {
  std::int64_t batch, heads, seq, dim;
};

Extents extents_of(const hal_attention_params_v1& params, AttentionTensor tensor) {
  switch (tensor) {
    case AttentionTensor::q:
    case AttentionTensor::grad_q: return {params.batch, params.heads_q, params.seq_q, params.head_dim_qk};
    case AttentionTensor::o:
    case AttentionTensor::grad_o: return {params.batch, params.heads_q, params.seq_q, params.head_dim_v};
    case AttentionTensor::k:
    case AttentionTensor::grad_k: return {params.batch, params.heads_kv, params.seq_kv, params.head_dim_qk};
    case AttentionTensor::v:
    case AttentionTensor::grad_v: return {params.batch, params.heads_kv, params.seq_kv, params.head_dim_v};
    case AttentionTensor::lse: return {params.batch, params.heads_q, params.seq_q, 1};
    case AttentionTensor::key_ranges: return {params.batch, 1, params.seq_q, 2};
  }
  return {};
}

const hal_tensor_strides_v1& strides_of(const hal_attention_params_v1& params, AttentionTensor tensor) {
  switch (tensor) {
    case AttentionTensor::q: return params.q_strides;
    case AttentionTensor::k: return params.k_strides;
    case AttentionTensor::v: return params.v_strides;
    case AttentionTensor::o: return params.o_strides;
    case AttentionTensor::grad_o: return params.grad_o_strides;
    case AttentionTensor::grad_q: return params.grad_q_strides;
    case AttentionTensor::grad_k: return params.grad_k_strides;
    case AttentionTensor::grad_v: return params.grad_v_strides;
    case AttentionTensor::lse:
    case AttentionTensor::key_ranges: break;
  }
  static const hal_tensor_strides_v1 unused{};
  return unused;
}

hal_tensor_strides_v1 contiguous_strides(const Extents& extents, AttentionLayout layout) {
  if (layout == AttentionLayout::bshd)
    return {extents.seq * extents.heads * extents.dim, extents.dim, extents.heads * extents.dim, 1};
  return {extents.heads * extents.seq * extents.dim, extents.seq * extents.dim, extents.dim, 1};
}

hal_tensor_strides_v1 to_abi(const TensorStrides& strides) {
  return {strides.batch, strides.head, strides.seq, strides.dim};
}

[[noreturn]] void invalid(const std::string& message) { throw Error(StatusCode::invalid_argument, message); }

void require_positive(const char* name, std::int64_t value) {
  if (value < 1) invalid(std::string("attention ") + name + " is " + std::to_string(value) + "; it must be at least 1");
}

bool operator==(const hal_tensor_strides_v1& a, const hal_tensor_strides_v1& b) {
  return a.batch == b.batch && a.head == b.head && a.seq == b.seq && a.dim == b.dim;
}

// Outputs written through overlapping strides would race with themselves.
void check_strides(const hal_attention_params_v1& params, AttentionTensor tensor, bool is_output) {
  const Extents extents = extents_of(params, tensor);
  const hal_tensor_strides_v1& strides = strides_of(params, tensor);
  // The usual case, a compact tensor in either layout, is fine as it is.
  if (strides == contiguous_strides(extents, AttentionLayout::bshd) ||
      strides == contiguous_strides(extents, AttentionLayout::bhsd))
    return;
  const std::array<std::pair<std::int64_t, std::int64_t>, 4> axes = {{{extents.batch, strides.batch},
                                                                      {extents.heads, strides.head},
                                                                      {extents.seq, strides.seq},
                                                                      {extents.dim, strides.dim}}};
  const char* axis_names[] = {"batch", "head", "seq", "dim"};
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i].second < 0 || (axes[i].second == 0 && axes[i].first > 1))
      invalid(std::string("attention ") + attention_tensor_name(tensor) + " stride of axis " + axis_names[i] + " is " +
              std::to_string(axes[i].second) + "; strides must be positive (0 only for an axis of extent 1)");
  if (!is_output) return;
  auto sorted = axes;  // by stride; four axes: an insertion sort, on every call
  for (std::size_t i = 1; i < sorted.size(); ++i)
    for (std::size_t j = i; j > 0 && sorted[j].second < sorted[j - 1].second; --j) std::swap(sorted[j], sorted[j - 1]);
  std::int64_t span = 1;
  for (const auto& [extent, stride] : sorted) {
    if (extent == 1) continue;
    if (stride < span)
      invalid(std::string("attention output ") + attention_tensor_name(tensor) +
              " has overlapping strides (an axis of stride " + std::to_string(stride) + " inside a span of " +
              std::to_string(span) + " elements); outputs need non-overlapping strides");
    span = stride * extent;
  }
}

}  // namespace

const char* attention_tensor_name(AttentionTensor tensor) {
  switch (tensor) {
    case AttentionTensor::q: return "q";
    case AttentionTensor::k: return "k";
    case AttentionTensor::v: return "v";
    case AttentionTensor::o: return "o";
    case AttentionTensor::lse: return "lse";
    case AttentionTensor::grad_o: return "grad_o";
    case AttentionTensor::grad_q: return "grad_q";
    case AttentionTensor::grad_k: return "grad_k";
    case AttentionTensor::grad_v: return "grad_v";
    case AttentionTensor::key_ranges: return "key_ranges";
  }
  return "tensor";
}

std::uint64_t attention_tensor_bytes(const hal_attention_params_v1& params, AttentionTensor tensor) {
  const Extents extents = extents_of(params, tensor);
  if (tensor == AttentionTensor::lse || tensor == AttentionTensor::key_ranges)  // contiguous, 4-byte elements
    return static_cast<std::uint64_t>(extents.batch * extents.heads * extents.seq * extents.dim) * 4;
  const hal_tensor_strides_v1& strides = strides_of(params, tensor);
  const std::int64_t last_element = (extents.batch - 1) * strides.batch + (extents.heads - 1) * strides.head +
                                    (extents.seq - 1) * strides.seq + (extents.dim - 1) * strides.dim;
  return static_cast<std::uint64_t>(last_element + 1) * size_in_bytes(from_abi(params.dtype));
}

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
  require_positive("batch", params.batch);
  require_positive("heads_q", params.heads_q);
  require_positive("heads_kv", params.heads_kv);
  require_positive("seq_q", params.seq_q);
  require_positive("seq_kv", params.seq_kv);
  require_positive("head_dim_qk", params.head_dim_qk);
  require_positive("head_dim_v", params.head_dim_v);
  if (params.heads_q % params.heads_kv != 0)
    invalid("attention heads_q (" + std::to_string(params.heads_q) + ") is not a multiple of heads_kv (" +
            std::to_string(params.heads_kv) + "); GQA needs each kv head shared by the same number of query heads");
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    invalid("attention dtype " + std::string(to_string(dtype)) + " is not supported; use f32, f16 or bf16");
  params.dtype = to_abi(dtype);
  if (window_left < -1 || window_right < -1)
    invalid("attention window (" + std::to_string(window_left) + ", " + std::to_string(window_right) +
            ") is not allowed; each side is -1 (unbounded) or a number of keys >= 0");
  params.causal = causal ? 1 : 0;
  params.alignment = to_abi(alignment);
  params.window_left = window_left;
  params.window_right = window_right;
  const float scale = softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(params.head_dim_qk)));
  if (!std::isfinite(scale) || scale == 0.0f)
    invalid("attention softmax_scale " + std::to_string(scale) + " is not allowed; use a finite non-zero value");
  params.softmax_scale = scale;
  params.return_lse = return_lse ? 1 : 0;
  params.key_ranges = key_ranges ? 1 : 0;

  auto strides_for = [&](const std::optional<TensorStrides>& explicit_strides, AttentionTensor tensor,
                         const hal_tensor_strides_v1* fallback) {
    if (explicit_strides) return to_abi(*explicit_strides);
    if (fallback != nullptr) return *fallback;
    return contiguous_strides(extents_of(params, tensor), layout);
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
  for (auto tensor : {AttentionTensor::q, AttentionTensor::k, AttentionTensor::v, AttentionTensor::grad_o})
    check_strides(params, tensor, false);
  for (auto tensor : {AttentionTensor::o, AttentionTensor::grad_q, AttentionTensor::grad_k, AttentionTensor::grad_v})
    check_strides(params, tensor, true);
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
