// A CPU emulator of the CUDA/HIP execution model, enough to run the device
// code of backends/kernels as plain C++: include this header, then the .cu
// file. Blocks of a launch run one after another on the calling thread; the
// threads of a block run as fibers (ucontext) that switch at __syncthreads,
// so shared memory is ordinary storage: `__shared__` variables become
// function-local statics and dynamic shared memory is one buffer per launch.
//
// Checked while running: every __syncthreads is reached by all threads of
// the block, at the same call site (a divergent barrier is an error, as it is
// undefined on both vendors). Not emulated: warp-synchronous behaviour
// (shuffles, votes, tensor-core instructions) and data races between threads
// of a block, since fibers only switch at barriers.
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

const dim3& thread_index();
const dim3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
void sync_threads();
void* dynamic_shared();

// Runs `kernel` for every thread of every block of the grid. Returns an
// empty string on success, else what went wrong (a divergent barrier, a
// block too large); the launch stops at the first error.
std::string launch(const std::function<void()>& kernel, dim3 grid, dim3 block, std::size_t shared_bytes);

}  // namespace hal_simt

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
#define __syncthreads() ::hal_simt::sync_threads()
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
