// Flash attention kernels written once over a vector-type abstraction `V`;
// each flash_kernels_<isa>.cpp defines its V and instantiates make_kernel_table<V>().
//
// V provides:
//   Reg, width (floats per Reg), tile_rows x tile_vectors (the register block
//   of the micro-kernel: tile_rows rows of tile_vectors Regs),
//   zero, load, store (unaligned), broadcast, fmadd(a, b, c) = a * b + c,
//   add, sub, mul, max, min, reduce_add, reduce_max,
//   pow2_integer(n) = 2^n for integer-valued n in [-127, 127] (0 for -127),
//   load_f16, load_bf16 (width halves to floats), store_f16, store_bf16
//   (round to nearest even, NaN stays NaN).
//
// Everything lives in an anonymous namespace (see flash_kernels.hpp for why).
#pragma once

#include <cstdint>
#include <utility>

#include "attention/attention_common.hpp"
#include "attention/flash_kernels.hpp"

namespace hal::host::flash {
namespace {

// Fully unrolled small loops keep register arrays (accumulators) in registers;
// also used by the kernel units that include this.
#define HAL_FLASH_UNROLL _Pragma("GCC unroll 16")

constexpr float kInfinity = __builtin_inff();

// 2^x with relative error ~2e-7 (Cephes exp2f polynomial on [-0.5, 0.5]).
// x <= -126.5 gives exactly 0, so masked scores (-inf) vanish.
template <class V>
HAL_ALWAYS_INLINE typename V::Reg exp2(typename V::Reg x) {
  using Reg = typename V::Reg;
  x = V::min(V::max(x, V::broadcast(-127.0f)), V::broadcast(127.0f));
  // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer.
  const Reg magic = V::broadcast(12582912.0f);
  const Reg whole = V::sub(V::add(x, magic), magic);
  const Reg fraction = V::sub(x, whole);
  Reg poly = V::broadcast(1.535336188319500e-4f);
  poly = V::fmadd(poly, fraction, V::broadcast(1.339887440266574e-3f));
  poly = V::fmadd(poly, fraction, V::broadcast(9.618437357674640e-3f));
  poly = V::fmadd(poly, fraction, V::broadcast(5.550332471162809e-2f));
  poly = V::fmadd(poly, fraction, V::broadcast(2.402264791363012e-1f));
  poly = V::fmadd(poly, fraction, V::broadcast(6.931472028550421e-1f));
  poly = V::fmadd(poly, fraction, V::broadcast(1.0f));
  return V::mul(poly, V::pow2_integer(whole));
}

// The B operand of Gemm: `depth` rows of `col_vectors` Regs, read one
// column panel (tile_vectors Regs wide, the last maybe narrower) at a time.
// Panel p starts at data + p * panel_stride and its rows lie row_stride
// floats apart; a packed operand stores each panel's rows contiguously
// (row_stride is then the panel's own width), so the panel the micro-kernel
// streams is one contiguous block of L1 instead of lines a power of two
// apart that compete for a few cache sets.
struct GemmB {
  const float* data;
  std::int64_t row_stride;  // 0: packed
  std::int64_t panel_stride;
};

// Where element (row, column) of a packed B with `depth_capacity` rows
// lives; `panel_width` is tile_vectors * width floats, `columns` the padded
// width of the whole operand.
HAL_ALWAYS_INLINE std::int64_t packed_b_offset(std::int64_t row, std::int64_t column, std::int64_t depth_capacity,
                                               std::int64_t columns, std::int64_t panel_width) {
  const std::int64_t panel = column / panel_width;
  const std::int64_t panel_start = panel * panel_width;
  const std::int64_t width = min_i64(panel_width, columns - panel_start);
  return panel_start * depth_capacity + row * width + (column - panel_start);
}

// C[rows x cols] (=|+=) A[rows x depth] * B[depth x cols], f32, A and C
// row-major, cols = col_vectors * V::width. The micro-kernel keeps a
// tile_rows x tile_vectors block of C in registers, loads tile_vectors Regs
// of one B row per step and multiplies them by broadcast A elements. With
// TransposedA, `a` holds A^T (depth rows of lda floats): A's elements are
// only ever broadcast one at a time, so reading them down a column costs
// nothing and no transposed copy is made.
template <class V, bool Accumulate, bool TransposedA = false>
struct Gemm {
  static constexpr int kRows = V::tile_rows;
  static constexpr int kVectors = V::tile_vectors;
  static constexpr std::int64_t kPanelWidth = kVectors * V::width;
  using Kernel = void (*)(const float*, std::int64_t, const float*, std::int64_t, float*, std::int64_t,
                          std::int64_t);

  static GemmB row_major(const float* b, std::int64_t ldb) { return GemmB{b, ldb, kPanelWidth}; }
  static GemmB packed(const float* b, std::int64_t depth_capacity) {
    return GemmB{b, 0, depth_capacity * kPanelWidth};
  }

  template <int Rows, int Vectors>
  static void micro_kernel(const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                           std::int64_t ldc, std::int64_t depth) {
    using Reg = typename V::Reg;
    Reg acc[Rows][Vectors];
    HAL_FLASH_UNROLL for (int row = 0; row < Rows; ++row) {
      HAL_FLASH_UNROLL for (int vec = 0; vec < Vectors; ++vec) {
        acc[row][vec] = Accumulate ? V::load(c + row * ldc + vec * V::width) : V::zero();
      }
    }
    for (std::int64_t step = 0; step < depth; ++step) {
      Reg b_row[Vectors];
      HAL_FLASH_UNROLL for (int vec = 0; vec < Vectors; ++vec) b_row[vec] = V::load(b + step * ldb + vec * V::width);
      HAL_FLASH_UNROLL for (int row = 0; row < Rows; ++row) {
        const Reg a_value = V::broadcast(TransposedA ? a[step * lda + row] : a[row * lda + step]);
        HAL_FLASH_UNROLL for (int vec = 0; vec < Vectors; ++vec) {
          acc[row][vec] = V::fmadd(a_value, b_row[vec], acc[row][vec]);
        }
      }
    }
    HAL_FLASH_UNROLL for (int row = 0; row < Rows; ++row) {
      HAL_FLASH_UNROLL for (int vec = 0; vec < Vectors; ++vec) V::store(c + row * ldc + vec * V::width, acc[row][vec]);
    }
  }

  // Every (rows, vectors) remainder shape, so edge tiles need no padding.
  struct KernelGrid {
    Kernel kernels[kRows][kVectors];
  };
  template <std::size_t... Index>
  static constexpr KernelGrid make_grid(std::index_sequence<Index...>) {
    return KernelGrid{{&micro_kernel<static_cast<int>(Index) / kVectors + 1, static_cast<int>(Index) % kVectors + 1>...}};
  }
  static constexpr KernelGrid grid = make_grid(std::make_index_sequence<kRows * kVectors>{});

