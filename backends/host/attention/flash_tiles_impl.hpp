// The bf16 flash kernels on tile products, shared by the units that have a
// bf16 product with f32 sums: the AMX unit (AMX-BF16 tiles) and the
// AVX512-BF16 unit (vdpbf16ps). Each unit supplies `Tiles`:
//   begin() / end()  around a run of products (AMX: the tile configuration
//                    and its release; nothing for AVX512-BF16),
//   gemm(a, lda, row_tiles, b, ldb, col_tiles, c, ldc, steps, accumulate):
//                    C[row_tiles * 16][col_tiles * 16] (=|+=) A B, A bf16
//                    row-major (lda bytes a row), B bf16 in pairs (row i
//                    holds, for each column, depths 2i and 2i + 1; ldb bytes
//                    a row), C f32 (ldc bytes a row), `steps` depth steps of
//                    kTileDepthBf16.
// The bf16 forward (prefill, and decode tiles of 16 rows or more) and the
// bf16 backward (head dims multiple of 32) run on them; every other call
// (other dtypes, fewer decode rows) runs the AVX-512 kernels. Units including this are compiled with AVX-512 and
// AVX512-BF16.
//
// What changes against the f32 path: Q and K stay bf16 (their products are
// exact in f32), the scores are scaled to the log2 domain in the softmax
// instead of in Q, and P is rounded to bf16 before P V, as flash attention
// does on GPUs; the sums, the softmax and O stay f32.
#pragma once

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

// `dims` elements of a bf16 row (`stride` apart) into `out`, zeros after
// them up to `padded`; dims 0 (a row past the tensor) reads nothing.
HAL_ALWAYS_INLINE void copy_bf16_row(const std::uint16_t* row, std::int64_t stride, std::int64_t dims,
                                     std::int64_t padded, std::uint16_t* out) {
  if (stride == 1) {
    __builtin_memcpy(out, row, static_cast<std::size_t>(dims) * sizeof(std::uint16_t));
  } else {
    for (std::int64_t dim = 0; dim < dims; ++dim) out[dim] = row[dim * stride];
  }
  for (std::int64_t dim = dims; dim < padded; ++dim) out[dim] = 0;
}

// Rows [key0, key0 + bc) of K or V (`dims` wide) transposed, as tile_gemm's
// B: round_up(dims, 32) / 2 rows of bc words, word (i, key) = dims 2i and
// 2i + 1 of that key; zero past dims and seq_kv.
void pack_dim_pairs(const hal_attention_params_v1& p, const void* tensor, const hal_tensor_strides_v1& strides,
                    std::int64_t dims, std::int64_t batch, std::int64_t kv_head, std::int64_t key0, std::int64_t bc,
                    std::uint32_t* out) {
  const std::int64_t pairs = round_up(dims, kTileDepthBf16) / 2;
  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key0 + column;
    if (key >= p.seq_kv) {
      for (std::int64_t pair = 0; pair < pairs; ++pair) out[pair * bc + column] = 0;
      continue;
    }
    const std::uint16_t* row =
        static_cast<const std::uint16_t*>(tensor) + element_offset(strides, batch, kv_head, key, 0);
    for (std::int64_t pair = 0; pair < pairs; ++pair) {
      out[pair * bc + column] =
          bf16_pair(bf16_at(row, strides.dim, 2 * pair, dims), bf16_at(row, strides.dim, 2 * pair + 1, dims));
    }
  }
}

// Rows [key0, key0 + bc) of K or V (`dims` wide) as tile_gemm's B of a
// product over keys: round_up(bc, 32) / 2 rows of `padded` words, word
// (i, dim) = that dim of keys key0 + 2i and key0 + 2i + 1; zero past dims,
// the block and seq_kv.
void pack_key_pairs(const hal_attention_params_v1& p, const void* tensor, const hal_tensor_strides_v1& strides,
                    std::int64_t dims, std::int64_t padded, std::int64_t batch, std::int64_t kv_head, std::int64_t key0,
                    std::int64_t bc, std::uint32_t* out) {
  const std::int64_t end = min_i64(key0 + bc, p.seq_kv);
  const std::int64_t pairs = round_up(bc, kTileDepthBf16) / 2;
  const auto* base = static_cast<const std::uint16_t*>(tensor);
  for (std::int64_t pair = 0; pair < pairs; ++pair) {
    const std::int64_t key = key0 + 2 * pair;
    const std::int64_t dims_low = key < end ? dims : 0;
    const std::int64_t dims_high = key + 1 < end ? dims : 0;
    const std::uint16_t* low = dims_low > 0 ? base + element_offset(strides, batch, kv_head, key, 0) : base;
    const std::uint16_t* high = dims_high > 0 ? base + element_offset(strides, batch, kv_head, key + 1, 0) : base;
    std::uint32_t* out_row = out + pair * padded;
    for (std::int64_t dim = 0; dim < padded; ++dim) {
      out_row[dim] = bf16_pair(bf16_at(low, strides.dim, dim, dims_low), bf16_at(high, strides.dim, dim, dims_high));
    }
  }
}

