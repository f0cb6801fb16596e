// Flash kernels for AVX2 + FMA; this unit is compiled with -mavx2 -mfma and
// only called after the CPU reports both.
#include <immintrin.h>

#include "attention/flash_kernels_impl.hpp"

namespace hal::host::flash {
namespace {

struct VecAvx2 {
  using Reg = __m256;
  static constexpr int width = 8;
  // 4 x 2 accumulators + 2 B loads + 1 broadcast fit the 16 ymm registers.
  static constexpr int tile_rows = 4;
  static constexpr int tile_vectors = 2;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* source) { return _mm256_loadu_ps(source); }
  static void store(float* destination, Reg value) { _mm256_storeu_ps(destination, value); }
  static Reg broadcast(float value) { return _mm256_set1_ps(value); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static float reduce_add(Reg value) {
    __m128 sum = _mm_add_ps(_mm256_castps256_ps128(value), _mm256_extractf128_ps(value, 1));
    sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
    return _mm_cvtss_f32(sum);
  }
  static float reduce_max(Reg value) {
    __m128 best = _mm_max_ps(_mm256_castps256_ps128(value), _mm256_extractf128_ps(value, 1));
    best = _mm_max_ps(best, _mm_movehl_ps(best, best));
    best = _mm_max_ss(best, _mm_movehdup_ps(best));
    return _mm_cvtss_f32(best);
  }
  static Reg pow2_integer(Reg exponent) {
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(exponent), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  }
};

}  // namespace

const KernelTable kernels_avx2 = make_kernel_table<VecAvx2>();

}  // namespace hal::host::flash
