// The ABI's element types, said once: name, size, half-ness, and the IEEE
// binary16 (f16) and bfloat16 (bf16) conversions. libhal, every plugin, the
// conformance reference and the tools use these; no other copy exists.
//
// Every function here is always_inline: this header is included by
// translation units compiled for different instruction sets (the host's
// flash kernels), and an out-of-line copy emitted by the AVX-512 unit could
// otherwise be picked by the linker for callers on any CPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hal/backend_abi.h"

#define HAL_ALWAYS_INLINE inline __attribute__((always_inline))

namespace hal::abi {

// "f32", "bf16", ...; "unknown" for a code outside the enumeration.
HAL_ALWAYS_INLINE const char* dtype_name(hal_dtype dtype) {
  switch (static_cast<int>(dtype)) {  // a C caller may send any integer
    case HAL_DTYPE_F32: return "f32";
    case HAL_DTYPE_F16: return "f16";
    case HAL_DTYPE_BF16: return "bf16";
    case HAL_DTYPE_F64: return "f64";
    case HAL_DTYPE_I8: return "i8";
    case HAL_DTYPE_U8: return "u8";
    case HAL_DTYPE_I32: return "i32";
    case HAL_DTYPE_I64: return "i64";
  }
  return "unknown";
}

// Bytes of one element; 0 for a code outside the enumeration.
HAL_ALWAYS_INLINE std::size_t element_size(hal_dtype dtype) {
  switch (static_cast<int>(dtype)) {
    case HAL_DTYPE_F32:
    case HAL_DTYPE_I32: return 4;
    case HAL_DTYPE_F64:
    case HAL_DTYPE_I64: return 8;
    case HAL_DTYPE_F16:
    case HAL_DTYPE_BF16: return 2;
    case HAL_DTYPE_I8:
    case HAL_DTYPE_U8: return 1;
  }
  return 0;
}

// f16 and bf16: stored in 16 bits, computed in f32.
HAL_ALWAYS_INLINE bool is_half(hal_dtype dtype) { return dtype == HAL_DTYPE_F16 || dtype == HAL_DTYPE_BF16; }

HAL_ALWAYS_INLINE std::uint32_t float_bits(float value) { return __builtin_bit_cast(std::uint32_t, value); }

HAL_ALWAYS_INLINE float float_from_bits(std::uint32_t bits) { return __builtin_bit_cast(float, bits); }

// Round to nearest, ties to even. Overflow gives +-inf, NaN stays a (quiet)
// NaN with its sign, values below the smallest subnormal round to +-0.
HAL_ALWAYS_INLINE std::uint16_t float_to_f16_bits(float value) {
  constexpr std::uint32_t f32_infinity = 255u << 23;
  constexpr std::uint32_t f16_overflow = (127u + 16u) << 23;  // 65536.0f
  constexpr std::uint32_t f16_smallest_normal = 113u << 23;   // 2^-14
  // Adding this float shifts a sub-2^-14 value so that the FPU's own
  // round-to-nearest-even lands the f16 subnormal mantissa in the low bits.
  constexpr std::uint32_t subnormal_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;

  std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  std::uint16_t result;
  if (bits >= f16_overflow) {
    result = bits > f32_infinity ? 0x7e00u : 0x7c00u;
  } else if (bits < f16_smallest_normal) {
    const float shifted = float_from_bits(bits) + float_from_bits(subnormal_magic);
    result = static_cast<std::uint16_t>(float_bits(shifted) - subnormal_magic);
  } else {
    const std::uint32_t mantissa_is_odd = (bits >> 13) & 1u;
    bits += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu;  // rebias, round half down
    bits += mantissa_is_odd;                                        // ... ties to even
    result = static_cast<std::uint16_t>(bits >> 13);
  }
  return static_cast<std::uint16_t>(result | (sign >> 16));
}

HAL_ALWAYS_INLINE float f16_bits_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return float_from_bits(float_bits(magnitude) | sign);
  }
  if (exponent == 31) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even; NaN stays a quiet NaN with its sign.
HAL_ALWAYS_INLINE std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

HAL_ALWAYS_INLINE float bf16_bits_to_float(std::uint16_t bf16) {
  return float_from_bits(static_cast<std::uint32_t>(bf16) << 16);
}

}  // namespace hal::abi
