// Flash kernels for AVX-512 with AMX-BF16 tiles: the bf16 prefill forward
// multiplies Q K^T and P V on AMX tiles (bf16 products, f32 sums); every
// other call (other dtypes, decode, backward) runs the AVX-512 kernels,
// instantiated here as well. This unit is compiled with the AVX-512,
// AVX512-BF16 and AMX -m flags and only called after the CPU reports them
// and Linux has granted the process the tile state (flash_isa_supported).
//
// What changes against the f32 path: Q and K stay bf16 (their products are
// exact in f32), the scores are scaled to the log2 domain in the softmax
// instead of in Q, and P is rounded to bf16 before P V, as flash attention
// does on GPUs; the sums, the softmax and O stay f32.
#include "attention/flash_kernels_impl.hpp"
#include "attention/flash_vec_avx512.hpp"

namespace hal::host::flash {
namespace {

// AVX-512 with one instruction for the rounding to bf16 (AVX512-BF16; tiny
// values flush to zero, which for probabilities in [0, 1] loses nothing).
struct VecAvx512Bf16 : VecAvx512 {
  static void store_bf16(std::uint16_t* destination, Reg value) {
    const __m256bh rounded = _mm512_cvtneps_pbh(value);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(destination), reinterpret_cast<const __m256i&>(rounded));
  }
};
using V = VecAvx512Bf16;

constexpr std::int64_t kTileRows = 16;   // rows of every tile
constexpr std::int64_t kTileBytes = 64;  // bytes of a tile row: 16 f32 of C, 32 bf16 of A, 16 bf16 pairs of B

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

// C (=|+=) A B for a block of Rows x Cols tiles (each 1 or 2): A is bf16,
// row-major (lda bytes a row); B is bf16 in pairs (VNNI): row i holds, for
// each column, the elements of depth 2i and 2i + 1 (ldb bytes a row); C is
// f32 (ldc bytes a row); `steps` depth steps of kTileDepthBf16.
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

// C[row_tiles * 16][col_tiles * 16] (=|+=) A B, operands as tile_block's.
void tile_gemm(const std::uint16_t* a, std::int64_t lda, std::int64_t row_tiles, const std::uint32_t* b,
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

// Whether a forward call runs on the tiles: bf16, a head dim whose padded
// pairs fit the f32 packing's room (>= 16), and a positive scale (the
// softmax scales the row maxima by it).
HAL_ALWAYS_INLINE bool runs_on_tiles(const hal_attention_params_v1& p) {
  return p.dtype == HAL_DTYPE_BF16 && p.head_dim_qk >= 16 && p.softmax_scale > 0.0f;
}

HAL_ALWAYS_INLINE std::uint32_t bf16_pair(std::uint16_t low, std::uint16_t high) {
  return static_cast<std::uint32_t>(low) | (static_cast<std::uint32_t>(high) << 16);
}

// Element `dim` of a row of a bf16 tensor, 0 past `dims`.
HAL_ALWAYS_INLINE std::uint16_t bf16_at(const std::uint16_t* row, std::int64_t stride, std::int64_t dim,
                                        std::int64_t dims) {
  return dim < dims ? row[dim * stride] : std::uint16_t{0};
}

// K^T of keys [key0, key0 + bc) as tile_gemm's B: round_up(head_dim_qk, 32) / 2
// rows of bc words, word (i, key) = dims 2i, 2i + 1 of that key; zero past
// head_dim_qk and seq_kv.
void pack_keys_bf16(const hal_attention_params_v1& p, const void* k, std::int64_t batch, std::int64_t kv_head,
                    std::int64_t key0, std::int64_t bc, std::uint32_t* out) {
  const std::int64_t pairs = round_up(p.head_dim_qk, kTileDepthBf16) / 2;
  const std::int64_t stride = p.k_strides.dim;
  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key0 + column;
    if (key >= p.seq_kv) {
      for (std::int64_t pair = 0; pair < pairs; ++pair) out[pair * bc + column] = 0;
      continue;
    }
    const std::uint16_t* row =
        static_cast<const std::uint16_t*>(k) + element_offset(p.k_strides, batch, kv_head, key, 0);
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      out[pair * bc + column] =
          bf16_pair(bf16_at(row, stride, 2 * pair, p.head_dim_qk), bf16_at(row, stride, 2 * pair + 1, p.head_dim_qk));
    }
  }
}

