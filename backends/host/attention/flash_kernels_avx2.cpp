// Flash kernels for AVX2 + FMA + F16C; this unit is compiled with -mavx2
// -mfma -mf16c and only called after the CPU reports all three.
#include <immintrin.h>

#include <cstdint>

#include "attention/flash_kernels_impl.hpp"

namespace hal::host::flash {
namespace {

struct VecAvx2 {
  using Reg = __m256;
  static constexpr int width = 8;
  // 6 x 2 accumulators + 2 B loads + 1 broadcast fit the 16 ymm registers;
  // 12 independent FMA chains cover latency x ports with room to spare.
  static constexpr int tile_rows = 6;
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
  static Reg load_f16(const std::uint16_t* source) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source)));
  }
  static Reg load_bf16(const std::uint16_t* source) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(source)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static void store_f16(std::uint16_t* destination, Reg value) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(destination),
                     _mm256_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store_bf16(std::uint16_t* destination, Reg value) {
    // Round to nearest even on the bits; a NaN keeps its top bits, made quiet.
    const __m256i bits = _mm256_castps_si256(value);
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(value, value, _CMP_UNORD_Q));
    const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(destination),
                     _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1)));
  }
};

}  // namespace

const KernelTable kernels_avx2 = make_kernel_table<VecAvx2>();

}  // namespace hal::host::flash
