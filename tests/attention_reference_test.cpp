// The conformance suite's double-precision attention reference: rounding to
// f16/bf16, masks with known answers, gradients against central finite
// differences, and the tolerance comparison.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal/conformance/attention_reference.hpp"

namespace conf = hal::conformance;
using hal::DType;

namespace {

std::vector<double> random_tensor(std::size_t count, std::mt19937& generator) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(count);
  for (auto& value : values) value = uniform(generator);
  return values;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

TEST_CASE("f16 and bf16 rounding: nearest, ties to even, overflow, subnormals") {
  CHECK(conf::round_to(DType::f16, 1.0 / 3.0) == 0.333251953125);
  CHECK(conf::round_to(DType::bf16, 1.0 / 3.0) == 0.333984375);
  CHECK(conf::round_to(DType::f16, 1.0 + std::ldexp(1.0, -11)) == 1.0);  // tie: to the even mantissa
  CHECK(conf::round_to(DType::f16, 1.0 + 3 * std::ldexp(1.0, -11)) == 1.0 + std::ldexp(1.0, -9));
  CHECK(conf::round_to(DType::bf16, 1.0 + std::ldexp(1.0, -8)) == 1.0);
  CHECK(conf::round_to(DType::bf16, 1.0 + 3 * std::ldexp(1.0, -8)) == 1.0 + std::ldexp(1.0, -6));
  CHECK(conf::round_to(DType::f16, 65504.0) == 65504.0);
  CHECK(std::isinf(conf::round_to(DType::f16, 65520.0)));
  CHECK(conf::round_to(DType::f16, std::ldexp(1.0, -24)) == std::ldexp(1.0, -24));
  CHECK(conf::round_to(DType::f16, std::ldexp(1.0, -25)) == 0.0);
  CHECK(conf::round_to(DType::f16, 3 * std::ldexp(1.0, -25)) == std::ldexp(1.0, -23));
  CHECK(conf::round_to(DType::f16, -2.5) == -2.5);
  CHECK(std::isnan(conf::round_to(DType::bf16, std::nan(""))));
  CHECK_THROWS_AS(conf::round_to(DType::i32, 1.0), std::invalid_argument);
}

TEST_CASE("forward: known answers for uniform weights, bottom-right alignment, windows and empty rows") {
  hal::AttentionParams params{.heads_q = 2, .heads_kv = 1, .seq_q = 2, .seq_kv = 3, .head_dim_qk = 2, .causal = true,
                              .alignment = hal::MaskAlignment::bottom_right};
  const std::vector<double> q(8, 0.0);  // zero queries: every visible key weighs the same
  const std::vector<double> k = {1, 2, 3, 4, 5, 6};
  const std::vector<double> v = {1, 10, 2, 20, 6, 60};
  auto result = conf::attention_reference_forward(params, q, k, v);
  // Bottom-right: query 0 sees keys 0 and 1, query 1 sees all three.
  CHECK(result.o[0] == doctest::Approx(1.5));
  CHECK(result.o[1] == doctest::Approx(15.0));
  CHECK(result.o[2] == doctest::Approx(3.0));
  CHECK(result.lse[0] == doctest::Approx(std::log(2.0)));
  CHECK(result.lse[1] == doctest::Approx(std::log(3.0)));
  CHECK(result.o[4] == result.o[0]);  // head 1 shares the kv head

  params.window_left = 0;  // each query sees its aligned key only
  result = conf::attention_reference_forward(params, q, k, v);
  CHECK(result.o[0] == doctest::Approx(2.0));
  CHECK(result.o[2] == doctest::Approx(6.0));

  // More queries than keys, bottom-right: the first query sees nothing.
  hal::AttentionParams empty = params;
  empty.window_left = -1;
  empty.seq_q = 3;
  empty.seq_kv = 2;
  result = conf::attention_reference_forward(empty, std::vector<double>(12, 0.0), std::vector<double>(4, 1.0),
                                             std::vector<double>(4, 1.0));
  CHECK(std::isinf(result.lse[0]));
  CHECK(result.lse[0] < 0);
  CHECK(result.o[0] == 0.0);
  CHECK(result.lse[1] == doctest::Approx(0.0));

  CHECK_THROWS_AS(conf::attention_reference_forward(params, q, k, std::vector<double>(5)), std::invalid_argument);
}

TEST_CASE("backward: gradients match central finite differences of sum(O * dO)") {
  const hal::AttentionParams params{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 3, .seq_kv = 5, .head_dim_qk = 4,
                                    .head_dim_v = 3, .causal = true, .alignment = hal::MaskAlignment::bottom_right,
                                    .window_left = 2, .softmax_scale = 0.9f};
  const auto extents = conf::AttentionExtents::of(params);
  std::mt19937 generator(5);
  std::vector<double> q = random_tensor(extents.q, generator), k = random_tensor(extents.k, generator),
                      v = random_tensor(extents.v, generator), grad_o = random_tensor(extents.o, generator);
  const auto analytic = conf::attention_reference_backward(params, q, k, v, grad_o);
  auto loss = [&] { return dot(conf::attention_reference_forward(params, q, k, v).o, grad_o); };
  const double step = 1e-5;
  auto check_gradient = [&](std::vector<double>& tensor, const std::vector<double>& gradient, const char* name) {
    CAPTURE(name);
    double worst = 0;
    for (std::size_t i = 0; i < tensor.size(); ++i) {
      const double saved = tensor[i];
      tensor[i] = saved + step;
      const double up = loss();
      tensor[i] = saved - step;
      const double down = loss();
      tensor[i] = saved;
      worst = std::max(worst, std::abs((up - down) / (2 * step) - gradient[i]));
    }
    CHECK(worst < 1e-8);
  };
  check_gradient(q, analytic.grad_q, "dQ");
  check_gradient(k, analytic.grad_k, "dK");
  check_gradient(v, analytic.grad_v, "dV");
}

TEST_CASE("comparison: scaled tolerance, NaN fails, -inf must match -inf") {
  const conf::Tolerance tolerance{1e-3, 1e-3};
  const std::vector<double> expected = {10.0, 0.001, -5.0};
  CHECK(conf::compare_to_reference(std::vector<double>{10.005, 0.009, -5.0}, expected, tolerance).ok());
  const auto off = conf::compare_to_reference(std::vector<double>{10.0, 0.03, -5.0}, expected, tolerance);
  CHECK_FALSE(off.ok());
  CHECK(off.failures == 1);
  CHECK(off.first_failure == 1);
  CHECK(off.describe("O", tolerance).find("1 of 3 values out of tolerance") != std::string::npos);
  CHECK_FALSE(conf::compare_to_reference(std::vector<double>{10.0, std::nan(""), -5.0}, expected, tolerance).ok());
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(conf::compare_to_reference(std::vector<double>{-inf, 1.0}, std::vector<double>{-inf, 1.0}, tolerance).ok());
  CHECK_FALSE(conf::compare_to_reference(std::vector<double>{0.0, 1.0}, std::vector<double>{-inf, 1.0}, tolerance).ok());
  CHECK(conf::attention_tolerance(DType::bf16).absolute == 1.6e-2);
  CHECK_THROWS_AS(conf::compare_to_reference(std::vector<double>{1.0}, expected, tolerance), std::invalid_argument);
}
