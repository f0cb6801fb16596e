// The kernel table behind emulated_kernels.hpp: the device code is compiled
// here as C++ against simt.hpp, and each entry point gets a binder that
// copies cuLaunchKernel-style parameters into its own parameter types.
#include "emulated_kernels.hpp"

#include "simt.hpp"
// The device code, as nvcc sees it for the CUDA image (the HIP image is a subset).
#include "cuda_kernels.cu"

#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace hal_simt {
namespace {

std::mutex& emulator_mutex() {
  static std::mutex mutex;
  return mutex;
}

template <typename... Parameters, std::size_t... Index>
BoundLaunch bind_arguments(void (*kernel)(Parameters...), void* const* parameters, const KernelShape& shape,
                           std::index_sequence<Index...>) {
  std::tuple<std::decay_t<Parameters>...> arguments{*static_cast<const std::decay_t<Parameters>*>(parameters[Index])...};
  return [kernel, arguments, shape] {
    std::lock_guard lock(emulator_mutex());
    return launch([&] { std::apply(kernel, arguments); }, dim3(shape.grid[0], shape.grid[1], shape.grid[2]),
                  dim3(shape.block[0], shape.block[1], shape.block[2]), shape.shared_bytes);
  };
}

using Binder = BoundLaunch (*)(void* const*, const KernelShape&);

template <auto kernel>
BoundLaunch binder(void* const* parameters, const KernelShape& shape) {
  return [&]<typename... Parameters>(void (*function)(Parameters...)) {
    return bind_arguments(function, parameters, shape, std::index_sequence_for<Parameters...>{});
  }(kernel);
}

#define HAL_EMULATED_KERNEL(name) {#name, &binder<&name>}

// Every extern "C" entry point of backends/gpu/kernels.
const std::map<std::string, Binder, std::less<>>& kernels() {
  static const std::map<std::string, Binder, std::less<>> table = {
      HAL_EMULATED_KERNEL(hal_softmax_rows_f32),
      HAL_EMULATED_KERNEL(hal_gemm_f32),
      HAL_EMULATED_KERNEL(hal_gemm_f32_strided_batched),
      HAL_EMULATED_KERNEL(hal_math_attention_pack_inputs),
      HAL_EMULATED_KERNEL(hal_math_attention_softmax_forward),
      HAL_EMULATED_KERNEL(hal_math_attention_softmax_backward),
      HAL_EMULATED_KERNEL(hal_math_attention_store_outputs),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_d64),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_d128),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_d256),
      HAL_EMULATED_KERNEL(hal_flash_attention_backward_preprocess),
      HAL_EMULATED_KERNEL(hal_flash_attention_backward_d64),
      HAL_EMULATED_KERNEL(hal_flash_attention_backward_d128),
      HAL_EMULATED_KERNEL(hal_flash_attention_backward_d256),
      HAL_EMULATED_KERNEL(hal_flash_attention_backward_convert_dq),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_f16_d64),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_f16_d128),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_f16_d256),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_bf16_d64),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_bf16_d128),
      HAL_EMULATED_KERNEL(hal_flash_attention_forward_mma_bf16_d256),
      HAL_EMULATED_KERNEL(hal_memory_test_element),
  };
  return table;
}

}  // namespace

BoundLaunch bind_kernel(std::string_view name, void* const* parameters, const KernelShape& shape) {
  const auto found = kernels().find(name);
  return found == kernels().end() ? BoundLaunch() : found->second(parameters, shape);
}

std::string run_kernel(std::string_view name, void* const* parameters, const KernelShape& shape) {
  const BoundLaunch bound = bind_kernel(name, parameters, shape);
  return bound ? bound() : "no emulated kernel named " + std::string(name);
}

bool image_kernel_runs(std::optional<std::string_view> image, const char* name, const char* fake) {
  const std::string symbol = std::string(1, '\0') + name + std::string(1, '\0');
  if (image && image->find(symbol) == std::string_view::npos) return false;
  if (kernels().find(std::string_view(name)) != kernels().end()) return true;
  std::fprintf(stderr, "%s: the image has %s but the SIMT emulator does not (tests/simt/emulated_kernels.cpp)\n", fake,
               name);
  return false;
}

}  // namespace hal_simt
