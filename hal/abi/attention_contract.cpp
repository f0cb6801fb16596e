#include "attention_contract.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <utility>

namespace hal::abi {
namespace {

// The raw integer of an enum field filled in by C code: reading it as the C++
// enum type is undefined when the value is outside the enumerators' range.
template <typename Enum>
std::underlying_type_t<Enum> raw_value(const Enum& field) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &field, sizeof raw);
  return raw;
}

constexpr const char* axis_names[] = {"batch", "head", "seq", "dim"};

// The params fields that size each axis of a tensor, for messages.
std::array<const char*, 4> extent_names(AttentionTensor tensor) {
  const bool query_side = tensor == AttentionTensor::q || tensor == AttentionTensor::o ||
                          tensor == AttentionTensor::grad_q || tensor == AttentionTensor::grad_o;
  const bool value_width = tensor == AttentionTensor::o || tensor == AttentionTensor::grad_o ||
                           tensor == AttentionTensor::v || tensor == AttentionTensor::grad_v;
  return {"batch", query_side ? "heads_q" : "heads_kv", query_side ? "seq_q" : "seq_kv",
          value_width ? "head_dim_v" : "head_dim_qk"};
}

// Each axis's stride must be positive, or 0 on an axis of extent 1; an
// output's axes must not overlap (each stride at least the span of the
// smaller ones), or two elements would be written to one place.
void check_strides(const hal_attention_params_v1& params, AttentionTensor tensor, bool is_output,
                   std::vector<std::string>& problems) {
  const AttentionExtents extents = attention_extents(params, tensor);
  const hal_tensor_strides_v1& strides = attention_strides(params, tensor);
  // The usual case, a compact tensor in either layout, passes both checks: decided without the sort, as libhal
  // checks every call.
  const std::int64_t row = extents.dim, bhsd_head = extents.seq * row, bshd_seq = extents.heads * row;
  const bool compact_bhsd = strides.dim == 1 && strides.seq == row && strides.head == bhsd_head &&
                            strides.batch == extents.heads * bhsd_head;
  const bool compact_bshd = strides.dim == 1 && strides.head == row && strides.seq == bshd_seq &&
                            strides.batch == extents.seq * bshd_seq;
  if (compact_bhsd || compact_bshd) return;
  const std::array<std::pair<std::int64_t, std::int64_t>, 4> axes = {{{extents.batch, strides.batch},
                                                                      {extents.heads, strides.head},
                                                                      {extents.seq, strides.seq},
                                                                      {extents.dim, strides.dim}}};
  const char* name = attention_tensor_name(tensor);
  bool well_formed = true;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto [extent, stride] = axes[i];
    if (stride > 0 || (stride == 0 && extent <= 1)) continue;
    std::ostringstream problem;
    problem << name << "_strides." << axis_names[i];
    if (stride < 0)
      problem << " (" << stride << ") is negative: strides must be positive";
    else
      problem << " is 0 but " << extent_names(tensor)[i] << " is " << extent
              << ": a zero stride is only allowed on an axis of extent 1";
    problems.push_back(problem.str());
    well_formed = false;
  }
  if (!is_output || !well_formed) return;
  auto sorted = axes;  // by stride; four axes: an insertion sort
  for (std::size_t i = 1; i < sorted.size(); ++i)
    for (std::size_t j = i; j > 0 && sorted[j].second < sorted[j - 1].second; --j) std::swap(sorted[j], sorted[j - 1]);
  std::int64_t span = 1;
  for (const auto& [extent, stride] : sorted) {
    if (extent == 1) continue;
    if (stride < span) {
      problems.push_back(std::string("output ") + name + " has overlapping strides (an axis of stride " +
                         std::to_string(stride) + " inside a span of " + std::to_string(span) +
                         " elements); outputs need non-overlapping strides");
      return;
    }
    span = stride * extent;
  }
}

}  // namespace

std::span<const AttentionTensor> strided_attention_tensors(bool backward) {
  static constexpr AttentionTensor tensors[] = {
      AttentionTensor::q,      AttentionTensor::k,      AttentionTensor::v,      AttentionTensor::o,
      AttentionTensor::grad_o, AttentionTensor::grad_q, AttentionTensor::grad_k, AttentionTensor::grad_v};
  return std::span(tensors).first(backward ? 8 : 4);
}

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