  static void run(std::int64_t rows, std::int64_t col_vectors, std::int64_t depth, const float* a,
                  std::int64_t lda, GemmB b, float* c, std::int64_t ldc) {
    // Column panels outermost: the depth x tile_vectors panel of B stays in L1
    // while every row block of A streams past it.
    for (std::int64_t col = 0; col < col_vectors; col += kVectors) {
      const std::int64_t vectors = min_i64(kVectors, col_vectors - col);
      const float* panel = b.data + (col / kVectors) * b.panel_stride;
      const std::int64_t ldb = b.row_stride != 0 ? b.row_stride : vectors * V::width;
      for (std::int64_t row = 0; row < rows; row += kRows) {
        const std::int64_t block_rows = min_i64(kRows, rows - row);
        grid.kernels[block_rows - 1][vectors - 1](a + (TransposedA ? row : row * lda), lda, panel, ldb,
                                                  c + row * ldc + col * V::width, ldc, depth);
      }
    }
  }
};

// Reads `count` elements of a row of a tensor of `dtype` (element `offset`,
// `stride` elements apart) as floats times `scale`; whole vectors when the
// row is contiguous.
template <class V>
HAL_ALWAYS_INLINE void load_row(hal_dtype dtype, const void* data, std::int64_t offset, std::int64_t stride,
                                std::int64_t count, float scale, float* out) {
  std::int64_t i = 0;
  if (stride == 1) {
    const typename V::Reg factor = V::broadcast(scale);
    if (dtype == HAL_DTYPE_F32) {
      const float* row = static_cast<const float*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store(out + i, V::mul(V::load(row + i), factor));
    } else if (dtype == HAL_DTYPE_F16) {
      const std::uint16_t* row = static_cast<const std::uint16_t*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store(out + i, V::mul(V::load_f16(row + i), factor));
    } else if (dtype == HAL_DTYPE_BF16) {
      const std::uint16_t* row = static_cast<const std::uint16_t*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store(out + i, V::mul(V::load_bf16(row + i), factor));
    }
  }
  for (; i < count; ++i) out[i] = scale * load_as_float(dtype, data, offset + i * stride);
}

// Writes `count` floats of `in` times `scale` to a row of a tensor of `dtype`.
template <class V>
HAL_ALWAYS_INLINE void store_row(hal_dtype dtype, void* data, std::int64_t offset, std::int64_t stride,
                                 std::int64_t count, float scale, const float* in) {
  std::int64_t i = 0;
  if (stride == 1) {
    const typename V::Reg factor = V::broadcast(scale);
    if (dtype == HAL_DTYPE_F32) {
      float* row = static_cast<float*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store(row + i, V::mul(V::load(in + i), factor));
    } else if (dtype == HAL_DTYPE_F16) {
      std::uint16_t* row = static_cast<std::uint16_t*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store_f16(row + i, V::mul(V::load(in + i), factor));
    } else if (dtype == HAL_DTYPE_BF16) {
      std::uint16_t* row = static_cast<std::uint16_t*>(data) + offset;
      for (; i + V::width <= count; i += V::width) V::store_bf16(row + i, V::mul(V::load(in + i), factor));
    }
  }
  for (; i < count; ++i) store_float(dtype, data, offset + i * stride, scale * in[i]);
}

// a . b over `count` floats: whole vectors, then the tail.
template <class V>
HAL_ALWAYS_INLINE float dot(const float* a, const float* b, std::int64_t count) {
  typename V::Reg sum = V::zero();
  std::int64_t i = 0;
  for (; i + V::width <= count; i += V::width) sum = V::fmadd(V::load(a + i), V::load(b + i), sum);
  float total = V::reduce_add(sum);
  for (; i < count; ++i) total += a[i] * b[i];
  return total;
}

template <class V>
HAL_ALWAYS_INLINE float row_max(const float* row, std::int64_t count) {
  typename V::Reg best = V::broadcast(-kInfinity);
  for (std::int64_t i = 0; i < count; i += V::width) best = V::max(best, V::load(row + i));
  return V::reduce_max(best);
}

template <class V>
HAL_ALWAYS_INLINE void scale_row(float* row, std::int64_t count, float factor) {
  const typename V::Reg factor_reg = V::broadcast(factor);
  for (std::int64_t i = 0; i < count; i += V::width) V::store(row + i, V::mul(V::load(row + i), factor_reg));
}

HAL_ALWAYS_INLINE void fill(float* data, std::int64_t count, float value) {
  for (std::int64_t i = 0; i < count; ++i) data[i] = value;
}

// load_row of `count` elements, then zeros up to `padded`.
template <class V>
HAL_ALWAYS_INLINE void load_padded_row(hal_dtype dtype, const void* data, std::int64_t offset, std::int64_t stride,
                                       std::int64_t count, std::int64_t padded, float scale, float* out) {
  load_row<V>(dtype, data, offset, stride, count, scale, out);
  fill(out + count, padded - count, 0.0f);
}

// Lane masks for mask_scores: loaded at kMaskLanes - n, the first gives
// -inf in lanes [0, n) and +inf after, the second +inf in [0, n) and -inf
// after (kMaskLanes: the widest vector's lanes).
constexpr int kMaskLanes = 16;
constexpr float kInfinityThenMasked[2 * kMaskLanes] = {
    kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,
    kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,
    -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity,
    -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity};
constexpr float kMaskedThenInfinity[2 * kMaskLanes] = {
    -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity,
    -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity, -kInfinity,
    kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,
    kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity,  kInfinity};

// Sets the scores of keys [key0, key0 + key_block) that `range` does not see
// to -inf, a whole vector at a time: the row is read back as vectors next,
// and scalar stores under a vector load stall it (no store forwarding).
template <class V>
HAL_ALWAYS_INLINE void mask_scores(float* row, std::int64_t key0, std::int64_t key_block, KeyRange range) {
  static_assert(V::width <= kMaskLanes, "mask tables narrower than a vector");
  const std::int64_t first = range.first - key0;   // first visible column
  const std::int64_t end = range.last + 1 - key0;  // past the last visible column
  if (first <= 0 && end >= key_block) return;
  for (std::int64_t column = 0; column < key_block; column += V::width) {
    const std::int64_t masked_front = max_i64(0, min_i64(first - column, V::width));
    const std::int64_t visible_end = max_i64(0, min_i64(end - column, V::width));
    if (masked_front == 0 && visible_end == V::width) continue;
    // min with -inf masks (a NaN score included); with +inf keeps the score.
    const typename V::Reg lanes = V::min(V::load(kMaskedThenInfinity + kMaskLanes - masked_front),
                                         V::load(kInfinityThenMasked + kMaskLanes - visible_end));
    V::store(row + column, V::min(V::load(row + column), lanes));
  }
}

// Keys visible to at least one query of [query0, query0 + rows) of a batch
// row: by the monotonic band ends, those of the first and of the last row
// bound them; with key ranges (in any order) every row counts.
HAL_ALWAYS_INLINE KeyRange block_keys(const hal_attention_params_v1& p, const std::int32_t* key_ranges,
                                      std::int64_t batch, std::int64_t query0, std::int64_t rows) {
  if (key_ranges == nullptr) return KeyRange{visible_keys(p, query0).first, visible_keys(p, query0 + rows - 1).last};
  KeyRange keys{p.seq_kv, -1};
  for (std::int64_t query = query0; query < query0 + rows; ++query) {
    const KeyRange own = visible_keys(p, key_ranges, batch, query);
    if (own.first > own.last) continue;
    keys.first = min_i64(keys.first, own.first);
    keys.last = max_i64(keys.last, own.last);
  }
  return keys;
}

// ---- forward ---------------------------------------------------------------

// Keys are read this far ahead of their use: rows of one head in a BSHD
// tensor lie a page or more apart, where the hardware prefetcher stops, so
// each row would otherwise wait the whole memory latency.
constexpr std::int64_t kPrefetchKeys = 8;

// Asks for the cache lines of a contiguous row; nothing for a strided row
// (rare) or when `wanted` is false (past the end of the tensor).
HAL_ALWAYS_INLINE void prefetch_row(hal_dtype dtype, const void* data, std::int64_t offset, std::int64_t stride,
                                    std::int64_t count, bool wanted) {
  if (!wanted || stride != 1) return;
  constexpr std::int64_t kLine = 64;
  const char* row = static_cast<const char*>(data) + offset * static_cast<std::int64_t>(abi::element_size(dtype));
  const std::int64_t bytes = count * static_cast<std::int64_t>(abi::element_size(dtype));
  for (std::int64_t line = 0; line < bytes; line += kLine) __builtin_prefetch(row + line);
}

// Rows [key0, key0 + count) of K (count <= kMaxKeyBlock), dims [dim0, dim0
// + dims) with dims <= kTransposeDims, transposed into dims rows of `count`
// floats, row `dim` at out + dim * out_stride; keys past seq_kv are zero.
// The chunk goes through a small row-major buffer first, so that the
// transposed rows are written contiguously (scattered stores to lines a
// panel apart cost more than the arithmetic at short sequences).
constexpr std::int64_t kMaxKeyBlock = 64;
constexpr std::int64_t kTransposeDims = 16;
template <class V>
HAL_ALWAYS_INLINE void transpose_key_chunk(const hal_attention_params_v1& p, const void* tensor,
                                           const hal_tensor_strides_v1& strides, std::int64_t batch,
                                           std::int64_t kv_head, std::int64_t key0, std::int64_t count,
                                           std::int64_t dim0, std::int64_t dims, float* out, std::int64_t out_stride) {
  float rows[kMaxKeyBlock * kTransposeDims];
  for (std::int64_t column = 0; column < count; ++column) {
    const std::int64_t ahead = key0 + column + kPrefetchKeys;
    prefetch_row(p.dtype, tensor, element_offset(strides, batch, kv_head, ahead, dim0), strides.dim, dims,
                 ahead < p.seq_kv);
    const bool present = key0 + column < p.seq_kv;
    load_padded_row<V>(p.dtype, tensor, element_offset(strides, batch, kv_head, key0 + column, dim0), strides.dim,
                       present ? dims : 0, dims, 1.0f, rows + column * kTransposeDims);
  }
  for (std::int64_t dim = 0; dim < dims; ++dim) {
    float* row = out + dim * out_stride;
    for (std::int64_t column = 0; column < count; ++column) row[column] = rows[column * kTransposeDims + dim];
  }
}

// K^T and V of keys [key0, key0 + bc) as packed Gemm B operands: K^T is
// head_dim_qk x bc, V is bc x dv_padded; keys past seq_kv are zero (and
// masked by the caller).
template <class V>
void pack_key_block(const hal_attention_params_v1& p, const void* k, const void* v, std::int64_t batch,
                    std::int64_t kv_head, std::int64_t key0, std::int64_t bc, std::int64_t dv_padded, float* keys_t,
                    float* values) {
  constexpr std::int64_t panel_width = Gemm<V, false>::kPanelWidth;  // bc may end in a narrower panel
  const std::int64_t dqk = p.head_dim_qk;
  for (std::int64_t panel_start = 0; panel_start < bc; panel_start += panel_width) {
    const std::int64_t width = min_i64(panel_width, bc - panel_start);
    for (std::int64_t dim0 = 0; dim0 < dqk; dim0 += kTransposeDims) {
      transpose_key_chunk<V>(p, k, p.k_strides, batch, kv_head, key0 + panel_start, width, dim0,
                             min_i64(kTransposeDims, dqk - dim0), keys_t + panel_start * dqk + dim0 * width, width);
    }
  }
  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key0 + column;
    const bool present = key < p.seq_kv;
    prefetch_row(p.dtype, v, element_offset(p.v_strides, batch, kv_head, key + kPrefetchKeys, 0), p.v_strides.dim,
                 p.head_dim_v, key + kPrefetchKeys < p.seq_kv);
    for (std::int64_t panel_start = 0; panel_start < dv_padded; panel_start += panel_width) {
      const std::int64_t width = min_i64(panel_width, dv_padded - panel_start);
      float* value_row = values + packed_b_offset(column, panel_start, bc, dv_padded, panel_width);
      const std::int64_t stored = present ? max_i64(0, min_i64(width, p.head_dim_v - panel_start)) : 0;
      load_padded_row<V>(p.dtype, v, element_offset(p.v_strides, batch, kv_head, key, panel_start), p.v_strides.dim,
                         stored, width, 1.0f, value_row);
    }
  }
}

// Running state of one tile of query rows: scaled Q, scores, unnormalized O,
// running max (log2 domain) and sum per row, in a thread's scratch.
struct QueryTile {
  float* queries;  // [query_block][dim_qk_padded]
  float* scores;   // [query_block][key_block]
  float* out;      // [query_block][dim_v_padded]
  float* running_max;
  float* running_sum;
  float* end;  // first float after the tile
};

HAL_ALWAYS_INLINE QueryTile query_tile(const Layout& layout, float* scratch) {
  QueryTile tile;
  tile.queries = scratch;
  tile.scores = tile.queries + layout.query_block * layout.dim_qk_padded;
  tile.out = tile.scores + layout.query_block * layout.key_block;
  tile.running_max = tile.out + layout.query_block * layout.dim_v_padded;
  tile.running_sum = tile.running_max + layout.query_block;
  tile.end = tile.running_sum + layout.query_block;
  return tile;
}

// Which (head, query) row r of a tile holds: head0 + r / period, query0 + r % period.
// A prefill tile is one head's consecutive queries (period >= rows); a
// decode tile stacks every query of each head of a kv group (period = seq_q).
struct TileRows {
  std::int64_t batch;
  std::int64_t head0;
  std::int64_t query0;
  std::int64_t period;
  std::int64_t count;
  std::int64_t head(std::int64_t row) const { return head0 + row / period; }
  std::int64_t query(std::int64_t row) const { return query0 + row % period; }
};

// Keys some row of the tile sees.
HAL_ALWAYS_INLINE KeyRange tile_keys(const hal_attention_params_v1& p, const std::int32_t* key_ranges,
                                     const TileRows& rows) {
  return block_keys(p, key_ranges, rows.batch, rows.query0, min_i64(rows.period, rows.count));
}

// An empty running state: O = 0, max = -inf, sum = 0 for the tile's rows.
HAL_ALWAYS_INLINE void reset_tile_state(const Layout& layout, const TileRows& rows, const QueryTile& tile) {
  fill(tile.out, rows.count * layout.dim_v_padded, 0.0f);
  fill(tile.running_max, rows.count, -kInfinity);
  fill(tile.running_sum, rows.count, 0.0f);
}

template <class V>
void start_tile(const hal_attention_params_v1& p, const void* q, const Layout& layout, const TileRows& rows,
                const QueryTile& tile) {
  // Scores in the log2 domain: folding scale * log2(e) into Q lets the
  // softmax use exp2 with no extra multiply per score.
  const float q_scale = p.softmax_scale * kLog2e;
  for (std::int64_t row = 0; row < rows.count; ++row) {
    load_row<V>(p.dtype, q, element_offset(p.q_strides, rows.batch, rows.head(row), rows.query(row), 0),
                p.q_strides.dim, p.head_dim_qk, q_scale, tile.queries + row * layout.dim_qk_padded);
  }
  reset_tile_state(layout, rows, tile);
}

// The scores of one online-softmax step: rows `stride` floats apart, columns
// [0, columns) for keys [key0, key0 + columns). The probabilities replace
// them, or with `bf16` go there in bf16 instead (rows bf16_stride apart).
struct ScoreBlock {
  float* scores;
  std::int64_t stride;
  std::int64_t key0;
  std::int64_t columns;  // whole vectors
  std::uint16_t* bf16 = nullptr;
  std::int64_t bf16_stride = 0;
};

// The softmax half of one online-softmax step: mask, replace each score s
// by exp2(s * score_scale - new max), rescale O and the sums. score_scale
// (> 0) takes the scores to the log2 domain: 1 when Q came scaled
// (start_tile), scale * log2(e) for raw Q . K products.
template <class V>
void softmax_rows(const hal_attention_params_v1& p, const std::int32_t* key_ranges, const TileRows& rows,
                  const QueryTile& tile, std::int64_t dv_padded, const ScoreBlock& block, float score_scale) {
  using Reg = typename V::Reg;
  const std::int64_t columns = block.columns;
  const Reg scale_reg = V::broadcast(score_scale);
  for (std::int64_t row = 0; row < rows.count; ++row) {
    float* score_row = block.scores + row * block.stride;
    std::uint16_t* bf16_row = block.bf16 + row * block.bf16_stride;
    mask_scores<V>(score_row, block.key0, columns, visible_keys(p, key_ranges, rows.batch, rows.query(row)));
    const float new_max = __builtin_fmaxf(tile.running_max[row], row_max<V>(score_row, columns) * score_scale);
    if (new_max == -kInfinity) {  // nothing visible yet: contributes nothing
      if (block.bf16 != nullptr) {
        for (std::int64_t column = 0; column < columns; ++column) bf16_row[column] = 0;
      } else {
        fill(score_row, columns, 0.0f);
      }
      continue;
    }
    const Reg negated_max = V::broadcast(-new_max);
    Reg sum = V::zero();
    for (std::int64_t column = 0; column < columns; column += V::width) {
      const Reg probability = exp2<V>(V::fmadd(V::load(score_row + column), scale_reg, negated_max));
      if (block.bf16 != nullptr) {
        V::store_bf16(bf16_row + column, probability);
      } else {
        V::store(score_row + column, probability);
      }
      sum = V::add(sum, probability);
    }
    const float correction = __builtin_exp2f(tile.running_max[row] - new_max);  // 0 on the first block
    tile.running_sum[row] = tile.running_sum[row] * correction + V::reduce_add(sum);
    if (correction != 1.0f) scale_row<V>(tile.out + row * dv_padded, dv_padded, correction);
    tile.running_max[row] = new_max;
  }
}

// One step of the online softmax on f32 operands, Q scaled by start_tile:
// the softmax, then O += P V.
template <class V>
void softmax_key_block(const hal_attention_params_v1& p, const std::int32_t* key_ranges, const Layout& layout,
                       const TileRows& rows, const QueryTile& tile, std::int64_t key0, GemmB values) {
  const std::int64_t bc = layout.key_block;
  softmax_rows<V>(p, key_ranges, rows, tile, layout.dim_v_padded, ScoreBlock{tile.scores, bc, key0, bc}, 1.0f);
  const std::int64_t key_count = min_i64(layout.key_block, p.seq_kv - key0);
  Gemm<V, true>::run(rows.count, layout.dim_v_padded / V::width, key_count, tile.scores, layout.key_block, values,
                     tile.out, layout.dim_v_padded);
}

// O = out / sum and LSE = (max + log2 sum) * ln 2 of every row; rows that saw
// no key get O = 0 and LSE = -inf.
template <class V>
void finish_tile(const hal_attention_params_v1& p, const Layout& layout, const TileRows& rows, const QueryTile& tile,
                 void* o, float* lse) {
  for (std::int64_t row = 0; row < rows.count; ++row) {
    const std::int64_t head = rows.head(row);
    const std::int64_t query = rows.query(row);
    const bool sees_keys = tile.running_sum[row] > 0.0f;
    const float inverse_sum = sees_keys ? 1.0f / tile.running_sum[row] : 0.0f;
    store_row<V>(p.dtype, o, element_offset(p.o_strides, rows.batch, head, query, 0), p.o_strides.dim, p.head_dim_v,
                 inverse_sum, tile.out + row * layout.dim_v_padded);
    if (lse != nullptr) {
      lse[(rows.batch * p.heads_q + head) * p.seq_q + query] =
          sees_keys ? (tile.running_max[row] + __builtin_log2f(tile.running_sum[row])) * kLn2 : -kInfinity;
    }
  }
}

// A key unit of a pass (forward packing, backward key blocks): unit =
// group_in_pass * key_blocks + key_block.
struct KeyUnit {
  std::int64_t group_in_pass;
  std::int64_t key_block;
  std::int64_t batch;
  std::int64_t kv_head;
  std::int64_t key0;
  std::int64_t key_count;  // keys of the block before seq_kv
};

template <class Job>
HAL_ALWAYS_INLINE KeyUnit key_unit(const Job& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  KeyUnit own;
  own.group_in_pass = unit / layout.key_blocks;
  own.key_block = unit % layout.key_blocks;
  const std::int64_t group = job.first_group + own.group_in_pass;
  own.batch = group / p.heads_kv;
  own.kv_head = group % p.heads_kv;
  own.key0 = own.key_block * layout.key_block;
  own.key_count = min_i64(layout.key_block, p.seq_kv - own.key0);
  return own;
}

// Where key block `key_block` of the pass's group `group_in_pass` lies packed:
// its K^T, and its V (the packed pass holds every K^T block, then every V block).
HAL_ALWAYS_INLINE float* packed_keys(const ForwardJob& job, std::int64_t group_in_pass, std::int64_t key_block) {
  const Layout& layout = job.layout;
  return job.packed + group_in_pass * layout.packed_group_floats +
         key_block * job.params->head_dim_qk * layout.key_block;
}
HAL_ALWAYS_INLINE float* packed_values(const ForwardJob& job, std::int64_t group_in_pass, std::int64_t key_block) {
  const Layout& layout = job.layout;
  return job.packed + group_in_pass * layout.packed_group_floats +
         (layout.key_blocks * job.params->head_dim_qk + key_block * layout.dim_v_padded) * layout.key_block;
}

template <class V>
void forward_pack_keys(const ForwardJob& job, std::int64_t unit) {
  const Layout& layout = job.layout;
  const KeyUnit own = key_unit(job, unit);
  pack_key_block<V>(*job.params, job.k, job.v, own.batch, own.kv_head, own.key0, layout.key_block, layout.dim_v_padded,
                    packed_keys(job, own.group_in_pass, own.key_block),
                    packed_values(job, own.group_in_pass, own.key_block));
}

// The rows of prefill unit `unit` (one query block of one query head; see
// KernelTable::forward_queries) and the pass's group it belongs to.
HAL_ALWAYS_INLINE TileRows prefill_rows(const ForwardJob& job, std::int64_t unit, std::int64_t& group_in_pass) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t heads_in_pass = job.pass_groups * layout.group_size;
  const std::int64_t query_block = layout.query_blocks - 1 - unit / heads_in_pass;
  const std::int64_t head_in_pass = unit % heads_in_pass;
  group_in_pass = head_in_pass / layout.group_size;
  const std::int64_t group = job.first_group + group_in_pass;
  TileRows rows;
  rows.batch = group / p.heads_kv;
  rows.head0 = (group % p.heads_kv) * layout.group_size + head_in_pass % layout.group_size;
  rows.query0 = query_block * layout.query_block;
  rows.count = min_i64(layout.query_block, p.seq_q - rows.query0);
  rows.period = rows.count;
  return rows;
}

