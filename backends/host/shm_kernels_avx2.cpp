// ShmKernels for AVX2 (with F16C); entered only after a CPU check.
#include "shm_kernels_impl.hpp"

namespace hal::host {
namespace {
struct Avx2 {};
}  // namespace
const ShmKernels shm_kernels_avx2 = ShmLoops<Avx2>::table("avx2");
}  // namespace hal::host
