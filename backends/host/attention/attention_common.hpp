// Mask geometry and element access shared by every attention implementation.
// Included by the per-instruction-set kernel units too, hence only
// always_inline functions and plain structs (see hal/abi/dtype_codes.hpp).
#pragma once

#include <cstdint>

#include "attention_contract.hpp"
#include "dtype_codes.hpp"
#include "hal/backend_abi.h"

namespace hal::host {

using abi::bf16_bits_to_float;
using abi::f16_bits_to_float;
using abi::float_to_bf16_bits;
using abi::float_to_f16_bits;

HAL_ALWAYS_INLINE std::int64_t min_i64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
HAL_ALWAYS_INLINE std::int64_t max_i64(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
HAL_ALWAYS_INLINE std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The mask's band (one interval of keys per query), as the ABI defines it.
using abi::KeyRange;
using abi::visible_keys;

// The same with the call's per-query key ranges (int32 [batch, seq_q, 2],
// hal_attention_params_v1's key_ranges) on top; null: none. Ranges need not
// grow with the query index, so blocks of queries bound their keys row by
// row (block_keys in the flash kernels).
HAL_ALWAYS_INLINE KeyRange visible_keys(const hal_attention_params_v1& params, const std::int32_t* key_ranges,
                                      std::int64_t batch, std::int64_t query) {
  KeyRange range = visible_keys(params, query);
  if (key_ranges != nullptr) {
    const std::int32_t* own = key_ranges + (batch * params.seq_q + query) * 2;
    range.first = max_i64(range.first, own[0]);
    range.last = min_i64(range.last, std::int64_t{own[1]} - 1);
  }
  return range;
}

HAL_ALWAYS_INLINE std::int64_t element_offset(const hal_tensor_strides_v1& strides, std::int64_t batch,
                                            std::int64_t head, std::int64_t seq, std::int64_t dim) {
  return batch * strides.batch + head * strides.head + seq * strides.seq + dim * strides.dim;
}

// Element `offset` of a tensor of `dtype` (F32, F16, BF16 or F64) as float.
HAL_ALWAYS_INLINE float load_as_float(hal_dtype dtype, const void* data, std::int64_t offset) {
  switch (dtype) {
    case HAL_DTYPE_F16: return f16_bits_to_float(static_cast<const std::uint16_t*>(data)[offset]);
    case HAL_DTYPE_BF16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[offset]);
    case HAL_DTYPE_F64: return static_cast<float>(static_cast<const double*>(data)[offset]);
    default: return static_cast<const float*>(data)[offset];
  }
}

HAL_ALWAYS_INLINE double load_as_double(hal_dtype dtype, const void* data, std::int64_t offset) {
  if (dtype == HAL_DTYPE_F64) return static_cast<const double*>(data)[offset];
  return load_as_float(dtype, data, offset);
}

HAL_ALWAYS_INLINE void store_float(hal_dtype dtype, void* data, std::int64_t offset, float value) {
  switch (dtype) {
    case HAL_DTYPE_F16: static_cast<std::uint16_t*>(data)[offset] = float_to_f16_bits(value); break;
    case HAL_DTYPE_BF16: static_cast<std::uint16_t*>(data)[offset] = float_to_bf16_bits(value); break;
    case HAL_DTYPE_F64: static_cast<double*>(data)[offset] = value; break;
    default: static_cast<float*>(data)[offset] = value; break;
  }
}

HAL_ALWAYS_INLINE void store_double(hal_dtype dtype, void* data, std::int64_t offset, double value) {
  if (dtype == HAL_DTYPE_F64) {
    static_cast<double*>(data)[offset] = value;
  } else {
    store_float(dtype, data, offset, static_cast<float>(value));
  }
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

}  // namespace hal::host
