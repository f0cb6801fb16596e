/* Where the math attention path keeps its f32 arrays inside the workspace:
 * shared by the kernels (math_attention.cu) and the host code that sizes
 * the workspace and runs the GEMMs between them (backends/gpu), so both
 * compute the same offsets from the same hal_attention_kernel_args.
 *
 * Every array is packed and contiguous. Query-side arrays are
 * [batch, heads_q, seq_q, dim], which is [batch, heads_kv, group * seq_q, dim]
 * with group = heads_q / heads_kv: the query heads sharing a key/value head
 * are adjacent, so one strided-batched GEMM over batch * heads_kv matrices
 * handles GQA without copying K or V. Scores are [batch, heads_q, seq_q, seq_kv].
 *
 * Forward:  q, k, v, scores, o.
 * Backward: q, k, v, scores, grad_o, grad_scores, grad_q, grad_k, grad_v
 *           (a call is backward when args.grad_o.address is non-zero). */
#ifndef HAL_KERNELS_MATH_ATTENTION_LAYOUT_H
#define HAL_KERNELS_MATH_ATTENTION_LAYOUT_H

#include "attention_kernels.h"

#if defined(__CUDACC__) || defined(__HIP__)
#define HAL_HOST_DEVICE __host__ __device__
#else
#define HAL_HOST_DEVICE
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hal_math_attention_layout {
  /* Offsets in f32 elements from args.workspace. */
  int64_t q, k, v, scores, o_or_grad_o, grad_scores, grad_q, grad_k, grad_v;
  int64_t total; /* elements in all */
} hal_math_attention_layout;

static inline HAL_HOST_DEVICE int hal_math_attention_is_backward(const hal_attention_kernel_args* args) {
  return args->grad_o.address != 0;
}

static inline HAL_HOST_DEVICE hal_math_attention_layout
hal_math_attention_layout_of(const hal_attention_kernel_args* args, int backward) {
  const int64_t query_rows = (int64_t)args->batch * args->heads_q * args->seq_q;
  const int64_t key_rows = (int64_t)args->batch * args->heads_kv * args->seq_kv;
  const int64_t q_elements = query_rows * args->head_dim_qk;
  const int64_t k_elements = key_rows * args->head_dim_qk;
  const int64_t v_elements = key_rows * args->head_dim_v;
  const int64_t score_elements = query_rows * args->seq_kv;
  const int64_t o_elements = query_rows * args->head_dim_v;
  hal_math_attention_layout layout;
  layout.q = 0;
  layout.k = layout.q + q_elements;
  layout.v = layout.k + k_elements;
  layout.scores = layout.v + v_elements;
  layout.o_or_grad_o = layout.scores + score_elements;
  layout.total = layout.o_or_grad_o + o_elements;
  layout.grad_scores = layout.grad_q = layout.grad_k = layout.grad_v = -1;
  if (backward) {
    layout.grad_scores = layout.total;
    layout.grad_q = layout.grad_scores + score_elements;
    layout.grad_k = layout.grad_q + q_elements;
    layout.grad_v = layout.grad_k + k_elements;
    layout.total = layout.grad_v + v_elements;
  }
  return layout;
}

#ifdef __cplusplus
}
#endif

#endif /* HAL_KERNELS_MATH_ATTENTION_LAYOUT_H */
