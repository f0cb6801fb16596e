// Host (CPU) scaled-dot-product attention kernels.
//
// Tensors follow hal_attention_params_v1 (hal/backend_abi.h): Q, K, V, O and
// the gradients are in params.dtype (F32, F16 or BF16) with their own element
// strides; LSE is f32, contiguous [batch, heads_q, seq_q], natural log.
//
// Two implementations:
//   math  - materializes the seq_q x seq_kv scores of one (batch, head) at a
//           time and accumulates in f32: the readable reference.
//   flash - tiled with online softmax (FlashAttention-2), extra memory
//           O(batch * heads * seq), register-blocked AVX-512 / AVX2 / scalar
//           micro-kernels picked at run time.
// The *_f64 variants run the math algorithm with double accumulation and
// write double outputs: the golden reference of the tests.
//
// Kernels throw std::invalid_argument (message: the problems, one per line)
// when attention_problems reports anything or a required pointer is null (for
// callers of the kernels themselves; the plugin's calls were checked by libhal).
// key_ranges: the call's per-query key ranges (backend_abi.h), passed exactly
// when params.key_ranges says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/thread_pool.hpp"
#include "attention_contract.hpp"
#include "hal/backend_abi.h"

namespace hal::host {

// The call's check and FLOP count are the ABI's (hal/abi/attention_contract.hpp).
using abi::attention_flops;
using abi::attention_problems;

// A call below this many FLOPs runs on the calling thread alone (and the
// host stream runs it inline when idle): waking and joining other threads
// costs more than they save. Measured on 2 cores (AVX-512 EPYC, halbench
// attn, 32/8 heads, d 64, causal): the seq 32 forward (4 MFLOP) 0.22 ms alone
// against 0.28 ms on the pool; its backward (10.5 MFLOP) 0.47 against 0.35.
constexpr double kSmallAttentionFlops = 1e7;
// The same on an OpenMP team, whose threads are awake already: sharing pays
// from here (a decode call of 0.3 MFLOP took 5 us longer shared).
constexpr double kSmallAttentionFlopsOnTeam = 1e6;

// lse_or_null: written when not null (the caller decides from return_lse).
void math_forward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                  void* o, float* lse_or_null, ThreadPool& pool, const std::int32_t* key_ranges = nullptr);

// Recomputes the softmax from Q and K: `o` and `lse` are not read and may be null.
void math_backward(const hal_attention_params_v1& params, const void* q, const void* k,
                   const void* v, const void* o, const void* grad_o, const float* lse,
                   void* grad_q, void* grad_k, void* grad_v, ThreadPool& pool,
                   const std::int32_t* key_ranges = nullptr);

// Golden reference: inputs as in params, double accumulation, double outputs
// in contiguous [batch, heads, seq, dim] layout (heads_q for O and grad_q,
// heads_kv for grad_k and grad_v); lse_or_null is [batch, heads_q, seq_q].
void math_forward_f64(const hal_attention_params_v1& params, const void* q, const void* k,
                      const void* v, double* o, double* lse_or_null, ThreadPool& pool,
                      const std::int32_t* key_ranges = nullptr);
void math_backward_f64(const hal_attention_params_v1& params, const void* q, const void* k,
                       const void* v, const void* grad_o, double* grad_q, double* grad_k,
                       double* grad_v, ThreadPool& pool, const std::int32_t* key_ranges = nullptr);

// Instruction-set paths of the flash kernels, lowest first. avx512bf16 and
// amx are avx512 with the bf16 prefill forward and backward on bf16 products
// with f32 sums: AVX512-BF16 dot products, or AMX-BF16 tiles.
enum class FlashIsa { scalar = 0, avx2 = 1, avx512 = 2, avx512bf16 = 3, amx = 4 };
// Every path, lowest first.
inline constexpr FlashIsa kFlashIsas[] = {FlashIsa::scalar, FlashIsa::avx2, FlashIsa::avx512, FlashIsa::avx512bf16,
                                          FlashIsa::amx};

const char* flash_isa_name(FlashIsa isa);
// By this CPU, this build and (amx) the operating system, which must grant
// the process the tile state; the first amx check asks for it.
bool flash_isa_supported(FlashIsa isa);
// "scalar", "avx2", "avx512", "avx512bf16", "amx" -> that path; nullopt for any other name.
std::optional<FlashIsa> parse_flash_isa(std::string_view name);
// Lowers every later flash_selected_isa() to `limit` (the host backend's
// `isa` option, which HAL_HOST_ISA sets); nullopt: no limit. The host plugin
// sets it at initialize; programs that run the kernels themselves may too.
void limit_flash_isa(std::optional<FlashIsa> limit);
// The best supported path, at most the limit.
FlashIsa flash_selected_isa();
const char* flash_isa_name();  // name of flash_selected_isa()

// The host backend's `isa` and `threads` options applied to this process's
// kernels (limit_flash_isa, configure_thread_count): the host plugin at
// initialize, and halbench, which runs the kernels itself, from the same
// settings. `origin` names the setting in warnings ("HAL_HOST_ISA=sse9").
// Returns a warning for each value it ignored.
struct KernelOption {
  std::string value;  // "" when unset
  std::string origin;
};
std::vector<std::string> configure_host_kernels(const KernelOption& isa, const KernelOption& threads);

void flash_forward(const hal_attention_params_v1& params, const void* q, const void* k,
                   const void* v, void* o, float* lse_or_null, ThreadPool& pool);
// Needs the LSE of the forward pass (rows of -inf: fully masked queries).
void flash_backward(const hal_attention_params_v1& params, const void* q, const void* k,
                    const void* v, const void* o, const void* grad_o, const float* lse,
                    void* grad_q, void* grad_k, void* grad_v, ThreadPool& pool);
// How the forward pass tiles the queries: `automatic` takes the decode
// tiling (every query row of a kv group in one tile, keys split across
// threads) when those rows fit one tile, `query_blocks` always tiles each
// head's queries on their own (the prefill tiling).
enum class FlashForwardTiling { automatic, query_blocks };

// Same on an explicit path (which must be supported); for tests and benchmarks.
void flash_forward(const hal_attention_params_v1& params, const void* q, const void* k,
                   const void* v, void* o, float* lse_or_null, ThreadPool& pool, FlashIsa isa,
                   FlashForwardTiling tiling = FlashForwardTiling::automatic,
                   const std::int32_t* key_ranges = nullptr);
void flash_backward(const hal_attention_params_v1& params, const void* q, const void* k,
                    const void* v, const void* o, const void* grad_o, const float* lse,
                    void* grad_q, void* grad_k, void* grad_v, ThreadPool& pool, FlashIsa isa,
                    const std::int32_t* key_ranges = nullptr);

// Bytes each implementation allocates for one call (beyond inputs/outputs);
// throw like the kernels for invalid params. Flash scratch is per thread,
// hence thread_count (the pool's thread_count()); the two-argument form
// assumes default_thread_count().
std::uint64_t math_workspace_bytes(const hal_attention_params_v1& params, bool backward);
std::uint64_t flash_workspace_bytes(const hal_attention_params_v1& params, bool backward,
                                    int thread_count);
std::uint64_t flash_workspace_bytes(const hal_attention_params_v1& params, bool backward);

}  // namespace hal::host