template <class V>
void forward_queries(const ForwardJob& job, std::int64_t unit, int worker) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  std::int64_t group_in_pass = 0;
  const TileRows rows = prefill_rows(job, unit, group_in_pass);
  const QueryTile tile = query_tile(layout, job.scratch + worker * layout.scratch_floats);
  start_tile<V>(p, job.q, layout, rows, tile);

  const KeyRange keys = tile_keys(p, job.key_ranges, rows);
  if (keys.first <= keys.last) {
    for (std::int64_t key_block = keys.first / bc; key_block <= keys.last / bc; ++key_block) {
      Gemm<V, false>::run(rows.count, bc / V::width, dqk, tile.queries, layout.dim_qk_padded,
                          Gemm<V, false>::packed(packed_keys(job, group_in_pass, key_block), dqk), tile.scores, bc);
      softmax_key_block<V>(p, job.key_ranges, layout, rows, tile, key_block * bc,
                           Gemm<V, true>::packed(packed_values(job, group_in_pass, key_block), bc));
    }
  }
  finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

// Every query row of a kv group, as one decode tile holds them.
HAL_ALWAYS_INLINE TileRows decode_rows(const hal_attention_params_v1& p, const Layout& layout, std::int64_t group) {
  TileRows rows;
  rows.batch = group / p.heads_kv;
  rows.head0 = (group % p.heads_kv) * layout.group_size;
  rows.query0 = 0;
  rows.period = p.seq_q;
  rows.count = layout.group_size * p.seq_q;
  return rows;
}

