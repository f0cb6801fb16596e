// Flash attention (FlashAttention-2 style) written once for CUDA (nvcc) and
// HIP (hipcc -x hip), launched by the plan in attention_plan.cpp with one
// hal_attention_kernel_args by value (attention_kernels.h has the contract).
//
// Forward, per (q-block, q-head, batch): the Q tile stays in shared memory,
// K and V tiles stream through one buffer, the softmax is computed online
// (running row max and sum, the accumulator rescaled when the max grows),
// O and the f32 log-sum-exp are written at the end. Backward: a preprocess
// computes delta = rowsum(dO * O) and zeroes the f32 dQ accumulator; the main
// kernel runs per (kv-block, kv-head, batch), keeps dK and dV in registers
// over every query head of the GQA group and every query block that can see
// the keys, and adds dQ with atomicAdd; a last kernel converts dQ to the
// dtype.
//
// Paths: scalar f32 arithmetic on every architecture, with f16/bf16
// converted on load and rounded to nearest even on store (the dtype is a
// run-time argument); and, for NVIDIA sm_80+ only, an f16/bf16 forward on
// tensor cores (mma.sync). Head dims have three compile-time bounds (64,
// 128, 256): 8 scalar kernels, plus 6 tensor-core ones in the CUDA image.
// tests/simt runs this file on the CPU; tests/gpu on an NVIDIA GPU.

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#endif

#include <stdint.h>

#include "attention_kernels.h"
#include "flash_attention_config.h"

#ifndef HAL_DYNAMIC_SHARED
#define HAL_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#if defined(__CUDACC__) || defined(__HIP__)
#define HAL_UNROLL _Pragma("unroll")
#else
#define HAL_UNROLL
#endif

namespace hal_flash {

// ---- element access -------------------------------------------------------

__device__ __forceinline__ float negative_infinity() { return __int_as_float(static_cast<int>(0xff800000u)); }

__device__ __forceinline__ float f16_bits_to_float(uint32_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return __int_as_float(static_cast<int>(sign | 0x7f800000u | (mantissa << 13)));
  if (exponent != 0) return __int_as_float(static_cast<int>(sign | ((exponent + 112u) << 23) | (mantissa << 13)));
  const float subnormal = static_cast<float>(mantissa) * 5.9604644775390625e-08f;  // mantissa * 2^-24
  return sign ? -subnormal : subnormal;
}

__device__ __forceinline__ uint16_t float_to_f16_bits(float value) {
  const uint32_t bits = static_cast<uint32_t>(__float_as_int(value));
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: f16 subnormal; value * 2^24 rounded to nearest even
    const float scaled = fabsf(value) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(scaled)));
  }
  const uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits) {
  return __int_as_float(static_cast<int>(bits << 16));
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = static_cast<uint32_t>(__float_as_int(value));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float load(uint64_t address, int64_t index, int32_t dtype) {
  if (dtype == HAL_KERNEL_F32) return reinterpret_cast<const float*>(address)[index];
  const uint32_t bits = reinterpret_cast<const uint16_t*>(address)[index];
  return dtype == HAL_KERNEL_F16 ? f16_bits_to_float(bits) : bf16_bits_to_float(bits);
}

__device__ __forceinline__ void store(uint64_t address, int64_t index, int32_t dtype, float value) {
  if (dtype == HAL_KERNEL_F32) {
    reinterpret_cast<float*>(address)[index] = value;
  } else {
    reinterpret_cast<uint16_t*>(address)[index] =
        dtype == HAL_KERNEL_F16 ? float_to_f16_bits(value) : float_to_bf16_bits(value);
  }
}

__device__ __forceinline__ int64_t row_offset(const hal_kernel_tensor& tensor, int batch, int head, int64_t row) {
  return batch * tensor.batch_stride + head * tensor.head_stride + row * tensor.seq_stride;
}

// Thread index and count as int (the builtins are unsigned).
__device__ __forceinline__ int thread_index() { return static_cast<int>(threadIdx.x); }
__device__ __forceinline__ int thread_count() { return static_cast<int>(blockDim.x); }

// ---- mask geometry ---------------------------------------------------------
// Key j is visible to query i when -left <= j - (i + mask_offset) <= right
// (attention_kernels.h); unbounded sides use a reach beyond any sequence.

constexpr int64_t kUnbounded = int64_t(1) << 40;

__device__ __forceinline__ int64_t reach_right(const hal_attention_kernel_args& a) {
  if (a.causal) return 0;  // a right window can only widen past the diagonal, and causal forbids that
  return a.window_right >= 0 ? a.window_right : kUnbounded;
}

__device__ __forceinline__ int64_t reach_left(const hal_attention_kernel_args& a) {
  return a.window_left >= 0 ? a.window_left : kUnbounded;
}

// The band, then the query's own key range when the call has them (blocks
// are bounded by the band alone: ranges only hide more keys).
__device__ __forceinline__ bool visible(const hal_attention_kernel_args& a, int batch, int64_t query, int64_t key) {
  const int64_t distance = key - (query + a.mask_offset);
  if (distance < -reach_left(a) || distance > reach_right(a)) return false;
  if (a.key_ranges == 0) return true;
  const int32_t* range =
      reinterpret_cast<const int32_t*>(a.key_ranges) + (static_cast<int64_t>(batch) * a.seq_q + query) * 2;
  return key >= range[0] && key < range[1];
}

__device__ __forceinline__ int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }
__device__ __forceinline__ int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }

