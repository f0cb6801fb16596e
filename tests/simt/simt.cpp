// The fiber scheduler behind simt.hpp. Under AddressSanitizer every switch
// is announced with __sanitizer_start/finish_switch_fiber so ASan tracks
// which stack is live.
#include "simt.hpp"

#include <ucontext.h>

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
  bool finished = false;
  bool at_barrier = false;
  void* barrier_site = nullptr;
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched away
};

struct Launch {
  const std::function<void()>* kernel = nullptr;
  dim3 grid, block, block_index;
  std::vector<max_align_t> shared;
  std::vector<Fiber> fibers;
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

std::string run_block(Launch& launch) {
  for (std::size_t t = 0; t < launch.fibers.size(); ++t) {
    Fiber& fiber = launch.fibers[t];
    const unsigned linear = static_cast<unsigned>(t);
    fiber.index = dim3(linear % launch.block.x, linear / launch.block.x % launch.block.y,
                       linear / (launch.block.x * launch.block.y));
    fiber.finished = fiber.at_barrier = false;
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack.get();
    fiber.context.uc_stack.ss_size = kFiberStackBytes;
    fiber.context.uc_link = &launch.scheduler;
    makecontext(&fiber.context, fiber_main, 0);
  }
  for (;;) {
    for (Fiber& fiber : launch.fibers) {
      if (!fiber.finished) resume(launch, fiber);
    }
    std::size_t waiting = 0;
    void* site = nullptr;
    for (Fiber& fiber : launch.fibers) {
      if (!fiber.at_barrier) continue;
      if (waiting++ == 0) site = fiber.barrier_site;
      if (fiber.barrier_site != site) return "threads of one block wait at different __syncthreads";
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

__attribute__((noinline)) void sync_threads() {
  Launch& launch = *active;
  Fiber& fiber = *launch.current;
  fiber.at_barrier = true;
  fiber.barrier_site = __builtin_return_address(0);
  start_switch(&fiber.fake_stack, launch.scheduler_stack_bottom, launch.scheduler_stack_size);
  swapcontext(&fiber.context, &launch.scheduler);
  finish_switch(fiber.fake_stack, &launch.scheduler_stack_bottom, &launch.scheduler_stack_size);
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
