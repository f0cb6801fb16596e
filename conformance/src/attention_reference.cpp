// The double-precision attention reference: scores materialized per query,
// softmax in double, gradients by the textbook formulas.
#include "hal/conformance/attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "dtype_codes.hpp"
#include "hal/status.hpp"

namespace hal::conformance {
namespace {

// The logical problem with defaults resolved.
struct Problem {
  std::int64_t batch, heads_q, heads_kv, seq_q, seq_kv, dim_qk, dim_v;
  bool causal;
  std::int64_t offset;  // key index aligned with query 0
  std::int64_t window_left, window_right;
  double scale;
  std::span<const std::int32_t> key_ranges;  // [batch][seq_q][begin, end); empty: none

  Problem(const AttentionParams& params, std::span<const std::int32_t> ranges = {}) : key_ranges(ranges) {
    const AttentionParams p = params.resolved();
    batch = p.batch;
    heads_q = p.heads_q;
    heads_kv = p.heads_kv;
    seq_q = p.seq_q;
    seq_kv = p.seq_kv;
    dim_qk = p.head_dim_qk;
    dim_v = p.head_dim_v;
    causal = p.causal;
    offset = p.alignment == MaskAlignment::bottom_right ? p.seq_kv - p.seq_q : 0;
    window_left = p.window_left;
    window_right = p.window_right;
    scale = static_cast<double>(*p.softmax_scale);  // the float every implementation uses
  }

  // docs/attention.md: key j is visible to query i of batch row b when
  // d = j - (i + offset) satisfies causal (d <= 0) and the window
  // (-left <= d <= right), and j lies in the query's key range if any.
  bool visible(std::int64_t b, std::int64_t i, std::int64_t j) const {
    const std::int64_t distance = j - (i + offset);
    if (causal && distance > 0) return false;
    if (window_left >= 0 && distance < -window_left) return false;
    if (window_right >= 0 && distance > window_right) return false;
    if (key_ranges.empty()) return true;
    const std::size_t row = static_cast<std::size_t>((b * seq_q + i) * 2);
    return j >= key_ranges[row] && j < key_ranges[row + 1];
  }

  std::size_t q_index(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>(((b * heads_q + h) * seq_q + i) * dim_qk);
  }
  std::size_t o_index(std::int64_t b, std::int64_t h, std::int64_t i) const {
    return static_cast<std::size_t>(((b * heads_q + h) * seq_q + i) * dim_v);
  }
  std::size_t k_index(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return static_cast<std::size_t>(((b * heads_kv + h) * seq_kv + j) * dim_qk);
  }
  std::size_t v_index(std::int64_t b, std::int64_t h, std::int64_t j) const {
    return static_cast<std::size_t>(((b * heads_kv + h) * seq_kv + j) * dim_v);
  }
  std::int64_t kv_head(std::int64_t h) const { return h / (heads_q / heads_kv); }
};

void require_key_ranges(const AttentionParams& params, std::span<const std::int32_t> key_ranges) {
  const std::size_t expected = params.key_ranges ? static_cast<std::size_t>(params.batch * params.seq_q * 2) : 0;
  if (key_ranges.size() != expected)
    throw std::invalid_argument("attention reference: key_ranges has " + std::to_string(key_ranges.size()) +
                                " values; the params need " + std::to_string(expected));
}

void require_size(const char* name, std::span<const double> tensor, std::size_t expected) {
  if (tensor.size() != expected)
    throw std::invalid_argument(std::string("attention reference: tensor ") + name + " has " +
                                std::to_string(tensor.size()) + " elements; the params need " +
                                std::to_string(expected));
}

// The inputs of both directions checked against the params; their extents.
AttentionExtents checked_inputs(const AttentionParams& params, std::span<const double> q, std::span<const double> k,
                                std::span<const double> v, std::span<const std::int32_t> key_ranges) {
  require_key_ranges(params, key_ranges);
  const AttentionExtents extents = AttentionExtents::of(params);
  require_size("q", q, extents.q);
  require_size("k", k, extents.k);
  require_size("v", v, extents.v);
  return extents;
}

// Softmax probabilities of one query row: p[j] (0 where masked); returns the
// log-sum-exp, -inf when no key is visible.
double softmax_row(const Problem& p, std::span<const double> q, std::span<const double> k, std::int64_t b,
                   std::int64_t h, std::int64_t i, std::vector<double>& probabilities) {
  probabilities.assign(static_cast<std::size_t>(p.seq_kv), 0.0);
  const double* query = q.data() + p.q_index(b, h, i);
  double largest = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = 0; j < p.seq_kv; ++j) {
    if (!p.visible(b, i, j)) continue;
    const double* key = k.data() + p.k_index(b, p.kv_head(h), j);
    double dot = 0;
    for (std::int64_t x = 0; x < p.dim_qk; ++x) dot += query[x] * key[x];
    probabilities[static_cast<std::size_t>(j)] = dot * p.scale;
    largest = std::max(largest, dot * p.scale);
  }
  if (std::isinf(largest)) {
    std::fill(probabilities.begin(), probabilities.end(), 0.0);
    return largest;
  }
  double total = 0;
  for (std::int64_t j = 0; j < p.seq_kv; ++j)
    if (p.visible(b, i, j)) total += std::exp(probabilities[static_cast<std::size_t>(j)] - largest);
  const double lse = largest + std::log(total);
  for (std::int64_t j = 0; j < p.seq_kv; ++j) {
    double& value = probabilities[static_cast<std::size_t>(j)];
    value = p.visible(b, i, j) ? std::exp(value - lse) : 0.0;
  }
  return lse;
}

[[noreturn]] void unsupported_dtype(DType dtype) {
  throw std::invalid_argument("attention reference: dtype " + std::string(to_string(dtype)) +
                              " is not an attention dtype; use f32, f16 or bf16");
}

std::string scientific(double value, int digits = 2) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.*g", digits, value);
  return text;
}

}  // namespace

