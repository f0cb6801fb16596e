// Flash kernels for AVX-512 (F, BW, VL) + FMA; this unit is compiled with
// those -m flags and only called after the CPU reports them.
// GCC 12 reports its own _mm512_undefined_* placeholders inside the
// intrinsic headers as uninitialized (GCC bug 105593); silence only those lines.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include "attention/flash_kernels_impl.hpp"

namespace hal::host::flash {
namespace {

struct VecAvx512 {
  using Reg = __m512;
  static constexpr int width = 16;
  // 8 x 2 accumulators: 16 independent FMA chains cover latency x ports, and
  // the A broadcasts fold into the FMAs as memory operands.
  static constexpr int tile_rows = 8;
  static constexpr int tile_vectors = 2;
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
};

}  // namespace

const KernelTable kernels_avx512 = make_kernel_table<VecAvx512>();

}  // namespace hal::host::flash
