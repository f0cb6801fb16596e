// Element-wise reductions and the f16/bf16 <-> f32 conversions collectives use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>

#include "hal/backend_abi.h"

namespace hal::host {

// f16 and bf16 are reduced in f32 and rounded once, to nearest even.
void widen_to_f32(hal_dtype dtype, const void* source, float* destination, std::size_t count);
void narrow_from_f32(hal_dtype dtype, const float* source, void* destination, std::size_t count);

// c[i] = a[i] op b[i]; c may alias a or b. Integers wrap on overflow (the
// arithmetic runs unsigned) instead of being undefined.
using ReductionFunction = std::function<void(void*, const void*, const void*, std::size_t)>;

template <typename T, typename Combine>
void combine_elements(void* c, const void* a, const void* b, std::size_t n, Combine combine) {
  auto* out = static_cast<T*>(c);
  const auto* left = static_cast<const T*>(a);
  const auto* right = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) out[i] = combine(left[i], right[i]);
}

template <typename T, bool integral = std::is_integral_v<T>>
struct ArithmeticOf {
  using type = T;
};
template <typename T>
struct ArithmeticOf<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
ReductionFunction reduction_function(hal_reduce_op op) {
  using Arithmetic = typename ArithmeticOf<T>::type;
  switch (op) {
    case HAL_REDUCE_PROD:
      return [](void* c, const void* a, const void* b, std::size_t n) {
        combine_elements<T>(c, a, b, n, [](T x, T y) {
          return static_cast<T>(static_cast<Arithmetic>(x) * static_cast<Arithmetic>(y));
        });
      };
    case HAL_REDUCE_MIN:
      return [](void* c, const void* a, const void* b, std::size_t n) {
        combine_elements<T>(c, a, b, n, [](T x, T y) { return std::min(x, y); });
      };
    case HAL_REDUCE_MAX:
      return [](void* c, const void* a, const void* b, std::size_t n) {
        combine_elements<T>(c, a, b, n, [](T x, T y) { return std::max(x, y); });
      };
    case HAL_REDUCE_SUM:
    case HAL_REDUCE_AVG:  // summed, divided afterwards
      break;
  }
  return [](void* c, const void* a, const void* b, std::size_t n) {
    combine_elements<T>(c, a, b, n, [](T x, T y) {
      return static_cast<T>(static_cast<Arithmetic>(x) + static_cast<Arithmetic>(y));
    });
  };
}

// avg = sum / ranks; integers truncate toward zero, as NCCL's do.
template <typename T>
void divide_by(T* values, std::size_t count, int divisor) {
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / static_cast<T>(divisor));
}

}  // namespace hal::host