AttentionExtents AttentionExtents::of(const AttentionParams& params) {
  const Problem p(params);
  return {static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q * p.dim_qk),
          static_cast<std::size_t>(p.batch * p.heads_kv * p.seq_kv * p.dim_qk),
          static_cast<std::size_t>(p.batch * p.heads_kv * p.seq_kv * p.dim_v),
          static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q * p.dim_v),
          static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q)};
}

AttentionForwardReference attention_reference_forward(const AttentionParams& params, std::span<const double> q,
                                                      std::span<const double> k, std::span<const double> v,
                                                      std::span<const std::int32_t> key_ranges) {
  const AttentionExtents extents = checked_inputs(params, q, k, v, key_ranges);
  const Problem p(params, key_ranges);
  AttentionForwardReference result{std::vector<double>(extents.o, 0.0), std::vector<double>(extents.lse, 0.0)};
  std::vector<double> probabilities;
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        result.lse[static_cast<std::size_t>((b * p.heads_q + h) * p.seq_q + i)] =
            softmax_row(p, q, k, b, h, i, probabilities);
        double* out = result.o.data() + p.o_index(b, h, i);
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          const double weight = probabilities[static_cast<std::size_t>(j)];
          if (weight == 0.0) continue;
          const double* value = v.data() + p.v_index(b, p.kv_head(h), j);
          for (std::int64_t x = 0; x < p.dim_v; ++x) out[x] += weight * value[x];
        }
      }
  return result;
}

AttentionGradientsReference attention_reference_backward(const AttentionParams& params, std::span<const double> q,
                                                         std::span<const double> k, std::span<const double> v,
                                                         std::span<const double> grad_o,
                                                         std::span<const std::int32_t> key_ranges) {
  const AttentionExtents extents = checked_inputs(params, q, k, v, key_ranges);
  const Problem p(params, key_ranges);
  require_size("grad_o", grad_o, extents.o);
  AttentionGradientsReference result{std::vector<double>(extents.q, 0.0), std::vector<double>(extents.k, 0.0),
                                     std::vector<double>(extents.v, 0.0)};
  std::vector<double> probabilities, grad_probabilities(static_cast<std::size_t>(p.seq_kv));
  for (std::int64_t b = 0; b < p.batch; ++b)
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::int64_t kv = p.kv_head(h);
      for (std::int64_t i = 0; i < p.seq_q; ++i) {
        softmax_row(p, q, k, b, h, i, probabilities);
        const double* d_out = grad_o.data() + p.o_index(b, h, i);
        // dP = dO V^T and D = sum_j P dP (= dO . O).
        double row_dot = 0;
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          const double weight = probabilities[static_cast<std::size_t>(j)];
          double& grad_p = grad_probabilities[static_cast<std::size_t>(j)];
          grad_p = 0;
          if (weight == 0.0) continue;
          const double* value = v.data() + p.v_index(b, kv, j);
          double* grad_value = result.grad_v.data() + p.v_index(b, kv, j);
          for (std::int64_t x = 0; x < p.dim_v; ++x) {
            grad_p += d_out[x] * value[x];
            grad_value[x] += weight * d_out[x];  // dV = P^T dO, summed over the query heads of the group
          }
          row_dot += weight * grad_p;
        }
        // dS = P (dP - D); dQ = scale dS K; dK = scale dS^T Q.
        const double* query = q.data() + p.q_index(b, h, i);
        double* grad_query = result.grad_q.data() + p.q_index(b, h, i);
        for (std::int64_t j = 0; j < p.seq_kv; ++j) {
          const double weight = probabilities[static_cast<std::size_t>(j)];
          if (weight == 0.0) continue;
          const double grad_score = weight * (grad_probabilities[static_cast<std::size_t>(j)] - row_dot) * p.scale;
          const double* key = k.data() + p.k_index(b, kv, j);
          double* grad_key = result.grad_k.data() + p.k_index(b, kv, j);
          for (std::int64_t x = 0; x < p.dim_qk; ++x) {
            grad_query[x] += grad_score * key[x];
            grad_key[x] += grad_score * query[x];
          }
        }
      }
    }
  return result;
}

