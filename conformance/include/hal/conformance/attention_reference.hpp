// A double-precision reference for scaled dot-product attention and the
// comparison every attention check uses (docs/attention.md, "Accuracy").
// It is written independently of every implementation it judges: plain loops
// over materialized scores, nothing shared with a backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hal/attention.hpp"
#include "hal/dtype.hpp"

namespace hal::conformance {

// Tensors here are dense doubles in logical [batch][heads][seq][dim] order,
// whatever the layout or strides of the device tensors they describe.
struct AttentionForwardReference {
  std::vector<double> o;    // [batch][heads_q][seq_q][head_dim_v]
  std::vector<double> lse;  // [batch][heads_q][seq_q]; -inf where a query sees no key
};

struct AttentionGradientsReference {
  std::vector<double> grad_q;  // [batch][heads_q][seq_q][head_dim_qk]
  std::vector<double> grad_k;  // [batch][heads_kv][seq_kv][head_dim_qk]
  std::vector<double> grad_v;  // [batch][heads_kv][seq_kv][head_dim_v]
};

// Element counts of the logical tensors of a problem.
struct AttentionExtents {
  std::size_t q, k, v, o, lse;
  static AttentionExtents of(const AttentionParams& params);
};

// Throws hal::Error (invalid_argument) for bad params, std::invalid_argument
// when a tensor's size does not match the params. key_ranges: [batch][seq_q]
// [begin, end) per query, exactly when params.key_ranges (AttentionOptions::
// key_ranges' values).
AttentionForwardReference attention_reference_forward(const AttentionParams& params, std::span<const double> q,
                                                      std::span<const double> k, std::span<const double> v,
                                                      std::span<const std::int32_t> key_ranges = {});
AttentionGradientsReference attention_reference_backward(const AttentionParams& params, std::span<const double> q,
                                                         std::span<const double> k, std::span<const double> v,
                                                         std::span<const double> grad_o,
                                                         std::span<const std::int32_t> key_ranges = {});

// Values stored as a dtype: f32, f16 or bf16 (rounded to nearest, ties to even).
double load_element(DType dtype, const void* data, std::size_t index);
void store_element(DType dtype, void* data, std::size_t index, double value);
// value as the dtype would hold it.
double round_to(DType dtype, double value);

// A value passes when |actual - expected| <= absolute * scale + relative * |expected|
// with scale = the largest |expected| of the tensor, so an error is judged
// against the tensor's magnitude rather than against values near zero.
struct Tolerance {
  double absolute = 0;
  double relative = 0;
};
// f32 2e-5/1e-5, f16 1e-3/1e-3, bf16 1.6e-2/1.6e-2; throws invalid_argument otherwise.
Tolerance attention_tolerance(DType dtype);
// The log-sum-exp is f32 whatever the dtype: held to the f32 tolerance.
Tolerance lse_tolerance();

struct Comparison {
  std::size_t count = 0;
  std::size_t failures = 0;       // out of tolerance, NaN included
  std::size_t first_failure = 0;  // flat index; meaningful when failures > 0
  double scale = 0;               // max |expected| (at least 1e-30)
  double max_abs_error = 0;       // over the finite values
  double max_rel_error = 0;       // max |error| / |expected| over values with |expected| >= 1e-3 * scale
  double worst_ratio = 0;         // max error / allowed: <= 1 passes; +inf for NaN or a mismatched -inf
  double first_actual = 0, first_expected = 0;
  bool ok() const { return failures == 0; }
  // "O: max abs error 3.1e-07, max rel error 2.0e-06, worst 0.02 of the allowed (2e-05*1.3 + 1e-05*|x|)"
  std::string describe(const std::string& tensor, const Tolerance& tolerance) const;
};
// -inf expected matches -inf actual exactly (queries that see no key).
Comparison compare_to_reference(std::span<const double> actual, std::span<const double> expected,
                                const Tolerance& tolerance);

}  // namespace hal::conformance
