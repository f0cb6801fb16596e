// Flash attention driver: tiling, passes over kv-head groups, threads and
// workspace; the arithmetic is in the per-ISA kernel units (flash_kernels.hpp).
//
// Forward, per pass of `groups_per_pass` (batch, kv head) groups:
//   1. pack K^T panels and V of the groups to f32 (parallel over key blocks);
//   2. each (query head, query block of 64 rows) runs the online-softmax loop
//      over the key blocks it can see (parallel, longest causal rows first).
// Decode and short chunks (every query row of a group fits one 64-row tile):
//   one pass; each (group, split of the keys) reads its key blocks in place
//   (S^T = K Q^T, O += P V with K and V rows as they lie in memory, converted
//   only when not f32), so K and V are read once and never packed; when the
//   groups are fewer than the threads want, the keys are split and the
//   splits' partial O are merged by their running max and sum (the LSE).
// Backward (FlashAttention-2), per pass:
//   1. pack scaled Q, dO, LSE and D = rowsum(dO * O) of the groups' query heads;
//   2. `chunks` fixed work lists (one per thread) over (group, key block):
//      each key block recomputes P from LSE for every query block that sees
//      it and owns its dK, dV rows (GQA heads summed in place, no atomics);
//      dQ goes to the chunk's own f32 partial;
//   3. dQ = scale * (sum of the partials, in chunk order: deterministic for a
//      given thread count).
// Extra memory (flash_workspace_bytes): forward packs K, V of one pass
// (groups_per_pass * seq_kv * (dim_qk + dim_v) floats) plus per-thread tiles;
// backward packs Q, dO of one pass plus threads * (dQ partial of one pass)
// plus per-thread tiles. All O(batch * heads * seq), nothing O(seq^2).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "attention/attention_common.hpp"
#include "attention/attention_internal.hpp"
#include "attention/flash_kernels.hpp"

