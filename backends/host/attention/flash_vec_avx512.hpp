// The AVX-512 vector type of the flash kernels (flash_kernels_impl.hpp's
// V), shared by the AVX-512 unit and the AMX unit built on it; only units
// compiled with AVX-512 flags include this.
#pragma once

// GCC 12 reports its own _mm512_undefined_* placeholders inside the
// intrinsic headers as uninitialized (GCC bug 105593); silence only those lines.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace hal::host::flash {
namespace {

struct VecAvx512 {
  using Reg = __m512;
  static constexpr int width = 16;
  // 6 x 4 accumulators + 4 B loads = 28 of the 32 zmm registers (the A
  // broadcasts fold into the FMAs as memory operands): 24 independent FMA
  // chains, and 10 loads per 24 FMAs where 8 x 2 needed 10 per 16, which
  // measured 20-40% faster at seq 2048.
  static constexpr int tile_rows = 6;
  static constexpr int tile_vectors = 4;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* source) { return _mm512_loadu_ps(source); }
  static void store(float* destination, Reg value) { _mm512_storeu_ps(destination, value); }
  static Reg broadcast(float value) { return _mm512_set1_ps(value); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static float reduce_add(Reg value) { return _mm512_reduce_add_ps(value); }
  static float reduce_max(Reg value) { return _mm512_reduce_max_ps(value); }
  static Reg pow2_integer(Reg exponent) {
    const __m512i biased = _mm512_add_epi32(_mm512_cvtps_epi32(exponent), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(biased, 23));
  }
  static Reg load_f16(const std::uint16_t* source) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(source)));
  }
  static Reg load_bf16(const std::uint16_t* source) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(source)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static void store_f16(std::uint16_t* destination, Reg value) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(destination),
                        _mm512_cvtps_ph(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store_bf16(std::uint16_t* destination, Reg value) {
    // Round to nearest even on the bits; a NaN keeps its top bits, made quiet.
    const __m512i bits = _mm512_castps_si512(value);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __m512i quiet_nan = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(value, value, _CMP_UNORD_Q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(destination),
                        _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet_nan)));
  }
};

}  // namespace
}  // namespace hal::host::flash
