#include "reduction.hpp"

#include "dtype_codes.hpp"

namespace hal::host {

void widen_to_f32(hal_dtype dtype, const void* source, float* destination, std::size_t count) {
  if (dtype == HAL_DTYPE_F16) {
    const auto* halves = static_cast<const _Float16*>(source);
    for (std::size_t i = 0; i < count; ++i) destination[i] = static_cast<float>(halves[i]);
  } else {
    const auto* halves = static_cast<const std::uint16_t*>(source);
    for (std::size_t i = 0; i < count; ++i) destination[i] = abi::bf16_bits_to_float(halves[i]);
  }
}

void narrow_from_f32(hal_dtype dtype, const float* source, void* destination, std::size_t count) {
  if (dtype == HAL_DTYPE_F16) {
    auto* halves = static_cast<_Float16*>(destination);  // the conversion rounds to nearest even
    for (std::size_t i = 0; i < count; ++i) halves[i] = static_cast<_Float16>(source[i]);
  } else {
    auto* halves = static_cast<std::uint16_t*>(destination);
    for (std::size_t i = 0; i < count; ++i) halves[i] = abi::float_to_bf16_bits(source[i]);
  }
}

}  // namespace hal::host