// The online-softmax state of one (group, split) of a decode pass with
// kv_splits > 1: unnormalized O [query_block][dim_v_padded], then the running
// max and sum of each row, in the split's partial, where the merge reads it.
HAL_ALWAYS_INLINE QueryTile split_state(const ForwardJob& job, std::int64_t unit) {
  const Layout& layout = job.layout;
  QueryTile state{};
  state.out = job.partials + unit * layout.partial_floats;
  state.running_max = state.out + layout.query_block * layout.dim_v_padded;
  state.running_sum = state.running_max + layout.query_block;
  return state;
}

// The tile of decode unit `unit` in the worker's scratch; with kv_splits > 1
// its running O, max and sum live in the split's partial, where the merge
// reads them.
HAL_ALWAYS_INLINE QueryTile decode_tile(const ForwardJob& job, std::int64_t unit, int worker) {
  QueryTile tile = query_tile(job.layout, job.scratch + worker * job.layout.scratch_floats);
  if (job.layout.kv_splits > 1) {
    const QueryTile state = split_state(job, unit);
    tile.out = state.out;
    tile.running_max = state.running_max;
    tile.running_sum = state.running_sum;
  }
  return tile;
}

// Rows [key0, key0 + count) of K or V of one (batch, kv head) as f32 rows:
// the caller's own memory when it already is (f32, unit dim stride, rows of
// whole vectors where `whole_vectors` asks it), else converted into
// `scratch` (row stride `padded`, zero past `dims`).
struct KeyRows {
  const float* data;
  std::int64_t stride;
};