namespace hal::host {
namespace {

constexpr std::int64_t kQueryBlock = 64;
constexpr std::int64_t kKeyBlock = 64;      // at most; a multiple of every ISA's vector width
constexpr std::int64_t kDimAlignment = 16;  // the widest vector: padded dims are whole vectors
// Work units wanted per thread in one pass: enough to balance, few enough to
// keep the packed pass small.
constexpr std::int64_t kUnitsPerThread = 4;
// Keys up to which a call whose groups balance over the threads (as many
// groups per thread, or kUnitsPerThread or more) runs whole groups per
// thread: there the parallel regions and the dQ reduction of the tiled
// passes cost as much as the arithmetic.
constexpr std::int64_t kWholeGroupKeys = 256;
// Key blocks one softmax step of the bf16 tile units spans (Layout::tile_key_blocks).
constexpr std::int64_t kTileKeyBlocks = 8;

flash::Layout make_layout(const hal_attention_params_v1& p, bool backward, int thread_count,
                          FlashForwardTiling tiling = FlashForwardTiling::automatic) {
  flash::Layout layout{};
  layout.query_block = kQueryBlock;
  // Short keys: a block of just the keys there are (whole vectors), not
  // scores and exponentials of padding.
  layout.key_block = std::min(kKeyBlock, round_up(p.seq_kv, kDimAlignment));
  layout.dim_qk_padded = round_up(p.head_dim_qk, kDimAlignment);
  layout.dim_v_padded = round_up(p.head_dim_v, kDimAlignment);
  layout.query_blocks = (p.seq_q + kQueryBlock - 1) / kQueryBlock;
  layout.key_blocks = (p.seq_kv + layout.key_block - 1) / layout.key_block;
  layout.seq_q_padded = layout.query_blocks * kQueryBlock;
  layout.group_size = p.heads_q / p.heads_kv;
  layout.group_count = p.batch * p.heads_kv;
  const std::int64_t threads = std::max(1, thread_count);
  const std::int64_t br = layout.query_block;
  const std::int64_t bc = layout.key_block;
  std::int64_t units_per_group = 0;
  const std::int64_t wanted_units = kUnitsPerThread * threads;
  if (!backward && tiling == FlashForwardTiling::automatic && layout.group_size * p.seq_q <= kQueryBlock) {
    // Decode: one tile holds every query row of a group and reads K and V
    // in place. Too few groups for the threads: split the keys.
    const std::int64_t splits = std::clamp<std::int64_t>((wanted_units + layout.group_count - 1) / layout.group_count,
                                                         1, layout.key_blocks);
    layout.split_key_blocks = (layout.key_blocks + splits - 1) / splits;
    layout.kv_splits = (layout.key_blocks + layout.split_key_blocks - 1) / layout.split_key_blocks;
    layout.partial_floats = layout.kv_splits > 1 ? br * (layout.dim_v_padded + 2) : 0;
    // the tile, then Q^T, S^T and the key block's K and V rows when they need converting
    const std::int64_t tile_floats = br * layout.dim_qk_padded + br * bc + br * layout.dim_v_padded + 2 * br;
    layout.scratch_floats =
        tile_floats + p.head_dim_qk * br + bc * br + bc * (layout.dim_qk_padded + layout.dim_v_padded);
    if (p.dtype == HAL_DTYPE_BF16) {
      // the tile units' decode: after the tile, a step's scores and P, then its K and V blocks in pairs
      layout.tile_key_blocks = std::min(kTileKeyBlocks, layout.split_key_blocks);
      const std::int64_t key_depth = round_up(bc, flash::kTileDepthBf16);
      const std::int64_t depth = round_up(p.head_dim_qk, flash::kTileDepthBf16);
      layout.scratch_floats = std::max(
          layout.scratch_floats, tile_floats + layout.tile_key_blocks * (br * (bc + key_depth / 2) + bc * depth / 2 +
                                                                         key_depth / 2 * layout.dim_v_padded));
    }
    layout.groups_per_pass = layout.group_count;
    return layout;
  }
  if (!backward) {
    units_per_group = layout.group_size * layout.query_blocks;
    layout.packed_group_floats = layout.key_blocks * bc * (p.head_dim_qk + layout.dim_v_padded);
    layout.scratch_floats = br * layout.dim_qk_padded + br * bc + br * layout.dim_v_padded + 2 * br;
    if (p.dtype == HAL_DTYPE_BF16) {
      layout.tile_key_blocks = std::min(kTileKeyBlocks, layout.key_blocks);
      layout.scratch_floats += br * layout.tile_key_blocks * (bc + round_up(bc, flash::kTileDepthBf16) / 2);
    }
    layout.chunks = 0;
  } else {
    units_per_group = layout.key_blocks;
    layout.packed_group_floats =
        layout.group_size * layout.seq_q_padded * (layout.dim_qk_padded + layout.dim_v_padded + 2);
    // K, K^T, V^T, dK, dV of the key block, then P and dS of a query block
    layout.scratch_floats = 3 * bc * layout.dim_qk_padded + 2 * bc * layout.dim_v_padded + 2 * br * bc;
    if (p.dtype == HAL_DTYPE_BF16) {
      layout.scratch_floats = std::max(layout.scratch_floats, flash::tile_backward_scratch_floats(
                                                                  br, bc, layout.dim_qk_padded, layout.dim_v_padded));
    }
    layout.chunks = threads;
  }
  layout.groups_per_pass =
      std::clamp<std::int64_t>((wanted_units + units_per_group - 1) / units_per_group, 1, layout.group_count);
  layout.whole_groups = p.seq_kv <= kWholeGroupKeys && (layout.group_count >= kUnitsPerThread * threads || layout.group_count % threads == 0);
  if (layout.whole_groups) {
    layout.packed_slots = threads;
    layout.chunks = backward ? 1 : 0;
    layout.dq_partial_floats = backward ? layout.group_size * layout.seq_q_padded * layout.dim_qk_padded : 0;
    return layout;
  }
  layout.packed_slots = layout.groups_per_pass;
  layout.dq_partial_floats =
      backward ? layout.groups_per_pass * layout.group_size * layout.seq_q_padded * layout.dim_qk_padded : 0;
  return layout;
}

// Runs unit(worker, u) for u in [0, count) on the pool's threads, or on the
// calling thread alone for a small call (kSmallAttentionFlops, or
// kSmallAttentionFlopsOnTeam on an OpenMP team).
class UnitRunner {
 public:
  UnitRunner(ThreadPool& pool, double flops)
      : pool_(pool),
        serial_(flops < (pool.uses_openmp_team() ? kSmallAttentionFlopsOnTeam : kSmallAttentionFlops)) {}

