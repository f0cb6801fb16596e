// The loops behind ShmKernels. Every function is a member of a template on
// the instruction set, so each kernel unit's copy has its own name and the
// linker cannot hand an AVX-512 copy to a caller on another CPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtype_codes.hpp"
#include "reduction.hpp"
#include "shm_kernels.hpp"

namespace hal::host {

template <typename Isa>
struct ShmLoops {
  // Integers combine unsigned, so that overflow wraps instead of being undefined.
  template <typename T, hal_reduce_op Op>
  static T apply(T x, T y) {
    using A = typename ArithmeticOf<T>::type;
    if constexpr (Op == HAL_REDUCE_PROD)
      return static_cast<T>(static_cast<A>(x) * static_cast<A>(y));
    else if constexpr (Op == HAL_REDUCE_MIN)
      return y < x ? y : x;
    else if constexpr (Op == HAL_REDUCE_MAX)
      return x < y ? y : x;
    else
      return static_cast<T>(static_cast<A>(x) + static_cast<A>(y));
  }

  // Separate loops for the in-place case keep both free of aliasing, so
  // both vectorise.
  template <typename T, hal_reduce_op Op>
  static void into(T* __restrict out, const T* __restrict b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = apply<T, Op>(out[i], b[i]);
  }
  template <typename T, hal_reduce_op Op>
  static void apart(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = apply<T, Op>(a[i], b[i]);
  }

  template <typename T, hal_reduce_op Op>
  static void typed(void* out, const void* a, const void* b, std::size_t n) {
    auto* o = static_cast<T*>(out);
    const auto* x = static_cast<const T*>(a);
    const auto* y = static_cast<const T*>(b);
    if (o == x)
      into<T, Op>(o, y, n);
    else if (o == y)
      into<T, Op>(o, x, n);  // every op commutes
    else
      apart<T, Op>(o, x, y, n);
  }

  template <typename T>
  static void by_op(hal_reduce_op op, void* out, const void* a, const void* b, std::size_t n) {
    switch (op) {
      case HAL_REDUCE_PROD: return typed<T, HAL_REDUCE_PROD>(out, a, b, n);
      case HAL_REDUCE_MIN: return typed<T, HAL_REDUCE_MIN>(out, a, b, n);
      case HAL_REDUCE_MAX: return typed<T, HAL_REDUCE_MAX>(out, a, b, n);
      case HAL_REDUCE_SUM:
      case HAL_REDUCE_AVG: break;
    }
    typed<T, HAL_REDUCE_SUM>(out, a, b, n);
  }

  static void combine(hal_dtype type, hal_reduce_op op, void* out, const void* a, const void* b, std::size_t n) {
    switch (type) {
      case HAL_DTYPE_F64: return by_op<double>(op, out, a, b, n);
      case HAL_DTYPE_I8: return by_op<std::int8_t>(op, out, a, b, n);
      case HAL_DTYPE_U8: return by_op<std::uint8_t>(op, out, a, b, n);
      case HAL_DTYPE_I32: return by_op<std::int32_t>(op, out, a, b, n);
      case HAL_DTYPE_I64: return by_op<std::int64_t>(op, out, a, b, n);
      case HAL_DTYPE_F32:
      case HAL_DTYPE_F16:
      case HAL_DTYPE_BF16: break;
    }
    by_op<float>(op, out, a, b, n);
  }

  static void widen(hal_dtype half, const void* in, float* __restrict out, std::size_t n) {
    if (half == HAL_DTYPE_F16) {
      const auto* __restrict x = static_cast<const _Float16*>(in);
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i]);
    } else {
      const auto* __restrict x = static_cast<const std::uint16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) out[i] = abi::bf16_bits_to_float(x[i]);
    }
  }

  static void narrow(hal_dtype half, const float* __restrict in, void* out, std::size_t n) {
    if (half == HAL_DTYPE_F16) {
      auto* __restrict y = static_cast<_Float16*>(out);
      for (std::size_t i = 0; i < n; ++i) y[i] = static_cast<_Float16>(in[i]);
    } else {
      auto* __restrict y = static_cast<std::uint16_t*>(out);
      for (std::size_t i = 0; i < n; ++i) y[i] = abi::float_to_bf16_bits(in[i]);
    }
  }

  static constexpr ShmKernels table(const char* name) { return {name, &combine, &widen, &narrow}; }
};

}  // namespace hal::host