template <class V>
KeyRows key_rows(const hal_attention_params_v1& p, const void* tensor, const hal_tensor_strides_v1& strides,
                 std::int64_t dims, std::int64_t padded, bool whole_vectors, std::int64_t batch,
                 std::int64_t kv_head, std::int64_t key0, std::int64_t count, float* scratch) {
  if (p.dtype == HAL_DTYPE_F32 && strides.dim == 1 && (!whole_vectors || dims == padded)) {
    return KeyRows{static_cast<const float*>(tensor) + element_offset(strides, batch, kv_head, key0, 0), strides.seq};
  }
  for (std::int64_t row = 0; row < count; ++row) {
    load_padded_row<V>(p.dtype, tensor, element_offset(strides, batch, kv_head, key0 + row, 0), strides.dim, dims,
                       padded, 1.0f, scratch + row * padded);
  }
  return KeyRows{scratch, padded};
}

// Decode reads each key once, so its rows come straight from memory: ask for
// the next block's rows while this one computes (rows of one head in a BSHD
// tensor lie a page or more apart, where the hardware prefetcher stops).
HAL_ALWAYS_INLINE void prefetch_key_block(const hal_attention_params_v1& p, const void* tensor,
                                          const hal_tensor_strides_v1& strides, std::int64_t dims, std::int64_t batch,
                                          std::int64_t kv_head, std::int64_t key0, std::int64_t count) {
  const std::int64_t end = min_i64(key0 + count, p.seq_kv);
  for (std::int64_t key = key0; key < end; ++key) {
    prefetch_row(p.dtype, tensor, element_offset(strides, batch, kv_head, key, 0), strides.dim, dims, true);
  }
}

