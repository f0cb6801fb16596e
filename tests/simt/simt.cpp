// The fiber scheduler behind simt.hpp. Under AddressSanitizer every switch
// is announced with __sanitizer_start/finish_switch_fiber so ASan tracks
// which stack is live.
#include "simt.hpp"

#include <ucontext.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define HAL_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAL_SIMT_ASAN 1
#endif
#endif

#if defined(HAL_SIMT_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace hal_simt {
namespace {

constexpr unsigned kMaxThreadsPerBlock = 1024;
// Room for the kernels' register arrays plus sanitizer redzones.
constexpr std::size_t kFiberStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t context{};
  std::unique_ptr<char[]> stack;
  dim3 index;
  unsigned linear = 0;
  bool finished = false;
  bool at_barrier = false;
  SourceSite barrier_site{};
  bool at_warp_collective = false;
  SourceSite warp_site{};
  unsigned collectives = 0;  // warp collectives passed; picks the exchange buffer
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched away
};

// What the lanes of one warp hand each other. Two buffers: a lane that
// leaves a collective may enter the next one before the others have read.
struct WarpExchange {
  float values[2][kWarpSize];
  std::uint32_t a[2][kWarpSize][4];
  std::uint32_t b[2][kWarpSize][2];
};

bool same_site(const SourceSite& a, const SourceSite& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

struct Launch {
  const std::function<void()>* kernel = nullptr;
  dim3 grid, block, block_index;
  std::vector<max_align_t> shared;
  std::vector<Fiber> fibers;
  std::vector<WarpExchange> warps;
  Fiber* current = nullptr;
  ucontext_t scheduler{};
  const void* scheduler_stack_bottom = nullptr;
  std::size_t scheduler_stack_size = 0;
};

Launch* active = nullptr;

void start_switch(void** fake_stack, const void* bottom, std::size_t size) {
#if defined(HAL_SIMT_ASAN)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

void finish_switch(void* fake_stack, const void** bottom, std::size_t* size) {
#if defined(HAL_SIMT_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#else
  (void)fake_stack, (void)bottom, (void)size;
#endif
}

void fiber_main() {
  Launch& launch = *active;
  finish_switch(nullptr, &launch.scheduler_stack_bottom, &launch.scheduler_stack_size);
  (*launch.kernel)();
  launch.current->finished = true;
  // This fiber's stack dies: tell ASan to drop its fake stack (nullptr).
  start_switch(nullptr, launch.scheduler_stack_bottom, launch.scheduler_stack_size);
}  // returns through uc_link to the scheduler

void resume(Launch& launch, Fiber& fiber) {
  launch.current = &fiber;
  void* fake_stack = nullptr;
  start_switch(&fake_stack, fiber.stack.get(), kFiberStackBytes);
  swapcontext(&launch.scheduler, &fiber.context);
  finish_switch(fake_stack, nullptr, nullptr);
}

// Lets the lanes of warp `warp` past their collective once all are there.
std::string release_warp(Launch& launch, std::size_t warp) {
  const std::size_t first = warp * kWarpSize;
  const std::size_t end = std::min(first + kWarpSize, launch.fibers.size());
  for (std::size_t t = first; t < end; ++t) {
    if (!launch.fibers[t].at_warp_collective) return "";  // not yet: another lane is still running
    if (!same_site(launch.fibers[t].warp_site, launch.fibers[first].warp_site)) {
      return "lanes of warp " + std::to_string(warp) + " wait at different warp collectives";
    }
  }
  for (std::size_t t = first; t < end; ++t) launch.fibers[t].at_warp_collective = false;
  return "";
}

// Thread `linear` of the block, ready to run fiber_main from its start. On its
// own, not in run_block's loop: getcontext returns twice as far as the
// compiler knows, and a loop counter live across it draws -Wclobbered.
void prepare_fiber(Launch& launch, Fiber& fiber, unsigned linear) {
  fiber.index = dim3(linear % launch.block.x, linear / launch.block.x % launch.block.y,
                     linear / (launch.block.x * launch.block.y));
  fiber.linear = linear;
  fiber.finished = fiber.at_barrier = fiber.at_warp_collective = false;
  fiber.collectives = 0;
  getcontext(&fiber.context);
  fiber.context.uc_stack.ss_sp = fiber.stack.get();
  fiber.context.uc_stack.ss_size = kFiberStackBytes;
  fiber.context.uc_link = &launch.scheduler;
  makecontext(&fiber.context, fiber_main, 0);
}

std::string run_block(Launch& launch) {
  for (std::size_t t = 0; t < launch.fibers.size(); ++t)
    prepare_fiber(launch, launch.fibers[t], static_cast<unsigned>(t));
  for (;;) {
    bool ran = false;
    for (std::size_t t = 0; t < launch.fibers.size(); ++t) {
      Fiber& fiber = launch.fibers[t];
      if (fiber.finished || fiber.at_barrier) continue;
      if (fiber.at_warp_collective) {
        const std::string error = release_warp(launch, t / kWarpSize);
        if (!error.empty()) return error;
        if (fiber.at_warp_collective) continue;
      }
      resume(launch, fiber);
      ran = true;
    }
    if (ran) continue;
    // Nothing can run: every thread returned, or waits at __syncthreads, or
    // waits for lanes that never come.
    std::size_t waiting = 0;
    SourceSite site{};
    for (Fiber& fiber : launch.fibers) {
      if (fiber.at_warp_collective) {
        return "lanes of warp " + std::to_string(fiber.linear / kWarpSize) +
               " wait at a warp collective the others do not reach";
      }
      if (!fiber.at_barrier) continue;
      if (waiting++ == 0) site = fiber.barrier_site;
      if (!same_site(fiber.barrier_site, site)) return "threads of one block wait at different __syncthreads";
    }
    if (waiting == 0) return "";
    if (waiting != launch.fibers.size()) {
      return "__syncthreads reached by " + std::to_string(waiting) + " of " + std::to_string(launch.fibers.size()) +
             " threads (the others returned)";
    }
    for (Fiber& fiber : launch.fibers) fiber.at_barrier = false;
  }
}

}  // namespace

const dim3& thread_index() { return active->current->index; }
const dim3& block_index() { return active->block_index; }
const dim3& block_dim() { return active->block; }
const dim3& grid_dim() { return active->grid; }
void* dynamic_shared() { return active->shared.data(); }

void sync_threads(SourceSite site) {
  Launch& launch = *active;
  Fiber& fiber = *launch.current;
  fiber.at_barrier = true;
  fiber.barrier_site = site;
  start_switch(&fiber.fake_stack, launch.scheduler_stack_bottom, launch.scheduler_stack_size);
  swapcontext(&fiber.context, &launch.scheduler);
  finish_switch(fiber.fake_stack, &launch.scheduler_stack_bottom, &launch.scheduler_stack_size);
}

// Switches out until every lane of the warp reached this collective;
// returns the exchange buffer this collective uses.
int wait_for_warp(SourceSite site) {
  Launch& launch = *active;
  Fiber& fiber = *launch.current;
  const int buffer = static_cast<int>(fiber.collectives++ & 1u);
  fiber.at_warp_collective = true;
  fiber.warp_site = site;
  start_switch(&fiber.fake_stack, launch.scheduler_stack_bottom, launch.scheduler_stack_size);
  swapcontext(&fiber.context, &launch.scheduler);
  finish_switch(fiber.fake_stack, &launch.scheduler_stack_bottom, &launch.scheduler_stack_size);
  return buffer;
}

float shuffle_xor(float value, int lane_mask, SourceSite site) {
  Launch& launch = *active;
  const unsigned linear = launch.current->linear;
  WarpExchange& exchange = launch.warps[linear / kWarpSize];
  const unsigned lane = linear % kWarpSize;
  const int buffer = static_cast<int>(launch.current->collectives & 1u);
  exchange.values[buffer][lane] = value;
  wait_for_warp(site);
  const unsigned source = lane ^ static_cast<unsigned>(lane_mask);
  return source < kWarpSize ? exchange.values[buffer][source] : value;
}

void mma_m16n8k16(float c[4], const std::uint32_t a[4], const std::uint32_t b[2],
                  float (*element_to_float)(std::uint32_t), SourceSite site) {
  Launch& launch = *active;
  const unsigned linear = launch.current->linear;
  WarpExchange& exchange = launch.warps[linear / kWarpSize];
  const unsigned lane = linear % kWarpSize;
  const int buffer = static_cast<int>(launch.current->collectives & 1u);
  std::memcpy(exchange.a[buffer][lane], a, sizeof exchange.a[buffer][lane]);
  std::memcpy(exchange.b[buffer][lane], b, sizeof exchange.b[buffer][lane]);
  wait_for_warp(site);
  // PTX layout: groupID = lane / 4 owns rows groupID and groupID + 8 of A,
  // C and D and column groupID of B; its index in the group t = lane % 4
  // owns the element pairs 2t, 2t + 1 (and 2t + 8, 2t + 9) along k or n.
  auto a_element = [&](unsigned row, unsigned k) {
    const unsigned owner = (row % 8) * 4 + (k % 8) / 2;
    const unsigned reg = (row >= 8 ? 1u : 0u) + (k >= 8 ? 2u : 0u);
    return element_to_float((exchange.a[buffer][owner][reg] >> (16 * (k % 2))) & 0xffffu);
  };
  auto b_element = [&](unsigned k, unsigned n) {
    const unsigned owner = n * 4 + (k % 8) / 2;
    return element_to_float((exchange.b[buffer][owner][k >= 8 ? 1 : 0] >> (16 * (k % 2))) & 0xffffu);
  };
  const unsigned group = lane / 4;
  const unsigned in_group = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const unsigned row = group + (i >= 2 ? 8u : 0u);
    const unsigned column = 2 * in_group + static_cast<unsigned>(i % 2);
    float sum = c[i];
    for (unsigned k = 0; k < 16; ++k) sum += a_element(row, k) * b_element(k, column);
    c[i] = sum;
  }
}

