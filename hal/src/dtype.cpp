#include "hal/dtype.hpp"

#include <array>
#include <string>

#include "abi.hpp"
#include "dtype_codes.hpp"
#include "hal/status.hpp"

namespace hal {
namespace {

// The names other frameworks use for each type; hal's own name and size are
// the ABI's dtype codes' (abi/dtype_codes.hpp), said there once.
struct DTypeAliases {
  DType dtype;
  std::array<std::string_view, 3> aliases;  // "" where a type has fewer
};

constexpr std::array dtype_aliases{
    DTypeAliases{DType::f32, {"float32", "float", "fp32"}},
    DTypeAliases{DType::f16, {"float16", "half", "fp16"}},
    DTypeAliases{DType::bf16, {"bfloat16", "", ""}},
    DTypeAliases{DType::f64, {"float64", "double", "fp64"}},
    DTypeAliases{DType::i8, {"int8", "char", ""}},
    DTypeAliases{DType::u8, {"uint8", "", ""}},
    DTypeAliases{DType::i32, {"int32", "int", ""}},
    DTypeAliases{DType::i64, {"int64", "long", ""}},
};

}  // namespace

std::string_view to_string(DType dtype) { return abi::dtype_name(detail::to_abi(dtype)); }

std::size_t size_in_bytes(DType dtype) {
  const std::size_t size = abi::element_size(detail::to_abi(dtype));
  if (size == 0)
    throw Error(StatusCode::invalid_argument,
                "dtype code " + std::to_string(static_cast<std::uint32_t>(dtype)) + " is not a hal::DType");
  return size;
}

bool is_floating_point(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f64;
}

std::optional<DType> parse_dtype(std::string_view text) {
  for (const auto& entry : dtype_aliases) {
    if (to_string(entry.dtype) == text) return entry.dtype;
    for (const auto alias : entry.aliases)
      if (!alias.empty() && alias == text) return entry.dtype;
  }
  return std::nullopt;
}

DType require_dtype(std::string_view text) {
  if (auto dtype = parse_dtype(text)) return *dtype;
  std::string known;
  for (const auto& entry : dtype_aliases) known += (known.empty() ? "" : ", ") + std::string(to_string(entry.dtype));
  throw Error(StatusCode::invalid_argument, "dtype '" + std::string(text) + "' is not known; use one of " + known +
                                                " (or float32, half, bfloat16, int64, ...)");
}

}  // namespace hal