// Rows of the dQ accumulator and the delta vector in the backward workspace.
__device__ __forceinline__ float* delta_rows(const hal_attention_kernel_args& a) {
  return reinterpret_cast<float*>(a.workspace);
}

__device__ __forceinline__ float* dq_accumulator(const hal_attention_kernel_args& a) {
  const uint64_t rows = static_cast<uint64_t>(a.batch) * a.heads_q * a.seq_q;
  const uint64_t delta_bytes =
      (rows * 4u + HAL_FLASH_WORKSPACE_ALIGNMENT - 1) / HAL_FLASH_WORKSPACE_ALIGNMENT * HAL_FLASH_WORKSPACE_ALIGNMENT;
  return reinterpret_cast<float*>(a.workspace + delta_bytes);
}

__device__ __forceinline__ int64_t query_row_index(const hal_attention_kernel_args& a, int batch, int head,
                                                   int64_t query) {
  return (static_cast<int64_t>(batch) * a.heads_q + head) * a.seq_q + query;
}

// Copies `rows` rows of `tensor` starting at `first_row` into a shared f32
// tile (row stride `stride`), zero past `row_limit`, each value times `factor`.
__device__ __forceinline__ void load_tile(float* tile, int stride, const hal_kernel_tensor& tensor,
                                          const hal_attention_kernel_args& a, int batch, int head, int64_t first_row,
                                          int rows, int64_t row_limit, int columns, float factor) {
  for (int e = thread_index(); e < rows * columns; e += thread_count()) {
    const int r = e / columns;
    const int d = e % columns;
    const int64_t row = first_row + r;
    tile[r * stride + d] =
        row < row_limit ? factor * load(tensor.address, row_offset(tensor, batch, head, row) + d, a.dtype) : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float* x, const float* y, int length) {
  float sum = 0.0f;
  for (int d = 0; d < length; ++d) sum += x[d] * y[d];
  return sum;
}

// ---- forward ---------------------------------------------------------------

template <int kBound>
__device__ void forward(const hal_attention_kernel_args& a) {
  constexpr int kRows = HAL_FLASH_FORWARD_ROWS(kBound);
  constexpr int kStride = HAL_FLASH_TILE_STRIDE(kBound);
  constexpr int kThreadsPerRow = HAL_FLASH_THREADS / kRows;
  constexpr int kColumnsPerThread = kBound / kThreadsPerRow;
  HAL_DYNAMIC_SHARED(float, shared);
  float* q_tile = shared;                     // [kRows][kStride], scaled by scale * log2(e)
  float* kv_tile = q_tile + kRows * kStride;  // [kRows][kStride]: K, then V of the same block
  float* scores = kv_tile + kRows * kStride;  // [kRows][kRows]: S, then P
  float* row_max = scores + kRows * kRows;    // running max of S (log2 units)
  float* row_sum = row_max + kRows;           // running sum of P
  float* row_alpha = row_sum + kRows;         // rescale of this block

  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int head_kv = head / (a.heads_q / a.heads_kv);
  const int64_t first_query = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t last_query = min64(first_query + kRows, a.seq_q) - 1;
  const int my_row = thread_index() / kThreadsPerRow;
  const int my_lane = thread_index() % kThreadsPerRow;
  const float score_scale = a.scale * 1.4426950408889634f;

  float accumulator[kColumnsPerThread];
  HAL_UNROLL
  for (int c = 0; c < kColumnsPerThread; ++c) accumulator[c] = 0.0f;

  load_tile(q_tile, kStride, a.q, a, batch, head, first_query, kRows, a.seq_q, a.head_dim_qk, score_scale);
  if (thread_index() < kRows) {
    row_max[thread_index()] = negative_infinity();
    row_sum[thread_index()] = 0.0f;
  }

  // The mask is a band: the block's keys lie between the first row's first
  // visible key and the last row's last one.
  const int64_t first_key = max64(0, first_query + a.mask_offset - reach_left(a));
  const int64_t last_key = min64(a.seq_kv - 1, last_query + a.mask_offset + reach_right(a));
  for (int64_t key_block = first_key / kRows * kRows; key_block <= last_key; key_block += kRows) {
    __syncthreads();  // the previous block's V is consumed
    load_tile(kv_tile, kStride, a.k, a, batch, head_kv, key_block, kRows, a.seq_kv, a.head_dim_qk, 1.0f);
    __syncthreads();
    for (int e = thread_index(); e < kRows * kRows; e += thread_count()) {
      const int r = e / kRows;
      const int c = e % kRows;
      const int64_t query = first_query + r;
      const int64_t key = key_block + c;
      const bool in_range = query < a.seq_q && key < a.seq_kv && visible(a, batch, query, key);
      scores[e] = in_range ? dot(q_tile + r * kStride, kv_tile + c * kStride, a.head_dim_qk) : negative_infinity();
    }
    __syncthreads();
    if (thread_index() < kRows) {
      const int r = thread_index();
      float block_max = negative_infinity();
      for (int c = 0; c < kRows; ++c) block_max = fmaxf(block_max, scores[r * kRows + c]);
      const float old_max = row_max[r];
      const float new_max = fmaxf(old_max, block_max);
      // Rescale what was summed against the old max; nothing to rescale
      // while the row has seen no visible key.
      row_alpha[r] = new_max == negative_infinity() ? 1.0f : exp2f(old_max - new_max);
      row_max[r] = new_max;
    }
    __syncthreads();
    for (int e = thread_index(); e < kRows * kRows; e += thread_count()) {
      const float max = row_max[e / kRows];
      scores[e] = max == negative_infinity() ? 0.0f : exp2f(scores[e] - max);
    }
    load_tile(kv_tile, kStride, a.v, a, batch, head_kv, key_block, kRows, a.seq_kv, a.head_dim_v, 1.0f);
    __syncthreads();
    const float alpha = row_alpha[my_row];
    const float* probabilities = scores + my_row * kRows;
    HAL_UNROLL
    for (int c = 0; c < kColumnsPerThread; ++c) accumulator[c] *= alpha;
    for (int key = 0; key < kRows; ++key) {
      const float p = probabilities[key];
      const float* v_row = kv_tile + key * kStride;
      HAL_UNROLL
      for (int c = 0; c < kColumnsPerThread; ++c) {
        const int d = my_lane + c * kThreadsPerRow;
        if (d < a.head_dim_v) accumulator[c] += p * v_row[d];
      }
    }
    if (my_lane == 0) {
      float block_sum = 0.0f;
      for (int key = 0; key < kRows; ++key) block_sum += probabilities[key];
      row_sum[my_row] = row_sum[my_row] * alpha + block_sum;
    }
  }
  __syncthreads();

  const int64_t query = first_query + my_row;
  if (query >= a.seq_q) return;
  const float sum = row_sum[my_row];
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;  // a row that saw no key: O = 0
  const int64_t out = row_offset(a.o, batch, head, query);
  HAL_UNROLL
  for (int c = 0; c < kColumnsPerThread; ++c) {
    const int d = my_lane + c * kThreadsPerRow;
    if (d < a.head_dim_v) store(a.o.address, out + d, a.dtype, accumulator[c] * inverse);
  }
  if (my_lane == 0 && a.lse != 0) {
    reinterpret_cast<float*>(a.lse)[query_row_index(a, batch, head, query)] =
        sum > 0.0f ? (row_max[my_row] + log2f(sum)) * 0.6931471805599453f : negative_infinity();
  }
}

// ---- backward ----------------------------------------------------------------

// delta = rowsum(dO * O) per query row, and the dQ accumulator zeroed.
__device__ void backward_preprocess(const hal_attention_kernel_args& a) {
  constexpr int kRows = HAL_FLASH_ROW_KERNEL_ROWS;
  constexpr int kThreadsPerRow = HAL_FLASH_THREADS / kRows;
  __shared__ float partial[HAL_FLASH_THREADS];
  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t first_query = static_cast<int64_t>(blockIdx.x) * kRows;
  const int my_row = thread_index() / kThreadsPerRow;
  const int my_lane = thread_index() % kThreadsPerRow;
  const int64_t query = first_query + my_row;
  float sum = 0.0f;
  if (query < a.seq_q) {
    const int64_t o_row = row_offset(a.o, batch, head, query);
    const int64_t grad_row = row_offset(a.grad_o, batch, head, query);
    for (int d = my_lane; d < a.head_dim_v; d += kThreadsPerRow) {
      sum += load(a.o.address, o_row + d, a.dtype) * load(a.grad_o.address, grad_row + d, a.dtype);
    }
  }
  partial[thread_index()] = sum;
  float* dq = dq_accumulator(a);
  for (int e = thread_index(); e < kRows * a.head_dim_qk; e += thread_count()) {
    const int64_t row = first_query + e / a.head_dim_qk;
    if (row < a.seq_q) dq[query_row_index(a, batch, head, row) * a.head_dim_qk + e % a.head_dim_qk] = 0.0f;
  }
  __syncthreads();
  if (my_lane == 0 && query < a.seq_q) {
    float total = 0.0f;
    for (int lane = 0; lane < kThreadsPerRow; ++lane) total += partial[thread_index() + lane];
    delta_rows(a)[query_row_index(a, batch, head, query)] = total;
  }
}

template <int kBound>
__device__ void backward(const hal_attention_kernel_args& a) {
  constexpr int kRows = HAL_FLASH_BACKWARD_ROWS(kBound);
  constexpr int kStride = HAL_FLASH_TILE_STRIDE(kBound);
  constexpr int kThreadsPerRow = HAL_FLASH_THREADS / kRows;
  constexpr int kColumnsPerThread = kBound / kThreadsPerRow;
  HAL_DYNAMIC_SHARED(float, shared);
  float* q_tile = shared;                         // [kRows][kStride]
  float* grad_o_tile = q_tile + kRows * kStride;  // [kRows][kStride]
  float* k_tile = grad_o_tile + kRows * kStride;  // [kRows][kStride], this block's keys
  float* v_tile = k_tile + kRows * kStride;       // [kRows][kStride]
  float* p_tile = v_tile + kRows * kStride;       // [query][key]
  float* ds_tile = p_tile + kRows * kRows;        // [query][key]: P * (dP - delta)
  float* lse_rows = ds_tile + kRows * kRows;      // LSE in log2 units
  float* delta_tile = lse_rows + kRows;

  const int batch = blockIdx.z;
  const int head_kv = blockIdx.y;
  const int group = a.heads_q / a.heads_kv;
  const int64_t first_key = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t last_key = min64(first_key + kRows, a.seq_kv) - 1;
  const int my_row = thread_index() / kThreadsPerRow;  // a key of this block
  const int my_lane = thread_index() % kThreadsPerRow;
  const float log2e = 1.4426950408889634f;
  const float score_scale = a.scale * log2e;
  const float* lse = reinterpret_cast<const float*>(a.lse);
  const float* delta = delta_rows(a);
  float* dq = dq_accumulator(a);

  float grad_k[kColumnsPerThread];
  float grad_v[kColumnsPerThread];
  HAL_UNROLL
  for (int c = 0; c < kColumnsPerThread; ++c) grad_k[c] = grad_v[c] = 0.0f;

  load_tile(k_tile, kStride, a.k, a, batch, head_kv, first_key, kRows, a.seq_kv, a.head_dim_qk, 1.0f);
  load_tile(v_tile, kStride, a.v, a, batch, head_kv, first_key, kRows, a.seq_kv, a.head_dim_v, 1.0f);

  // Queries that see at least one key of this block (the mask is a band).
  const int64_t first_query = max64(0, first_key - a.mask_offset - reach_right(a));
  const int64_t last_query = min64(a.seq_q - 1, last_key - a.mask_offset + reach_left(a));
  for (int member = 0; member < group; ++member) {
    const int head = head_kv * group + member;
    for (int64_t query_block = first_query / kRows * kRows; query_block <= last_query; query_block += kRows) {
      __syncthreads();  // the previous query block is consumed
      load_tile(q_tile, kStride, a.q, a, batch, head, query_block, kRows, a.seq_q, a.head_dim_qk, 1.0f);
      load_tile(grad_o_tile, kStride, a.grad_o, a, batch, head, query_block, kRows, a.seq_q, a.head_dim_v, 1.0f);
      if (thread_index() < kRows) {
        const int64_t query = query_block + thread_index();
        const bool in_range = query < a.seq_q;
        lse_rows[thread_index()] = in_range ? lse[query_row_index(a, batch, head, query)] * log2e : negative_infinity();
        delta_tile[thread_index()] = in_range ? delta[query_row_index(a, batch, head, query)] : 0.0f;
      }
      __syncthreads();
      for (int e = thread_index(); e < kRows * kRows; e += thread_count()) {
        const int r = e / kRows;
        const int c = e % kRows;
        const int64_t query = query_block + r;
        const int64_t key = first_key + c;
        float p = 0.0f;
        float ds = 0.0f;
        // LSE = -inf: the row saw no key in the forward, its gradient is 0.
        if (query < a.seq_q && key < a.seq_kv && visible(a, batch, query, key) && lse_rows[r] != negative_infinity()) {
          p = exp2f(dot(q_tile + r * kStride, k_tile + c * kStride, a.head_dim_qk) * score_scale - lse_rows[r]);
          const float dp = dot(grad_o_tile + r * kStride, v_tile + c * kStride, a.head_dim_v);
          ds = p * (dp - delta_tile[r]);
        }
        p_tile[e] = p;
        ds_tile[e] = ds;
      }
      __syncthreads();
      for (int r = 0; r < kRows; ++r) {
        const float p = p_tile[r * kRows + my_row];
        const float ds = ds_tile[r * kRows + my_row];
        HAL_UNROLL
        for (int c = 0; c < kColumnsPerThread; ++c) {
          const int d = my_lane + c * kThreadsPerRow;
          if (d < a.head_dim_v) grad_v[c] += p * grad_o_tile[r * kStride + d];
          if (d < a.head_dim_qk) grad_k[c] += ds * q_tile[r * kStride + d];
        }
      }
      for (int e = thread_index(); e < kRows * a.head_dim_qk; e += thread_count()) {
        const int r = e / a.head_dim_qk;
        const int d = e % a.head_dim_qk;
        const int64_t query = query_block + r;
        if (query >= a.seq_q) continue;
        float sum = 0.0f;
        for (int c = 0; c < kRows; ++c) sum += ds_tile[r * kRows + c] * k_tile[c * kStride + d];
        if (sum != 0.0f) atomicAdd(dq + query_row_index(a, batch, head, query) * a.head_dim_qk + d, sum * a.scale);
      }
    }
  }

  const int64_t key = first_key + my_row;
  if (key >= a.seq_kv) return;
  const int64_t k_out = row_offset(a.grad_k, batch, head_kv, key);
  const int64_t v_out = row_offset(a.grad_v, batch, head_kv, key);
  HAL_UNROLL
  for (int c = 0; c < kColumnsPerThread; ++c) {
    const int d = my_lane + c * kThreadsPerRow;
    if (d < a.head_dim_qk) store(a.grad_k.address, k_out + d, a.dtype, grad_k[c] * a.scale);
    if (d < a.head_dim_v) store(a.grad_v.address, v_out + d, a.dtype, grad_v[c]);
  }
}

__device__ void backward_convert_dq(const hal_attention_kernel_args& a) {
  constexpr int kRows = HAL_FLASH_ROW_KERNEL_ROWS;
  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int64_t first_query = static_cast<int64_t>(blockIdx.x) * kRows;
  const float* dq = dq_accumulator(a);
  for (int e = thread_index(); e < kRows * a.head_dim_qk; e += thread_count()) {
    const int64_t query = first_query + e / a.head_dim_qk;
    const int d = e % a.head_dim_qk;
    if (query >= a.seq_q) continue;
    store(a.grad_q.address, row_offset(a.grad_q, batch, head, query) + d, a.dtype,
          dq[query_row_index(a, batch, head, query) * a.head_dim_qk + d]);
  }
}

// ---- forward on tensor cores (f16/bf16, NVIDIA sm_80+) -----------------------
// One warp per 16 query rows. S = Q K^T and O += P V are mma.sync.m16n8k16
// (16-bit inputs, f32 accumulate); the online softmax runs on the
// accumulator fragments, with the row max and sum combined over the four
// lanes that share a row (shuffles). P's fragments of two adjacent 8-key
// tiles are the A fragment of one 16-key step, so P never leaves registers.
// Fragment layout (PTX ISA, mma.m16n8k16): lane = 4 * group + t; A and C/D
// rows group and group + 8, columns 2t, 2t + 1 (A also 2t + 8, 2t + 9); B
// column group, rows 2t, 2t + 1 and 2t + 8, 2t + 9; two 16-bit elements per
// 32-bit register, the lower index in the low half. The SIMT emulator
// implements the same instruction with the same layout (tests/simt).

#if defined(HAL_SIMT_EMULATOR) || (defined(__CUDACC__) && !defined(__HIP__))
#define HAL_FLASH_TENSOR_CORES 1

template <int kDtype>
__device__ __forceinline__ void mma_m16n8k16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 800
  if (kDtype == HAL_KERNEL_F16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
#error "the tensor-core flash attention kernels need sm_80 or newer: build for compute_80 and up"
#endif
#elif defined(HAL_SIMT_EMULATOR)
  hal_simt::mma_m16n8k16(c, a, b, kDtype == HAL_KERNEL_F16 ? f16_bits_to_float : bf16_bits_to_float);
#else
  (void)c, (void)a, (void)b;  // host pass of nvcc: never called
#endif
}

__device__ __forceinline__ uint32_t pack(uint32_t low, uint32_t high) { return low | (high << 16); }

// Two floats rounded to nearest even into one register of 16-bit elements.
template <int kDtype>
__device__ __forceinline__ uint32_t pack_floats(float low, float high) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t packed;
  if (kDtype == HAL_KERNEL_F16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(high), "f"(low));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(high), "f"(low));
  }
  return packed;