std::string launch(const std::function<void()>& kernel, dim3 grid, dim3 block, std::size_t shared_bytes) {
  const unsigned long threads = static_cast<unsigned long>(block.x) * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock) {
    return "block of " + std::to_string(threads) + " threads (allowed: 1.." + std::to_string(kMaxThreadsPerBlock) + ")";
  }
  Launch state;
  state.kernel = &kernel;
  state.grid = grid;
  state.block = block;
  state.shared.resize((shared_bytes + sizeof(max_align_t) - 1) / sizeof(max_align_t) + 1);
  state.fibers.resize(threads);
  state.warps.resize((threads + kWarpSize - 1) / kWarpSize);
  for (Fiber& fiber : state.fibers) fiber.stack.reset(new char[kFiberStackBytes]);
  Launch* const outer = active;
  active = &state;
  std::string error;
  for (unsigned z = 0; z < grid.z && error.empty(); ++z) {
    for (unsigned y = 0; y < grid.y && error.empty(); ++y) {
      for (unsigned x = 0; x < grid.x && error.empty(); ++x) {
        state.block_index = dim3(x, y, z);
        // Fresh garbage-free shared memory is not promised by hardware either,
        // so fill it with NaN: a kernel that reads before writing shows it.
        std::memset(static_cast<void*>(state.shared.data()), 0xff, state.shared.size() * sizeof(max_align_t));
        error = run_block(state);
      }
    }
  }
  active = outer;
  return error;
}

}  // namespace hal_simt
