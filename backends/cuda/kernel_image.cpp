// The fatbin nvcc built from backends/gpu/kernels, embedded in the plugin so it
// never goes looking for a file at run time.
#include "kernels.hpp"

#include <cstddef>
#include <span>

#ifdef HAL_CUDA_KERNEL_FATBIN
// The driver reads the fatbin in place and expects it 8-byte aligned.
__asm__(".pushsection .rodata.hal_cuda_kernel_image, \"a\"\n"
        ".balign 64\n"
        ".globl hal_cuda_kernel_image\n"
        ".hidden hal_cuda_kernel_image\n"
        "hal_cuda_kernel_image:\n"
        ".incbin \"" HAL_CUDA_KERNEL_FATBIN "\"\n"
        ".globl hal_cuda_kernel_image_end\n"
        ".hidden hal_cuda_kernel_image_end\n"
        "hal_cuda_kernel_image_end:\n"
        ".byte 0\n"
        ".popsection\n");
extern "C" const unsigned char hal_cuda_kernel_image[];
extern "C" const unsigned char hal_cuda_kernel_image_end[];
#endif

namespace hal::cuda {

std::span<const unsigned char> embedded_kernel_image() {
#ifdef HAL_CUDA_KERNEL_FATBIN
  return {hal_cuda_kernel_image, static_cast<std::size_t>(hal_cuda_kernel_image_end - hal_cuda_kernel_image)};
#else
  return {};
#endif
}

}  // namespace hal::cuda