#else
  return kDtype == HAL_KERNEL_F16 ? pack(float_to_f16_bits(low), float_to_f16_bits(high))
                                  : pack(float_to_bf16_bits(low), float_to_bf16_bits(high));
#endif
}

__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}

__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

// Copies rows of a 16-bit tensor into shared memory as they are, zero past
// `row_limit` and in the columns from `columns` up to `padded_columns`.
__device__ __forceinline__ void load_tile_bits(uint16_t* tile, int stride, const hal_kernel_tensor& tensor, int batch,
                                               int head, int64_t first_row, int rows, int64_t row_limit, int columns,
                                               int padded_columns) {
  const uint16_t* source = reinterpret_cast<const uint16_t*>(tensor.address);
  for (int e = thread_index(); e < rows * padded_columns; e += thread_count()) {
    const int r = e / padded_columns;
    const int d = e % padded_columns;
    const int64_t row = first_row + r;
    tile[r * stride + d] = row < row_limit && d < columns ? source[row_offset(tensor, batch, head, row) + d] : 0;
  }
}

template <int kBound, int kDtype>
__device__ void forward_tensor_cores(const hal_attention_kernel_args& a) {
  constexpr int kQueryRows = HAL_FLASH_MMA_QUERY_ROWS;
  constexpr int kKeyRows = HAL_FLASH_MMA_KEY_ROWS(kBound);
  constexpr int kStride = HAL_FLASH_MMA_STRIDE(kBound);
  constexpr int kKeyTiles = kKeyRows / 8;  // 8-key column tiles of S
  constexpr int kDimTiles = kBound / 8;    // 8-wide column tiles of O
  HAL_DYNAMIC_SHARED(uint16_t, shared_halves);
  uint16_t* q_tile = shared_halves;                   // [kQueryRows][kStride]
  uint16_t* kv_tile = q_tile + kQueryRows * kStride;  // [kKeyRows][kStride]: K, then V of the same block

  const int batch = blockIdx.z;
  const int head = blockIdx.y;
  const int head_kv = head / (a.heads_q / a.heads_kv);
  const int lane = thread_index() % 32;
  const int group = lane / 4;
  const int in_group = lane % 4;
  const int warp_row = thread_index() / 32 * 16;  // the warp's first row in the block
  const int64_t first_query = static_cast<int64_t>(blockIdx.x) * kQueryRows;
  const int64_t last_query = min64(first_query + kQueryRows, a.seq_q) - 1;
  const int qk_steps = (a.head_dim_qk + 15) / 16;
  const int v_tiles = (a.head_dim_v + 7) / 8;
  const float score_scale = a.scale * 1.4426950408889634f;

  float out[kDimTiles][4];
  HAL_UNROLL
  for (int t = 0; t < kDimTiles; ++t) out[t][0] = out[t][1] = out[t][2] = out[t][3] = 0.0f;
  float row_max[2] = {negative_infinity(), negative_infinity()};  // rows group, group + 8
  float row_sum[2] = {0.0f, 0.0f};                                // this lane's share; the quad's sum at the end

  load_tile_bits(q_tile, kStride, a.q, batch, head, first_query, kQueryRows, a.seq_q, a.head_dim_qk, qk_steps * 16);

  const int64_t first_key = max64(0, first_query + a.mask_offset - reach_left(a));
  const int64_t last_key = min64(a.seq_kv - 1, last_query + a.mask_offset + reach_right(a));
  for (int64_t key_block = first_key / kKeyRows * kKeyRows; key_block <= last_key; key_block += kKeyRows) {
    __syncthreads();  // the previous block's V is consumed
    load_tile_bits(kv_tile, kStride, a.k, batch, head_kv, key_block, kKeyRows, a.seq_kv, a.head_dim_qk, qk_steps * 16);
    __syncthreads();

    float scores[kKeyTiles][4];
    HAL_UNROLL
    for (int t = 0; t < kKeyTiles; ++t) scores[t][0] = scores[t][1] = scores[t][2] = scores[t][3] = 0.0f;
    for (int step = 0; step < qk_steps; ++step) {
      const uint16_t* q_low = q_tile + (warp_row + group) * kStride + step * 16 + 2 * in_group;
      const uint16_t* q_high = q_low + 8 * kStride;
      const uint32_t q_fragment[4] = {pack(q_low[0], q_low[1]), pack(q_high[0], q_high[1]), pack(q_low[8], q_low[9]),
                                      pack(q_high[8], q_high[9])};
      HAL_UNROLL
      for (int t = 0; t < kKeyTiles; ++t) {
        const uint16_t* k_row = kv_tile + (t * 8 + group) * kStride + step * 16 + 2 * in_group;
        const uint32_t k_fragment[2] = {pack(k_row[0], k_row[1]), pack(k_row[8], k_row[9])};
        mma_m16n8k16<kDtype>(scores[t], q_fragment, k_fragment);
      }
    }

    float block_max[2] = {negative_infinity(), negative_infinity()};
    HAL_UNROLL
    for (int t = 0; t < kKeyTiles; ++t) {
      HAL_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int64_t query = first_query + warp_row + group + (i >= 2 ? 8 : 0);
        const int64_t key = key_block + t * 8 + 2 * in_group + (i & 1);
        const bool in_range = query < a.seq_q && key < a.seq_kv && visible(a, batch, query, key);
        scores[t][i] = in_range ? scores[t][i] * score_scale : negative_infinity();
        block_max[i >> 1] = fmaxf(block_max[i >> 1], scores[t][i]);
      }
    }
    float alpha[2];
    HAL_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float new_max = fmaxf(row_max[h], quad_max(block_max[h]));
      alpha[h] = new_max == negative_infinity() ? 1.0f : exp2f(row_max[h] - new_max);
      row_max[h] = new_max;
      row_sum[h] *= alpha[h];
    }
    HAL_UNROLL
    for (int t = 0; t < kKeyTiles; ++t) {
      HAL_UNROLL
      for (int i = 0; i < 4; ++i) {
        const float max = row_max[i >> 1];
        scores[t][i] = max == negative_infinity() ? 0.0f : exp2f(scores[t][i] - max);
        row_sum[i >> 1] += scores[t][i];
      }
    }
    HAL_UNROLL
    for (int t = 0; t < kDimTiles; ++t) {
      HAL_UNROLL
      for (int i = 0; i < 4; ++i) out[t][i] *= alpha[i >> 1];
    }

    __syncthreads();  // every warp is done with K
    load_tile_bits(kv_tile, kStride, a.v, batch, head_kv, key_block, kKeyRows, a.seq_kv, a.head_dim_v, v_tiles * 8);
    __syncthreads();
    HAL_UNROLL
    for (int step = 0; step < kKeyRows / 16; ++step) {
      const float* low = scores[2 * step];
      const float* high = scores[2 * step + 1];
      const uint32_t p_fragment[4] = {pack_floats<kDtype>(low[0], low[1]), pack_floats<kDtype>(low[2], low[3]),
                                      pack_floats<kDtype>(high[0], high[1]), pack_floats<kDtype>(high[2], high[3])};
      HAL_UNROLL
      for (int t = 0; t < kDimTiles; ++t) {
        if (t >= v_tiles) break;
        const uint16_t* v_column = kv_tile + (step * 16 + 2 * in_group) * kStride + t * 8 + group;
        const uint32_t v_fragment[2] = {pack(v_column[0], v_column[kStride]),
                                        pack(v_column[8 * kStride], v_column[9 * kStride])};
        mma_m16n8k16<kDtype>(out[t], p_fragment, v_fragment);
      }
    }
  }

  HAL_UNROLL
  for (int h = 0; h < 2; ++h) row_sum[h] = quad_sum(row_sum[h]);
  HAL_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int64_t query = first_query + warp_row + group + 8 * h;
    if (query >= a.seq_q) continue;
    const float inverse = row_sum[h] > 0.0f ? 1.0f / row_sum[h] : 0.0f;  // a row that saw no key: O = 0
    const int64_t o_row = row_offset(a.o, batch, head, query);
    HAL_UNROLL
    for (int t = 0; t < kDimTiles; ++t) {
      HAL_UNROLL
      for (int j = 0; j < 2; ++j) {
        const int d = t * 8 + 2 * in_group + j;
        if (d < a.head_dim_v) store(a.o.address, o_row + d, kDtype, out[t][2 * h + j] * inverse);
      }
    }
    if (in_group == 0 && a.lse != 0) {
      reinterpret_cast<float*>(a.lse)[query_row_index(a, batch, head, query)] =
          row_sum[h] > 0.0f ? (row_max[h] + log2f(row_sum[h])) * 0.6931471805599453f : negative_infinity();
    }
  }
}
#endif  // tensor cores

}  // namespace hal_flash