// scores[row][key] = Q[row] . K[key] for a few rows, one dot product each.
template <class V>
void key_dot_products(const QueryTile& tile, std::int64_t row_count, std::int64_t query_stride, std::int64_t dims,
                      KeyRows keys, std::int64_t key_count, std::int64_t score_stride) {
  for (std::int64_t key = 0; key < key_count; ++key) {
    const float* key_row = keys.data + key * keys.stride;
    for (std::int64_t row = 0; row < row_count; ++row) {
      tile.scores[row * score_stride + key] = dot<V>(tile.queries + row * query_stride, key_row, dims);
    }
  }
}

// Decode: scores come as S^T = K Q^T, K's rows being the A operand read in
// place, so K is never transposed; the tile's few rows are Q^T's columns.
template <class V>
void forward_decode(const ForwardJob& job, std::int64_t unit, int worker) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t group = unit / layout.kv_splits;
  const std::int64_t split = unit % layout.kv_splits;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t kv_head = group % p.heads_kv;
  const TileRows rows = decode_rows(p, layout, group);
  const std::int64_t rows_padded = round_up(rows.count, V::width);
  const QueryTile tile = decode_tile(job, unit, worker);
  float* queries_t = tile.end;                               // packed B: [dqk][rows_padded]
  float* scores_t = queries_t + dqk * layout.query_block;    // [bc][rows_padded]
  float* keys = scores_t + bc * layout.query_block;          // [bc][dim_qk_padded] when converted
  float* values = keys + bc * layout.dim_qk_padded;          // [bc][dim_v_padded] when converted
  start_tile<V>(p, job.q, layout, rows, tile);
  // Fewer rows than a vector holds: each score is one dot product, which
  // beats a GEMM whose columns would be mostly padding.
  const bool dot_products = rows.count < V::width;
  if (!dot_products) {
    const std::int64_t panel_width = Gemm<V, false>::kPanelWidth;
    for (std::int64_t row = 0; row < rows_padded; ++row) {
      float* column = queries_t + packed_b_offset(0, row, dqk, rows_padded, panel_width);
      const std::int64_t width = min_i64(panel_width, rows_padded - row / panel_width * panel_width);
      for (std::int64_t dim = 0; dim < dqk; ++dim) {
        column[dim * width] = row < rows.count ? tile.queries[row * layout.dim_qk_padded + dim] : 0.0f;
      }
    }
  }

  const KeyRange keys_seen = tile_keys(p, job.key_ranges, rows);
  const std::int64_t first_block = max_i64(split * layout.split_key_blocks, keys_seen.first / bc);
  const std::int64_t end_block = min_i64((split + 1) * layout.split_key_blocks, keys_seen.last / bc + 1);
  if (keys_seen.first <= keys_seen.last) {
    for (std::int64_t key_block = first_block; key_block < end_block; ++key_block) {
      const std::int64_t key0 = key_block * bc;
      const std::int64_t key_count = min_i64(bc, p.seq_kv - key0);
      if (key_block + 1 < end_block) {
        prefetch_key_block(p, job.k, p.k_strides, dqk, rows.batch, kv_head, key0 + bc, bc);
        prefetch_key_block(p, job.v, p.v_strides, p.head_dim_v, rows.batch, kv_head, key0 + bc, bc);
      }
      const KeyRows k_rows = key_rows<V>(p, job.k, p.k_strides, dqk, layout.dim_qk_padded, false, rows.batch,
                                         kv_head, key0, key_count, keys);
      if (dot_products) {
        key_dot_products<V>(tile, rows.count, layout.dim_qk_padded, dqk, k_rows, key_count, bc);
      } else {
        Gemm<V, false>::run(key_count, rows_padded / V::width, dqk, k_rows.data, k_rows.stride,
                            Gemm<V, false>::packed(queries_t, dqk), scores_t, rows_padded);
        for (std::int64_t row = 0; row < rows.count; ++row) {
          float* score_row = tile.scores + row * bc;
          for (std::int64_t column = 0; column < key_count; ++column) {
            score_row[column] = scores_t[column * rows_padded + row];
          }
        }
      }
      for (std::int64_t row = 0; row < rows.count; ++row) {
        fill(tile.scores + row * bc + key_count, bc - key_count, 0.0f);  // masked: past seq_kv
      }
      const KeyRows v_rows = key_rows<V>(p, job.v, p.v_strides, p.head_dim_v, layout.dim_v_padded, true, rows.batch,
                                         kv_head, key0, key_count, values);
      softmax_key_block<V>(p, job.key_ranges, layout, rows, tile, key0, Gemm<V, true>::row_major(v_rows.data, v_rows.stride));
    }
  }
  if (layout.kv_splits == 1) finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

// Merges the kv splits of one group: each split's O and sum are rescaled to
// the largest running max, summed, then normalized as one tile.
template <class V>
void forward_merge_splits(const ForwardJob& job, std::int64_t group) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const TileRows rows = decode_rows(p, layout, group);
  // Split 0's state accumulates the merged tile in place.
  const QueryTile tile = split_state(job, group * layout.kv_splits);
  for (std::int64_t row = 0; row < rows.count; ++row) {
    float best = -kInfinity;
    for (std::int64_t split = 0; split < layout.kv_splits; ++split) {
      best = __builtin_fmaxf(best, split_state(job, group * layout.kv_splits + split).running_max[row]);
    }
    float* out_row = tile.out + row * dv_padded;
    if (best == -kInfinity) {  // no split saw a key for this row
      tile.running_sum[row] = 0.0f;
      continue;
    }
    const float own_weight = __builtin_exp2f(tile.running_max[row] - best);
    float sum = tile.running_sum[row] * own_weight;
    scale_row<V>(out_row, dv_padded, own_weight);
    for (std::int64_t split = 1; split < layout.kv_splits; ++split) {
      const QueryTile partial = split_state(job, group * layout.kv_splits + split);
      const float weight = __builtin_exp2f(partial.running_max[row] - best);  // 0 for a split that saw nothing
      if (weight == 0.0f) continue;
      sum += partial.running_sum[row] * weight;
      const typename V::Reg weight_reg = V::broadcast(weight);
      const float* partial_row = partial.out + row * dv_padded;
      for (std::int64_t i = 0; i < dv_padded; i += V::width) {
        V::store(out_row + i, V::fmadd(V::load(partial_row + i), weight_reg, V::load(out_row + i)));
      }
    }
    tile.running_max[row] = best;
    tile.running_sum[row] = sum;
  }
  finish_tile<V>(p, layout, rows, tile, job.o, job.lse);
}

// ---- backward --------------------------------------------------------------

