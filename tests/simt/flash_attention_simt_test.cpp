// The flash attention kernels of backends/kernels/flash_attention.cu, run on
// the CPU by the SIMT emulator (simt.hpp) through the launches their host
// plan returns, against an f64 reference computed here from the same
// (dtype-rounded) inputs. This covers the scalar path, which is the path
// every architecture runs today; tensor-core/matrix-core code, when added,
// is checked only on real GPUs (scripts/gpu-check.sh).
#include <doctest/doctest.h>

#include "simt.hpp"
// The device code, compiled as C++ against the emulator.
#include "flash_attention.cu"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "flash_attention_config.h"

namespace {

using Kernel = void (*)(hal_attention_kernel_args);

const std::map<std::string, Kernel>& kernels() {
  static const std::map<std::string, Kernel> table = {
      {"hal_flash_attention_forward_d64", hal_flash_attention_forward_d64},
      {"hal_flash_attention_forward_d128", hal_flash_attention_forward_d128},
      {"hal_flash_attention_forward_d256", hal_flash_attention_forward_d256},
      {"hal_flash_attention_backward_preprocess", hal_flash_attention_backward_preprocess},
      {"hal_flash_attention_backward_d64", hal_flash_attention_backward_d64},
      {"hal_flash_attention_backward_d128", hal_flash_attention_backward_d128},
      {"hal_flash_attention_backward_d256", hal_flash_attention_backward_d256},
      {"hal_flash_attention_backward_convert_dq", hal_flash_attention_backward_convert_dq},
      {"hal_flash_attention_forward_mma_f16_d64", hal_flash_attention_forward_mma_f16_d64},
      {"hal_flash_attention_forward_mma_f16_d128", hal_flash_attention_forward_mma_f16_d128},
      {"hal_flash_attention_forward_mma_f16_d256", hal_flash_attention_forward_mma_f16_d256},
      {"hal_flash_attention_forward_mma_bf16_d64", hal_flash_attention_forward_mma_bf16_d64},
      {"hal_flash_attention_forward_mma_bf16_d128", hal_flash_attention_forward_mma_bf16_d128},
      {"hal_flash_attention_forward_mma_bf16_d256", hal_flash_attention_forward_mma_bf16_d256},
  };
  return table;
}

// Device limits the plans are made for: NVIDIA's default dynamic shared
// memory with 32-wide warps; AMD's LDS with 64-wide wavefronts.
constexpr std::uint32_t kCudaSharedBytes = 48 * 1024;
constexpr std::uint32_t kAmdSharedBytes = 64 * 1024;

// Runs every launch of the plan in the emulator; the plan must succeed.
// Returns the first kernel's name.
std::string run_plan(const hal_attention_kernel_args& args, bool backward, std::uint32_t paths,
                     std::vector<float>* workspace) {
  hal_kernel_plan plan{};
  hal_flash_attention_plan_paths(&args, backward ? 1 : 0, kCudaSharedBytes, 32, paths, &plan);
  REQUIRE_MESSAGE(plan.launch_count > 0, plan.why_not);
  hal_attention_kernel_args launched = args;
  workspace->assign(plan.workspace_bytes / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
  if (plan.workspace_bytes != 0) launched.workspace = reinterpret_cast<std::uint64_t>(workspace->data());
  for (std::uint32_t i = 0; i < plan.launch_count; ++i) {
    const hal_kernel_launch& step = plan.launches[i];
    const auto kernel = kernels().find(step.kernel);
    REQUIRE_MESSAGE(kernel != kernels().end(), step.kernel);
    const std::string error = hal_simt::launch([&] { kernel->second(launched); },
                                               dim3(step.grid[0], step.grid[1], step.grid[2]),
                                               dim3(step.block[0], step.block[1], step.block[2]), step.shared_bytes);
    REQUIRE_MESSAGE(error.empty(), step.kernel << ": " << error);
  }
  return plan.launches[0].kernel;
}

// ---- tensors in a dtype, with their float values --------------------------

// A [batch, heads, seq, dim] tensor stored in `dtype`; `seq_major` lays it
// out as [batch, seq, heads, dim] to exercise the strides.
struct Tensor {
  int dtype, batch, heads, seq, dim;
  bool seq_major;
  std::vector<std::uint16_t> half_data;
  std::vector<float> float_data;

  Tensor(int dtype_, int batch_, int heads_, int seq_, int dim_, bool seq_major_)
      : dtype(dtype_), batch(batch_), heads(heads_), seq(seq_), dim(dim_), seq_major(seq_major_) {
    const std::size_t count = static_cast<std::size_t>(batch) * heads * seq * dim;
    if (dtype == HAL_KERNEL_F32) {
      float_data.assign(count, std::numeric_limits<float>::quiet_NaN());
    } else {
      half_data.assign(count, 0x7e00);
    }
  }
  hal_kernel_tensor view() {
    hal_kernel_tensor tensor{};
    tensor.address = dtype == HAL_KERNEL_F32 ? reinterpret_cast<std::uint64_t>(float_data.data())
                                             : reinterpret_cast<std::uint64_t>(half_data.data());
    tensor.batch_stride = static_cast<std::int64_t>(heads) * seq * dim;
    tensor.head_stride = seq_major ? dim : static_cast<std::int64_t>(seq) * dim;
    tensor.seq_stride = seq_major ? static_cast<std::int64_t>(heads) * dim : dim;
    return tensor;
  }
  std::int64_t index(int b, int h, int s, int d) {
    const hal_kernel_tensor t = view();
    return b * t.batch_stride + h * t.head_stride + s * t.seq_stride + d;
  }
  double get(int b, int h, int s, int d) {
    const std::int64_t i = index(b, h, s, d);
    if (dtype == HAL_KERNEL_F32) return float_data[i];
    return dtype == HAL_KERNEL_F16 ? hal_flash::f16_bits_to_float(half_data[i]) : hal_flash::bf16_bits_to_float(half_data[i]);
  }
  void set(int b, int h, int s, int d, float value) {
    const std::int64_t i = index(b, h, s, d);
    if (dtype == HAL_KERNEL_F32) {
      float_data[i] = value;
    } else {
      half_data[i] = dtype == HAL_KERNEL_F16 ? hal_flash::float_to_f16_bits(value) : hal_flash::float_to_bf16_bits(value);
    }
  }
  void fill_random(std::mt19937& random, float amplitude) {
    std::uniform_real_distribution<float> uniform(-amplitude, amplitude);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int s = 0; s < seq; ++s)
          for (int d = 0; d < dim; ++d) set(b, h, s, d, uniform(random));
  }
};

struct Shape {
  const char* name;
  int dtype, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  bool causal;
  int window_left, window_right;
  bool bottom_right;
};

bool visible(const Shape& shape, int query, int key) {
  const int offset = shape.bottom_right ? shape.seq_kv - shape.seq_q : 0;
  const int distance = key - (query + offset);
  if (shape.causal && distance > 0) return false;
  if (shape.window_left >= 0 && distance < -shape.window_left) return false;
  if (shape.window_right >= 0 && distance > shape.window_right) return false;
  return true;
}

// Largest |got - want| over the largest |want|, at least 0.1 (the inputs
// are O(1)), so that an all-zero reference (dQ and dK where every row sees
// one key) is not judged by f32 rounding noise alone.
struct Mismatch {
  double worst_abs = 0.0, scale = 0.1;
  void add(double got, double want) {
    worst_abs = std::max(worst_abs, std::isnan(got) ? INFINITY : std::fabs(got - want));
    scale = std::max(scale, std::fabs(want));
  }
  double relative() const { return worst_abs / scale; }
};

double tolerance(int dtype) {
  switch (dtype) {
    case HAL_KERNEL_F16: return 2e-3;
    case HAL_KERNEL_BF16: return 1.6e-2;
    default: return 2e-5;
  }
}

// Forward with the given optional paths (0: scalar), backward (scalar), both
// checked against the reference.
void check_shape(const Shape& shape, std::uint32_t paths) {
  const std::string name = std::string(shape.name) + (paths != 0 ? " [tensor cores]" : "");
  CAPTURE(name);
  std::mt19937 random(1234);
  const int dtype = shape.dtype;
  Tensor q(dtype, shape.batch, shape.heads_q, shape.seq_q, shape.head_dim_qk, true);
  Tensor k(dtype, shape.batch, shape.heads_kv, shape.seq_kv, shape.head_dim_qk, true);
  Tensor v(dtype, shape.batch, shape.heads_kv, shape.seq_kv, shape.head_dim_v, false);
  Tensor o(dtype, shape.batch, shape.heads_q, shape.seq_q, shape.head_dim_v, false);
  Tensor grad_o(dtype, shape.batch, shape.heads_q, shape.seq_q, shape.head_dim_v, true);
  Tensor grad_q(dtype, shape.batch, shape.heads_q, shape.seq_q, shape.head_dim_qk, false);
  Tensor grad_k(dtype, shape.batch, shape.heads_kv, shape.seq_kv, shape.head_dim_qk, true);
  Tensor grad_v(dtype, shape.batch, shape.heads_kv, shape.seq_kv, shape.head_dim_v, false);
  q.fill_random(random, 2.0f);
  k.fill_random(random, 2.0f);
  v.fill_random(random, 1.0f);
  grad_o.fill_random(random, 1.0f);
  std::vector<float> lse(static_cast<std::size_t>(shape.batch) * shape.heads_q * shape.seq_q,
                         std::numeric_limits<float>::quiet_NaN());

  hal_attention_kernel_args args{};
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.o = o.view();
  args.grad_o = grad_o.view();
  args.grad_q = grad_q.view();
  args.grad_k = grad_k.view();
  args.grad_v = grad_v.view();
  args.lse = reinterpret_cast<std::uint64_t>(lse.data());
  args.dtype = dtype;
  args.batch = shape.batch;
  args.heads_q = shape.heads_q;
  args.heads_kv = shape.heads_kv;
  args.seq_q = shape.seq_q;
  args.seq_kv = shape.seq_kv;
  args.head_dim_qk = shape.head_dim_qk;
  args.head_dim_v = shape.head_dim_v;
  args.causal = shape.causal ? 1 : 0;
  args.window_left = shape.window_left;
  args.window_right = shape.window_right;
  args.mask_offset = shape.bottom_right ? shape.seq_kv - shape.seq_q : 0;
  args.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim_qk));

  std::vector<float> workspace;
  const std::string forward_kernel = run_plan(args, false, paths, &workspace);
  CHECK((forward_kernel.find("_mma_") != std::string::npos) == (paths != 0 && dtype != HAL_KERNEL_F32));
  run_plan(args, true, paths, &workspace);

  Mismatch o_error, lse_error, dq_error, dk_error, dv_error;
  int masked_rows = 0;
  const int group = shape.heads_q / shape.heads_kv;
  std::vector<double> dk(static_cast<std::size_t>(shape.batch) * shape.heads_kv * shape.seq_kv * shape.head_dim_qk);
  std::vector<double> dv(static_cast<std::size_t>(shape.batch) * shape.heads_kv * shape.seq_kv * shape.head_dim_v);
  auto kv_index = [&](int b, int h, int j, int d, int dim) {
    return ((static_cast<std::size_t>(b) * shape.heads_kv + h) * shape.seq_kv + j) * dim + d;
  };
  for (int b = 0; b < shape.batch; ++b) {
    for (int h = 0; h < shape.heads_q; ++h) {
      const int hk = h / group;
      for (int i = 0; i < shape.seq_q; ++i) {
        std::vector<double> p(shape.seq_kv, 0.0);
        double max = -INFINITY;
        for (int j = 0; j < shape.seq_kv; ++j) {
          if (!visible(shape, i, j)) continue;
          double s = 0.0;
          for (int d = 0; d < shape.head_dim_qk; ++d) s += q.get(b, h, i, d) * k.get(b, hk, j, d);
          p[j] = s * args.scale;
          max = std::max(max, p[j]);
        }
        const float got_lse = lse[(static_cast<std::size_t>(b) * shape.heads_q + h) * shape.seq_q + i];
        if (max == -INFINITY) {  // no visible key: O = 0, LSE = -inf, no gradient
          ++masked_rows;
          CHECK(got_lse == -INFINITY);
          for (int d = 0; d < shape.head_dim_v; ++d) o_error.add(o.get(b, h, i, d), 0.0);
          for (int d = 0; d < shape.head_dim_qk; ++d) dq_error.add(grad_q.get(b, h, i, d), 0.0);
          continue;
        }
        double sum = 0.0;
        for (int j = 0; j < shape.seq_kv; ++j) {
          p[j] = visible(shape, i, j) ? std::exp(p[j] - max) : 0.0;
          sum += p[j];
        }
        lse_error.add(got_lse, max + std::log(sum));
        std::vector<double> dp(shape.seq_kv, 0.0);
        double delta = 0.0;
        for (int j = 0; j < shape.seq_kv; ++j) {
          p[j] /= sum;
          for (int d = 0; d < shape.head_dim_v; ++d) dp[j] += grad_o.get(b, h, i, d) * v.get(b, hk, j, d);
          delta += p[j] * dp[j];
        }
        for (int d = 0; d < shape.head_dim_v; ++d) {
          double out = 0.0;
          for (int j = 0; j < shape.seq_kv; ++j) out += p[j] * v.get(b, hk, j, d);
          o_error.add(o.get(b, h, i, d), out);
        }
        std::vector<double> dq(shape.head_dim_qk, 0.0);
        for (int j = 0; j < shape.seq_kv; ++j) {
          const double ds = p[j] * (dp[j] - delta) * args.scale;
          for (int d = 0; d < shape.head_dim_qk; ++d) {
            dq[d] += ds * k.get(b, hk, j, d);
            dk[kv_index(b, hk, j, d, shape.head_dim_qk)] += ds * q.get(b, h, i, d);
          }
          for (int d = 0; d < shape.head_dim_v; ++d) {
            dv[kv_index(b, hk, j, d, shape.head_dim_v)] += p[j] * grad_o.get(b, h, i, d);
          }
        }
        for (int d = 0; d < shape.head_dim_qk; ++d) dq_error.add(grad_q.get(b, h, i, d), dq[d]);
      }
    }
    for (int hk = 0; hk < shape.heads_kv; ++hk) {
      for (int j = 0; j < shape.seq_kv; ++j) {
        for (int d = 0; d < shape.head_dim_qk; ++d) {
          dk_error.add(grad_k.get(b, hk, j, d), dk[kv_index(b, hk, j, d, shape.head_dim_qk)]);
        }
        for (int d = 0; d < shape.head_dim_v; ++d) {
          dv_error.add(grad_v.get(b, hk, j, d), dv[kv_index(b, hk, j, d, shape.head_dim_v)]);
        }
      }
    }
  }
  const double limit = tolerance(dtype);
  CHECK(o_error.relative() <= limit);
  CHECK(lse_error.worst_abs <= 1e-4);  // f32 in every dtype, from exactly representable inputs
  CHECK(dq_error.relative() <= 2 * limit);
  CHECK(dk_error.relative() <= 2 * limit);
  CHECK(dv_error.relative() <= limit);
  MESSAGE(name << ": O " << o_error.relative() << ", LSE " << lse_error.worst_abs << ", dQ "
                     << dq_error.relative() << ", dK " << dk_error.relative() << ", dV " << dv_error.relative()
                     << ", fully masked rows " << masked_rows);
}

}  // namespace