  template <class Unit>
  void run(std::int64_t count, const Unit& unit) {
    if (serial_) {
      for (std::int64_t index = 0; index < count; ++index) unit(0, index);
      return;
    }
    pool_.parallel_for_with_worker(count, [&](int worker, std::int64_t begin, std::int64_t end) {
      for (std::int64_t index = begin; index < end; ++index) unit(worker, index);
    });
  }

 private:
  ThreadPool& pool_;
  bool serial_;
};

// How many query blocks see each key block, + 1 (loading a block's K and V
// costs even when no query sees it); every query block with key ranges (any
// row may see any key). The same for every pass of a call.
std::vector<std::int64_t> key_block_costs(const hal_attention_params_v1& p, const flash::Layout& layout,
                                          bool key_ranges) {
  std::vector<std::int64_t> costs(static_cast<std::size_t>(layout.key_blocks), layout.query_blocks + 1);
  if (key_ranges) return costs;
  for (std::int64_t key_block = 0; key_block < layout.key_blocks; ++key_block) {
    const std::int64_t key0 = key_block * layout.key_block;
    const std::int64_t key_last = std::min(key0 + layout.key_block, p.seq_kv) - 1;
    std::int64_t seen_by = 0;
    for (std::int64_t query_block = 0; query_block < layout.query_blocks; ++query_block) {
      const std::int64_t query0 = query_block * layout.query_block;
      const std::int64_t query_last = std::min(query0 + layout.query_block, p.seq_q) - 1;
      const std::int64_t first = abi::visible_keys(p, query0).first;
      const std::int64_t last = abi::visible_keys(p, query_last).last;
      seen_by += first <= last && first <= key_last && last >= key0;
    }
    costs[static_cast<std::size_t>(key_block)] = seen_by + 1;
  }
  return costs;
}

// The backward's key units of a pass, dealt to its chunks so that their
// work evens out: under a causal mask or a window the early key blocks are
// seen by more query blocks. Longest first, each to the least loaded chunk
// (the lowest on a tie): fixed for a given thread count, so the dQ partials
// are summed in a fixed order. Returns each chunk's units.
std::vector<std::vector<std::int64_t>> deal_key_units(const flash::Layout& layout, std::int64_t pass_groups,
                                                      const std::vector<std::int64_t>& block_costs) {
  const auto cost = [&](std::int64_t unit) { return block_costs[static_cast<std::size_t>(unit % layout.key_blocks)]; };
  std::vector<std::int64_t> by_cost(static_cast<std::size_t>(pass_groups * layout.key_blocks));
  for (std::size_t unit = 0; unit < by_cost.size(); ++unit) by_cost[unit] = static_cast<std::int64_t>(unit);
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::int64_t a, std::int64_t b) { return cost(a) > cost(b); });
  std::vector<std::vector<std::int64_t>> dealt(static_cast<std::size_t>(layout.chunks));
  std::vector<std::int64_t> load(static_cast<std::size_t>(layout.chunks), 0);
  for (const std::int64_t unit : by_cost) {
    const auto lightest = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[lightest] += cost(unit);
    dealt[lightest].push_back(unit);
  }
  return dealt;
}

// Per-thread (or per-chunk) scratch slots of a call.
std::int64_t scratch_slots(const flash::Layout& layout, int thread_count) {
  return layout.chunks > 0 && !layout.whole_groups ? layout.chunks : std::max(1, thread_count);
}

// The workspace, in this order: packed operands, scratch, dQ partials, decode partials.
std::int64_t workspace_floats(const flash::Layout& layout, int thread_count) {
  const std::int64_t slots = scratch_slots(layout, thread_count);
  const std::int64_t dq_slots = layout.whole_groups ? slots : layout.chunks;
  return layout.packed_slots * layout.packed_group_floats + slots * layout.scratch_floats +
         dq_slots * layout.dq_partial_floats + layout.group_count * layout.kv_splits * layout.partial_floats;
}

