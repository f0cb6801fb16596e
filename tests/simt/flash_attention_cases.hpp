// Flash attention test cases and their f64 reference, shared by the CPU
// emulator test (flash_attention_simt_test.cpp) and the GPU check
// (tests/gpu/flash_attention_gpu_check.cu): the caller supplies how a plan's
// launches run, this file makes the inputs, runs forward then backward and
// measures the errors. No test framework here, so that nvcc alone builds the
// GPU check.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention_kernels.h"
#include "dtype_codes.hpp"

namespace flash_cases {

struct Shape {
  const char* name;
  int dtype, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim_qk, head_dim_v;
  bool causal;
  int window_left, window_right;
  bool bottom_right;
  bool key_ranges;  // per-query key ranges (key_range below) on top of the band
};

constexpr int kF32 = HAL_KERNEL_F32, kF16 = HAL_KERNEL_F16, kBf16 = HAL_KERNEL_BF16;

// name, dtype, batch, heads q/kv, seq q/kv, head dims qk/v, causal, window left/right, bottom-right, key ranges
inline const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"MHA, no mask, f32, d64", kF32, 1, 2, 2, 37, 45, 64, 64, false, -1, -1, false, false},
      {"GQA, causal top-left, f16, d128", kF16, 2, 4, 2, 50, 50, 128, 128, true, -1, -1, false, false},
      {"MQA, causal bottom-right, bf16, d64", kBf16, 1, 4, 1, 20, 45, 64, 64, true, -1, -1, true, false},
      {"causal bottom-right, seq_q > seq_kv (masked rows), f32", kF32, 1, 2, 1, 40, 17, 64, 64, true, -1, -1, true, false},
      {"causal bottom-right, seq_q > seq_kv (masked rows), bf16", kBf16, 1, 2, 1, 70, 33, 64, 64, true, -1, -1, true, false},
      {"sliding window 7/3, f16", kF16, 1, 2, 2, 70, 70, 64, 64, false, 7, 3, false, false},
      {"causal + window 9, bottom-right, bf16, d128", kBf16, 1, 2, 1, 33, 65, 128, 128, true, 9, -1, true, false},
      {"diagonal only, rows past seq_kv masked, f32", kF32, 1, 1, 1, 20, 10, 64, 64, false, 0, 0, false, false},
      {"odd head dims 40/72, f32", kF32, 1, 3, 1, 19, 23, 40, 72, false, -1, -1, false, false},
      {"odd head dims 40/72, f16", kF16, 1, 3, 1, 19, 23, 40, 72, false, -1, -1, false, false},
      {"head dim 200, GQA, causal, bf16", kBf16, 1, 2, 1, 21, 21, 200, 200, true, -1, -1, false, false},
      {"head dim 256, f16", kF16, 1, 1, 1, 18, 33, 256, 256, false, -1, -1, false, false},
      {"head dim 256/96, f32", kF32, 1, 2, 2, 9, 40, 256, 96, true, -1, -1, true, false},
      {"key ranges, no band, f32", kF32, 2, 2, 2, 37, 45, 64, 64, false, -1, -1, false, true},
      {"key ranges, GQA, causal, f16", kF16, 2, 4, 2, 50, 50, 128, 128, true, -1, -1, false, true},
      {"key ranges, window 9, bottom-right, bf16", kBf16, 2, 2, 1, 33, 65, 64, 64, true, 9, -1, true, true},
  };
  return all;
}