struct BackwardHeadBuffers {
  float* queries;      // scaled by softmax_scale * log2(e)
  float* output_grads;
  float* lse_log2;     // +inf for fully masked rows, so that their P is 0
  float* output_dot_grads;
};

HAL_ALWAYS_INLINE BackwardHeadBuffers backward_head_buffers(const BackwardJob& job, std::int64_t head_in_pass) {
  const Layout& layout = job.layout;
  const std::int64_t rows = layout.seq_q_padded;
  float* base = job.packed + head_in_pass * rows * (layout.dim_qk_padded + layout.dim_v_padded + 2);
  BackwardHeadBuffers buffers;
  buffers.queries = base;
  buffers.output_grads = base + rows * layout.dim_qk_padded;
  buffers.lse_log2 = buffers.output_grads + rows * layout.dim_v_padded;
  buffers.output_dot_grads = buffers.lse_log2 + rows;
  return buffers;
}

// A backward query unit of a pass: unit = head_in_pass * query_blocks + query_block.
struct BackwardQueryUnit {
  std::int64_t head_in_pass;
  std::int64_t query_block;
  std::int64_t batch;
  std::int64_t head;  // the query head
};

HAL_ALWAYS_INLINE BackwardQueryUnit backward_query_unit(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  BackwardQueryUnit own;
  own.head_in_pass = unit / layout.query_blocks;
  own.query_block = unit % layout.query_blocks;
  const std::int64_t group = job.first_group + own.head_in_pass / layout.group_size;
  own.batch = group / p.heads_kv;
  own.head = (group % p.heads_kv) * layout.group_size + own.head_in_pass % layout.group_size;
  return own;
}

// D = rowsum(dO * O) and LSE * log2(e) of one query row (+inf past seq_q or
// where the row saw no key, so that its P is 0), dO and O read from the
// tensors a chunk at a time.
template <class V>
void pack_row_statistics(const BackwardJob& job, const BackwardHeadBuffers& buffers, std::int64_t batch,
                         std::int64_t head, std::int64_t query) {
  const hal_attention_params_v1& p = *job.params;
  const bool present = query < p.seq_q;
  const std::int64_t value_dims = present ? p.head_dim_v : 0;
  constexpr std::int64_t kChunk = 64;
  float output_chunk[kChunk];
  float grad_chunk[kChunk];
  float output_dot_grad = 0.0f;
  for (std::int64_t dim0 = 0; dim0 < value_dims; dim0 += kChunk) {
    const std::int64_t count = min_i64(kChunk, value_dims - dim0);
    load_row<V>(p.dtype, job.o, element_offset(p.o_strides, batch, head, query, dim0), p.o_strides.dim, count, 1.0f,
                output_chunk);
    load_row<V>(p.dtype, job.grad_o, element_offset(p.grad_o_strides, batch, head, query, dim0), p.grad_o_strides.dim,
                count, 1.0f, grad_chunk);
    output_dot_grad += dot<V>(grad_chunk, output_chunk, count);
  }
  buffers.output_dot_grads[query] = output_dot_grad;
  const float lse = present ? job.lse[(batch * p.heads_q + head) * p.seq_q + query] : -kInfinity;
  buffers.lse_log2[query] = lse == -kInfinity ? kInfinity : lse * kLog2e;
}

template <class V>
void backward_pack_queries(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const auto [head_in_pass, query_block, batch, head] = backward_query_unit(job, unit);
  const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
  const float q_scale = p.softmax_scale * kLog2e;
  for (std::int64_t row = 0; row < layout.query_block; ++row) {
    const std::int64_t query = query_block * layout.query_block + row;
    const bool present = query < p.seq_q;
    float* query_row = buffers.queries + query * layout.dim_qk_padded;
    float* grad_row = buffers.output_grads + query * layout.dim_v_padded;
    const std::int64_t query_dims = present ? p.head_dim_qk : 0;
    const std::int64_t value_dims = present ? p.head_dim_v : 0;
    load_padded_row<V>(p.dtype, job.q, element_offset(p.q_strides, batch, head, query, 0), p.q_strides.dim,
                       query_dims, layout.dim_qk_padded, q_scale, query_row);
    load_padded_row<V>(p.dtype, job.grad_o, element_offset(p.grad_o_strides, batch, head, query, 0),
                       p.grad_o_strides.dim, value_dims, layout.dim_v_padded, 1.0f, grad_row);
    pack_row_statistics<V>(job, buffers, batch, head, query);
  }
}

// Runs step(head_in_pass, query0, rows) for each query block of each query
// head of the unit's group whose rows see some of the unit's keys.
template <class Step>
HAL_ALWAYS_INLINE void for_each_query_block_seeing(const BackwardJob& job, const KeyUnit& keys, const Step& step) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  for (std::int64_t head_in_group = 0; head_in_group < layout.group_size; ++head_in_group) {
    const std::int64_t head_in_pass = keys.group_in_pass * layout.group_size + head_in_group;
    for (std::int64_t query_block = 0; query_block < layout.query_blocks; ++query_block) {
      const std::int64_t query0 = query_block * layout.query_block;
      const std::int64_t rows = min_i64(layout.query_block, p.seq_q - query0);
      const KeyRange seen = block_keys(p, job.key_ranges, keys.batch, query0, rows);
      if (seen.first > seen.last || seen.last < keys.key0 || seen.first >= keys.key0 + keys.key_count) continue;
      step(head_in_pass, query0, rows);
    }
  }
}