// V of keys [key0, key0 + bc) as tile_gemm's B of P V: round_up(bc, 32) / 2
// rows of dv_padded words, word (i, dim) = that dim of keys key0 + 2i and
// key0 + 2i + 1; zero past head_dim_v, the block and seq_kv.
void pack_values_bf16(const hal_attention_params_v1& p, const void* v, std::int64_t batch, std::int64_t kv_head,
                      std::int64_t key0, std::int64_t bc, std::int64_t dv_padded, std::uint32_t* out) {
  const std::int64_t end = min_i64(key0 + bc, p.seq_kv);
  const std::int64_t stride = p.v_strides.dim;
  const std::int64_t pairs = round_up(bc, kTileDepthBf16) / 2;
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    const std::int64_t key = key0 + 2 * pair;
    const std::int64_t dims_low = key < end ? p.head_dim_v : 0;
    const std::int64_t dims_high = key + 1 < end ? p.head_dim_v : 0;
    const auto* base = static_cast<const std::uint16_t*>(v);
    const std::uint16_t* low = dims_low > 0 ? base + element_offset(p.v_strides, batch, kv_head, key, 0) : base;
    const std::uint16_t* high = dims_high > 0 ? base + element_offset(p.v_strides, batch, kv_head, key + 1, 0) : base;
    std::uint32_t* out_row = out + pair * dv_padded;
    for (std::int64_t dim = 0; dim < dv_padded; ++dim) {
      out_row[dim] = bf16_pair(bf16_at(low, stride, dim, dims_low), bf16_at(high, stride, dim, dims_high));
    }
  }
}

// Where pack_values_bf16 puts the V of a key block: right after the previous
// block's pairs, so that consecutive blocks form one B operand (the pairs of
// a block, round_up(bc, 32) / 2 rows, need no more room than its f32 rows).
std::uint32_t* tile_values(const ForwardJob& job, std::int64_t group_in_pass, std::int64_t key_block) {
  const Layout& layout = job.layout;
  return reinterpret_cast<std::uint32_t*>(packed_values(job, group_in_pass, 0)) +
         key_block * round_up(layout.key_block, kTileDepthBf16) / 2 * layout.dim_v_padded;
}

void forward_pack_keys_tiles(const ForwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  if (!runs_on_tiles(p)) return forward_pack_keys<V>(job, unit);
  const Layout& layout = job.layout;
  const std::int64_t group_in_pass = unit / layout.key_blocks;
  const std::int64_t key_block = unit % layout.key_blocks;
  const std::int64_t group = job.first_group + group_in_pass;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t kv_head = group % p.heads_kv;
  // The pairs take no more room than the f32 packing (head_dim_qk >= 16).
  const std::int64_t key0 = key_block * layout.key_block;
  pack_keys_bf16(p, job.k, batch, kv_head, key0, layout.key_block,
                 reinterpret_cast<std::uint32_t*>(packed_keys(job, group_in_pass, key_block)));
  pack_values_bf16(p, job.v, batch, kv_head, key0, layout.key_block, layout.dim_v_padded,
                   tile_values(job, group_in_pass, key_block));
}