// A forward or backward job's fields that do not depend on the direction:
// the operands every call reads, the layout, and the workspace's packed
// operands and per-thread scratch (what follows them is the caller's).
template <class Job>
Job start_job(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
              const std::int32_t* key_ranges, const flash::Layout& layout, float* workspace) {
  Job job{};
  job.params = &params;
  job.q = q;
  job.k = k;
  job.v = v;
  job.key_ranges = key_ranges;
  job.layout = layout;
  job.packed = workspace;
  job.scratch = job.packed + layout.packed_slots * layout.packed_group_floats;
  return job;
}

// The job of one whole group run by `worker`, in that worker's packed slot.
template <class Job>
Job whole_group_job(const Job& job, int worker, std::int64_t group) {
  Job own = job;
  own.first_group = group;
  own.pass_groups = 1;
  own.packed = job.packed + worker * job.layout.packed_group_floats;
  return own;
}

// Runs pass() once per pass of groups_per_pass groups, with the job's
// first_group and pass_groups set to that pass's.
template <class Job, class Pass>
void for_each_pass(Job& job, const Pass& pass) {
  const flash::Layout& layout = job.layout;
  for (std::int64_t first = 0; first < layout.group_count; first += layout.groups_per_pass) {
    job.first_group = first;
    job.pass_groups = std::min(layout.groups_per_pass, layout.group_count - first);
    pass();
  }
}

#if defined(HAL_HOST_AMX_UNIT)
// Linux hands out the AMX tile state (XTILEDATA) only to a process that asks
// for it; a tile instruction before that faults. Asked once, for the process.
bool tile_state_granted() {
  static const bool granted = [] {
#if defined(__linux__)
    constexpr int kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr int kTileData = 18;               // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
#else
    return false;
#endif
  }();
  return granted;
}
#endif

}  // namespace

const flash::KernelTable& flash_kernel_table(FlashIsa isa) {
  if (!flash_isa_supported(isa)) {
    throw std::invalid_argument(std::string("flash path ") + flash_isa_name(isa) + " is not supported by this CPU");
  }
#if defined(HAL_HOST_AMX_UNIT)
  if (isa == FlashIsa::amx) return flash::kernels_amx;
#endif
#if defined(HAL_HOST_BF16_UNIT)
  if (isa == FlashIsa::avx512bf16) return flash::kernels_avx512bf16;
#endif
#if defined(HAL_HOST_X86_UNITS)
  if (isa == FlashIsa::avx512) return flash::kernels_avx512;
  if (isa == FlashIsa::avx2) return flash::kernels_avx2;
#endif
  return flash::kernels_scalar;
}

const char* flash_isa_name(FlashIsa isa) {
  switch (isa) {
    case FlashIsa::amx: return "amx";
    case FlashIsa::avx512bf16: return "avx512bf16";
    case FlashIsa::avx512: return "avx512";
    case FlashIsa::avx2: return "avx2";
    case FlashIsa::scalar: break;
  }
  return "scalar";
}

bool flash_isa_supported(FlashIsa isa) {
  switch (isa) {
    case FlashIsa::scalar: return true;
#if defined(HAL_HOST_X86_UNITS)
    case FlashIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case FlashIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
#if defined(HAL_HOST_BF16_UNIT)
    case FlashIsa::avx512bf16: return flash_isa_supported(FlashIsa::avx512) && __builtin_cpu_supports("avx512bf16");
#endif
#if defined(HAL_HOST_AMX_UNIT)
    case FlashIsa::amx:
      return flash_isa_supported(FlashIsa::avx512bf16) && __builtin_cpu_supports("amx-tile") &&
             __builtin_cpu_supports("amx-bf16") && tile_state_granted();
#endif
    default: return false;
  }
}

std::optional<FlashIsa> parse_flash_isa(std::string_view name) {
  for (FlashIsa isa : kFlashIsas)
    if (name == flash_isa_name(isa)) return isa;
  return std::nullopt;
}

