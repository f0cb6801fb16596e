// ShmKernels for AVX-512 (F, BW, VL, with F16C); entered only after a CPU check.
#include "shm_kernels_impl.hpp"

namespace hal::host {
namespace {
struct Avx512 {};
}  // namespace
const ShmKernels shm_kernels_avx512 = ShmLoops<Avx512>::table("avx512");
}  // namespace hal::host
