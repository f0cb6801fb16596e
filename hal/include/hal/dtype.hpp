// Element types: one vocabulary for attention, collectives and tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hal {

// The values are the plugin ABI's hal_dtype codes (checked in the library).
enum class DType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  bf16 = 2,
  f64 = 3,
  i8 = 4,
  u8 = 5,
  i32 = 6,
  i64 = 7,
};

inline constexpr DType all_dtypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64,
                                       DType::i8,  DType::u8,  DType::i32,  DType::i64};

std::string_view to_string(DType dtype);  // "f32", "bf16", ...
std::size_t size_in_bytes(DType dtype);
bool is_floating_point(DType dtype);
// The to_string names and the spellings users type: "float32", "float",
// "fp32", "half", "float16", "bfloat16", "double", "int8", "uint8", "int",
// "int32", "long", "int64".
std::optional<DType> parse_dtype(std::string_view text);
// As parse_dtype; throws invalid_argument naming the text and the names allowed.
DType require_dtype(std::string_view text);

}  // namespace hal
