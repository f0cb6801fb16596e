#include "attention/attention_bench.hpp"

#include <chrono>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <vector>

#include "attention/attention_common.hpp"
#include "attention/attention_internal.hpp"

namespace hal::host {
namespace {

// Elements a tensor with these strides spans (its largest offset + 1).
std::int64_t span_elements(const hal_tensor_strides_v1& strides, std::int64_t batch, std::int64_t heads,
                           std::int64_t seq, std::int64_t dim) {
  return (batch - 1) * strides.batch + (heads - 1) * strides.head + (seq - 1) * strides.seq +
         (dim - 1) * strides.dim + 1;
}

struct Tensor {
  std::vector<unsigned char> bytes;
  void* data() { return bytes.data(); }
};

Tensor random_tensor(hal_dtype dtype, std::int64_t elements, std::mt19937& random) {
  Tensor tensor;
  tensor.bytes.resize(static_cast<std::size_t>(elements * dtype_size(dtype)));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < elements; ++i) store_float(dtype, tensor.data(), i, uniform(random));
  return tensor;
}

}  // namespace

AttentionBenchResult bench_attention(const hal_attention_params_v1& params, hal_attention_implementation implementation,
                                     bool backward, ThreadPool& pool, int iterations, int warmup_calls) {
  require_valid_params(params, backward);
  if (implementation != HAL_ATTENTION_MATH && implementation != HAL_ATTENTION_FLASH) {
    throw std::invalid_argument("host attention benchmarks math and flash only");
  }
  const hal_attention_params_v1& p = params;
  std::mt19937 random(1234);
  Tensor q = random_tensor(p.dtype, span_elements(p.q_strides, p.batch, p.heads_q, p.seq_q, p.head_dim_qk), random);
  Tensor k = random_tensor(p.dtype, span_elements(p.k_strides, p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk), random);
  Tensor v = random_tensor(p.dtype, span_elements(p.v_strides, p.batch, p.heads_kv, p.seq_kv, p.head_dim_v), random);
  Tensor o = random_tensor(p.dtype, span_elements(p.o_strides, p.batch, p.heads_q, p.seq_q, p.head_dim_v), random);
  std::vector<float> lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q));
  const bool flash = implementation == HAL_ATTENTION_FLASH;

  auto forward = [&] {
    if (flash) {
      flash_forward(p, q.data(), k.data(), v.data(), o.data(), lse.data(), pool);
    } else {
      math_forward(p, q.data(), k.data(), v.data(), o.data(), lse.data(), pool);
    }
  };
  Tensor grad_o, grad_q, grad_k, grad_v;
  if (backward) {
    grad_o = random_tensor(p.dtype, span_elements(p.grad_o_strides, p.batch, p.heads_q, p.seq_q, p.head_dim_v), random);
    grad_q = random_tensor(p.dtype, span_elements(p.grad_q_strides, p.batch, p.heads_q, p.seq_q, p.head_dim_qk), random);
    grad_k = random_tensor(p.dtype, span_elements(p.grad_k_strides, p.batch, p.heads_kv, p.seq_kv, p.head_dim_qk), random);
    grad_v = random_tensor(p.dtype, span_elements(p.grad_v_strides, p.batch, p.heads_kv, p.seq_kv, p.head_dim_v), random);
    forward();
  }
  auto call = [&] {
    if (!backward) {
      forward();
    } else if (flash) {
      flash_backward(p, q.data(), k.data(), v.data(), o.data(), grad_o.data(), lse.data(), grad_q.data(),
                     grad_k.data(), grad_v.data(), pool);
    } else {
      math_backward(p, q.data(), k.data(), v.data(), o.data(), grad_o.data(), lse.data(), grad_q.data(),
                    grad_k.data(), grad_v.data(), pool);
    }
  };

  for (int i = 0; i < warmup_calls; ++i) call();
  const int timed = iterations > 0 ? iterations : 1;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < timed; ++i) call();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / timed;

  AttentionBenchResult result{};
  result.seconds_per_call = seconds;
  result.tflops = attention_flops(p, backward) / seconds * 1e-12;
  result.peak_extra_bytes = flash ? flash_workspace_bytes(p, backward, pool.thread_count())
                                  : math_workspace_bytes(p, backward);
  result.iterations = timed;
  return result;
}

}  // namespace hal::host