TEST_CASE("flash attention kernels match an f64 reference in the SIMT emulator") {
  const int f32 = HAL_KERNEL_F32, f16 = HAL_KERNEL_F16, bf16 = HAL_KERNEL_BF16;
  // name, dtype, batch, heads q/kv, seq q/kv, head dims qk/v, causal, window left/right, bottom-right
  const Shape shapes[] = {
      {"MHA, no mask, f32, d64", f32, 1, 2, 2, 37, 45, 64, 64, false, -1, -1, false},
      {"GQA, causal top-left, f16, d128", f16, 2, 4, 2, 50, 50, 128, 128, true, -1, -1, false},
      {"MQA, causal bottom-right, bf16, d64", bf16, 1, 4, 1, 20, 45, 64, 64, true, -1, -1, true},
      {"causal bottom-right, seq_q > seq_kv (masked rows), f32", f32, 1, 2, 1, 40, 17, 64, 64, true, -1, -1, true},
      {"sliding window 7/3, f16", f16, 1, 2, 2, 70, 70, 64, 64, false, 7, 3, false},
      {"causal + window 9, bottom-right, bf16, d128", bf16, 1, 2, 1, 33, 65, 128, 128, true, 9, -1, true},
      {"diagonal only, rows past seq_kv masked, f32", f32, 1, 1, 1, 20, 10, 64, 64, false, 0, 0, false},
      {"odd head dims 40/72, f32", f32, 1, 3, 1, 19, 23, 40, 72, false, -1, -1, false},
      {"head dim 200, GQA, causal, bf16", bf16, 1, 2, 1, 21, 21, 200, 200, true, -1, -1, false},
      {"head dim 256, f16", f16, 1, 1, 1, 18, 33, 256, 256, false, -1, -1, false},
      {"head dim 256/96, f32", f32, 1, 2, 2, 9, 40, 256, 96, true, -1, -1, true},
  };
  for (const Shape& shape : shapes) {
    check_shape(shape, 0);
    // The tensor-core forward, through the emulator's mma.sync (PTX layout).
    if (shape.dtype != f32) check_shape(shape, HAL_FLASH_PATH_TENSOR_CORES);
  }
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

  hal_flash_attention_plan_paths(&args, 0, kCudaSharedBytes, 32, 0, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  CHECK(plan.launches[0].grid[0] == 4);  // ceil(100 / 32)
  CHECK(plan.launches[0].grid[1] == 8);
  CHECK(plan.launches[0].grid[2] == 2);
  CHECK(plan.launches[0].block[0] == HAL_FLASH_THREADS);
  CHECK(plan.launches[0].shared_bytes == HAL_FLASH_FORWARD_SHARED_BYTES(128));
  CHECK(plan.workspace_bytes == 0);

  // 32-wide warps (NVIDIA, sm_80+ image): f16/bf16 forward on tensor cores.
  hal_flash_attention_plan(&args, 0, kCudaSharedBytes, 32, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_mma_bf16_d128");
  CHECK(plan.launches[0].grid[0] == 2);  // ceil(100 / 64)
  CHECK(plan.launches[0].shared_bytes == HAL_FLASH_MMA_SHARED_BYTES(128));
  // 64-wide wavefronts (AMD): the scalar kernels only.
  hal_flash_attention_plan(&args, 0, kAmdSharedBytes, 64, &plan);
  REQUIRE(plan.launch_count == 1);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  args.dtype = HAL_KERNEL_F32;  // f32 has no tensor-core kernel
  hal_flash_attention_plan(&args, 0, kCudaSharedBytes, 32, &plan);
  CHECK(std::string(plan.launches[0].kernel) == "hal_flash_attention_forward_d128");
  args.dtype = HAL_KERNEL_BF16;

  hal_flash_attention_plan(&args, 1, kAmdSharedBytes, 64, &plan);
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
      hal_flash_attention_plan(&bad, backward, shared, 32, &plan);
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