AttentionExtents attention_extents(const hal_attention_params_v1& params, AttentionTensor tensor) {
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

const hal_tensor_strides_v1& attention_strides(const hal_attention_params_v1& params, AttentionTensor tensor) {
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
  static const hal_tensor_strides_v1 none{};
  return none;
}

std::uint64_t attention_tensor_bytes(const hal_attention_params_v1& params, AttentionTensor tensor) {
  const AttentionExtents extents = attention_extents(params, tensor);
  if (tensor == AttentionTensor::lse || tensor == AttentionTensor::key_ranges)  // contiguous, 4-byte elements
    return static_cast<std::uint64_t>(extents.batch * extents.heads * extents.seq * extents.dim) * 4;
  const hal_tensor_strides_v1& strides = attention_strides(params, tensor);
  const std::int64_t last_element = (extents.batch - 1) * strides.batch + (extents.heads - 1) * strides.head +
                                    (extents.seq - 1) * strides.seq + (extents.dim - 1) * strides.dim;
  return static_cast<std::uint64_t>(last_element + 1) * element_size(params.dtype);
}

double attention_flops(const hal_attention_params_v1& params, bool backward) {
  double pairs = 0.0;
  for (std::int64_t query = 0; query < params.seq_q; ++query) {
    const KeyRange range = visible_keys(params, query);
    if (range.first <= range.last) pairs += static_cast<double>(range.last - range.first + 1);
  }
  pairs *= static_cast<double>(params.batch * params.heads_q);
  const double dims = backward ? 3.0 * params.head_dim_qk + 2.0 * params.head_dim_v
                               : static_cast<double>(params.head_dim_qk + params.head_dim_v);
  return 2.0 * pairs * dims;
}

std::vector<std::string> attention_problems(const hal_attention_params_v1& params, bool backward) {
  std::vector<std::string> problems;
  auto add = [&problems](auto&&... parts) {
    std::ostringstream problem;
    (problem << ... << parts);
    problems.push_back(problem.str());
  };
  if (params.struct_size < HAL_ATTENTION_PARAMS_V1_MIN_SIZE) {
    add("struct_size (", params.struct_size, ") is smaller than hal_attention_params_v1 (",
        HAL_ATTENTION_PARAMS_V1_MIN_SIZE, " bytes)");
    return problems;  // the fields past struct_size are not there to check
  }
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"batch", params.batch},          {"heads_q", params.heads_q}, {"heads_kv", params.heads_kv},
      {"seq_q", params.seq_q},          {"seq_kv", params.seq_kv},   {"head_dim_qk", params.head_dim_qk},
      {"head_dim_v", params.head_dim_v}};
  bool sizes_positive = true;
  for (const auto& [name, value] : sizes) {
    if (value > 0) continue;
    add(name, " (", value, ") must be positive");
    sizes_positive = false;
  }
  if (params.heads_q > 0 && params.heads_kv > 0 && params.heads_q % params.heads_kv != 0)
    add("heads_q (", params.heads_q, ") is not a multiple of heads_kv (", params.heads_kv,
        "): grouped-query attention shares each kv head among the same number of query heads");
  const auto dtype = raw_value(params.dtype);
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16) {
    if (dtype >= HAL_DTYPE_F32 && dtype <= HAL_DTYPE_I64)
      add("dtype ", dtype_name(params.dtype), " is not supported: use f32, f16 or bf16");
    else
      add("dtype (", static_cast<long long>(dtype), ") is not a hal_dtype: use f32, f16 or bf16");
  }
  if (params.causal != 0 && params.causal != 1) add("causal (", params.causal, ") must be 0 or 1");
  const auto alignment = raw_value(params.alignment);
  if (alignment != HAL_MASK_TOP_LEFT && alignment != HAL_MASK_BOTTOM_RIGHT)
    add("alignment (", static_cast<long long>(alignment),
        ") must be HAL_MASK_TOP_LEFT (0) or HAL_MASK_BOTTOM_RIGHT (1)");
  if (params.window_left < -1) add("window_left (", params.window_left, ") must be -1 (unbounded) or at least 0");
  if (params.window_right < -1) add("window_right (", params.window_right, ") must be -1 (unbounded) or at least 0");
  if (!std::isfinite(params.softmax_scale) || params.softmax_scale == 0.0f)
    add("softmax_scale (", params.softmax_scale, ") must be finite and not 0");
  if (params.return_lse != 0 && params.return_lse != 1) add("return_lse (", params.return_lse, ") must be 0 or 1");
  if (!sizes_positive) return problems;  // strides are judged against the extents
  for (const AttentionTensor tensor : strided_attention_tensors(backward)) {
    const bool written = tensor == AttentionTensor::o || tensor == AttentionTensor::grad_q ||
                         tensor == AttentionTensor::grad_k || tensor == AttentionTensor::grad_v;
    check_strides(params, tensor, written, problems);
  }
  return problems;
}

}  // namespace hal::abi