double load_element(DType dtype, const void* data, std::size_t index) {
  switch (dtype) {
    case DType::f32: {
      float value;
      std::memcpy(&value, static_cast<const unsigned char*>(data) + index * 4, 4);
      return value;
    }
    case DType::f16:
    case DType::bf16: {
      std::uint16_t bits;
      std::memcpy(&bits, static_cast<const unsigned char*>(data) + index * 2, 2);
      return dtype == DType::f16 ? abi::f16_bits_to_float(bits) : abi::bf16_bits_to_float(bits);
    }
    default: unsupported_dtype(dtype);
  }
}

void store_element(DType dtype, void* data, std::size_t index, double value) {
  const float single = static_cast<float>(value);
  switch (dtype) {
    case DType::f32: std::memcpy(static_cast<unsigned char*>(data) + index * 4, &single, 4); return;
    case DType::f16:
    case DType::bf16: {
      const std::uint16_t bits = dtype == DType::f16 ? abi::float_to_f16_bits(single) : abi::float_to_bf16_bits(single);
      std::memcpy(static_cast<unsigned char*>(data) + index * 2, &bits, 2);
      return;
    }
    default: unsupported_dtype(dtype);
  }
}

double round_to(DType dtype, double value) {
  unsigned char bytes[4];
  store_element(dtype, bytes, 0, value);
  return load_element(dtype, bytes, 0);
}

Tolerance attention_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return {2e-5, 1e-5};
    case DType::f16: return {1e-3, 1e-3};
    case DType::bf16: return {1.6e-2, 1.6e-2};
    default: unsupported_dtype(dtype);
  }
}

Tolerance lse_tolerance() { return attention_tolerance(DType::f32); }

Comparison compare_to_reference(std::span<const double> actual, std::span<const double> expected,
                                const Tolerance& tolerance) {
  if (actual.size() != expected.size())
    throw std::invalid_argument("compare_to_reference: " + std::to_string(actual.size()) + " values against " +
                                std::to_string(expected.size()) + " expected");
  Comparison result;
  result.count = actual.size();
  result.scale = 1e-30;
  for (double value : expected)
    if (std::isfinite(value)) result.scale = std::max(result.scale, std::abs(value));
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double ratio;
    if (std::isinf(expected[i])) {
      ratio = actual[i] == expected[i] ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      const double error = std::abs(actual[i] - expected[i]);
      const double allowed = tolerance.absolute * result.scale + tolerance.relative * std::abs(expected[i]);
      ratio = std::isfinite(error) ? error / allowed : std::numeric_limits<double>::infinity();
      if (std::isfinite(error)) {
        result.max_abs_error = std::max(result.max_abs_error, error);
        if (std::abs(expected[i]) >= 1e-3 * result.scale)
          result.max_rel_error = std::max(result.max_rel_error, error / std::abs(expected[i]));
      }
    }
    result.worst_ratio = std::max(result.worst_ratio, ratio);
    if (!(ratio <= 1.0)) {
      if (result.failures == 0) {
        result.first_failure = i;
        result.first_actual = actual[i];
        result.first_expected = expected[i];
      }
      ++result.failures;
    }
  }
  return result;
}

std::string Comparison::describe(const std::string& tensor, const Tolerance& tolerance) const {
  std::string text = tensor + ": max abs error " + scientific(max_abs_error) + ", max rel error " +
                     scientific(max_rel_error) + ", worst " + scientific(worst_ratio) + " of the allowed (" +
                     scientific(tolerance.absolute) + " x " + scientific(scale) + " + " +
                     scientific(tolerance.relative) + " x |expected|)";
  if (failures > 0)
    text += "; " + std::to_string(failures) + " of " + std::to_string(count) + " values out of tolerance, first at " +
            std::to_string(first_failure) + ": got " + scientific(first_actual, 7) + ", expected " +
            scientific(first_expected, 7);
  return text;
}

}  // namespace hal::conformance
