// Element types shared by attention and collectives.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "hal/backend_abi.h"

namespace hal {

enum class DType {
  f32 = HAL_DTYPE_F32,
  f16 = HAL_DTYPE_F16,
  bf16 = HAL_DTYPE_BF16,
  f64 = HAL_DTYPE_F64,
  i8 = HAL_DTYPE_I8,
  u8 = HAL_DTYPE_U8,
  i32 = HAL_DTYPE_I32,
  i64 = HAL_DTYPE_I64,
};

std::string_view to_string(DType dtype);  // "f32", "bf16", ...
std::size_t size_in_bytes(DType dtype);
std::optional<DType> parse_dtype(std::string_view text);  // accepts the to_string names

}  // namespace hal