// Where the forward packs the V of a key block: right after the previous
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
  const KeyUnit own = key_unit(job, unit);
  // The pairs take no more room than the f32 packing (head_dim_qk >= 16).
  pack_dim_pairs(p, job.k, p.k_strides, p.head_dim_qk, own.batch, own.kv_head, own.key0, layout.key_block,
                 reinterpret_cast<std::uint32_t*>(packed_keys(job, own.group_in_pass, own.key_block)));
  pack_key_pairs(p, job.v, p.v_strides, p.head_dim_v, layout.dim_v_padded, own.batch, own.kv_head, own.key0,
                 layout.key_block, tile_values(job, own.group_in_pass, own.key_block));
}

// The tile's rows of Q as bf16 rows of `depth` (zero past head_dim_qk and
// past the rows, up to whole tiles), where the f32 tile keeps its scaled Q
// (depth <= 2 * dim_qk_padded).
HAL_ALWAYS_INLINE std::uint16_t* load_tile_queries(const hal_attention_params_v1& p, const void* q,
                                                   const TileRows& rows, std::int64_t depth, const QueryTile& tile) {
  auto* queries = reinterpret_cast<std::uint16_t*>(tile.queries);
  const std::int64_t tile_rows = round_up(rows.count, kTileRows);
  for (std::int64_t row = 0; row < tile_rows; ++row) {
    const std::int64_t dims = row < rows.count ? p.head_dim_qk : 0;
    const auto* q_row = static_cast<const std::uint16_t*>(q) +
                        (dims > 0 ? element_offset(p.q_strides, rows.batch, rows.head(row), rows.query(row), 0) : 0);
    copy_bf16_row(q_row, p.q_strides.dim, dims, depth, queries + row * depth);
  }
  return queries;
}

// Where a tile's step of `span` key blocks keeps its scores (f32) and its P
// (bf16 in pairs of columns), after the tile in the thread's scratch.
struct TileStep {
  float* scores;
  std::uint16_t* probabilities;
  float* end;
};
HAL_ALWAYS_INLINE TileStep tile_step(const Layout& layout, const QueryTile& tile, std::int64_t span) {
  const std::int64_t key_depth = round_up(layout.key_block, kTileDepthBf16);
  TileStep step;
  step.scores = tile.end;
  step.probabilities = reinterpret_cast<std::uint16_t*>(step.scores + layout.query_block * span * layout.key_block);
  step.end = reinterpret_cast<float*>(step.probabilities) + layout.query_block * span * key_depth / 2;
  return step;
}

// Key blocks [first_block, end_block) of a tile whose state is reset: per
// step of up to `span` blocks, S = Q K^T block by block, the online softmax
// with P rounded to bf16, then O += P V over the step's blocks at once.
// keys(block) is a block's K in dim pairs; values(block) the V of the
// step's blocks from `block` on, in key pairs, back to back.
template <class Tiles, class Keys, class Values>
void attend_key_blocks(const hal_attention_params_v1& p, const std::int32_t* key_ranges, const Layout& layout,
                       const TileRows& rows, const QueryTile& tile, const std::uint16_t* queries, std::int64_t span,
                       std::int64_t first_block, std::int64_t end_block, const Keys& keys, const Values& values) {
  const std::int64_t bc = layout.key_block;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const std::int64_t depth = round_up(p.head_dim_qk, kTileDepthBf16);  // Q's bf16 row
  const std::int64_t key_depth = round_up(bc, kTileDepthBf16);         // one block's P columns
  const std::int64_t row_tiles = (rows.count + kTileRows - 1) / kTileRows;
  const TileStep step = tile_step(layout, tile, span);
  // Rows past the tile's and P's columns past bc (one block shorter than
  // its depth) stay zero; the softmax writes the rest.
  fill(reinterpret_cast<float*>(step.probabilities), row_tiles * kTileRows * span * key_depth / 2, 0.0f);
  fill(tile.out + rows.count * dv_padded, (row_tiles * kTileRows - rows.count) * dv_padded, 0.0f);
  if (first_block >= end_block) return;
  Tiles::begin();
  const float score_scale = p.softmax_scale * kLog2e;
  for (std::int64_t block0 = first_block; block0 < end_block; block0 += span) {
    const std::int64_t blocks = min_i64(span, end_block - block0);
    for (std::int64_t block = 0; block < blocks; ++block) {
      Tiles::gemm(queries, depth * 2, row_tiles, keys(block0 + block), bc * 4, bc / 16, step.scores + block * bc,
                  span * bc * 4, depth / kTileDepthBf16, false);
    }
    const ScoreBlock scores{step.scores, span * bc, block0 * bc, blocks * bc, step.probabilities, span * key_depth};
    softmax_rows<V>(p, key_ranges, rows, tile, dv_padded, scores, score_scale);
    Tiles::gemm(step.probabilities, span * key_depth * 2, row_tiles, values(block0), dv_padded * 4, dv_padded / 16,
                tile.out, dv_padded * 4, blocks * key_depth / kTileDepthBf16, true);
  }
  Tiles::end();
}

