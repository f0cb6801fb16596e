// A CPU emulator of the CUDA/HIP execution model, enough to run the device
// code of backends/gpu/kernels as plain C++: include this header, then the .cu
// file. Blocks of a launch run one after another on the calling thread; the
// threads of a block run as fibers (ucontext) that switch at __syncthreads,
// so shared memory is ordinary storage: `__shared__` variables become
// function-local statics and dynamic shared memory is one buffer per launch.
//
// Warps are 32 threads (NVIDIA's width). Warp collectives switch fibers too:
// __shfl_xor_sync and mma_m16n8k16, an emulation of the tensor-core
// instruction mma.sync.m16n8k16 (f16/bf16 in, f32 accumulate) with the PTX
// fragment layout, so kernels written against that layout run here.
//
// Checked while running: every __syncthreads is reached by all threads of
// the block and every warp collective by all lanes of the warp, each at one
// call site (divergence is an error, as it is undefined on the hardware).
// Not emulated: data races between threads of a block (fibers only switch
// at barriers and collectives) and the tensor cores' own rounding.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace hal_simt {

// Where a barrier or warp collective is in the source. Its identity for the
// divergence check: a return address is not one, since the optimizer may
// duplicate a call (jump threading, loop unswitching) into several.
struct SourceSite {
  const char* file;
  int line;
};

const dim3& thread_index();
const dim3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
void sync_threads(SourceSite site);
void* dynamic_shared();

constexpr int kWarpSize = 32;

// Lane `lane ^ lane_mask`'s value, for every lane of the warp.
float shuffle_xor(float value, int lane_mask, SourceSite site);

// D = A * B + C for one warp with mma.sync.aligned.m16n8k16.row.col's
// fragments: a holds 2 16-bit elements per register, b likewise, c/d f32;
// element_to_float decodes the 16-bit type (f16 or bf16).
void mma_m16n8k16(float c[4], const std::uint32_t a[4], const std::uint32_t b[2],
                  float (*element_to_float)(std::uint32_t),
                  SourceSite site = {__builtin_FILE(), __builtin_LINE()});

// Runs `kernel` for every thread of every block of the grid. Returns an
// empty string on success, else what went wrong (a divergent barrier, a
// block too large); the launch stops at the first error.
std::string launch(const std::function<void()>& kernel, dim3 grid, dim3 block, std::size_t shared_bytes);

}  // namespace hal_simt

#define HAL_SIMT_EMULATOR 1
#define warpSize (::hal_simt::kWarpSize)
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (::hal_simt::thread_index())
#define blockIdx (::hal_simt::block_index())
#define blockDim (::hal_simt::block_dim())
#define gridDim (::hal_simt::grid_dim())
#define __syncthreads() ::hal_simt::sync_threads(::hal_simt::SourceSite{__FILE__, __LINE__})
#define HAL_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::hal_simt::dynamic_shared())

inline float __int_as_float(int bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline int __float_as_int(float value) {
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Fibers switch only at barriers, so a plain add is atomic among them.
inline float atomicAdd(float* address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  const unsigned long long old = *address;
  *address = old + value;
  return old;
}

inline float __shfl_xor_sync(unsigned mask, float value, int lane_mask, int width = 32,
                             ::hal_simt::SourceSite site = {__builtin_FILE(), __builtin_LINE()}) {
  if (mask != 0xffffffffu || width != 32) __builtin_trap();  // only full-warp shuffles are emulated
  return ::hal_simt::shuffle_xor(value, lane_mask, site);
}
