#include "reduction.hpp"

#include <cstring>

namespace hal::host {
namespace {

float bf16_to_f32(std::uint16_t bits) {
  const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

std::uint16_t f32_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // to nearest, ties to even
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

}  // namespace

void widen_to_f32(hal_dtype dtype, const void* source, float* destination, std::size_t count) {
  if (dtype == HAL_DTYPE_F16) {
    const auto* halves = static_cast<const _Float16*>(source);
    for (std::size_t i = 0; i < count; ++i) destination[i] = static_cast<float>(halves[i]);
  } else {
    const auto* halves = static_cast<const std::uint16_t*>(source);
    for (std::size_t i = 0; i < count; ++i) destination[i] = bf16_to_f32(halves[i]);
  }
}

void narrow_from_f32(hal_dtype dtype, const float* source, void* destination, std::size_t count) {
  if (dtype == HAL_DTYPE_F16) {
    auto* halves = static_cast<_Float16*>(destination);  // the conversion rounds to nearest even
    for (std::size_t i = 0; i < count; ++i) halves[i] = static_cast<_Float16>(source[i]);
  } else {
    auto* halves = static_cast<std::uint16_t*>(destination);
    for (std::size_t i = 0; i < count; ++i) halves[i] = f32_to_bf16(source[i]);
  }
}

}  // namespace hal::host
