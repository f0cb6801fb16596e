#include "hal/dtype.hpp"

#include <array>
#include <string>

#include "hal/status.hpp"

namespace hal {
namespace {

struct DTypeNames {
  DType dtype;
  std::string_view name;
  std::size_t size;
  std::array<std::string_view, 3> aliases;  // "" where a type has fewer
};

constexpr std::array dtype_names{
    DTypeNames{DType::f32, "f32", 4, {"float32", "float", "fp32"}},
    DTypeNames{DType::f16, "f16", 2, {"float16", "half", "fp16"}},
    DTypeNames{DType::bf16, "bf16", 2, {"bfloat16", "", ""}},
    DTypeNames{DType::f64, "f64", 8, {"float64", "double", "fp64"}},
    DTypeNames{DType::i8, "i8", 1, {"int8", "char", ""}},
    DTypeNames{DType::u8, "u8", 1, {"uint8", "", ""}},
    DTypeNames{DType::i32, "i32", 4, {"int32", "int", ""}},
    DTypeNames{DType::i64, "i64", 8, {"int64", "long", ""}},
};

const DTypeNames* entry_of(DType dtype) {
  for (const auto& entry : dtype_names)
    if (entry.dtype == dtype) return &entry;
  return nullptr;
}

}  // namespace

std::string_view to_string(DType dtype) {
  const DTypeNames* entry = entry_of(dtype);
  return entry != nullptr ? entry->name : "unknown";
}

std::size_t size_in_bytes(DType dtype) {
  const DTypeNames* entry = entry_of(dtype);
  if (entry == nullptr)
    throw Error(StatusCode::invalid_argument,
                "dtype code " + std::to_string(static_cast<std::uint32_t>(dtype)) + " is not a hal::DType");
  return entry->size;
}

bool is_floating_point(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f64;
}

std::optional<DType> parse_dtype(std::string_view text) {
  for (const auto& entry : dtype_names) {
    if (entry.name == text) return entry.dtype;
    for (const auto alias : entry.aliases)
      if (!alias.empty() && alias == text) return entry.dtype;
  }
  return std::nullopt;
}

DType require_dtype(std::string_view text) {
  if (auto dtype = parse_dtype(text)) return *dtype;
  std::string known;
  for (const auto& entry : dtype_names) known += (known.empty() ? "" : ", ") + std::string(entry.name);
  throw Error(StatusCode::invalid_argument, "dtype '" + std::string(text) + "' is not known; use one of " + known +
                                                " (or float32, half, bfloat16, int64, ...)");
}

}  // namespace hal