// ---- entry points (names the plan returns) -----------------------------------

#define HAL_FLASH_ENTRY(name, body) \
  extern "C" __global__ void __launch_bounds__(HAL_FLASH_THREADS) name(hal_attention_kernel_args args) { body; }

HAL_FLASH_ENTRY(hal_flash_attention_forward_d64, hal_flash::forward<64>(args))
HAL_FLASH_ENTRY(hal_flash_attention_forward_d128, hal_flash::forward<128>(args))
HAL_FLASH_ENTRY(hal_flash_attention_forward_d256, hal_flash::forward<256>(args))
HAL_FLASH_ENTRY(hal_flash_attention_backward_preprocess, hal_flash::backward_preprocess(args))
HAL_FLASH_ENTRY(hal_flash_attention_backward_d64, hal_flash::backward<64>(args))
HAL_FLASH_ENTRY(hal_flash_attention_backward_d128, hal_flash::backward<128>(args))
HAL_FLASH_ENTRY(hal_flash_attention_backward_d256, hal_flash::backward<256>(args))
HAL_FLASH_ENTRY(hal_flash_attention_backward_convert_dq, hal_flash::backward_convert_dq(args))

#if defined(HAL_FLASH_TENSOR_CORES)
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_f16_d64, (hal_flash::forward_tensor_cores<64, HAL_KERNEL_F16>(args)))
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_f16_d128, (hal_flash::forward_tensor_cores<128, HAL_KERNEL_F16>(args)))
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_f16_d256, (hal_flash::forward_tensor_cores<256, HAL_KERNEL_F16>(args)))
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_bf16_d64, (hal_flash::forward_tensor_cores<64, HAL_KERNEL_BF16>(args)))
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_bf16_d128,
                (hal_flash::forward_tensor_cores<128, HAL_KERNEL_BF16>(args)))
HAL_FLASH_ENTRY(hal_flash_attention_forward_mma_bf16_d256,
                (hal_flash::forward_tensor_cores<256, HAL_KERNEL_BF16>(args)))
#endif
