// ShmKernels for any CPU of the build's target (what the baseline flags
// vectorise), and the choice among the sets.
#include "attention/attention_kernels.hpp"
#include "shm_kernels_impl.hpp"

namespace hal::host {
namespace {
struct Baseline {};
}  // namespace

const ShmKernels shm_kernels_scalar = ShmLoops<Baseline>::table("baseline");

const ShmKernels& shm_kernels() {
  // The attention kernels' choice: the same CPU checks and `isa` limit.
  switch (flash_selected_isa()) {
#if defined(HAL_HOST_X86_UNITS)
    case FlashIsa::amx:  // bf16 products add nothing to a reduction
    case FlashIsa::avx512bf16:
    case FlashIsa::avx512: return shm_kernels_avx512;
    case FlashIsa::avx2: return shm_kernels_avx2;
#endif
    default: return shm_kernels_scalar;
  }
}

}  // namespace hal::host