// Max error over the largest reference value: f32 arithmetic with inputs
// and outputs in the dtype. dQ and dK get twice this.
inline double tolerance(int dtype) {
  switch (dtype) {
    case kF16: return 2e-3;
    case kBf16: return 1.6e-2;
    default: return 2e-5;
  }
}

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
    if (dtype == kF32) {
      float_data.assign(count, std::numeric_limits<float>::quiet_NaN());
    } else {
      half_data.assign(count, 0x7e00);  // NaN: an output the kernel misses shows
    }
  }
  void* data() {
    return dtype == kF32 ? static_cast<void*>(float_data.data()) : static_cast<void*>(half_data.data());
  }
  std::size_t bytes() const { return dtype == kF32 ? float_data.size() * 4 : half_data.size() * 2; }
  hal_kernel_tensor view() {
    hal_kernel_tensor tensor{};
    tensor.address = reinterpret_cast<std::uint64_t>(data());
    tensor.batch_stride = static_cast<std::int64_t>(heads) * seq * dim;
    tensor.head_stride = seq_major ? dim : static_cast<std::int64_t>(seq) * dim;
    tensor.seq_stride = seq_major ? static_cast<std::int64_t>(heads) * dim : dim;
    return tensor;
  }
  std::size_t index(int b, int h, int s, int d) {
    const hal_kernel_tensor t = view();
    return static_cast<std::size_t>(b * t.batch_stride + h * t.head_stride + s * t.seq_stride + d);
  }
  double get(int b, int h, int s, int d) {
    const std::size_t i = index(b, h, s, d);
    if (dtype == kF32) return float_data[i];
    return dtype == kF16 ? hal::abi::f16_bits_to_float(half_data[i]) : hal::abi::bf16_bits_to_float(half_data[i]);
  }
  void set(int b, int h, int s, int d, float value) {
    const std::size_t i = index(b, h, s, d);
    if (dtype == kF32) {
      float_data[i] = value;
    } else {
      half_data[i] = dtype == kF16 ? hal::abi::float_to_f16_bits(value) : hal::abi::float_to_bf16_bits(value);
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

// [begin, end) of the keys query i of batch row b may see, for shapes with
// key ranges: left padding that grows with the row, an end that moves with
// the query (not monotonic), past seq_kv for some, empty every seventh query.
inline void key_range(const Shape& shape, int batch, int query, std::int32_t* begin, std::int32_t* end) {
  *begin = 3 * batch + query % 4;
  *end = shape.seq_kv + 2 - query % 5 - 2 * batch;
  if (query % 7 == 3) *end = *begin;
}

inline bool visible(const Shape& shape, int batch, int query, int key) {
  const int offset = shape.bottom_right ? shape.seq_kv - shape.seq_q : 0;
  const int distance = key - (query + offset);
  if (shape.causal && distance > 0) return false;
  if (shape.window_left >= 0 && distance < -shape.window_left) return false;
  if (shape.window_right >= 0 && distance > shape.window_right) return false;
  if (!shape.key_ranges) return true;
  std::int32_t begin = 0, end = 0;
  key_range(shape, batch, query, &begin, &end);
  return key >= begin && key < end;
}

// Largest |got - want| over the largest |want|, at least 0.1 (the inputs
// are O(1)), so that an all-zero reference (dQ and dK where every row sees
// one key) is not judged by f32 rounding noise alone. NaN counts as inf.
struct Mismatch {
  double worst_abs = 0.0, scale = 0.1;
  void add(double got, double want) {
    worst_abs = std::max(worst_abs, std::isnan(got) ? INFINITY : std::fabs(got - want));
    scale = std::max(scale, std::fabs(want));
  }
  double relative() const { return worst_abs / scale; }
};

// A host buffer the kernels read or write; a GPU runner mirrors it.
struct Buffer {
  void* host;
  std::size_t bytes;
};

// Runs the plan for `args` (host addresses of `buffers`) and leaves the
// results in the buffers; returns an empty string or what failed. Also
// reports the first kernel's name.
using RunPlan = std::function<std::string(const hal_attention_kernel_args& args, const std::vector<Buffer>& buffers,
                                          bool backward, std::uint32_t paths, std::string* first_kernel)>;

struct Result {
  std::string error;  // from the runner; the errors below are meaningless when set
  std::string forward_kernel;
  Mismatch o, lse, dq, dk, dv;
  int masked_rows = 0;
  int masked_rows_wrong = 0;  // LSE not -inf where no key is visible
  bool passed() const {
    const double limit = current_limit;
    return error.empty() && masked_rows_wrong == 0 && o.relative() <= limit && lse.worst_abs <= 1e-4 &&
           dq.relative() <= 2 * limit && dk.relative() <= 2 * limit && dv.relative() <= limit;
  }
  double current_limit = 0.0;
  std::string summary(const Shape& shape) const {
    std::ostringstream text;
    text << shape.name << " [" << forward_kernel << "]: O " << o.relative() << ", LSE " << lse.worst_abs << ", dQ "
         << dq.relative() << ", dK " << dk.relative() << ", dV " << dv.relative() << " (limit " << current_limit
         << "), fully masked rows " << masked_rows;
    if (!error.empty()) text << ", error: " << error;
    return text.str();
  }
};

// Forward (with the optional `paths`), then backward, against the reference.
inline Result run_case(const Shape& shape, std::uint32_t paths, const RunPlan& run_plan) {
  Result result;
  result.current_limit = tolerance(shape.dtype);
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
  std::vector<std::int32_t> ranges;
  if (shape.key_ranges) {
    for (int b = 0; b < shape.batch; ++b)
      for (int i = 0; i < shape.seq_q; ++i) {
        std::int32_t begin = 0, end = 0;
        key_range(shape, b, i, &begin, &end);
        ranges.push_back(begin);
        ranges.push_back(end);
      }
    args.key_ranges = reinterpret_cast<std::uint64_t>(ranges.data());
  }

  std::vector<Buffer> buffers;
  for (Tensor* tensor : {&q, &k, &v, &o, &grad_o, &grad_q, &grad_k, &grad_v}) {
    buffers.push_back({tensor->data(), tensor->bytes()});
  }
  buffers.push_back({lse.data(), lse.size() * sizeof(float)});
  if (!ranges.empty()) buffers.push_back({ranges.data(), ranges.size() * sizeof(std::int32_t)});
  result.error = run_plan(args, buffers, false, paths, &result.forward_kernel);
  std::string backward_kernel;
  if (result.error.empty()) result.error = run_plan(args, buffers, true, paths, &backward_kernel);
  if (!result.error.empty()) return result;

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
          if (!visible(shape, b, i, j)) continue;
          double s = 0.0;
          for (int d = 0; d < shape.head_dim_qk; ++d) s += q.get(b, h, i, d) * k.get(b, hk, j, d);
          p[j] = s * args.scale;
          max = std::max(max, p[j]);
        }
        const float got_lse = lse[(static_cast<std::size_t>(b) * shape.heads_q + h) * shape.seq_q + i];
        if (max == -INFINITY) {  // no visible key: O = 0, LSE = -inf, no gradient
          ++result.masked_rows;
          if (got_lse != -INFINITY) ++result.masked_rows_wrong;
          for (int d = 0; d < shape.head_dim_v; ++d) result.o.add(o.get(b, h, i, d), 0.0);
          for (int d = 0; d < shape.head_dim_qk; ++d) result.dq.add(grad_q.get(b, h, i, d), 0.0);
          continue;
        }
        double sum = 0.0;
        for (int j = 0; j < shape.seq_kv; ++j) {
          p[j] = visible(shape, b, i, j) ? std::exp(p[j] - max) : 0.0;
          sum += p[j];
        }
        result.lse.add(got_lse, max + std::log(sum));
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
          result.o.add(o.get(b, h, i, d), out);
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
        for (int d = 0; d < shape.head_dim_qk; ++d) result.dq.add(grad_q.get(b, h, i, d), dq[d]);
      }
    }
    for (int hk = 0; hk < shape.heads_kv; ++hk) {
      for (int j = 0; j < shape.seq_kv; ++j) {
        for (int d = 0; d < shape.head_dim_qk; ++d) {
          result.dk.add(grad_k.get(b, hk, j, d), dk[kv_index(b, hk, j, d, shape.head_dim_qk)]);
        }
        for (int d = 0; d < shape.head_dim_v; ++d) {
          result.dv.add(grad_v.get(b, hk, j, d), dv[kv_index(b, hk, j, d, shape.head_dim_v)]);
        }
      }
    }
  }
  return result;
}

}  // namespace flash_cases
