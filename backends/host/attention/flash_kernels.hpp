// The contract between the flash driver (flash_attention.cpp) and the
// per-instruction-set kernel units (flash_kernels_{scalar,avx2,avx512}.cpp).
//
// Each kernel unit is compiled with its own -m flags and included only the
// plain structs below plus always_inline helpers: any inline function with
// external linkage compiled there (a standard-library template, say) could be
// emitted out of line with AVX-512 instructions and then picked by the linker
// for every caller, breaking CPUs without them. So kernel units use no
// standard-library code; threads, allocation and errors stay in the driver.
#pragma once

#include <cstdint>

#include "hal/backend_abi.h"

namespace hal::host::flash {

// bf16 elements in one row of an AMX tile (64 bytes): the tile units
// (flash_tiles_impl.hpp: AMX, AVX512-BF16) pad the depth of their products
// (head_dim_qk for Q K^T, the keys for P V) to it.
constexpr std::int64_t kTileDepthBf16 = 32;

// The bf16 backward's buffers in the tile units, in floats per chunk: K^T and
// V^T in pairs of dims, K in pairs of keys, dK^T and dV^T, S then P and dP
// then dS in f32, P and dS in pairs of rows, dS in bf16 rows.
constexpr std::int64_t tile_backward_scratch_floats(std::int64_t br, std::int64_t bc, std::int64_t dim_qk,
                                                    std::int64_t dim_v) {
  const std::int64_t key_depth = (bc + kTileDepthBf16 - 1) / kTileDepthBf16 * kTileDepthBf16;
  return bc * (dim_qk + dim_v) / 2 + key_depth * dim_qk / 2 + bc * (dim_qk + dim_v) + 2 * br * bc + br * bc +
         br * key_depth / 2;
}

// Tile sizes and buffer sizes (in floats) of one call; every kernel unit uses
// the same so the workspace does not depend on the instruction set.
struct Layout {
  std::int64_t query_block;    // Br: query rows per tile
  std::int64_t key_block;      // Bc: keys per tile
  std::int64_t dim_qk_padded;  // head_dim_qk rounded up to the widest vector
  std::int64_t dim_v_padded;
  std::int64_t seq_q_padded;   // query_blocks * query_block
  std::int64_t query_blocks;
  std::int64_t key_blocks;
  std::int64_t group_size;     // query heads per kv head
  std::int64_t group_count;    // batch * heads_kv: one (batch, kv head) is a group
  std::int64_t groups_per_pass;
  // Short sequences with enough groups for the threads: each thread runs
  // whole groups (packs its group's operands into its own slot and runs
  // every unit of it), one parallel region per call; the backward's dQ of a
  // group is then one chunk's alone (chunks = 1).
  bool whole_groups;
  std::int64_t packed_slots;         // groups_per_pass, or a slot per thread with whole_groups
  std::int64_t packed_group_floats;  // per group of a pass
  std::int64_t scratch_floats;       // per thread (forward) or per chunk (backward)
  // bf16 forward, for the tile units: the key blocks one softmax step spans
  // (the per-row work of a step and the reloads of O then serve more keys);
  // each query tile's scratch ends with room for their scores (query_block
  // rows of tile_key_blocks * key_block floats) and their P in bf16 (rows of
  // key_block rounded up to kTileDepthBf16, per block), and in decode their
  // K and V in pairs. 0 otherwise.
  std::int64_t tile_key_blocks;
  std::int64_t dq_partial_floats;    // backward, per chunk (per thread with whole_groups)
  std::int64_t chunks;               // backward: fixed work split, one dQ partial each
  // Decode (forward with every query row of a kv group in one tile): the
  // keys of each group are split kv_splits ways, split_key_blocks each; 0 otherwise.
  std::int64_t kv_splits;
  std::int64_t split_key_blocks;
  std::int64_t partial_floats;  // per (group, split) when kv_splits > 1
};

struct ForwardJob {
  const hal_attention_params_v1* params;
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // may be null
  const std::int32_t* key_ranges;  // the call's per-query key ranges; null: none
  Layout layout;
  std::int64_t first_group;  // of the current pass
  std::int64_t pass_groups;
  // per group: K^T [key_blocks][dim_qk][Bc], then V [key_blocks][Bc][dim_v_padded], each block
  // a packed Gemm operand (column panels of the ISA's tile width)
  float* packed;
  float* scratch;   // per thread: scratch_floats
  float* partials;  // decode with kv_splits > 1: per (group, split) partial_floats
};

struct BackwardJob {
  const hal_attention_params_v1* params;
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* grad_o;
  const float* lse;
  void* grad_q;
  void* grad_k;
  void* grad_v;
  const std::int32_t* key_ranges;  // the call's per-query key ranges; null: none
  Layout layout;
  std::int64_t first_group;
  std::int64_t pass_groups;
  // per group, per query head of the group: scaled Q [seq_q_padded][dim_qk_padded],
  // dO [seq_q_padded][dim_v_padded], LSE*log2(e) [seq_q_padded], rowsum(dO*O) [seq_q_padded]
  float* packed;
  float* scratch;      // per chunk: scratch_floats
  float* dq_partials;  // per chunk: dq_partial_floats, [group*head of pass][seq_q_padded][dim_qk_padded]
};

// Work units are numbered densely; the comments say what one unit covers.
struct KernelTable {
  // unit = group_in_pass * key_blocks + key_block: packs K^T and V of one key block
  void (*forward_pack_keys)(const ForwardJob& job, std::int64_t unit);
  // one query block of one query head; units are ordered by decreasing query
  // block so that the longest causal rows start first
  void (*forward_queries)(const ForwardJob& job, std::int64_t unit, int worker);
  // decode: unit = group * kv_splits + split; packs its own key blocks
  void (*forward_decode)(const ForwardJob& job, std::int64_t unit, int worker);
  // decode with kv_splits > 1: unit = group; merges the splits by their LSE
  void (*forward_merge_splits)(const ForwardJob& job, std::int64_t unit);
  // unit = (group_in_pass * group_size + head_in_group) * query_blocks + query_block
  void (*backward_pack_queries)(const BackwardJob& job, std::int64_t unit);
  // unit = group_in_pass * key_blocks + key_block: dK, dV of that block, dQ into `dq_partial`
  void (*backward_keys)(const BackwardJob& job, std::int64_t unit, float* scratch, float* dq_partial);
  // same units as backward_pack_queries: grad_q = scale * sum of the chunks' partials
  void (*backward_reduce_dq)(const BackwardJob& job, std::int64_t unit);
  // runs independent FMA chains `iterations` times; returns the FLOPs done
  double (*fma_chains)(std::int64_t iterations);
};

extern const KernelTable kernels_scalar;
#if defined(HAL_HOST_X86_UNITS)
extern const KernelTable kernels_avx2;
extern const KernelTable kernels_avx512;
#endif
#if defined(HAL_HOST_BF16_UNIT)
extern const KernelTable kernels_avx512bf16;
#endif
#if defined(HAL_HOST_AMX_UNIT)
extern const KernelTable kernels_amx;
#endif

}  // namespace hal::host::flash
