// Flash kernels for AVX-512 with AMX-BF16 tiles: the tile products of
// flash_tiles_impl.hpp on AMX tiles (2 x 2 blocks of 16 x 16 C tiles). This
// unit is compiled with the AVX-512, AVX512-BF16 and AMX -m flags and only
// called after the CPU reports them and Linux has granted the process the
// tile state (flash_isa_supported).
#include "attention/flash_tiles_impl.hpp"

namespace hal::host::flash {
namespace {

// ldtilecfg's operand (palette 1): tiles 0-3 hold a 2 x 2 block of C, 4 and
// 5 two row tiles of A, 6 and 7 two column tiles of B; all 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t column_bytes[16];
  std::uint8_t rows[16];
};

HAL_ALWAYS_INLINE void configure_tiles() {
  TileConfig config{};
  config.palette = 1;
  for (int tile = 0; tile < 8; ++tile) {
    config.column_bytes[tile] = kTileBytes;
    config.rows[tile] = kTileRows;
  }
  _tile_loadconfig(&config);
}

// Tiles::gemm's product for a block of Rows x Cols C tiles (each 1 or 2).
template <int Rows, int Cols>
HAL_ALWAYS_INLINE void tile_block(const char* a, std::int64_t lda, const char* b, std::int64_t ldb, char* c,
                                  std::int64_t ldc, std::int64_t steps, bool accumulate) {
  char* c_low = c + kTileRows * ldc;
  if (accumulate) {
    _tile_loadd(0, c, ldc);
    if constexpr (Cols > 1) _tile_loadd(1, c + kTileBytes, ldc);
    if constexpr (Rows > 1) _tile_loadd(2, c_low, ldc);
    if constexpr (Rows > 1 && Cols > 1) _tile_loadd(3, c_low + kTileBytes, ldc);
  } else {
    _tile_zero(0);
    if constexpr (Cols > 1) _tile_zero(1);
    if constexpr (Rows > 1) _tile_zero(2);
    if constexpr (Rows > 1 && Cols > 1) _tile_zero(3);
  }
  for (std::int64_t step = 0; step < steps; ++step) {
    const char* a_step = a + step * kTileBytes;
    const char* b_step = b + step * kTileRows * ldb;
    _tile_loadd(4, a_step, lda);
    if constexpr (Rows > 1) _tile_loadd(5, a_step + kTileRows * lda, lda);
    _tile_loadd(6, b_step, ldb);
    if constexpr (Cols > 1) _tile_loadd(7, b_step + kTileBytes, ldb);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (Cols > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (Rows > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (Rows > 1 && Cols > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, ldc);
  if constexpr (Cols > 1) _tile_stored(1, c + kTileBytes, ldc);
  if constexpr (Rows > 1) _tile_stored(2, c_low, ldc);
  if constexpr (Rows > 1 && Cols > 1) _tile_stored(3, c_low + kTileBytes, ldc);
}

// The tile products of flash_tiles_impl.hpp: 2 x 2 blocks of C tiles.
struct AmxTiles {
  static void begin() { configure_tiles(); }
  static void end() { _tile_release(); }
  static void gemm(const std::uint16_t* a, std::int64_t lda, std::int64_t row_tiles, const std::uint32_t* b,
                   std::int64_t ldb, std::int64_t col_tiles, float* c, std::int64_t ldc, std::int64_t steps,
                   bool accumulate) {
    const char* a_bytes = reinterpret_cast<const char*>(a);
    const char* b_bytes = reinterpret_cast<const char*>(b);
    char* c_bytes = reinterpret_cast<char*>(c);
    for (std::int64_t row = 0; row < row_tiles; row += 2) {
      for (std::int64_t col = 0; col < col_tiles; col += 2) {
        const char* a_block = a_bytes + row * kTileRows * lda;
        const char* b_block = b_bytes + col * kTileBytes;
        char* c_block = c_bytes + row * kTileRows * ldc + col * kTileBytes;
        const bool two_rows = row + 1 < row_tiles;
        const bool two_cols = col + 1 < col_tiles;
        if (two_rows && two_cols) {
          tile_block<2, 2>(a_block, lda, b_block, ldb, c_block, ldc, steps, accumulate);
        } else if (two_rows) {
          tile_block<2, 1>(a_block, lda, b_block, ldb, c_block, ldc, steps, accumulate);
        } else if (two_cols) {
          tile_block<1, 2>(a_block, lda, b_block, ldb, c_block, ldc, steps, accumulate);
        } else {
          tile_block<1, 1>(a_block, lda, b_block, ldb, c_block, ldc, steps, accumulate);
        }
      }
    }
  }
};

}  // namespace

const KernelTable kernels_amx = make_tile_table<AmxTiles>();

}  // namespace hal::host::flash