namespace {
// The CPU's best path, found once; the limit is read on every call.
FlashIsa best_supported_isa() {
  static const FlashIsa best = [] {
    FlashIsa found = FlashIsa::scalar;
    for (FlashIsa isa : kFlashIsas)
      if (flash_isa_supported(isa)) found = isa;
    return found;
  }();
  return best;
}
std::atomic<FlashIsa> isa_limit{FlashIsa::amx};
}  // namespace

void limit_flash_isa(std::optional<FlashIsa> limit) { isa_limit.store(limit.value_or(FlashIsa::amx)); }

FlashIsa flash_selected_isa() { return std::min(best_supported_isa(), isa_limit.load(std::memory_order_relaxed)); }

const char* flash_isa_name() { return flash_isa_name(flash_selected_isa()); }

std::vector<std::string> configure_host_kernels(const KernelOption& isa, const KernelOption& threads) {
  std::vector<std::string> warnings;
  const std::optional<FlashIsa> limit = parse_flash_isa(isa.value);
  if (!isa.value.empty() && !limit)
    warnings.push_back(isa.origin +
                       " is not an instruction set the host kernels have; use scalar, avx2, avx512, avx512bf16 or amx. "
                       "The CPU's best is used.");
  limit_flash_isa(limit);
  unsigned count = 0;
  const char* const end = threads.value.data() + threads.value.size();
  const auto [parsed_end, error] = std::from_chars(threads.value.data(), end, count);
  if (!threads.value.empty() && (error != std::errc{} || parsed_end != end || count == 0)) {
    warnings.push_back(threads.origin +
                       " is not a whole number greater than 0; the thread count is decided as if it "
                       "were unset.");
    count = 0;
  }
  configure_thread_count(count, count > 0 ? threads.origin : "");
  return warnings;
}

std::uint64_t flash_workspace_bytes(const hal_attention_params_v1& params, bool backward, int thread_count) {
  require_valid_params(params, backward);
  return static_cast<std::uint64_t>(workspace_floats(make_layout(params, backward, thread_count), thread_count)) *
         sizeof(float);
}

std::uint64_t flash_workspace_bytes(const hal_attention_params_v1& params, bool backward) {
  return flash_workspace_bytes(params, backward, static_cast<int>(default_thread_count().threads));
}

void flash_forward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v, void* o,
                   float* lse_or_null, ThreadPool& pool, FlashIsa isa, FlashForwardTiling tiling,
                   const std::int32_t* key_ranges) {
  require_forward_call(params, key_ranges, q, k, v, o);
  const flash::KernelTable& kernels = flash_kernel_table(isa);
  const int threads = pool.thread_count();
  const flash::Layout layout = make_layout(params, false, threads, tiling);
  CallScratch workspace(static_cast<std::size_t>(workspace_floats(layout, threads)));

  auto job = start_job<flash::ForwardJob>(params, q, k, v, key_ranges, layout, workspace.data());
  job.o = o;
  job.lse = lse_or_null;
  job.partials = job.scratch + threads * layout.scratch_floats;
  UnitRunner units(pool, attention_flops(params, false));
  if (layout.whole_groups) {
    units.run(layout.group_count, [&](int worker, std::int64_t group) {
      const flash::ForwardJob own = whole_group_job(job, worker, group);
      for (std::int64_t key_block = 0; key_block < layout.key_blocks; ++key_block) {
        kernels.forward_pack_keys(own, key_block);
      }
      for (std::int64_t unit = 0; unit < layout.group_size * layout.query_blocks; ++unit) {
        kernels.forward_queries(own, unit, worker);
      }
    });
    return;
  }
  if (layout.kv_splits > 0) {
    units.run(layout.group_count * layout.kv_splits,
              [&](int worker, std::int64_t unit) { kernels.forward_decode(job, unit, worker); });
    if (layout.kv_splits > 1) {
      units.run(layout.group_count, [&](int, std::int64_t group) { kernels.forward_merge_splits(job, group); });
    }
    return;
  }
  for_each_pass(job, [&] {
    units.run(job.pass_groups * layout.key_blocks, [&](int, std::int64_t unit) { kernels.forward_pack_keys(job, unit); });
    units.run(job.pass_groups * layout.group_size * layout.query_blocks,
              [&](int worker, std::int64_t unit) { kernels.forward_queries(job, unit, worker); });
  });
}

