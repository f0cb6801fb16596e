/* The contract between the attention kernels in this folder (compiled by
 * nvcc and hipcc) and the host code that launches them (backends/gpu).
 * Plain C: the same bytes are the kernel's by-value argument and the host's
 * launch argument, so every field has a fixed size and the layout is pinned.
 *
 * Tensors are 4-D [batch, head, seq, dim] with element strides for the first
 * three axes; the dim axis must be contiguous (stride 1). The mask follows
 * hal_attention_params_v1: key j is visible to query i when, with
 * d = j - (i + mask_offset): causal -> d <= 0; window_left >= 0 ->
 * d >= -window_left; window_right >= 0 -> d <= window_right; with key
 * ranges, also begin <= j < end of the query's own range. A query that sees
 * no key gets O = 0 and LSE = -inf. */
#ifndef HAL_KERNELS_ATTENTION_KERNELS_H
#define HAL_KERNELS_ATTENTION_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The element types, numbered as hal_dtype. */
enum { HAL_KERNEL_F32 = 0, HAL_KERNEL_F16 = 1, HAL_KERNEL_BF16 = 2 };

typedef struct hal_kernel_tensor {
  uint64_t address;     /* device address of element [0, 0, 0, 0]; 0 when unused */
  int64_t batch_stride; /* in elements */
  int64_t head_stride;
  int64_t seq_stride;
} hal_kernel_tensor;

typedef struct hal_attention_kernel_args {
  hal_kernel_tensor q, k, v, o;
  hal_kernel_tensor grad_o, grad_q, grad_k, grad_v; /* backward only */
  uint64_t lse;       /* f32 [batch, heads_q, seq_q] contiguous; forward writes it when non-zero, backward reads it */
  uint64_t workspace; /* device scratch of the size the plan asks for; 0 when it asks for none */
  int32_t dtype;      /* HAL_KERNEL_F32, _F16 or _BF16: Q, K, V, O and the gradients */
  int32_t batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  int32_t causal, window_left, window_right; /* windows: -1 unbounded */
  int32_t mask_offset;                       /* 0 top-left; seq_kv - seq_q bottom-right */
  float scale;                               /* softmax scale */
  int32_t reserved;                          /* zero; keeps the size a multiple of 8 */
  uint64_t key_ranges;                       /* int32 [batch][seq_q][begin, end) per query, every head alike; 0: none */
} hal_attention_kernel_args;

/* One kernel launch of a plan: run in order on one stream, each with the
 * same hal_attention_kernel_args as its only argument. */
typedef struct hal_kernel_launch {
  const char* kernel; /* extern "C" name in the embedded image */
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes; /* dynamic shared memory */
} hal_kernel_launch;

enum { HAL_KERNEL_PLAN_MAX_LAUNCHES = 4 };

typedef struct hal_kernel_plan {
  uint32_t launch_count; /* 0: the kernels cannot run these arguments; why_not says why */
  hal_kernel_launch launches[HAL_KERNEL_PLAN_MAX_LAUNCHES];
  uint64_t workspace_bytes; /* device scratch the caller allocates and passes as args.workspace */
  char why_not[256];
} hal_kernel_plan;

/* Optional kernel paths, a bit mask; without them every dtype runs the
 * scalar f32-arithmetic kernels, which every architecture has. */
enum {
  /* f16/bf16 forward on mma.sync.m16n8k16 (NVIDIA sm_80+; not in the HIP image) */
  HAL_FLASH_PATH_TENSOR_CORES = 1
};

/* Host functions (attention_plan.cpp): the launches for flash attention,
 * forward or backward, on a device with the given shared-memory limit per
 * block (bytes) and warp/wavefront width, using only the optional paths
 * (HAL_FLASH_PATH_*) that the caller's kernel image has. */
void hal_flash_attention_plan(const hal_attention_kernel_args* args, int32_t backward, uint32_t max_shared_bytes,
                              uint32_t warp_size, uint32_t paths, hal_kernel_plan* plan);

#ifdef __cplusplus
}
#endif

#endif /* HAL_KERNELS_ATTENTION_KERNELS_H */
