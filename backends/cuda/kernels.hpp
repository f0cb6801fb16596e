// The device kernels of backends/kernels on one CUDA device: loaded from the
// embedded fatbin and checked once, or off with the reason.
#pragma once

#include <span>
#include <string>

#include "cuda_backend.hpp"

namespace hal::cuda {

// Empty when the plugin was built without nvcc.
std::span<const unsigned char> embedded_kernel_image();

// Loads the image on the device, runs the softmax on a small input and
// compares it with the host; fills device.kernels_* either way.
void load_kernels(const Context& context, std::uint32_t device);
void unload_kernels(const Context& context, std::uint32_t device);
// The named kernel of the device's loaded image, resolved once; fails with
// the device's kernels_status when it has no usable image.
hal_status find_kernel(const Context& context, std::uint32_t device, const char* name, CUfunction* function);

}  // namespace hal::cuda