void flash_backward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                    const void* o, const void* grad_o, const float* lse, void* grad_q, void* grad_k, void* grad_v,
                    ThreadPool& pool, FlashIsa isa, const std::int32_t* key_ranges) {
  require_backward_call(params, key_ranges, q, k, v, grad_o, grad_q, grad_k, grad_v);
  // Unlike the math path, flash reads O (for rowsum(dO * O)) and the forward's LSE.
  require_pointer(o, "o");
  require_pointer(lse, "lse (flash backward needs the forward's LSE)");
  const flash::KernelTable& kernels = flash_kernel_table(isa);
  const int threads = pool.thread_count();
  const flash::Layout layout = make_layout(params, true, threads);
  CallScratch workspace(static_cast<std::size_t>(workspace_floats(layout, threads)));

  auto job = start_job<flash::BackwardJob>(params, q, k, v, key_ranges, layout, workspace.data());
  job.o = o;
  job.grad_o = grad_o;
  job.lse = lse;
  job.grad_q = grad_q;
  job.grad_k = grad_k;
  job.grad_v = grad_v;
  job.dq_partials = job.scratch + scratch_slots(layout, threads) * layout.scratch_floats;
  UnitRunner units(pool, attention_flops(params, true));
  if (layout.whole_groups) {
    // A group's dQ is this thread's alone: no partials to sum across chunks.
    units.run(layout.group_count, [&](int worker, std::int64_t group) {
      flash::BackwardJob own = whole_group_job(job, worker, group);
      own.dq_partials = job.dq_partials + worker * layout.dq_partial_floats;
      const std::int64_t query_units = layout.group_size * layout.query_blocks;
      for (std::int64_t unit = 0; unit < query_units; ++unit) kernels.backward_pack_queries(own, unit);
      std::fill(own.dq_partials, own.dq_partials + layout.dq_partial_floats, 0.0f);
      for (std::int64_t key_block = 0; key_block < layout.key_blocks; ++key_block) {
        kernels.backward_keys(own, key_block, job.scratch + worker * layout.scratch_floats, own.dq_partials);
      }
      for (std::int64_t unit = 0; unit < query_units; ++unit) kernels.backward_reduce_dq(own, unit);
    });
    return;
  }
  const std::vector<std::int64_t> block_costs = key_block_costs(params, layout, key_ranges != nullptr);
  for_each_pass(job, [&] {
    const std::int64_t query_units = job.pass_groups * layout.group_size * layout.query_blocks;
    units.run(query_units, [&](int, std::int64_t unit) { kernels.backward_pack_queries(job, unit); });
    const std::int64_t partial_floats = job.pass_groups * layout.group_size * layout.seq_q_padded * layout.dim_qk_padded;
    const std::vector<std::vector<std::int64_t>> dealt = deal_key_units(layout, job.pass_groups, block_costs);
    units.run(layout.chunks, [&](int, std::int64_t chunk) {
      float* partial = job.dq_partials + chunk * layout.dq_partial_floats;
      std::fill(partial, partial + partial_floats, 0.0f);
      for (const std::int64_t unit : dealt[static_cast<std::size_t>(chunk)]) {
        kernels.backward_keys(job, unit, job.scratch + chunk * layout.scratch_floats, partial);
      }
    });
    units.run(query_units, [&](int, std::int64_t unit) { kernels.backward_reduce_dq(job, unit); });
  });
}

void flash_forward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v, void* o,
                   float* lse_or_null, ThreadPool& pool) {
  flash_forward(params, q, k, v, o, lse_or_null, pool, flash_selected_isa());
}

void flash_backward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                    const void* o, const void* grad_o, const float* lse, void* grad_q, void* grad_k, void* grad_v,
                    ThreadPool& pool) {
  flash_backward(params, q, k, v, o, grad_o, lse, grad_q, grad_k, grad_v, pool, flash_selected_isa());
}

}  // namespace hal::host
