// Flash attention kernels written once over a vector-type abstraction `V`;
// each flash_kernels_<isa>.cpp defines its V and instantiates make_kernel_table<V>().
//
// V provides:
//   Reg, width (floats per Reg), tile_rows x tile_vectors (the register block
//   of the micro-kernel: tile_rows rows of tile_vectors Regs),
//   zero, load, store (unaligned), broadcast, fmadd(a, b, c) = a * b + c,
//   add, sub, mul, max, min, reduce_add, reduce_max,
//   pow2_integer(n) = 2^n for integer-valued n in [-127, 127] (0 for -127).
//
// Everything lives in an anonymous namespace (see flash_kernels.hpp for why).
#pragma once

#include <cstdint>
#include <utility>

#include "attention/attention_common.hpp"
#include "attention/flash_kernels.hpp"

namespace hal::host::flash {
namespace {

#define HAL_FLASH_UNROLL _Pragma("GCC unroll 16")

constexpr float kInfinity = __builtin_inff();

// 2^x with relative error ~2e-7 (Cephes exp2f polynomial on [-0.5, 0.5]).
// x <= -126.5 gives exactly 0, so masked scores (-inf) vanish.
template <class V>
HAL_HOST_INLINE typename V::Reg exp2(typename V::Reg x) {
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

// C[rows x cols] (=|+=) A[rows x depth] * B[depth x cols], all row-major f32,
// cols = col_vectors * V::width. The micro-kernel keeps a tile_rows x
// tile_vectors block of C in registers, loads tile_vectors Regs of one B row
// per step and multiplies them by broadcast A elements.
template <class V, bool Accumulate>
struct Gemm {
  static constexpr int kRows = V::tile_rows;
  static constexpr int kVectors = V::tile_vectors;
  using Kernel = void (*)(const float*, std::int64_t, const float*, std::int64_t, float*, std::int64_t,
                          std::int64_t);

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
        const Reg a_value = V::broadcast(a[row * lda + step]);
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
                  std::int64_t lda, const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
    // Column panels outermost: the depth x tile_vectors panel of B stays in L1
    // while every row block of A streams past it.
    for (std::int64_t col = 0; col < col_vectors; col += kVectors) {
      const std::int64_t vectors = min_i64(kVectors, col_vectors - col);
      for (std::int64_t row = 0; row < rows; row += kRows) {
        const std::int64_t block_rows = min_i64(kRows, rows - row);
        grid.kernels[block_rows - 1][vectors - 1](a + row * lda, lda, b + col * V::width, ldb,
                                                  c + row * ldc + col * V::width, ldc, depth);
      }
    }
  }
};

template <class V>
HAL_HOST_INLINE float row_max(const float* row, std::int64_t count) {
  typename V::Reg best = V::broadcast(-kInfinity);
  for (std::int64_t i = 0; i < count; i += V::width) best = V::max(best, V::load(row + i));
  return V::reduce_max(best);
}

template <class V>
HAL_HOST_INLINE void scale_row(float* row, std::int64_t count, float factor) {
  const typename V::Reg factor_reg = V::broadcast(factor);
  for (std::int64_t i = 0; i < count; i += V::width) V::store(row + i, V::mul(V::load(row + i), factor_reg));
}

HAL_HOST_INLINE void fill(float* data, std::int64_t count, float value) {
  for (std::int64_t i = 0; i < count; ++i) data[i] = value;
}

// Sets the scores of keys [key0, key0 + key_block) that `range` does not see to -inf.
HAL_HOST_INLINE void mask_scores(float* row, std::int64_t key0, std::int64_t key_block, KeyRange range) {
  const std::int64_t first = range.first - key0;
  const std::int64_t last = range.last - key0;
  if (first <= 0 && last >= key_block - 1) return;
  const std::int64_t masked_below = max_i64(0, min_i64(first, key_block));
  fill(row, masked_below, -kInfinity);
  const std::int64_t masked_from = max_i64(masked_below, min_i64(last + 1, key_block));
  fill(row + masked_from, key_block - masked_from, -kInfinity);
}

// Keys visible to at least one query of [query0, query0 + rows): by the
// monotonic band ends, those of the first and of the last row bound them.
HAL_HOST_INLINE KeyRange block_keys(const hal_attention_params_v1& p, std::int64_t query0, std::int64_t rows) {
  return KeyRange{visible_keys(p, query0).first, visible_keys(p, query0 + rows - 1).last};
}

// ---- forward ---------------------------------------------------------------

template <class V>
void forward_pack_keys(const ForwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t group_in_pass = unit / layout.key_blocks;
  const std::int64_t key_block = unit % layout.key_blocks;
  const std::int64_t group = job.first_group + group_in_pass;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t kv_head = group % p.heads_kv;
  const std::int64_t bc = layout.key_block;
  float* group_base = job.packed + group_in_pass * layout.packed_group_floats;
  float* keys_t = group_base + key_block * p.head_dim_qk * bc;
  float* values = group_base + layout.key_blocks * p.head_dim_qk * bc + key_block * bc * layout.dim_v_padded;
  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key_block * bc + column;
    const bool present = key < p.seq_kv;  // padding keys are zero, masked later
    for (std::int64_t dim = 0; dim < p.head_dim_qk; ++dim) {
      keys_t[dim * bc + column] =
          present ? load_as_float(p.dtype, job.k, element_offset(p.k_strides, batch, kv_head, key, dim)) : 0.0f;
    }
    float* value_row = values + column * layout.dim_v_padded;
    for (std::int64_t dim = 0; dim < layout.dim_v_padded; ++dim) {
      value_row[dim] = present && dim < p.head_dim_v
                           ? load_as_float(p.dtype, job.v, element_offset(p.v_strides, batch, kv_head, key, dim))
                           : 0.0f;
    }
  }
}

template <class V>
void forward_queries(const ForwardJob& job, std::int64_t unit, int worker) {
  using Reg = typename V::Reg;
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t heads_in_pass = job.pass_groups * layout.group_size;
  const std::int64_t query_block = layout.query_blocks - 1 - unit / heads_in_pass;
  const std::int64_t head_in_pass = unit % heads_in_pass;
  const std::int64_t group_in_pass = head_in_pass / layout.group_size;
  const std::int64_t group = job.first_group + group_in_pass;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t head = (group % p.heads_kv) * layout.group_size + head_in_pass % layout.group_size;
  const std::int64_t br = layout.query_block;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const std::int64_t query0 = query_block * br;
  const std::int64_t rows = min_i64(br, p.seq_q - query0);

  float* q_tile = job.scratch + worker * layout.scratch_floats;  // [br][dim_qk_padded]
  float* scores = q_tile + br * layout.dim_qk_padded;            // [br][bc]
  float* out = scores + br * bc;                                 // [br][dim_v_padded]
  float* running_max = out + br * dv_padded;                     // [br], log2 domain
  float* running_sum = running_max + br;                         // [br]

  // Scores in the log2 domain: folding scale * log2(e) into Q lets the
  // softmax use exp2 with no extra multiply per score.
  const float q_scale = p.softmax_scale * kLog2e;
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t dim = 0; dim < dqk; ++dim) {
      q_tile[row * layout.dim_qk_padded + dim] =
          q_scale * load_as_float(p.dtype, job.q, element_offset(p.q_strides, batch, head, query0 + row, dim));
    }
  }
  fill(out, rows * dv_padded, 0.0f);
  fill(running_max, rows, -kInfinity);
  fill(running_sum, rows, 0.0f);

  const float* group_base = job.packed + group_in_pass * layout.packed_group_floats;
  const float* values = group_base + layout.key_blocks * dqk * bc;
  const KeyRange keys = block_keys(p, query0, rows);
  if (keys.first <= keys.last) {
    for (std::int64_t key_block = keys.first / bc; key_block <= keys.last / bc; ++key_block) {
      const std::int64_t key0 = key_block * bc;
      Gemm<V, false>::run(rows, bc / V::width, dqk, q_tile, layout.dim_qk_padded, group_base + key_block * dqk * bc,
                          bc, scores, bc);
      for (std::int64_t row = 0; row < rows; ++row) {
        float* score_row = scores + row * bc;
        mask_scores(score_row, key0, bc, visible_keys(p, query0 + row));
        const float new_max = __builtin_fmaxf(running_max[row], row_max<V>(score_row, bc));
        if (new_max == -kInfinity) {  // nothing visible yet: contributes nothing
          fill(score_row, bc, 0.0f);
          continue;
        }
        const Reg max_reg = V::broadcast(new_max);
        Reg sum = V::zero();
        for (std::int64_t column = 0; column < bc; column += V::width) {
          const Reg probability = exp2<V>(V::sub(V::load(score_row + column), max_reg));
          V::store(score_row + column, probability);
          sum = V::add(sum, probability);
        }
        const float correction = __builtin_exp2f(running_max[row] - new_max);  // 0 on the first block
        running_sum[row] = running_sum[row] * correction + V::reduce_add(sum);
        if (correction != 1.0f) scale_row<V>(out + row * dv_padded, dv_padded, correction);
        running_max[row] = new_max;
      }
      const std::int64_t key_count = min_i64(bc, p.seq_kv - key0);
      Gemm<V, true>::run(rows, dv_padded / V::width, key_count, scores, bc, values + key0 * dv_padded, dv_padded, out,
                         dv_padded);
    }
  }

  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t query = query0 + row;
    const bool sees_keys = running_sum[row] > 0.0f;
    const float inverse_sum = sees_keys ? 1.0f / running_sum[row] : 0.0f;
    for (std::int64_t dim = 0; dim < p.head_dim_v; ++dim) {
      store_float(p.dtype, job.o, element_offset(p.o_strides, batch, head, query, dim),
                  out[row * dv_padded + dim] * inverse_sum);
    }
    if (job.lse != nullptr) {
      job.lse[(batch * p.heads_q + head) * p.seq_q + query] =
          sees_keys ? (running_max[row] + __builtin_log2f(running_sum[row])) * kLn2 : -kInfinity;
    }
  }
}