template <class Tiles>
void forward_queries_tiles(const ForwardJob& job, std::int64_t unit, int worker) {
  const hal_attention_params_v1& p = *job.params;
  if (!runs_on_tiles(p)) return forward_queries<V>(job, unit, worker);
  const Layout& layout = job.layout;
  const std::int64_t bc = layout.key_block;
  std::int64_t group_in_pass = 0;
  const TileRows rows = prefill_rows(job, unit, group_in_pass);
  const QueryTile tile = query_tile(layout, job.scratch + worker * layout.scratch_floats);
  const std::uint16_t* queries = load_tile_queries(p, job.q, rows, round_up(p.head_dim_qk, kTileDepthBf16), tile);
  reset_tile_state(layout, rows, tile);
  const KeyRange keys = tile_keys(p, job.key_ranges, rows);
  attend_key_blocks<Tiles>(
      p, job.key_ranges, layout, rows, tile, queries, layout.tile_key_blocks, keys.first / bc,
      keys.first <= keys.last ? keys.last / bc + 1 : keys.first / bc,
      [&](std::int64_t block) {
        return reinterpret_cast<const std::uint32_t*>(packed_keys(job, group_in_pass, block));
      },
      [&](std::int64_t block) { return tile_values(job, group_in_pass, block); });
  finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

// Whether a decode tile runs on the tiles: bf16 and at least a tile of rows
// (fewer leave most of each product padding; the f32 kernel's dot products
// serve them).
HAL_ALWAYS_INLINE bool decode_runs_on_tiles(const hal_attention_params_v1& p, const Layout& layout) {
  return runs_on_tiles(p) && layout.group_size * p.seq_q >= kTileRows;
}

// Decode on the tiles: a tile stacks every query row of a kv group (up to
// 64: 4 tiles of rows), and each step packs its key blocks into the
// thread's scratch, read once per group as the f32 decode reads them.
template <class Tiles>
void forward_decode_tiles(const ForwardJob& job, std::int64_t unit, int worker) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  if (!decode_runs_on_tiles(p, layout)) return forward_decode<V>(job, unit, worker);
  const std::int64_t group = unit / layout.kv_splits;
  const std::int64_t split = unit % layout.kv_splits;
  const std::int64_t bc = layout.key_block;
  const std::int64_t kv_head = group % p.heads_kv;
  const std::int64_t depth = round_up(p.head_dim_qk, kTileDepthBf16);
  const std::int64_t key_depth = round_up(bc, kTileDepthBf16);
  const std::int64_t span = layout.tile_key_blocks;
  const TileRows rows = decode_rows(p, layout, group);
  const QueryTile tile = decode_tile(job, unit, worker);
  const std::uint16_t* queries = load_tile_queries(p, job.q, rows, depth, tile);
  reset_tile_state(layout, rows, tile);
  // The step's K blocks in dim pairs, then its V blocks in key pairs.
  auto* packed_k = reinterpret_cast<std::uint32_t*>(tile_step(layout, tile, span).end);
  std::uint32_t* packed_v = packed_k + span * bc * depth / 2;
  const std::int64_t v_block_words = key_depth / 2 * layout.dim_v_padded;
  const KeyRange keys = tile_keys(p, job.key_ranges, rows);
  const std::int64_t first_block = max_i64(split * layout.split_key_blocks, keys.first / bc);
  const std::int64_t end_block =
      keys.first <= keys.last ? min_i64((split + 1) * layout.split_key_blocks, keys.last / bc + 1) : first_block;
  attend_key_blocks<Tiles>(
      p, job.key_ranges, layout, rows, tile, queries, span, first_block, max_i64(first_block, end_block),
      [&](std::int64_t block) {
        std::uint32_t* out = packed_k + (block - first_block) % span * bc * depth / 2;
        pack_dim_pairs(p, job.k, p.k_strides, p.head_dim_qk, rows.batch, kv_head, block * bc, bc, out);
        return static_cast<const std::uint32_t*>(out);
      },
      [&](std::int64_t block0) {
        const std::int64_t blocks = min_i64(span, end_block - block0);
        for (std::int64_t block = 0; block < blocks; ++block) {
          pack_key_pairs(p, job.v, p.v_strides, p.head_dim_v, layout.dim_v_padded, rows.batch, kv_head,
                         (block0 + block) * bc, bc, packed_v + block * v_block_words);
        }
        return static_cast<const std::uint32_t*>(packed_v);
      });
  if (layout.kv_splits == 1) finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

// ---- backward ----------------------------------------------------------------
//
// Per (key block, query block), five tile products: S = Q K^T and dP = dO V^T
// (Q, dO as bf16 rows; K^T, V^T in pairs of dims), then, with P and dS
// rounded to bf16, dV^T += dO^T P and dK^T += Q^T dS (dO^T, Q^T per query
// block; P, dS in pairs of rows) and dQ += dS K (K in pairs of keys). dK
// and dV are kept transposed and written at the end; Q is not scaled (the
// softmax scale is applied to S, and to dK when written).

// Whether a backward call runs on the tiles: bf16, head dims of whole tile
// rows (so the bf16 forms of Q and dO fit the f32 packing), a positive scale.
HAL_ALWAYS_INLINE bool backward_runs_on_tiles(const hal_attention_params_v1& p) {
  return p.dtype == HAL_DTYPE_BF16 && p.head_dim_qk % kTileDepthBf16 == 0 && p.head_dim_v % kTileDepthBf16 == 0 &&
         p.softmax_scale > 0.0f;
}

// A query head's packed Q and dO in bf16, where the f32 path keeps them in
// f32: rows [seq_q_padded][dim], then per query block its transpose [dim][query_block].
struct TileQueries {
  std::uint16_t* queries;
  std::uint16_t* queries_t;
  std::uint16_t* output_grads;
  std::uint16_t* output_grads_t;
};

HAL_ALWAYS_INLINE TileQueries tile_queries(const BackwardJob& job, std::int64_t head_in_pass) {
  const hal_attention_params_v1& p = *job.params;
  const std::int64_t rows = job.layout.seq_q_padded;
  const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
  TileQueries own;
  own.queries = reinterpret_cast<std::uint16_t*>(buffers.queries);
  own.queries_t = own.queries + rows * p.head_dim_qk;
  own.output_grads = reinterpret_cast<std::uint16_t*>(buffers.output_grads);
  own.output_grads_t = own.output_grads + rows * p.head_dim_v;
  return own;
}

// A query block's rows of a bf16 tensor (`dims` wide; zero past seq_q), and
// their transpose.
void pack_query_rows(const hal_attention_params_v1& p, const void* tensor, const hal_tensor_strides_v1& strides,
                     std::int64_t dims, std::int64_t batch, std::int64_t head, std::int64_t query0,
                     std::int64_t block_rows, std::uint16_t* rows_out, std::uint16_t* transposed_out) {
  for (std::int64_t row = 0; row < block_rows; ++row) {
    const std::int64_t query = query0 + row;
    std::uint16_t* out_row = rows_out + query * dims;
    const bool present = query < p.seq_q;
    const auto* in_row =
        static_cast<const std::uint16_t*>(tensor) + (present ? element_offset(strides, batch, head, query, 0) : 0);
    copy_bf16_row(in_row, strides.dim, present ? dims : 0, dims, out_row);
    for (std::int64_t dim = 0; dim < dims; ++dim) transposed_out[dim * block_rows + row] = out_row[dim];
  }
}

void backward_pack_queries_tiles(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  if (!backward_runs_on_tiles(p)) return backward_pack_queries<V>(job, unit);
  const Layout& layout = job.layout;
  const auto [head_in_pass, query_block, batch, head] = backward_query_unit(job, unit);
  const TileQueries own = tile_queries(job, head_in_pass);
  const std::int64_t br = layout.query_block;
  const std::int64_t query0 = query_block * br;
  pack_query_rows(p, job.q, p.q_strides, p.head_dim_qk, batch, head, query0, br, own.queries,
                  own.queries_t + query_block * p.head_dim_qk * br);
  pack_query_rows(p, job.grad_o, p.grad_o_strides, p.head_dim_v, batch, head, query0, br, own.output_grads,
                  own.output_grads_t + query_block * p.head_dim_v * br);
  const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
  for (std::int64_t row = 0; row < br; ++row) pack_row_statistics<V>(job, buffers, batch, head, query0 + row);
}

// Two rows of 16 floats as 16 words of bf16 pairs: word i = (low[i], high[i]).
HAL_ALWAYS_INLINE void store_row_pair(std::uint32_t* out, __m512 low, __m512 high) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512bh both = _mm512_cvtne2ps_pbh(high, low);  // low in the lower half
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(interleave, reinterpret_cast<const __m512i&>(both)));
}

