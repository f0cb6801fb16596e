// Flash kernels for AVX-512 with AVX512-BF16 (no AMX): the tile products of
// flash_tiles_impl.hpp as vdpbf16ps dot products, each a pair of bf16 times
// a pair, summed into f32: twice the multiplies of an f32 FMA per
// instruction. This unit is compiled with the AVX-512 and AVX512-BF16 -m
// flags and only called after the CPU reports them (flash_isa_supported).
#include "attention/flash_tiles_impl.hpp"

namespace hal::host::flash {
namespace {

// 8 rows x Cols vectors of C (16 f32 each) over `pairs` depth pairs: per
// pair, Cols loads of B and one broadcast pair of A per row (folded into the
// dot product as a memory operand); 8 x 2 = 16 independent sums.
template <int Cols>
HAL_ALWAYS_INLINE void dot_block(const char* a, std::int64_t lda, const char* b, std::int64_t ldb, char* c,
                                 std::int64_t ldc, std::int64_t pairs, bool accumulate) {
  constexpr int kRows = 8;
  __m512 sums[kRows][Cols];
  HAL_FLASH_UNROLL for (int row = 0; row < kRows; ++row) {
    HAL_FLASH_UNROLL for (int col = 0; col < Cols; ++col) {
      sums[row][col] =
          accumulate ? _mm512_loadu_ps(reinterpret_cast<const float*>(c + row * ldc) + col * 16) : _mm512_setzero_ps();
    }
  }
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    __m512i columns[Cols];
    HAL_FLASH_UNROLL for (int col = 0; col < Cols; ++col) columns[col] =
        _mm512_loadu_si512(b + pair * ldb + col * kTileBytes);
    HAL_FLASH_UNROLL for (int row = 0; row < kRows; ++row) {
      std::int32_t word;
      __builtin_memcpy(&word, a + row * lda + pair * 4, sizeof(word));
      const __m512i a_pair = _mm512_set1_epi32(word);
      HAL_FLASH_UNROLL for (int col = 0; col < Cols; ++col) {
        sums[row][col] = _mm512_dpbf16_ps(sums[row][col], reinterpret_cast<const __m512bh&>(a_pair),
                                          reinterpret_cast<const __m512bh&>(columns[col]));
      }
    }
  }
  HAL_FLASH_UNROLL for (int row = 0; row < kRows; ++row) {
    HAL_FLASH_UNROLL for (int col = 0; col < Cols; ++col) {
      _mm512_storeu_ps(reinterpret_cast<float*>(c + row * ldc) + col * 16, sums[row][col]);
    }
  }
}

struct DotTiles {
  static void begin() {}
  static void end() {}
  static void gemm(const std::uint16_t* a, std::int64_t lda, std::int64_t row_tiles, const std::uint32_t* b,
                   std::int64_t ldb, std::int64_t col_tiles, float* c, std::int64_t ldc, std::int64_t steps,
                   bool accumulate) {
    constexpr std::int64_t kRows = 8;
    const char* a_bytes = reinterpret_cast<const char*>(a);
    const char* b_bytes = reinterpret_cast<const char*>(b);
    char* c_bytes = reinterpret_cast<char*>(c);
    const std::int64_t pairs = steps * kTileDepthBf16 / 2;
    for (std::int64_t row = 0; row < row_tiles * kTileRows; row += kRows) {
      for (std::int64_t col = 0; col < col_tiles; col += 2) {
        const char* a_block = a_bytes + row * lda;
        const char* b_block = b_bytes + col * kTileBytes;
        char* c_block = c_bytes + row * ldc + col * kTileBytes;
        if (col + 1 < col_tiles) {
          dot_block<2>(a_block, lda, b_block, ldb, c_block, ldc, pairs, accumulate);
        } else {
          dot_block<1>(a_block, lda, b_block, ldb, c_block, ldc, pairs, accumulate);
        }
      }
    }
  }
};

}  // namespace

const KernelTable kernels_avx512bf16 = make_tile_table<DotTiles>();

}  // namespace hal::host::flash
