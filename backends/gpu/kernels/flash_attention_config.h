/* Tile geometry of the flash attention kernels (flash_attention.cu), shared
 * with the host plan (attention_plan.cpp) so both sides agree on launch
 * shapes, shared memory and the workspace layout. Plain C, no device code. */
#ifndef HAL_KERNELS_FLASH_ATTENTION_CONFIG_H
#define HAL_KERNELS_FLASH_ATTENTION_CONFIG_H

/* Every kernel runs 128 threads per block: a multiple of both warp widths
 * (32 on NVIDIA, 64 on AMD). */
#define HAL_FLASH_THREADS 128

/* Head-dim bounds with one kernel each; a problem uses the smallest bound
 * that holds max(head_dim_qk, head_dim_v). */
#define HAL_FLASH_MAX_HEAD_DIM 256

/* Rows of a tile per head-dim bound. Forward: query rows = key rows; the
 * K and V tiles share one buffer. Backward: query rows = key rows, with Q,
 * dO, K and V resident together, hence smaller tiles. */
#define HAL_FLASH_FORWARD_ROWS(bound) ((bound) <= 128 ? 32 : 16)
#define HAL_FLASH_BACKWARD_ROWS(bound) (2048 / (bound))

/* Row stride of the f32 tiles in shared memory: odd, so the threads of a
 * warp reading one column of different rows hit different banks. */
#define HAL_FLASH_TILE_STRIDE(bound) ((bound) + 1)

/* Dynamic shared memory in bytes (all f32). Forward: Q tile, one K-or-V
 * tile, the score tile and three per-row statistics. Backward: Q, dO, K, V
 * tiles, P and dS tiles and two per-row values (LSE, delta). */
#define HAL_FLASH_FORWARD_SHARED_BYTES(bound)                                \
  (4u * (2u * HAL_FLASH_FORWARD_ROWS(bound) * HAL_FLASH_TILE_STRIDE(bound) + \
         HAL_FLASH_FORWARD_ROWS(bound) * HAL_FLASH_FORWARD_ROWS(bound) + 3u * HAL_FLASH_FORWARD_ROWS(bound)))
#define HAL_FLASH_BACKWARD_SHARED_BYTES(bound)                                \
  (4u * (4u * HAL_FLASH_BACKWARD_ROWS(bound) * HAL_FLASH_TILE_STRIDE(bound) + \
         2u * HAL_FLASH_BACKWARD_ROWS(bound) * HAL_FLASH_BACKWARD_ROWS(bound) + 2u * HAL_FLASH_BACKWARD_ROWS(bound)))

/* Tensor-core forward (f16/bf16, sm_80+): 4 warps of 16 query rows each,
 * key tiles of HAL_FLASH_MMA_KEY_ROWS; Q and one K-or-V tile kept as the
 * 16-bit input, rows padded by 8 elements (16 bytes) against bank
 * conflicts. */
#define HAL_FLASH_MMA_QUERY_ROWS 64
#define HAL_FLASH_MMA_KEY_ROWS(bound) ((bound) <= 128 ? 32 : 16)
#define HAL_FLASH_MMA_STRIDE(bound) ((bound) + 8)
#define HAL_FLASH_MMA_SHARED_BYTES(bound) \
  (2u * (HAL_FLASH_MMA_QUERY_ROWS + HAL_FLASH_MMA_KEY_ROWS(bound)) * HAL_FLASH_MMA_STRIDE(bound))

/* Rows per block of the backward preprocess (delta, zeroing dQ) and of the
 * dQ conversion. */
#define HAL_FLASH_ROW_KERNEL_ROWS 16

/* Backward workspace: delta (f32 [batch, heads_q, seq_q]) at offset 0, then
 * the dQ accumulator (f32 [batch, heads_q, seq_q, head_dim_qk], contiguous)
 * at the delta size rounded up to this alignment. */
#define HAL_FLASH_WORKSPACE_ALIGNMENT 256

#endif /* HAL_KERNELS_FLASH_ATTENTION_CONFIG_H */