// Column `column` of a transposed f32 block [dims][bc] written as a row of a
// tensor, times `scale`, a chunk of dims at a time.
void store_transposed_column(const hal_attention_params_v1& p, void* tensor, const hal_tensor_strides_v1& strides,
                             std::int64_t dims, std::int64_t batch, std::int64_t kv_head, std::int64_t key,
                             const float* transposed, std::int64_t bc, std::int64_t column, float scale) {
  constexpr std::int64_t kChunk = 64;
  float chunk[kChunk];
  for (std::int64_t dim0 = 0; dim0 < dims; dim0 += kChunk) {
    const std::int64_t count = min_i64(kChunk, dims - dim0);
    for (std::int64_t dim = 0; dim < count; ++dim) chunk[dim] = transposed[(dim0 + dim) * bc + column];
    store_row<V>(p.dtype, tensor, element_offset(strides, batch, kv_head, key, dim0), strides.dim, count, scale, chunk);
  }
}

template <class Tiles>
void backward_keys_tiles(const BackwardJob& job, std::int64_t unit, float* scratch, float* dq_partial) {
  using Reg = V::Reg;
  const hal_attention_params_v1& p = *job.params;
  if (!backward_runs_on_tiles(p)) return backward_keys<V>(job, unit, scratch, dq_partial);
  const Layout& layout = job.layout;
  const KeyUnit own = key_unit(job, unit);
  const std::int64_t br = layout.query_block;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t dv = p.head_dim_v;
  const std::int64_t key_depth = round_up(bc, kTileDepthBf16);

  // The buffers of tile_backward_scratch_floats, in its order.
  auto* keys_t = reinterpret_cast<std::uint32_t*>(scratch);                                  // [dqk / 2][bc]
  std::uint32_t* values_t = keys_t + dqk / 2 * bc;                                           // [dv / 2][bc]
  std::uint32_t* key_pairs = values_t + dv / 2 * bc;                                         // [key_depth / 2][dqk]
  auto* key_grads_t = reinterpret_cast<float*>(key_pairs + key_depth / 2 * dqk);             // [dqk][bc]
  float* value_grads_t = key_grads_t + dqk * bc;                                             // [dv][bc]
  float* scores = value_grads_t + dv * bc;                                                   // [br][bc]
  float* score_grads = scores + br * bc;                                                     // [br][bc]: dP
  auto* probability_pairs = reinterpret_cast<std::uint32_t*>(score_grads + br * bc);         // [br / 2][bc]
  std::uint32_t* score_grad_pairs = probability_pairs + br / 2 * bc;                         // [br / 2][bc]
  auto* score_grad_rows = reinterpret_cast<std::uint16_t*>(score_grad_pairs + br / 2 * bc);  // [br][key_depth]

  pack_dim_pairs(p, job.k, p.k_strides, dqk, own.batch, own.kv_head, own.key0, bc, keys_t);
  pack_dim_pairs(p, job.v, p.v_strides, dv, own.batch, own.kv_head, own.key0, bc, values_t);
  pack_key_pairs(p, job.k, p.k_strides, dqk, dqk, own.batch, own.kv_head, own.key0, bc, key_pairs);
  fill(key_grads_t, (dqk + dv) * bc, 0.0f);
  fill(reinterpret_cast<float*>(score_grad_rows), br * key_depth / 2, 0.0f);  // columns past bc stay 0

  Tiles::begin();
  const Reg score_scale = V::broadcast(p.softmax_scale * kLog2e);
  for_each_query_block_seeing(job, own, [&](std::int64_t head_in_pass, std::int64_t query0, std::int64_t rows) {
    const TileQueries queries = tile_queries(job, head_in_pass);
    const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
    // Rows past `rows` (up to a whole depth step) are past seq_q: zero Q and
    // dO, LSE +inf, so their P and dS are 0.
    const std::int64_t padded_rows = round_up(rows, kTileDepthBf16);
    const std::int64_t row_tiles = padded_rows / kTileRows;
    Tiles::gemm(queries.queries + query0 * dqk, dqk * 2, row_tiles, keys_t, bc * 4, bc / 16, scores, bc * 4,
                dqk / kTileDepthBf16, false);
    Tiles::gemm(queries.output_grads + query0 * dv, dv * 2, row_tiles, values_t, bc * 4, bc / 16, score_grads, bc * 4,
                dv / kTileDepthBf16, false);
    for (std::int64_t row = 0; row < rows; ++row) {
      mask_scores<V>(scores + row * bc, own.key0, bc, visible_keys(p, job.key_ranges, own.batch, query0 + row));
    }
    // P = exp2(S * scale * log2 e - LSE * log2 e); dS = P * (dP - rowsum(dO * O)).
    for (std::int64_t row = 0; row < padded_rows; row += 2) {
      Reg lse[2], dot[2];
      for (int half = 0; half < 2; ++half) {
        lse[half] = V::broadcast(-buffers.lse_log2[query0 + row + half]);
        dot[half] = V::broadcast(buffers.output_dot_grads[query0 + row + half]);
      }
      for (std::int64_t column = 0; column < bc; column += V::width) {
        Reg probability[2], score_grad[2];
        for (int half = 0; half < 2; ++half) {
          const std::int64_t at = (row + half) * bc + column;
          probability[half] = exp2<V>(V::fmadd(V::load(scores + at), score_scale, lse[half]));
          score_grad[half] = V::mul(probability[half], V::sub(V::load(score_grads + at), dot[half]));
          V::store_bf16(score_grad_rows + (row + half) * key_depth + column, score_grad[half]);
        }
        store_row_pair(probability_pairs + row / 2 * bc + column, probability[0], probability[1]);
        store_row_pair(score_grad_pairs + row / 2 * bc + column, score_grad[0], score_grad[1]);
      }
    }
    const std::int64_t query_block = query0 / br;
    const std::int64_t depth_steps = padded_rows / kTileDepthBf16;
    Tiles::gemm(queries.output_grads_t + query_block * dv * br, br * 2, dv / kTileRows, probability_pairs, bc * 4,
                bc / 16, value_grads_t, bc * 4, depth_steps, true);
    Tiles::gemm(queries.queries_t + query_block * dqk * br, br * 2, dqk / kTileRows, score_grad_pairs, bc * 4, bc / 16,
                key_grads_t, bc * 4, depth_steps, true);
    float* head_dq = dq_partial + (head_in_pass * layout.seq_q_padded + query0) * dqk;
    Tiles::gemm(score_grad_rows, key_depth * 2, row_tiles, key_pairs, dqk * 4, dqk / 16, head_dq, dqk * 4,
                key_depth / kTileDepthBf16, true);
  });
  Tiles::end();

  for (std::int64_t column = 0; column < own.key_count; ++column) {
    const std::int64_t key = own.key0 + column;
    store_transposed_column(p, job.grad_k, p.grad_k_strides, dqk, own.batch, own.kv_head, key, key_grads_t, bc, column,
                            p.softmax_scale);
    store_transposed_column(p, job.grad_v, p.grad_v_strides, dv, own.batch, own.kv_head, key, value_grads_t, bc, column,
                            1.0f);
  }
}

template <class Tiles>
constexpr KernelTable make_tile_table() {
  KernelTable table = make_kernel_table<V>();
  table.forward_pack_keys = &forward_pack_keys_tiles;
  table.forward_queries = &forward_queries_tiles<Tiles>;
  table.forward_decode = &forward_decode_tiles<Tiles>;
  table.backward_pack_queries = &backward_pack_queries_tiles;
  table.backward_keys = &backward_keys_tiles<Tiles>;
  return table;
}

}  // namespace
}  // namespace hal::host::flash