template <class V>
void backward_keys(const BackwardJob& job, std::int64_t unit, float* scratch, float* dq_partial) {
  using Reg = typename V::Reg;
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const KeyUnit own = key_unit(job, unit);
  const std::int64_t batch = own.batch;
  const std::int64_t kv_head = own.kv_head;
  const std::int64_t br = layout.query_block;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t dv = p.head_dim_v;
  const std::int64_t dqk_padded = layout.dim_qk_padded;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const std::int64_t key0 = own.key0;
  const std::int64_t key_count = own.key_count;

  float* keys = scratch;                               // [bc][dqk_padded]
  float* keys_t = keys + bc * dqk_padded;              // [dqk_padded][bc]
  float* values_t = keys_t + dqk_padded * bc;          // [dv_padded][bc]
  float* key_grads = values_t + dv_padded * bc;        // [bc][dqk_padded]
  float* value_grads = key_grads + bc * dqk_padded;    // [bc][dv_padded]
  float* probabilities = value_grads + bc * dv_padded; // [br][bc]
  float* score_grads = probabilities + br * bc;        // [br][bc]: dP, then dS

  float* value_rows = value_grads;  // zeroed once V^T is made
  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key0 + column;
    const std::int64_t key_dims = column < key_count ? dqk : 0;
    const std::int64_t value_dims = column < key_count ? dv : 0;
    load_padded_row<V>(p.dtype, job.k, element_offset(p.k_strides, batch, kv_head, key, 0), p.k_strides.dim, key_dims,
                       dqk_padded, 1.0f, keys + column * dqk_padded);
    load_padded_row<V>(p.dtype, job.v, element_offset(p.v_strides, batch, kv_head, key, 0), p.v_strides.dim, value_dims,
                       dv_padded, 1.0f, value_rows + column * dv_padded);
  }
  // Transposed a row of the result at a time: contiguous stores, strided
  // loads from rows that are in L1.
  for (std::int64_t dim = 0; dim < dqk_padded; ++dim) {
    for (std::int64_t column = 0; column < bc; ++column) keys_t[dim * bc + column] = keys[column * dqk_padded + dim];
  }
  for (std::int64_t dim = 0; dim < dv_padded; ++dim) {
    for (std::int64_t column = 0; column < bc; ++column) {
      values_t[dim * bc + column] = value_rows[column * dv_padded + dim];
    }
  }
  fill(key_grads, bc * (dqk_padded + dv_padded), 0.0f);

  for_each_query_block_seeing(job, own, [&](std::int64_t head_in_pass, std::int64_t query0, std::int64_t rows) {
    const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
    float* head_dq = dq_partial + head_in_pass * layout.seq_q_padded * dqk_padded;
    const float* q_tile = buffers.queries + query0 * dqk_padded;
    const float* grad_o_tile = buffers.output_grads + query0 * dv_padded;

    // P = exp2(S - LSE) with S = Q K^T in the log2 domain.
    Gemm<V, false>::run(rows, bc / V::width, dqk, q_tile, dqk_padded, Gemm<V, false>::row_major(keys_t, bc),
                        probabilities, bc);
    for (std::int64_t row = 0; row < rows; ++row) {
      float* row_values = probabilities + row * bc;
      mask_scores<V>(row_values, key0, bc, visible_keys(p, job.key_ranges, batch, query0 + row));
      const Reg lse_reg = V::broadcast(buffers.lse_log2[query0 + row]);
      for (std::int64_t column = 0; column < bc; column += V::width) {
        V::store(row_values + column, exp2<V>(V::sub(V::load(row_values + column), lse_reg)));
      }
    }
    // dS = P * (dO V^T - rowsum(dO * O)), the gradient of the natural-log scores.
    Gemm<V, false>::run(rows, bc / V::width, dv, grad_o_tile, dv_padded, Gemm<V, false>::row_major(values_t, bc),
                        score_grads, bc);
    for (std::int64_t row = 0; row < rows; ++row) {
      const Reg dot_reg = V::broadcast(buffers.output_dot_grads[query0 + row]);
      float* grad_row = score_grads + row * bc;
      const float* probability_row = probabilities + row * bc;
      for (std::int64_t column = 0; column < bc; column += V::width) {
        V::store(grad_row + column,
                 V::mul(V::load(probability_row + column), V::sub(V::load(grad_row + column), dot_reg)));
      }
    }
    // dV += P^T dO;  dK += dS^T Q' (Q' = Q * scale * log2 e, corrected when written);  dQ += dS K.
    using GemmTransposedA = Gemm<V, true, true>;
    GemmTransposedA::run(key_count, dv_padded / V::width, rows, probabilities, bc,
                         GemmTransposedA::row_major(grad_o_tile, dv_padded), value_grads, dv_padded);
    GemmTransposedA::run(key_count, dqk_padded / V::width, rows, score_grads, bc,
                         GemmTransposedA::row_major(q_tile, dqk_padded), key_grads, dqk_padded);
    Gemm<V, true>::run(rows, dqk_padded / V::width, key_count, score_grads, bc,
                       Gemm<V, true>::row_major(keys, dqk_padded), head_dq + query0 * dqk_padded, dqk_padded);
  });

  // dK = scale * dS^T Q = ln 2 * dS^T Q'.
  for (std::int64_t column = 0; column < key_count; ++column) {
    const std::int64_t key = key0 + column;
    store_row<V>(p.dtype, job.grad_k, element_offset(p.grad_k_strides, batch, kv_head, key, 0), p.grad_k_strides.dim,
                 dqk, kLn2, key_grads + column * dqk_padded);
    store_row<V>(p.dtype, job.grad_v, element_offset(p.grad_v_strides, batch, kv_head, key, 0), p.grad_v_strides.dim,
                 dv, 1.0f, value_grads + column * dv_padded);
  }
}

template <class V>
void backward_reduce_dq(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const auto [head_in_pass, query_block, batch, head] = backward_query_unit(job, unit);
  const std::int64_t query0 = query_block * layout.query_block;
  const std::int64_t rows = min_i64(layout.query_block, p.seq_q - query0);
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t query = query0 + row;
    // The chunks summed into the first one, in fixed chunk order: the result
    // does not depend on thread timing.
    float* sum = job.dq_partials + (head_in_pass * layout.seq_q_padded + query) * layout.dim_qk_padded;
    for (std::int64_t chunk = 1; chunk < layout.chunks; ++chunk) {
      const float* other = sum + chunk * layout.dq_partial_floats;
      for (std::int64_t dim = 0; dim < layout.dim_qk_padded; dim += V::width) {
        V::store(sum + dim, V::add(V::load(sum + dim), V::load(other + dim)));
      }
    }
    store_row<V>(p.dtype, job.grad_q, element_offset(p.grad_q_strides, batch, head, query, 0), p.grad_q_strides.dim,
                 p.head_dim_qk, p.softmax_scale, sum);
  }
}

// ---- FMA peak --------------------------------------------------------------

template <class V>
double fma_chains(std::int64_t iterations) {
  // Enough independent chains to cover FMA latency times FMA ports.
  constexpr int kChains = 12;
  using Reg = typename V::Reg;
  Reg chains[kChains];
  HAL_FLASH_UNROLL for (int chain = 0; chain < kChains; ++chain) chains[chain] = V::broadcast(0.001f * chain);
  const Reg factor = V::broadcast(0.999f);
  const Reg addend = V::broadcast(0.001f);
  for (std::int64_t i = 0; i < iterations; ++i) {
    HAL_FLASH_UNROLL for (int chain = 0; chain < kChains; ++chain) chains[chain] = V::fmadd(chains[chain], factor, addend);
  }
  Reg total = V::zero();
  HAL_FLASH_UNROLL for (int chain = 0; chain < kChains; ++chain) total = V::add(total, chains[chain]);
  volatile float keep = V::reduce_add(total);  // keeps the chains from being optimized away
  (void)keep;
  return 2.0 * kChains * V::width * static_cast<double>(iterations);
}

template <class V>
constexpr KernelTable make_kernel_table() {
  return KernelTable{&forward_pack_keys<V>, &forward_queries<V>,     &forward_decode<V>,    &forward_merge_splits<V>,
                     &backward_pack_queries<V>, &backward_keys<V>, &backward_reduce_dq<V>, &fma_chains<V>};
}

}  // namespace
}  // namespace hal::host::flash
