// The flash attention kernels of backends/gpu/kernels/flash_attention.cu, run on
// the CPU by the SIMT emulator (simt.hpp) through the launches their host
// plan returns, against the f64 reference of flash_attention_cases.hpp. The
// tensor-core forward runs through the emulator's mma.sync (same fragment
// layout); the PTX instructions themselves are checked only on a GPU
// (tests/gpu/flash_attention_gpu_check.cu, run by scripts/gpu-check.sh).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "emulated_kernels.hpp"
#include "flash_attention_cases.hpp"
#include "flash_attention_config.h"

namespace {

// Device limits the plans are made for: NVIDIA's default dynamic shared
// memory with 32-wide warps; AMD's LDS with 64-wide wavefronts.
constexpr std::uint32_t kCudaSharedBytes = 48 * 1024;
constexpr std::uint32_t kAmdSharedBytes = 64 * 1024;

// Runs every launch of the plan in the emulator (host addresses are device
// addresses here).
std::string run_in_emulator(const hal_attention_kernel_args& args, const std::vector<flash_cases::Buffer>&,
                            bool backward, std::uint32_t paths, std::string* first_kernel) {
  hal_kernel_plan plan{};
  hal_flash_attention_plan(&args, backward ? 1 : 0, kCudaSharedBytes, 32, paths, &plan);
  if (plan.launch_count == 0) return std::string("no plan: ") + plan.why_not;
  *first_kernel = plan.launches[0].kernel;
  std::vector<float> workspace(plan.workspace_bytes / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
  hal_attention_kernel_args launched = args;
  if (plan.workspace_bytes != 0) launched.workspace = reinterpret_cast<std::uint64_t>(workspace.data());
  for (std::uint32_t i = 0; i < plan.launch_count; ++i) {
    const hal_kernel_launch& step = plan.launches[i];
    void* parameters[] = {&launched};
    const std::string error = hal_simt::run_kernel(
        step.kernel, parameters,
        {{step.grid[0], step.grid[1], step.grid[2]}, {step.block[0], step.block[1], step.block[2]}, step.shared_bytes});
    if (!error.empty()) return std::string(step.kernel) + ": " + error;
  }
  return "";
}

}  // namespace

TEST_CASE("flash attention kernels match an f64 reference in the SIMT emulator") {
  for (const flash_cases::Shape& shape : flash_cases::shapes()) {
    // f16/bf16 also run the tensor-core forward, through the emulator's mma.sync.
    for (std::uint32_t paths : {0u, static_cast<std::uint32_t>(HAL_FLASH_PATH_TENSOR_CORES)}) {
      if (paths != 0 && shape.dtype == HAL_KERNEL_F32) continue;
      const flash_cases::Result result = flash_cases::run_case(shape, paths, run_in_emulator);
      const std::string summary = result.summary(shape);
      CAPTURE(summary);
      REQUIRE(result.error.empty());
      CHECK((result.forward_kernel.find("_mma_") != std::string::npos) == (paths != 0));
      CHECK(result.masked_rows_wrong == 0);
      CHECK(result.passed());
      MESSAGE(summary);
    }
  }
  // The shapes cover fully masked rows.
  int masked = 0;
  for (const flash_cases::Shape& shape : flash_cases::shapes()) {
    if (shape.bottom_right && shape.causal && shape.seq_q > shape.seq_kv) ++masked;
  }
  CHECK(masked >= 1);
}

TEST_CASE("flash attention plan: launches, workspace and limits") {
  hal_attention_kernel_args args{};
  const std::uint64_t fake_address = 256;  // the plan never dereferences
  args.q.address = args.k.address = args.v.address = args.o.address = fake_address;
  args.grad_o.address = args.grad_q.address = args.grad_k.address = args.grad_v.address = fake_address;
  args.lse = fake_address;
  args.dtype = HAL_KERNEL_BF16;
  args.batch = 2;
  args.heads_q = 8;
  args.heads_kv = 2;
  args.seq_q = 100;
  args.seq_kv = 70;
  args.head_dim_qk = 128;
  args.head_dim_v = 64;
  args.window_left = args.window_right = -1;
  args.scale = 0.125f;
  hal_kernel_plan plan{};

  hal_flash_attention_plan(&args, 0, kCudaSharedBytes, 32, 0, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  CHECK(plan.launches[0].grid[0] == 4);  // ceil(100 / 32)
  CHECK(plan.launches[0].grid[1] == 8);
  CHECK(plan.launches[0].grid[2] == 2);
  CHECK(plan.launches[0].block[0] == HAL_FLASH_THREADS);
  CHECK(plan.launches[0].shared_bytes == HAL_FLASH_FORWARD_SHARED_BYTES(128));
  CHECK(plan.workspace_bytes == 0);

  // An image with tensor-core kernels (CUDA, sm_80+): f16/bf16 forward on them.
  hal_flash_attention_plan(&args, 0, kCudaSharedBytes, 32, HAL_FLASH_PATH_TENSOR_CORES, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_mma_bf16_d128");
  CHECK(plan.launches[0].grid[0] == 2);  // ceil(100 / 64)
  CHECK(plan.launches[0].shared_bytes == HAL_FLASH_MMA_SHARED_BYTES(128));
  // An image without them (HIP): the scalar kernels, whatever the wavefront width.
  hal_flash_attention_plan(&args, 0, kAmdSharedBytes, 64, 0, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  hal_flash_attention_plan(&args, 0, kAmdSharedBytes, 32, 0, &plan);  // RDNA: 32-wide
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  args.dtype = HAL_KERNEL_F32;  // f32 has no tensor-core kernel
  hal_flash_attention_plan(&args, 0, kCudaSharedBytes, 32, HAL_FLASH_PATH_TENSOR_CORES, &plan);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  args.dtype = HAL_KERNEL_BF16;

  hal_flash_attention_plan(&args, 1, kAmdSharedBytes, 64, 0, &plan);
  REQUIRE(plan.launch_count == 3);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_backward_preprocess");
  CHECK(std::string(plan.launches[1].kernel) == "hal_flash_attention_backward_d128");
  CHECK(plan.launches[1].grid[0] == 5);  // ceil(70 / 16)
  CHECK(plan.launches[1].grid[1] == 2);  // one block per kv head
  CHECK(std::string(plan.launches[2].kernel) == "hal_flash_attention_backward_convert_dq");
  const std::uint64_t rows = 2 * 8 * 100;
  CHECK(plan.workspace_bytes == (rows * 4 + 255) / 256 * 256 + rows * 128 * 4);

  SUBCASE("unsupported inputs say why") {
    auto why_not = [&](hal_attention_kernel_args bad, int backward, std::uint32_t shared) {
      hal_flash_attention_plan(&bad, backward, shared, 32, HAL_FLASH_PATH_TENSOR_CORES, &plan);
      CHECK(plan.launch_count == 0);
      return std::string(plan.why_not);
    };
    hal_attention_kernel_args bad = args;
    bad.head_dim_qk = 257;
    CHECK(why_not(bad, 0, kCudaSharedBytes).find("head_dim_qk 257") != std::string::npos);
    bad = args;
    bad.dtype = 4;
    CHECK(why_not(bad, 0, kCudaSharedBytes).find("dtype 4") != std::string::npos);
    bad = args;
    bad.heads_kv = 3;
    CHECK(why_not(bad, 0, kCudaSharedBytes).find("heads_kv 3 does not divide heads_q 8") != std::string::npos);
    CHECK(why_not(args, 1, 16 * 1024).find("device allows 16384") != std::string::npos);
    bad = args;
    bad.lse = 0;
    CHECK(why_not(bad, 1, kCudaSharedBytes).find("lse") != std::string::npos);
    bad = args;
    bad.window_left = -2;
    CHECK(why_not(bad, 0, kCudaSharedBytes).find("window_left -2") != std::string::npos);
  }

  SUBCASE("every kernel fits the default shared memory of both vendors") {
    for (int bound : {64, 128, 256}) {
      CHECK(HAL_FLASH_FORWARD_SHARED_BYTES(bound) <= kCudaSharedBytes);
      CHECK(HAL_FLASH_BACKWARD_SHARED_BYTES(bound) <= kCudaSharedBytes);
      CHECK(HAL_FLASH_MMA_SHARED_BYTES(bound) <= kCudaSharedBytes);
    }
  }
}
