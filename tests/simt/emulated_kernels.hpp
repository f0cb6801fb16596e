// hal's device kernels (every file of backends/gpu/kernels that cuda_kernels.cu
// includes) compiled for the SIMT emulator and found by their extern "C"
// names: what the fake CUDA driver runs for cuLaunchKernel, the fake HIP
// runtime for hipModuleLaunchKernel, and the emulator tests launch. This
// header leaves out simt.hpp, so a fake can include it beside vendor headers
// that have their own dim3.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace hal_simt {

struct KernelShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  std::size_t shared_bytes = 0;  // dynamic shared memory
};

// A launch whose arguments were copied when it was made; calling it runs
// every block and returns "" or what went wrong (a divergent barrier, a
// block too large). Launches run one at a time in the process, since the
// emulator's state and the kernels' __shared__ variables are global.
using BoundLaunch = std::function<std::string()>;

// Copies the named kernel's arguments now, as cuLaunchKernel does, from
// `parameters` (one pointer per kernel parameter, each to a value of the
// parameter's type). An empty function when no kernel has the name.
BoundLaunch bind_kernel(std::string_view name, void* const* parameters, const KernelShape& shape);

// Binds and runs at once.
std::string run_kernel(std::string_view name, void* const* parameters, const KernelShape& shape);

// Whether a loaded image (an ELF code object: a cubin, or a HIP bundle's
// entry) holds `name` as a NUL-terminated symbol and the emulator can run
// it; nullopt for an image whose names cannot be read (compressed PTX), then
// only the emulator is asked. A name the image has but the emulator lacks is
// said on stderr, under `fake` (the calling fake's name), so a kernel
// missing from the table shows.
bool image_kernel_runs(std::optional<std::string_view> image, const char* name, const char* fake);

}  // namespace hal_simt
