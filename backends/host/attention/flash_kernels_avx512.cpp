// Flash kernels for AVX-512 (F, BW, VL) + FMA; this unit is compiled with
// those -m flags and only called after the CPU reports them.
#include "attention/flash_kernels_impl.hpp"
#include "attention/flash_vec_avx512.hpp"

namespace hal::host::flash {

const KernelTable kernels_avx512 = make_kernel_table<VecAvx512>();

}  // namespace hal::host::flash
