// hal_flash_attention_plan: which kernels of flash_attention.cu run a problem,
// with what grid, block and shared memory, and how much workspace backward
// needs; or, when they cannot, why not. Host code only: the launcher
// (backends/gpu) links it whether or not a kernel compiler was found.
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "attention_kernels.h"
#include "flash_attention_config.h"

// The launcher copies these bytes as the kernels' by-value argument: the
// layout is pinned on both sides.
static_assert(sizeof(hal_attention_kernel_args) == 336, "hal_attention_kernel_args layout changed");
static_assert(offsetof(hal_attention_kernel_args, lse) == 256, "hal_attention_kernel_args layout changed");
static_assert(offsetof(hal_attention_kernel_args, scale) == 320, "hal_attention_kernel_args layout changed");

namespace {

constexpr int kHeadDimBounds[] = {64, 128, 256};
constexpr unsigned kMaxGridYZ = 65535;  // grid.y and grid.z limit on both vendors

void fail(hal_kernel_plan* plan, const char* format, ...) __attribute__((format(printf, 2, 3)));

void fail(hal_kernel_plan* plan, const char* format, ...) {
  std::memset(plan, 0, sizeof(*plan));
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(plan->why_not, sizeof(plan->why_not), format, arguments);
  va_end(arguments);
}

unsigned blocks_for(int rows, int rows_per_block) {
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}

void add_launch(hal_kernel_plan* plan, const char* kernel, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                unsigned shared_bytes) {
  hal_kernel_launch& launch = plan->launches[plan->launch_count++];
  launch.kernel = kernel;
  launch.grid[0] = grid_x;
  launch.grid[1] = grid_y;
  launch.grid[2] = grid_z;
  launch.block[0] = HAL_FLASH_THREADS;
  launch.block[1] = 1;
  launch.block[2] = 1;
  launch.shared_bytes = shared_bytes;
}

const char* forward_kernel(int bound) {
  switch (bound) {
    case 64: return "hal_flash_attention_forward_d64";
    case 128: return "hal_flash_attention_forward_d128";
    default: return "hal_flash_attention_forward_d256";
  }
}

const char* tensor_core_forward_kernel(int32_t dtype, int bound) {
  const bool f16 = dtype == HAL_KERNEL_F16;
  switch (bound) {
    case 64: return f16 ? "hal_flash_attention_forward_mma_f16_d64" : "hal_flash_attention_forward_mma_bf16_d64";
    case 128: return f16 ? "hal_flash_attention_forward_mma_f16_d128" : "hal_flash_attention_forward_mma_bf16_d128";
    default: return f16 ? "hal_flash_attention_forward_mma_f16_d256" : "hal_flash_attention_forward_mma_bf16_d256";
  }
}

const char* backward_kernel(int bound) {
  switch (bound) {
    case 64: return "hal_flash_attention_backward_d64";
    case 128: return "hal_flash_attention_backward_d128";
    default: return "hal_flash_attention_backward_d256";
  }
}

bool tensor_missing(const hal_kernel_tensor& tensor) { return tensor.address == 0; }

// Checks shared by forward and backward; false (with why_not) on bad input.
bool check_arguments(const hal_attention_kernel_args& args, int32_t backward, uint32_t warp_size,
                     hal_kernel_plan* plan) {
  if (args.dtype != HAL_KERNEL_F32 && args.dtype != HAL_KERNEL_F16 && args.dtype != HAL_KERNEL_BF16) {
    fail(plan, "dtype %d is not supported by the flash kernels (allowed: f32=0, f16=1, bf16=2)", args.dtype);
    return false;
  }
  if (args.batch < 1 || args.heads_q < 1 || args.heads_kv < 1 || args.seq_q < 1 || args.seq_kv < 1) {
    fail(plan, "batch %d, heads_q %d, heads_kv %d, seq_q %d, seq_kv %d: each must be at least 1", args.batch,
         args.heads_q, args.heads_kv, args.seq_q, args.seq_kv);
    return false;
  }
  if (args.heads_q % args.heads_kv != 0) {
    fail(plan, "heads_kv %d does not divide heads_q %d", args.heads_kv, args.heads_q);
    return false;
  }
  if (args.head_dim_qk < 1 || args.head_dim_qk > HAL_FLASH_MAX_HEAD_DIM || args.head_dim_v < 1 ||
      args.head_dim_v > HAL_FLASH_MAX_HEAD_DIM) {
    fail(plan, "head_dim_qk %d, head_dim_v %d: the flash kernels handle head dims 1..%d", args.head_dim_qk,
         args.head_dim_v, HAL_FLASH_MAX_HEAD_DIM);
    return false;
  }
  if (args.window_left < -1 || args.window_right < -1) {
    fail(plan, "window_left %d, window_right %d: each must be -1 (unbounded) or at least 0", args.window_left,
         args.window_right);
    return false;
  }
  if (warp_size != 32 && warp_size != 64) {
    fail(plan, "warp size %u is not supported (allowed: 32, 64)", warp_size);
    return false;
  }
  if (static_cast<unsigned>(args.heads_q) > kMaxGridYZ || static_cast<unsigned>(args.batch) > kMaxGridYZ) {
    fail(plan, "heads_q %d or batch %d exceeds the grid limit %u", args.heads_q, args.batch, kMaxGridYZ);
    return false;
  }
  if (tensor_missing(args.q) || tensor_missing(args.k) || tensor_missing(args.v) || tensor_missing(args.o)) {
    fail(plan, "q, k, v and o need device addresses");
    return false;
  }
  if (backward && (tensor_missing(args.grad_o) || tensor_missing(args.grad_q) || tensor_missing(args.grad_k) ||
                   tensor_missing(args.grad_v) || args.lse == 0)) {
    fail(plan, "backward needs grad_o, grad_q, grad_k, grad_v and the forward's lse");
    return false;
  }
  return true;
}

}  // namespace