// ---- backward --------------------------------------------------------------

struct BackwardHeadBuffers {
  float* queries;      // scaled by softmax_scale * log2(e)
  float* output_grads;
  float* lse_log2;     // +inf for fully masked rows, so that their P is 0
  float* output_dot_grads;
};

HAL_HOST_INLINE BackwardHeadBuffers backward_head_buffers(const BackwardJob& job, std::int64_t head_in_pass) {
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

template <class V>
void backward_pack_queries(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t head_in_pass = unit / layout.query_blocks;
  const std::int64_t query_block = unit % layout.query_blocks;
  const std::int64_t group = job.first_group + head_in_pass / layout.group_size;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t head = (group % p.heads_kv) * layout.group_size + head_in_pass % layout.group_size;
  const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
  const float q_scale = p.softmax_scale * kLog2e;
  for (std::int64_t row = 0; row < layout.query_block; ++row) {
    const std::int64_t query = query_block * layout.query_block + row;
    const bool present = query < p.seq_q;
    float* query_row = buffers.queries + query * layout.dim_qk_padded;
    for (std::int64_t dim = 0; dim < layout.dim_qk_padded; ++dim) {
      query_row[dim] = present && dim < p.head_dim_qk
                           ? q_scale * load_as_float(p.dtype, job.q, element_offset(p.q_strides, batch, head, query, dim))
                           : 0.0f;
    }
    float* grad_row = buffers.output_grads + query * layout.dim_v_padded;
    float output_dot_grad = 0.0f;
    for (std::int64_t dim = 0; dim < layout.dim_v_padded; ++dim) {
      float grad = 0.0f;
      if (present && dim < p.head_dim_v) {
        grad = load_as_float(p.dtype, job.grad_o, element_offset(p.grad_o_strides, batch, head, query, dim));
        output_dot_grad += grad * load_as_float(p.dtype, job.o, element_offset(p.o_strides, batch, head, query, dim));
      }
      grad_row[dim] = grad;
    }
    buffers.output_dot_grads[query] = output_dot_grad;
    const float lse = present ? job.lse[(batch * p.heads_q + head) * p.seq_q + query] : -kInfinity;
    buffers.lse_log2[query] = lse == -kInfinity ? kInfinity : lse * kLog2e;
  }
}

// Copies rows [0, rows) x columns [0, columns) of `in` (row stride ld_in) transposed into `out` (row stride ld_out).
HAL_HOST_INLINE void transpose(const float* in, std::int64_t ld_in, std::int64_t rows, std::int64_t columns, float* out,
                               std::int64_t ld_out) {
  for (std::int64_t column = 0; column < columns; ++column) {
    for (std::int64_t row = 0; row < rows; ++row) out[column * ld_out + row] = in[row * ld_in + column];
  }
}

template <class V>
void backward_keys(const BackwardJob& job, std::int64_t unit, float* scratch, float* dq_partial) {
  using Reg = typename V::Reg;
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t group_in_pass = unit / layout.key_blocks;
  const std::int64_t key_block = unit % layout.key_blocks;
  const std::int64_t group = job.first_group + group_in_pass;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t kv_head = group % p.heads_kv;
  const std::int64_t br = layout.query_block;
  const std::int64_t bc = layout.key_block;
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t dv = p.head_dim_v;
  const std::int64_t dqk_padded = layout.dim_qk_padded;
  const std::int64_t dv_padded = layout.dim_v_padded;
  const std::int64_t key0 = key_block * bc;
  const std::int64_t key_count = min_i64(bc, p.seq_kv - key0);

  float* keys = scratch;                               // [bc][dqk_padded]
  float* keys_t = keys + bc * dqk_padded;              // [dqk_padded][bc]
  float* values_t = keys_t + dqk_padded * bc;          // [dv_padded][bc]
  float* key_grads = values_t + dv_padded * bc;        // [bc][dqk_padded]
  float* value_grads = key_grads + bc * dqk_padded;    // [bc][dv_padded]
  float* probabilities = value_grads + bc * dv_padded; // [br][bc]
  float* score_grads = probabilities + br * bc;        // [br][bc]: dP, then dS
  float* probabilities_t = score_grads + br * bc;      // [bc][br]
  float* score_grads_t = probabilities_t + bc * br;    // [bc][br]

  for (std::int64_t column = 0; column < bc; ++column) {
    const std::int64_t key = key0 + column;
    const bool present = column < key_count;
    for (std::int64_t dim = 0; dim < dqk_padded; ++dim) {
      const float value = present && dim < dqk
                              ? load_as_float(p.dtype, job.k, element_offset(p.k_strides, batch, kv_head, key, dim))
                              : 0.0f;
      keys[column * dqk_padded + dim] = value;
      keys_t[dim * bc + column] = value;
    }
    for (std::int64_t dim = 0; dim < dv_padded; ++dim) {
      values_t[dim * bc + column] =
          present && dim < dv ? load_as_float(p.dtype, job.v, element_offset(p.v_strides, batch, kv_head, key, dim))
                              : 0.0f;
    }
  }
  fill(key_grads, bc * (dqk_padded + dv_padded), 0.0f);

  for (std::int64_t head_in_group = 0; head_in_group < layout.group_size; ++head_in_group) {
    const std::int64_t head_in_pass = group_in_pass * layout.group_size + head_in_group;
    const BackwardHeadBuffers buffers = backward_head_buffers(job, head_in_pass);
    float* head_dq = dq_partial + head_in_pass * layout.seq_q_padded * dqk_padded;
    for (std::int64_t query_block = 0; query_block < layout.query_blocks; ++query_block) {
      const std::int64_t query0 = query_block * br;
      const std::int64_t rows = min_i64(br, p.seq_q - query0);
      const KeyRange keys_seen = block_keys(p, query0, rows);
      if (keys_seen.first > keys_seen.last || keys_seen.last < key0 || keys_seen.first >= key0 + key_count) continue;
      const float* q_tile = buffers.queries + query0 * dqk_padded;
      const float* grad_o_tile = buffers.output_grads + query0 * dv_padded;

      // P = exp2(S - LSE) with S = Q K^T in the log2 domain.
      Gemm<V, false>::run(rows, bc / V::width, dqk, q_tile, dqk_padded, keys_t, bc, probabilities, bc);
      for (std::int64_t row = 0; row < rows; ++row) {
        float* row_values = probabilities + row * bc;
        mask_scores(row_values, key0, bc, visible_keys(p, query0 + row));
        const Reg lse_reg = V::broadcast(buffers.lse_log2[query0 + row]);
        for (std::int64_t column = 0; column < bc; column += V::width) {
          V::store(row_values + column, exp2<V>(V::sub(V::load(row_values + column), lse_reg)));
        }
      }
      // dS = P * (dO V^T - rowsum(dO * O)), the gradient of the natural-log scores.
      Gemm<V, false>::run(rows, bc / V::width, dv, grad_o_tile, dv_padded, values_t, bc, score_grads, bc);
      for (std::int64_t row = 0; row < rows; ++row) {
        const Reg dot_reg = V::broadcast(buffers.output_dot_grads[query0 + row]);
        float* grad_row = score_grads + row * bc;
        const float* probability_row = probabilities + row * bc;
        for (std::int64_t column = 0; column < bc; column += V::width) {
          V::store(grad_row + column,
                   V::mul(V::load(probability_row + column), V::sub(V::load(grad_row + column), dot_reg)));
        }
      }
      transpose(probabilities, bc, rows, key_count, probabilities_t, br);
      transpose(score_grads, bc, rows, key_count, score_grads_t, br);
      // dV += P^T dO;  dK += dS^T Q' (Q' = Q * scale * log2 e, corrected when written);  dQ += dS K.
      Gemm<V, true>::run(key_count, dv_padded / V::width, rows, probabilities_t, br, grad_o_tile, dv_padded, value_grads,
                         dv_padded);
      Gemm<V, true>::run(key_count, dqk_padded / V::width, rows, score_grads_t, br, q_tile, dqk_padded, key_grads,
                         dqk_padded);
      Gemm<V, true>::run(rows, dqk_padded / V::width, key_count, score_grads, bc, keys, dqk_padded,
                         head_dq + query0 * dqk_padded, dqk_padded);
    }
  }

  // dK = scale * dS^T Q = ln 2 * dS^T Q'.
  for (std::int64_t column = 0; column < key_count; ++column) {
    const std::int64_t key = key0 + column;
    for (std::int64_t dim = 0; dim < dqk; ++dim) {
      store_float(p.dtype, job.grad_k, element_offset(p.grad_k_strides, batch, kv_head, key, dim),
                  kLn2 * key_grads[column * dqk_padded + dim]);
    }
    for (std::int64_t dim = 0; dim < dv; ++dim) {
      store_float(p.dtype, job.grad_v, element_offset(p.grad_v_strides, batch, kv_head, key, dim),
                  value_grads[column * dv_padded + dim]);
    }
  }
}

template <class V>
void backward_reduce_dq(const BackwardJob& job, std::int64_t unit) {
  const hal_attention_params_v1& p = *job.params;
  const Layout& layout = job.layout;
  const std::int64_t head_in_pass = unit / layout.query_blocks;
  const std::int64_t query_block = unit % layout.query_blocks;
  const std::int64_t group = job.first_group + head_in_pass / layout.group_size;
  const std::int64_t batch = group / p.heads_kv;
  const std::int64_t head = (group % p.heads_kv) * layout.group_size + head_in_pass % layout.group_size;
  const std::int64_t query0 = query_block * layout.query_block;
  const std::int64_t rows = min_i64(layout.query_block, p.seq_q - query0);
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::int64_t query = query0 + row;
    const float* partial = job.dq_partials + (head_in_pass * layout.seq_q_padded + query) * layout.dim_qk_padded;
    for (std::int64_t dim = 0; dim < p.head_dim_qk; ++dim) {
      float sum = 0.0f;
      // Fixed chunk order: the result does not depend on thread timing.
      for (std::int64_t chunk = 0; chunk < layout.chunks; ++chunk) sum += partial[chunk * layout.dq_partial_floats + dim];
      store_float(p.dtype, job.grad_q, element_offset(p.grad_q_strides, batch, head, query, dim),
                  p.softmax_scale * sum);
    }
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
  return KernelTable{&forward_pack_keys<V>, &forward_queries<V>, &backward_pack_queries<V>,
                     &backward_keys<V>,     &backward_reduce_dq<V>, &fma_chains<V>};
}

#undef HAL_FLASH_UNROLL

}  // namespace
}  // namespace hal::host::flash
