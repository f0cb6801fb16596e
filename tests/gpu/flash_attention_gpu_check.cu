// The flash attention kernels on a real NVIDIA GPU, with the cases and f64
// reference the CPU emulator test uses (tests/simt/flash_attention_cases.hpp):
// the one place the inline PTX (mma.sync, cvt.rn.*x2) is exercised. Built and
// run by scripts/gpu-check.sh with nvcc alone:
//   nvcc -O2 -std=c++17 -arch=native -Ibackends/gpu/kernels -Ibackends/host -Itests/simt \
//        tests/gpu/flash_attention_gpu_check.cu backends/gpu/kernels/attention_plan.cpp -o flash_check
// Prints one line per case; exits 1 when any case fails.
#include <cuda_runtime.h>

#include "flash_attention.cu"

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "flash_attention_cases.hpp"

namespace {

const std::map<std::string, const void*>& kernels() {
  static const std::map<std::string, const void*> table = {
      {"hal_flash_attention_forward_d64", reinterpret_cast<const void*>(hal_flash_attention_forward_d64)},
      {"hal_flash_attention_forward_d128", reinterpret_cast<const void*>(hal_flash_attention_forward_d128)},
      {"hal_flash_attention_forward_d256", reinterpret_cast<const void*>(hal_flash_attention_forward_d256)},
      {"hal_flash_attention_backward_preprocess", reinterpret_cast<const void*>(hal_flash_attention_backward_preprocess)},
      {"hal_flash_attention_backward_d64", reinterpret_cast<const void*>(hal_flash_attention_backward_d64)},
      {"hal_flash_attention_backward_d128", reinterpret_cast<const void*>(hal_flash_attention_backward_d128)},
      {"hal_flash_attention_backward_d256", reinterpret_cast<const void*>(hal_flash_attention_backward_d256)},
      {"hal_flash_attention_backward_convert_dq", reinterpret_cast<const void*>(hal_flash_attention_backward_convert_dq)},
      {"hal_flash_attention_forward_mma_f16_d64", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_f16_d64)},
      {"hal_flash_attention_forward_mma_f16_d128", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_f16_d128)},
      {"hal_flash_attention_forward_mma_f16_d256", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_f16_d256)},
      {"hal_flash_attention_forward_mma_bf16_d64", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_bf16_d64)},
      {"hal_flash_attention_forward_mma_bf16_d128", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_bf16_d128)},
      {"hal_flash_attention_forward_mma_bf16_d256", reinterpret_cast<const void*>(hal_flash_attention_forward_mma_bf16_d256)},
  };
  return table;
}

std::string cuda_error(const char* what, cudaError_t status) {
  return std::string(what) + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

// Device copies of the case's buffers; the kernels get their addresses.
std::string run_on_gpu(const hal_attention_kernel_args& args, const std::vector<flash_cases::Buffer>& buffers,
                       bool backward, std::uint32_t paths, std::string* first_kernel) {
  int device = 0, shared_limit = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlock, device);
  hal_kernel_plan plan{};
  hal_flash_attention_plan(&args, backward ? 1 : 0, static_cast<std::uint32_t>(shared_limit), 32, paths, &plan);
  if (plan.launch_count == 0) return std::string("no plan: ") + plan.why_not;
  *first_kernel = plan.launches[0].kernel;

  std::vector<void*> device_buffers(buffers.size(), nullptr);
  std::string error;
  auto release = [&] {
    for (void* pointer : device_buffers) cudaFree(pointer);
  };
  for (std::size_t i = 0; i < buffers.size() && error.empty(); ++i) {
    cudaError_t status = cudaMalloc(&device_buffers[i], buffers[i].bytes);
    if (status == cudaSuccess) {
      status = cudaMemcpy(device_buffers[i], buffers[i].host, buffers[i].bytes, cudaMemcpyHostToDevice);
    }
    if (status != cudaSuccess) error = cuda_error("cudaMalloc/cudaMemcpy", status);
  }
  auto to_device = [&](std::uint64_t host_address) -> std::uint64_t {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (reinterpret_cast<std::uint64_t>(buffers[i].host) == host_address) {
        return reinterpret_cast<std::uint64_t>(device_buffers[i]);
      }
    }
    return 0;
  };
  hal_attention_kernel_args launched = args;
  for (hal_kernel_tensor* tensor : {&launched.q, &launched.k, &launched.v, &launched.o, &launched.grad_o,
                                    &launched.grad_q, &launched.grad_k, &launched.grad_v}) {
    tensor->address = to_device(tensor->address);
  }
  launched.lse = to_device(launched.lse);
  launched.key_ranges = to_device(launched.key_ranges);
  void* workspace = nullptr;
  if (error.empty() && plan.workspace_bytes != 0) {
    const cudaError_t status = cudaMalloc(&workspace, plan.workspace_bytes);
    if (status != cudaSuccess) error = cuda_error("cudaMalloc workspace", status);
    launched.workspace = reinterpret_cast<std::uint64_t>(workspace);
  }
  for (std::uint32_t i = 0; i < plan.launch_count && error.empty(); ++i) {
    const hal_kernel_launch& step = plan.launches[i];
    const auto kernel = kernels().find(step.kernel);
    if (kernel == kernels().end()) {
      error = std::string("no kernel ") + step.kernel;
      break;
    }
    void* arguments[] = {&launched};
    cudaError_t status = cudaLaunchKernel(kernel->second, dim3(step.grid[0], step.grid[1], step.grid[2]),
                                          dim3(step.block[0], step.block[1], step.block[2]), arguments,
                                          step.shared_bytes, nullptr);
    if (status == cudaSuccess) status = cudaDeviceSynchronize();
    if (status != cudaSuccess) error = cuda_error(step.kernel, status);
  }
  for (std::size_t i = 0; i < buffers.size() && error.empty(); ++i) {
    const cudaError_t status = cudaMemcpy(buffers[i].host, device_buffers[i], buffers[i].bytes, cudaMemcpyDeviceToHost);
    if (status != cudaSuccess) error = cuda_error("cudaMemcpy back", status);
  }
  cudaFree(workspace);
  release();
  return error;
}

}  // namespace

int main() {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess) {
    std::printf("no CUDA device\n");
    return 2;
  }
  std::printf("device: %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
  int failures = 0, cases = 0;
  for (const flash_cases::Shape& shape : flash_cases::shapes()) {
    for (std::uint32_t paths : {0u, static_cast<std::uint32_t>(HAL_FLASH_PATH_TENSOR_CORES)}) {
      if (paths != 0 && shape.dtype == HAL_KERNEL_F32) continue;
      const flash_cases::Result result = flash_cases::run_case(shape, paths, run_on_gpu);
      const bool passed = result.passed();
      ++cases;
      failures += passed ? 0 : 1;
      std::printf("%s %s\n", passed ? "PASS" : "FAIL", result.summary(shape).c_str());
    }
  }
  std::printf("%d of %d cases passed\n", cases - failures, cases);
  return failures == 0 ? 0 : 1;
}