extern "C" void hal_flash_attention_plan(const hal_attention_kernel_args* args, int32_t backward,
                                         uint32_t max_shared_bytes, uint32_t warp_size, uint32_t paths,
                                         hal_kernel_plan* plan) {
  if (plan == nullptr) return;
  if (args == nullptr) {
    fail(plan, "no kernel arguments");
    return;
  }
  if (!check_arguments(*args, backward, warp_size, plan)) return;

  const int widest = args->head_dim_qk > args->head_dim_v ? args->head_dim_qk : args->head_dim_v;
  int bound = kHeadDimBounds[0];
  for (int candidate : kHeadDimBounds) {
    if (widest <= candidate) {
      bound = candidate;
      break;
    }
  }
  const bool tensor_cores =
      !backward && (paths & HAL_FLASH_PATH_TENSOR_CORES) != 0 && warp_size == 32 && args->dtype != HAL_KERNEL_F32;
  const unsigned shared_bytes = backward       ? HAL_FLASH_BACKWARD_SHARED_BYTES(bound)
                                : tensor_cores ? HAL_FLASH_MMA_SHARED_BYTES(bound)
                                               : HAL_FLASH_FORWARD_SHARED_BYTES(bound);
  if (shared_bytes > max_shared_bytes) {
    fail(plan, "the head-dim-%d %s kernel needs %u bytes of shared memory per block; the device allows %u", bound,
         backward ? "backward" : "forward", shared_bytes, max_shared_bytes);
    return;
  }

  std::memset(plan, 0, sizeof(*plan));
  const unsigned heads_q = static_cast<unsigned>(args->heads_q);
  const unsigned batch = static_cast<unsigned>(args->batch);
  if (tensor_cores) {
    add_launch(plan, tensor_core_forward_kernel(args->dtype, bound), blocks_for(args->seq_q, HAL_FLASH_MMA_QUERY_ROWS),
               heads_q, batch, shared_bytes);
    return;
  }
  if (!backward) {
    add_launch(plan, forward_kernel(bound), blocks_for(args->seq_q, HAL_FLASH_FORWARD_ROWS(bound)), heads_q, batch,
               shared_bytes);
    return;
  }
  const unsigned row_blocks = blocks_for(args->seq_q, HAL_FLASH_ROW_KERNEL_ROWS);
  add_launch(plan, "hal_flash_attention_backward_preprocess", row_blocks, heads_q, batch, 0);
  add_launch(plan, backward_kernel(bound), blocks_for(args->seq_kv, HAL_FLASH_BACKWARD_ROWS(bound)),
             static_cast<unsigned>(args->heads_kv), batch, shared_bytes);
  add_launch(plan, "hal_flash_attention_backward_convert_dq", row_blocks, heads_q, batch, 0);

  const uint64_t rows = static_cast<uint64_t>(args->batch) * heads_q * static_cast<uint64_t>(args->seq_q);
  const uint64_t delta_bytes =
      (rows * 4u + HAL_FLASH_WORKSPACE_ALIGNMENT - 1) / HAL_FLASH_WORKSPACE_ALIGNMENT * HAL_FLASH_WORKSPACE_ALIGNMENT;
  plan->workspace_bytes = delta_bytes + rows * static_cast<uint64_t>(args->head_dim_qk) * 4u;
}
