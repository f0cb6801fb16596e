// The device kernels of backends/gpu/kernels on one CUDA device: loaded from the
// embedded fatbin and checked once, or off with the reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cuda_backend.hpp"

namespace hal::cuda {

// Empty when the plugin was built without nvcc.
std::span<const unsigned char> embedded_kernel_image();

// Why no device can have the kernels (no image, no module API), known
// without a context; empty when they are loaded on first use.
std::string kernels_missing(const Context& context);
// Loads the image on the device the first time it is asked (thread-safe),
// runs the softmax on a small input and compares it with the host; then
// whether that worked, with device.kernels_status saying why not.
bool kernels_usable(const Context& context, std::uint32_t device);
void unload_kernels(const Context& context, std::uint32_t device);
// The named kernel of the device's image (loaded if need be), resolved once; fails with
// the device's kernels_status when it has no usable image.
hal_status find_kernel(const Context& context, std::uint32_t device, const char* name, CUfunction* function);

}  // namespace hal::cuda
