// The math attention path's kernels, around the GEMMs the host runs between
// them (see math_attention_layout.h for the arrays and the order):
//   pack_inputs       Q, K, V (and dO in backward) from their dtype and strides to packed f32
//   softmax_forward   per score row: scale, mask, softmax -> P in place; LSE in forward
//   softmax_backward  per score row: dS = P * (dP - rowsum(dP * P)), in place of dP
//   store_outputs     packed f32 -> O (forward) or dQ, dK, dV (backward) in their dtype and strides
// Each takes hal_attention_kernel_args by value, like the flash kernels.
// Written in the subset of CUDA that HIP accepts: no vendor intrinsics, f16
// and bf16 converted by bit manipulation (round to nearest even), block
// reductions through shared memory so the wavefront width does not matter.

#if defined(__HIP__)
#include <hip/hip_runtime.h>
#endif

#include "attention_kernels.h"
#include "math_attention_layout.h"

#define HAL_MATH_ROW_THREADS 128 /* a power of two; row_threads in gpu_attention.cpp */

namespace {

union FloatBits {
  float value;
  unsigned int bits;
};

__device__ float half_to_float(unsigned short half) {
  const unsigned int exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
  float magnitude;
  if (exponent == 0)
    magnitude = ldexpf(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa != 0 ? NAN : INFINITY;
  else
    magnitude = ldexpf(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return (half & 0x8000u) != 0 ? -magnitude : magnitude;
}

__device__ unsigned short float_to_half(float value) {
  FloatBits in;
  in.value = value;
  const unsigned int sign = (in.bits >> 16) & 0x8000u, magnitude = in.bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u)
    return static_cast<unsigned short>(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (magnitude >= 0x477ff000u) return static_cast<unsigned short>(sign | 0x7c00u);  // rounds past 65504
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24
    FloatBits absolute;
    absolute.bits = magnitude;
    return static_cast<unsigned short>(sign | static_cast<unsigned int>(rintf(absolute.value * 16777216.0f)));
  }
  const unsigned int rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<unsigned short>(sign | ((rounded - 0x38000000u) >> 13));
}

__device__ float bfloat_to_float(unsigned short bfloat) {
  FloatBits out;
  out.bits = static_cast<unsigned int>(bfloat) << 16;
  return out.value;
}

__device__ unsigned short float_to_bfloat(float value) {
  FloatBits in;
  in.value = value;
  if ((in.bits & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((in.bits >> 16) | 0x40u);
  return static_cast<unsigned short>((in.bits + 0x7fffu + ((in.bits >> 16) & 1u)) >> 16);
}

__device__ float load_element(unsigned long long base, int dtype, long long index) {
  if (dtype == HAL_KERNEL_F32) return reinterpret_cast<const float*>(base)[index];
  const unsigned short bits = reinterpret_cast<const unsigned short*>(base)[index];
  return dtype == HAL_KERNEL_F16 ? half_to_float(bits) : bfloat_to_float(bits);
}

__device__ void store_element(unsigned long long base, int dtype, long long index, float value) {
  if (dtype == HAL_KERNEL_F32) {
    reinterpret_cast<float*>(base)[index] = value;
    return;
  }
  reinterpret_cast<unsigned short*>(base)[index] =
      dtype == HAL_KERNEL_F16 ? float_to_half(value) : float_to_bfloat(value);
}

// A packed [batch, heads, seq, dim] array and the strided tensor it mirrors.
struct PackedView {
  const hal_kernel_tensor* tensor;
  float* packed;
  long long elements;
  int heads, seq, dim;
};

__device__ long long strided_index(const PackedView& view, long long packed_index) {
  const long long dim_index = packed_index % view.dim;
  long long rest = packed_index / view.dim;
  const long long seq_index = rest % view.seq;
  rest /= view.seq;
  const long long head_index = rest % view.heads;
  const long long batch_index = rest / view.heads;
  return batch_index * view.tensor->batch_stride + head_index * view.tensor->head_stride +
         seq_index * view.tensor->seq_stride + dim_index;
}

__device__ long long first_thread() { return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ long long thread_count() { return static_cast<long long>(gridDim.x) * blockDim.x; }

// Runs one grid-stride loop over the views one after the other, copying in
// or out of the packed arrays.
template <int ViewCount>
__device__ void copy_views(const PackedView (&views)[ViewCount], int dtype, bool into_packed) {
  long long total = 0;
  for (int i = 0; i < ViewCount; ++i) total += views[i].elements;
  for (long long index = first_thread(); index < total; index += thread_count()) {
    long long local = index;
    int which = 0;
    while (local >= views[which].elements) local -= views[which++].elements;
    const PackedView& view = views[which];
    const long long source = strided_index(view, local);
    if (into_packed)
      view.packed[local] = load_element(view.tensor->address, dtype, source);
    else
      store_element(view.tensor->address, dtype, source, view.packed[local]);
  }
}

__device__ float* workspace(const hal_attention_kernel_args& args, long long offset) {
  return reinterpret_cast<float*>(args.workspace) + offset;
}

__device__ bool key_visible(const hal_attention_kernel_args& args, int batch, int query, int key) {
  const int distance = key - (query + args.mask_offset);
  if (args.causal != 0 && distance > 0) return false;
  if (args.window_left >= 0 && distance < -args.window_left) return false;
  if (args.window_right >= 0 && distance > args.window_right) return false;
  if (args.key_ranges == 0) return true;
  const int32_t* range =
      reinterpret_cast<const int32_t*>(args.key_ranges) + (static_cast<long long>(batch) * args.seq_q + query) * 2;
  return key >= range[0] && key < range[1];
}

// Block-wide reduction over HAL_MATH_ROW_THREADS values; every thread gets
// the result. Branch-free between barriers (every thread reads, then every
// thread writes back, the upper half its own value unchanged), so no
// compiler can give one barrier two call sites.
template <bool Maximum>
__device__ float reduce_block(float value, float* scratch) {
  const int thread = static_cast<int>(threadIdx.x);
  scratch[thread] = value;
  __syncthreads();
  for (int stride = HAL_MATH_ROW_THREADS / 2; stride > 0; stride /= 2) {
    const float mine = scratch[thread];
    const float other = scratch[thread < stride ? thread + stride : thread];
    const float combined = Maximum ? fmaxf(mine, other) : mine + other;
    __syncthreads();
    scratch[thread] = thread < stride ? combined : mine;
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();  // scratch is reused by the next reduction
  return result;
}

}  // namespace

extern "C" __global__ void hal_math_attention_pack_inputs(hal_attention_kernel_args args) {
  const int backward = hal_math_attention_is_backward(&args);
  const hal_math_attention_layout layout = hal_math_attention_layout_of(&args, backward);
  const long long query_rows = static_cast<long long>(args.batch) * args.heads_q * args.seq_q;
  const long long key_rows = static_cast<long long>(args.batch) * args.heads_kv * args.seq_kv;
  const PackedView views[4] = {
      {&args.q, workspace(args, layout.q), query_rows * args.head_dim_qk, args.heads_q, args.seq_q, args.head_dim_qk},
      {&args.k, workspace(args, layout.k), key_rows * args.head_dim_qk, args.heads_kv, args.seq_kv, args.head_dim_qk},
      {&args.v, workspace(args, layout.v), key_rows * args.head_dim_v, args.heads_kv, args.seq_kv, args.head_dim_v},
      {&args.grad_o, workspace(args, layout.o_or_grad_o), backward ? query_rows * args.head_dim_v : 0, args.heads_q,
       args.seq_q, args.head_dim_v}};
  copy_views(views, args.dtype, true);
}

// One block of HAL_MATH_ROW_THREADS per score row (batch, head, query).
extern "C" __global__ void hal_math_attention_softmax_forward(hal_attention_kernel_args args) {
  __shared__ float scratch[HAL_MATH_ROW_THREADS];
  const int backward = hal_math_attention_is_backward(&args);
  const long long row = blockIdx.x;
  const int query = static_cast<int>(row % args.seq_q);
  const int batch = static_cast<int>(row / (static_cast<long long>(args.heads_q) * args.seq_q));
  float* scores = workspace(args, hal_math_attention_layout_of(&args, backward).scores) + row * args.seq_kv;

  float local_max = -INFINITY;
  for (int key = threadIdx.x; key < args.seq_kv; key += HAL_MATH_ROW_THREADS) {
    const float scaled = key_visible(args, batch, query, key) ? scores[key] * args.scale : -INFINITY;
    scores[key] = scaled;
    local_max = fmaxf(local_max, scaled);
  }
  const float row_max = reduce_block<true>(local_max, scratch);
  // A query that sees no key: P = 0 and LSE = -inf, never NaN.
  const bool empty = row_max == -INFINITY;
  float local_sum = 0.0f;
  for (int key = threadIdx.x; key < args.seq_kv; key += HAL_MATH_ROW_THREADS) {
    const float weight = empty ? 0.0f : expf(scores[key] - row_max);
    scores[key] = weight;
    local_sum += weight;
  }
  const float sum = reduce_block<false>(local_sum, scratch);
  const float inverse = empty ? 0.0f : 1.0f / sum;
  for (int key = threadIdx.x; key < args.seq_kv; key += HAL_MATH_ROW_THREADS) scores[key] *= inverse;
  if (!backward && args.lse != 0 && threadIdx.x == 0)
    reinterpret_cast<float*>(args.lse)[row] = empty ? -INFINITY : row_max + logf(sum);
}

// One block per score row: dS = P * (dP - sum_j P_j dP_j), written over dP.
extern "C" __global__ void hal_math_attention_softmax_backward(hal_attention_kernel_args args) {
  __shared__ float scratch[HAL_MATH_ROW_THREADS];
  const hal_math_attention_layout layout = hal_math_attention_layout_of(&args, 1);
  const long long row = blockIdx.x;
  const float* probabilities = workspace(args, layout.scores) + row * args.seq_kv;
  float* gradient = workspace(args, layout.grad_scores) + row * args.seq_kv;
  float local_dot = 0.0f;
  for (int key = threadIdx.x; key < args.seq_kv; key += HAL_MATH_ROW_THREADS)
    local_dot += probabilities[key] * gradient[key];
  const float dot = reduce_block<false>(local_dot, scratch);
  for (int key = threadIdx.x; key < args.seq_kv; key += HAL_MATH_ROW_THREADS)
    gradient[key] = probabilities[key] * (gradient[key] - dot);
}

extern "C" __global__ void hal_math_attention_store_outputs(hal_attention_kernel_args args) {
  const int backward = hal_math_attention_is_backward(&args);
  const hal_math_attention_layout layout = hal_math_attention_layout_of(&args, backward);
  const long long query_rows = static_cast<long long>(args.batch) * args.heads_q * args.seq_q;
  const long long key_rows = static_cast<long long>(args.batch) * args.heads_kv * args.seq_kv;
  if (!backward) {
    const PackedView views[1] = {{&args.o, workspace(args, layout.o_or_grad_o), query_rows * args.head_dim_v,
                                  args.heads_q, args.seq_q, args.head_dim_v}};
    copy_views(views, args.dtype, false);
    return;
  }
  const PackedView views[3] = {{&args.grad_q, workspace(args, layout.grad_q), query_rows * args.head_dim_qk,
                                args.heads_q, args.seq_q, args.head_dim_qk},
                               {&args.grad_k, workspace(args, layout.grad_k), key_rows * args.head_dim_qk,
                                args.heads_kv, args.seq_kv, args.head_dim_qk},
                               {&args.grad_v, workspace(args, layout.grad_v), key_rows * args.head_dim_v, args.heads_kv,
                                args.seq_kv, args.head_dim_v}};
  copy_views(views, args.dtype, false);
}
