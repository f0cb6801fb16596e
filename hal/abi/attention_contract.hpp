// The attention call of backend_abi.h, said once: the tensors a call hands a
// plugin, their extents, strides and bytes, the mask's band, the FLOPs, and
// the check of a hal_attention_params_v1. libhal checks every call with
// attention_problems() before it reaches a plugin; plugins trust what crosses
// the boundary and keep only their own limits (in supports()).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtype_codes.hpp"
#include "hal/backend_abi.h"

namespace hal::abi {

// Forward hands q, k, v, o, lse; backward q, k, v, o, grad_o, lse, grad_q,
// grad_k, grad_v; either adds key_ranges last when params announce them
// (hal_attention_tensor_count).
enum class AttentionTensor { q, k, v, o, lse, grad_o, grad_q, grad_k, grad_v, key_ranges };

struct AttentionExtents {
  std::int64_t batch, heads, seq, dim;
};

const char* attention_tensor_name(AttentionTensor tensor);
// The tensors whose strides params carry, in order: q, k, v, o, then for
// backward grad_o, grad_q, grad_k, grad_v.
std::span<const AttentionTensor> strided_attention_tensors(bool backward);
AttentionExtents attention_extents(const hal_attention_params_v1& params, AttentionTensor tensor);
// lse and key_ranges are contiguous and have no strides in params: all zero.
const hal_tensor_strides_v1& attention_strides(const hal_attention_params_v1& params, AttentionTensor tensor);
// Bytes from the tensor's first element to one past its last.
std::uint64_t attention_tensor_bytes(const hal_attention_params_v1& params, AttentionTensor tensor);

// Keys visible to one query: the mask is a band, so every query sees one
// contiguous interval [first, last], empty when first > last. Both ends are
// non-decreasing in the query index, which lets a block of queries bound
// its keys by its first and last rows. Always inline: the host's per-ISA
// kernel units use it.
struct KeyRange {
  std::int64_t first;
  std::int64_t last;
};

HAL_ALWAYS_INLINE KeyRange visible_keys(const hal_attention_params_v1& params, std::int64_t query) {
  const std::int64_t offset = params.alignment == HAL_MASK_BOTTOM_RIGHT ? params.seq_kv - params.seq_q : 0;
  const std::int64_t position = query + offset;
  KeyRange range{0, params.seq_kv - 1};
  if (params.causal && position < range.last) range.last = position;
  if (params.window_left >= 0 && position - params.window_left > range.first)
    range.first = position - params.window_left;
  if (params.window_right >= 0 && position + params.window_right < range.last)
    range.last = position + params.window_right;
  return range;
}

// 2 x (head_dim_qk + head_dim_v) per visible (query, key) pair of the band
// forward (S = QK^T, then PV); 2 x (3 head_dim_qk + 2 head_dim_v) backward
// (S again, dP, dV, dQ, dK). Per-query key ranges are not counted.
double attention_flops(const hal_attention_params_v1& params, bool backward);

// Every problem of params, each naming the field and its value and what is
// allowed; empty when a call may go to a plugin. Outputs (o, and in backward
// grad_q/k/v) must not overlap themselves.
std::vector<std::string> attention_problems(const hal_attention_params_v1& params, bool backward);

}  // namespace hal::abi