void forward_queries_tiles(const ForwardJob& job, std::int64_t unit, int worker) {
  const hal_attention_params_v1& p = *job.params;
  if (!runs_on_tiles(p)) return forward_queries<V>(job, unit, worker);
  const Layout& layout = job.layout;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const std::int64_t depth = round_up(p.head_dim_qk, kTileDepthBf16);  // Q's bf16 row
  const std::int64_t key_depth = round_up(bc, kTileDepthBf16);         // one block's P columns
  const std::int64_t span = layout.tile_key_blocks;                    // blocks per softmax step
  std::int64_t group_in_pass = 0;
  const TileRows rows = prefill_rows(job, unit, group_in_pass);
  const std::int64_t row_tiles = (rows.count + kTileRows - 1) / kTileRows;
  const std::int64_t tile_rows = row_tiles * kTileRows;
  const QueryTile tile = query_tile(layout, job.scratch + worker * layout.scratch_floats);
  // Q in bf16 where the f32 tile keeps its scaled Q (depth <= 2 * dim_qk_padded);
  // after the tile, the step's scores and its P (Layout::tile_key_blocks).
  auto* queries = reinterpret_cast<std::uint16_t*>(tile.queries);
  float* scores = tile.end;
  auto* probabilities = reinterpret_cast<std::uint16_t*>(scores + layout.query_block * span * bc);
  for (std::int64_t row = 0; row < tile_rows; ++row) {
    std::uint16_t* out_row = queries + row * depth;
    const std::int64_t dims = row < rows.count ? p.head_dim_qk : 0;
    const auto* q_row = static_cast<const std::uint16_t*>(job.q) +
                        (dims > 0 ? element_offset(p.q_strides, rows.batch, rows.head(row), rows.query(row), 0) : 0);
    if (p.q_strides.dim == 1) {
      __builtin_memcpy(out_row, q_row, static_cast<std::size_t>(dims) * sizeof(std::uint16_t));
    } else {
      for (std::int64_t dim = 0; dim < dims; ++dim) out_row[dim] = q_row[dim * p.q_strides.dim];
    }
    for (std::int64_t dim = dims; dim < depth; ++dim) out_row[dim] = 0;
  }
  // Rows past the tile's and P's columns past bc (one block shorter than
  // its depth) stay zero; the softmax writes the rest.
  fill(reinterpret_cast<float*>(probabilities), tile_rows * span * key_depth / 2, 0.0f);
  fill(tile.out, tile_rows * dv_padded, 0.0f);
  reset_tile_state(layout, rows, tile);

  const KeyRange keys = tile_keys(p, job.key_ranges, rows);
  if (keys.first <= keys.last) {
    configure_tiles();
    const float score_scale = p.softmax_scale * kLog2e;
    const std::int64_t last_block = keys.last / bc;
    for (std::int64_t first_block = keys.first / bc; first_block <= last_block; first_block += span) {
      const std::int64_t blocks = min_i64(span, last_block + 1 - first_block);
      for (std::int64_t block = 0; block < blocks; ++block) {
        tile_gemm(queries, depth * 2, row_tiles,
                  reinterpret_cast<const std::uint32_t*>(packed_keys(job, group_in_pass, first_block + block)), bc * 4,
                  bc / 16, scores + block * bc, span * bc * 4, depth / kTileDepthBf16, false);
      }
      const ScoreBlock step{scores, span * bc, first_block * bc, blocks * bc, probabilities, span * key_depth};
      softmax_rows<V>(p, job.key_ranges, rows, tile, dv_padded, step, score_scale);
      tile_gemm(probabilities, span * key_depth * 2, row_tiles, tile_values(job, group_in_pass, first_block),
                dv_padded * 4, dv_padded / 16, tile.out, dv_padded * 4, blocks * key_depth / kTileDepthBf16, true);
    }
    _tile_release();
  }
  finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

constexpr KernelTable make_amx_table() {
  KernelTable table = make_kernel_table<V>();
  table.forward_pack_keys = &forward_pack_keys_tiles;
  table.forward_queries = &forward_queries_tiles;
  return table;
}

}  // namespace

const KernelTable kernels_amx = make_amx_table();

}  // namespace hal::host::flash
