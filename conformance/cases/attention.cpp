// Attention cases. Numerics: every implementation the device claims (fused,
// flash, math), forward and backward, against the double-precision reference
// (attention_reference.hpp) with the per-dtype tolerances of docs/attention.md.
// Probes: fused and flash run and match the reference, verdicts cached for the
// runtime's selection. API: explain lists every candidate with its reasons and
// chooses an eligible one; HAL_ATTN_STRICT turns a fallback into an error.
// Performance: flash forward TFLOP/s against the profile's minimum. The FP32
// GEMM corner case: f32 math attention on inputs that expose reduced-precision
// tensor-core GEMMs, against the reference and the host backend.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "case_support.hpp"
#include "hal/capabilities.hpp"
#include "hal/conformance/attention_reference.hpp"
#include "hal/conformance/health.hpp"

namespace hal::conformance::cases {
namespace {

using Implementation = AttentionImplementation;

std::string capability_of(Implementation implementation) {
  return "attention." + std::string(to_string(implementation));
}


// The options that run one implementation, and test it even when an earlier
// probe cached it as absent: the claim (declaration, quirk, override) is what
// conformance verifies, and a stale verdict must not keep it from being
// verified again. The call's capability override is the top layer.
AttentionOptions claim_under_test(CaseContext& context, Implementation implementation) {
  AttentionOptions options{{implementation}};
  const std::string key = capability_of(implementation);
  const EffectiveCapability effective = effective_capability(context.device(), key);
  if (effective.is_true() || effective.decided_by != "probe") return options;
  options.capability_overrides.push_back(key + "=true");
  context.note("the probe cache says " + key + " is absent (" + effective.layers.back().source +
               "); the claim is tested again");
  return options;
}

struct NamedShape {
  std::string name;
  AttentionParams params;
  std::vector<std::int32_t> key_ranges = {};  // [batch][seq_q][begin, end); empty: none
};

// Small shapes that still reach the hard parts: GQA with sequences that are
// no multiple of a tile, causal bottom-right with seq_q != seq_kv over MQA in
// BHSD order, and head dim 128 with an explicit softmax scale.
std::vector<NamedShape> numerics_shapes(DType dtype, bool quick) {
  const std::int64_t grow = quick ? 1 : 4;
  const AttentionParams gqa{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 37 * grow, .seq_kv = 37 * grow,
                            .head_dim_qk = 64, .dtype = dtype};
  const AttentionParams bottom_right{.batch = 1, .heads_q = 4, .heads_kv = 1, .seq_q = 19 * grow, .seq_kv = 53 * grow,
                                     .head_dim_qk = 64, .dtype = dtype, .layout = AttentionLayout::bhsd,
                                     .causal = true, .alignment = MaskAlignment::bottom_right};
  // A scale sharper than the default: a softmax far from uniform.
  const AttentionParams wide{.batch = 1, .heads_q = 2, .heads_kv = 2, .seq_q = 64 * grow, .seq_kv = 64 * grow,
                             .head_dim_qk = 128, .dtype = dtype, .causal = true,
                             .softmax_scale = 2.0f / std::sqrt(128.0f)};

  return {{"gqa", gqa}, {"causal_bottom_right", bottom_right}, {"head_dim_128", wide}};
}

// Causal key ranges for sequences inside batch rows: each (row, first,
// length) sees only its own keys; positions of no sequence see no key.
std::vector<std::int32_t> sequence_ranges(const AttentionParams& params,
                                          std::initializer_list<std::array<std::int32_t, 3>> sequences) {
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(params.batch * params.seq_q * 2), 0);
  for (const auto& [row, first, length] : sequences)
    for (std::int32_t i = first; i < first + length; ++i) {
      const std::size_t at = static_cast<std::size_t>((row * params.seq_q + i) * 2);
      ranges[at] = first;
      ranges[at + 1] = i + 1;
    }
  return ranges;
}

// Variable-length batches as frameworks pass them: key padding on the left
// and on the right of a GQA batch, and documents packed into one row.
std::vector<NamedShape> key_range_shapes(DType dtype) {
  const AttentionParams padded{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 45, .head_dim_qk = 64,
                               .dtype = dtype, .key_ranges = true};
  const AttentionParams packed{.batch = 1, .heads_q = 2, .seq_q = 70, .head_dim_qk = 128, .dtype = dtype,
                               .layout = AttentionLayout::bhsd, .key_ranges = true};
  return {{"padded_left_and_right", padded, sequence_ranges(padded, {{0, 7, 38}, {1, 0, 40}})},
          {"packed_documents", packed, sequence_ranges(packed, {{0, 0, 21}, {0, 21, 33}, {0, 54, 16}})}};
}

// A device tensor described by logical extents and the resolved strides.
class DeviceTensor {
 public:
  DeviceTensor(const Device& device, DType dtype, const TensorStrides& strides, std::int64_t batch,
               std::int64_t heads, std::int64_t seq, std::int64_t dim)
      : dtype_(dtype), strides_(strides), extents_{batch, heads, seq, dim} {
    std::int64_t last = 0;
    last += (batch - 1) * strides.batch + (heads - 1) * strides.head + (seq - 1) * strides.seq + (dim - 1) * strides.dim;
    span_ = static_cast<std::size_t>(last + 1);
    buffer_ = device.allocate(span_ * size_in_bytes(dtype));
    // NaN everywhere, so an output the implementation never writes cannot pass.
    buffer_.fill(0, buffer_.size(), 0xFF, 1);
  }

  std::size_t elements() const {
    return static_cast<std::size_t>(extents_[0] * extents_[1] * extents_[2] * extents_[3]);
  }

  void upload(const std::vector<double>& logical) {
    std::vector<unsigned char> bytes(span_ * size_in_bytes(dtype_), 0xFF);
    each([&](std::size_t flat, std::size_t offset) { store_element(dtype_, bytes.data(), offset, logical[flat]); });
    buffer_.write(0, bytes.data(), bytes.size());
  }

  std::vector<double> download() const {
    std::vector<unsigned char> bytes(span_ * size_in_bytes(dtype_));
    buffer_.read(0, bytes.data(), bytes.size());
    std::vector<double> logical(elements());
    each([&](std::size_t flat, std::size_t offset) { logical[flat] = load_element(dtype_, bytes.data(), offset); });
    return logical;
  }

  TensorRef ref() const { return {buffer_, 0}; }

 private:
  template <typename Visit>
  void each(Visit&& visit) const {
    std::size_t flat = 0;
    for (std::int64_t b = 0; b < extents_[0]; ++b)
      for (std::int64_t h = 0; h < extents_[1]; ++h)
        for (std::int64_t s = 0; s < extents_[2]; ++s)
          for (std::int64_t d = 0; d < extents_[3]; ++d)
            visit(flat++, static_cast<std::size_t>(b * strides_.batch + h * strides_.head + s * strides_.seq +
                                                   d * strides_.dim));
  }

  DType dtype_;
  TensorStrides strides_;
  std::int64_t extents_[4];
  std::size_t span_ = 0;
  Buffer buffer_;
};

// Values as the dtype holds them, so the reference sees exactly the device's inputs.
std::vector<double> random_values(std::size_t count, DType dtype, std::mt19937& generator) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> values(count);
  for (auto& value : values) value = round_to(dtype, uniform(generator));
  return values;
}

// Judges one tensor: evidence for the report, a line for the message.
class Judge {
 public:
  Judge(CaseContext& context, std::string shape) : context_(context), shape_(std::move(shape)) {}

  void check(const std::string& tensor, const std::vector<double>& actual, const std::vector<double>& expected,
             const Tolerance& tolerance) {
    const Comparison comparison = compare_to_reference(actual, expected, tolerance);
    const std::string prefix = shape_ + " " + tensor;
    context_.measure({prefix + " max_abs_error", comparison.max_abs_error, "", 0.0,
                      tolerance.absolute * comparison.scale, "", ""});
    context_.measure({prefix + " max_rel_error", comparison.max_rel_error, "", 0.0, tolerance.relative, "", ""});
    context_.measure({prefix + " error/allowed", comparison.worst_ratio, "", 1.0, {}, "<=", ""});
    lines_ += "\n  " + comparison.describe(tensor, tolerance);
    if (!comparison.ok()) failed_.push_back(tensor);
  }

  const std::vector<std::string>& failed() const { return failed_; }
  const std::string& lines() const { return lines_; }

 private:
  CaseContext& context_;
  std::string shape_;
  std::string lines_;
  std::vector<std::string> failed_;
};

// Why the options' implementation cannot run these params, or empty when it can.
std::vector<std::string> ineligible_because(const Device& device, const AttentionParams& params,
                                            const AttentionOptions& only, bool backward) {
  const AttentionDecision decision = explain_attention(device, params, backward, only);
  const AttentionCandidate& candidate =
      decision.candidates.at(static_cast<std::size_t>(only.implementations.front()));
  if (candidate.eligible) return {};
  return candidate.reasons.empty() ? std::vector<std::string>{"ineligible, no reason given"} : candidate.reasons;
}

struct ShapeOutcome {
  bool ran = false;
  std::vector<std::string> failed;  // tensors out of tolerance
  std::string report;               // one paragraph for the message
};

// Forward (O and LSE) and, when asked, backward (dQ, dK, dV from the forward's
// O and LSE) of one implementation on one shape.
ShapeOutcome run_shape(CaseContext& context, const AttentionOptions& only, const NamedShape& shape, bool backward) {
  const Implementation implementation = only.implementations.front();
  AttentionParams params = shape.params;
  params.return_lse = true;  // the backward pass needs it; the forward is checked on it too
  const std::string title = shape.name + " (" + params.describe() + ")";
  ShapeOutcome outcome;
  for (const bool pass : {false, true}) {
    if (pass && !backward) break;
    const auto reasons = ineligible_because(context.device(), params, only, pass);
    if (!reasons.empty()) {
      outcome.report = title + ": not run, " + std::string(to_string(implementation)) + " does not take it" +
                       (pass ? " backward" : "") + ": " + reasons.front();
      return outcome;
    }
  }
  const Device& device = context.device();
  const AttentionParams r = params.resolved();
  const DType dtype = params.dtype;
  DeviceTensor q(device, dtype, *r.q_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_qk);
  DeviceTensor k(device, dtype, *r.k_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_qk);
  DeviceTensor v(device, dtype, *r.v_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_v);
  DeviceTensor o(device, dtype, *r.o_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_v);
  const TensorStrides lse_strides{r.heads_q * r.seq_q, r.seq_q, 1, 1};
  DeviceTensor lse(device, DType::f32, lse_strides, r.batch, r.heads_q, r.seq_q, 1);

  std::mt19937 generator(context.seed("attention " + shape.name));
  AttentionOptions call = only;
  if (params.key_ranges) {
    Buffer ranges = device.allocate(shape.key_ranges.size() * sizeof(std::int32_t));
    ranges.write(0, shape.key_ranges.data(), shape.key_ranges.size() * sizeof(std::int32_t));
    call.key_ranges = {ranges};
  }
  const std::vector<double> q_values = random_values(q.elements(), dtype, generator);
  const std::vector<double> k_values = random_values(k.elements(), dtype, generator);
  const std::vector<double> v_values = random_values(v.elements(), dtype, generator);
  q.upload(q_values);
  k.upload(k_values);
  v.upload(v_values);

  const Stream stream = device.create_stream();
  const AttentionDecision forward = attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref(), lse.ref(), call);
  stream.synchronize();
  context.require(forward.chosen == implementation, title + ": asked for " + std::string(to_string(implementation)) +
                                                         " and got " + std::string(to_string(forward.chosen)));
  const AttentionForwardReference expected =
      attention_reference_forward(params, q_values, k_values, v_values, shape.key_ranges);
  Judge judge(context, shape.name);
  judge.check("O", o.download(), expected.o, attention_tolerance(dtype));
  judge.check("LSE", lse.download(), expected.lse, lse_tolerance());

  if (backward) {
    DeviceTensor grad_o(device, dtype, *r.grad_o_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_v);
    DeviceTensor grad_q(device, dtype, *r.grad_q_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_qk);
    DeviceTensor grad_k(device, dtype, *r.grad_k_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_qk);
    DeviceTensor grad_v(device, dtype, *r.grad_v_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_v);
    const std::vector<double> grad_o_values = random_values(grad_o.elements(), dtype, generator);
    grad_o.upload(grad_o_values);
    const AttentionDecision decision =
        attention_backward(stream, params, q.ref(), k.ref(), v.ref(), o.ref(), grad_o.ref(), lse.ref(), grad_q.ref(),
                           grad_k.ref(), grad_v.ref(), call);
    stream.synchronize();
    context.require(decision.chosen == implementation, title + ": backward asked for " +
                                                           std::string(to_string(implementation)) + " and got " +
                                                           std::string(to_string(decision.chosen)));
    const AttentionGradientsReference gradients =
        attention_reference_backward(params, q_values, k_values, v_values, grad_o_values, shape.key_ranges);
    judge.check("dQ", grad_q.download(), gradients.grad_q, attention_tolerance(dtype));
    judge.check("dK", grad_k.download(), gradients.grad_k, attention_tolerance(dtype));
    judge.check("dV", grad_v.download(), gradients.grad_v, attention_tolerance(dtype));
  }
  outcome.ran = true;
  outcome.failed = judge.failed();
  outcome.report = title + ":" + judge.lines();
  return outcome;
}

// Runs the shapes, then passes, or fails naming every tensor out of
// tolerance. An implementation may decline a shape (its supports() reasons);
// declining all of them skips a numerics case (no evidence) but fails a
// probe: an implementation that runs nothing basic is not present.
enum class WhenAllDeclined { skip, fail };

void judge_shapes(CaseContext& context, Implementation implementation, const std::vector<NamedShape>& shapes,
                  bool backward, WhenAllDeclined all_declined) {
  const AttentionOptions only = claim_under_test(context, implementation);
  std::string failures, details, passed;
  int ran = 0;
  for (const auto& shape : shapes) {
    const ShapeOutcome outcome = run_shape(context, only, shape, backward);
    details += "\n" + outcome.report;
    ran += outcome.ran ? 1 : 0;
    for (const auto& tensor : outcome.failed) failures += (failures.empty() ? "" : ", ") + shape.name + " " + tensor;
    if (outcome.ran && outcome.failed.empty()) passed += (passed.empty() ? "" : ", ") + shape.name;
  }
  // The headline first: the probe cache keeps only the start of the message.
  const std::string name(to_string(implementation));
  if (!failures.empty())
    context.fail(name + " attention is out of tolerance against the double-precision reference: " + failures +
                 details);
  if (ran == 0 && all_declined == WhenAllDeclined::fail)
    context.fail(name + " is claimed, but takes none of the probe's shapes:" + details);
  if (ran == 0) context.skip(name + " is claimed, but takes none of the shapes of this case: no evidence" + details);
  context.note(name + (backward ? " forward and backward" : " forward") + " matched the double-precision reference (" +
               passed + ")" + details);
}

void numerics(CaseContext& context, Implementation implementation, bool backward, DType dtype) {
  judge_shapes(context, implementation, numerics_shapes(dtype, context.quick()), backward, WhenAllDeclined::skip);
}

// Quick and broad: forward and backward of the GQA shape in every dtype the
// implementation takes. Its verdict goes to the probe cache.
void probe(CaseContext& context, Implementation implementation) {
  std::vector<NamedShape> shapes;
  for (const DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    NamedShape shape = numerics_shapes(dtype, true).front();
    shape.name += "_" + std::string(to_string(dtype));
    shapes.push_back(shape);
  }
  judge_shapes(context, implementation, shapes, true, WhenAllDeclined::fail);
}

// ---- api -------------------------------------------------------------------

const AttentionCandidate& candidate_of(const AttentionDecision& decision, Implementation implementation) {
  return decision.candidates.at(static_cast<std::size_t>(implementation));
}

// Runs a tiny forward with the call's options; returns the decision.
AttentionDecision run_tiny(const Device& device, const AttentionParams& params, const AttentionOptions& options) {
  const AttentionParams r = params.resolved();
  DeviceTensor q(device, params.dtype, *r.q_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_qk);
  DeviceTensor k(device, params.dtype, *r.k_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_qk);
  DeviceTensor v(device, params.dtype, *r.v_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_v);
  DeviceTensor o(device, params.dtype, *r.o_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_v);
  std::mt19937 generator(static_cast<std::uint32_t>(stable_hash("attention tiny")));
  for (DeviceTensor* tensor : {&q, &k, &v}) tensor->upload(random_values(tensor->elements(), params.dtype, generator));
  const Stream stream = device.create_stream();
  const AttentionDecision decision = attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref(), {}, options);
  stream.synchronize();
  return decision;
}

void explain_and_strict(CaseContext& context) {
  const Device& device = context.device();
  std::vector<Implementation> claimed;
  for (const Implementation implementation : {Implementation::fused, Implementation::flash, Implementation::math})
    if (resolve_claim(device, capability_of(implementation)).claimed) claimed.push_back(implementation);
  if (claimed.empty())
    context.skip("the device claims no attention implementation (attention.fused, .flash, .math): nothing to explain");

  AttentionParams params;
  params.batch = 1;
  params.heads_q = 4;
  params.heads_kv = 2;
  params.seq_q = params.seq_kv = 16;
  params.head_dim_qk = 64;
  params.dtype = DType::bf16;  // what every implementation kind takes, fused kernels included

  // 1. explain: every candidate listed, each one not eligible says why, and
  //    the choice is the first eligible one of the order.
  const AttentionDecision decision = explain_attention(device, params);
  context.require(decision.candidates.size() == 3, "explain_attention listed " +
                                                       std::to_string(decision.candidates.size()) +
                                                       " candidates; expected fused, flash and math");
  for (const Implementation implementation : {Implementation::fused, Implementation::flash, Implementation::math}) {
    const AttentionCandidate& candidate = candidate_of(decision, implementation);
    const std::string name(to_string(implementation));
    context.require(candidate.implementation == implementation,
                    "explain_attention lists the candidates out of order at " + name);
    context.require(candidate.eligible || !candidate.reasons.empty(),
                    "explain_attention says " + name + " is ineligible without giving a reason");
  }
  context.require(!decision.order_source.empty(), "explain_attention does not say where its order came from");
  if (decision.found) {
    context.require(candidate_of(decision, decision.chosen).eligible,
                    "explain_attention chose " + std::string(to_string(decision.chosen)) + ", which is not eligible");
    for (const Implementation earlier : decision.order) {
      if (earlier == decision.chosen) break;
      context.require(!candidate_of(decision, earlier).eligible,
                      "explain_attention chose " + std::string(to_string(decision.chosen)) + " over " +
                          std::string(to_string(earlier)) + ", which is eligible and earlier in the order");
    }
  }
  context.note("explain (" + decision.order_source + "):\n" + decision.to_string());

  std::vector<Implementation> eligible;
  for (const Implementation implementation : claimed)
    if (candidate_of(decision, implementation).eligible) eligible.push_back(implementation);
  if (eligible.empty())
    context.fail("the device claims attention (" + std::string(to_string(claimed.front())) +
                 ", ...) but no implementation is eligible for a small bf16 GQA shape:\n" + decision.to_string());

  // 2. Strict mode with nothing to fall back from: the first choice runs.
  {
    AttentionOptions strict{{eligible.front()}};
    strict.strict = true;
    const AttentionDecision strict_run = run_tiny(device, params, strict);
    context.require(strict_run.chosen == eligible.front() && !strict_run.fell_back,
                    "in strict mode with an eligible first choice, " +
                        std::string(to_string(strict_run.chosen)) + " ran instead of " +
                        std::string(to_string(eligible.front())));
  }

  // 3. A fallback: the first eligible implementation switched off by a user
  //    override; the next one runs, and strict mode refuses it.
  if (eligible.size() < 2) {
    context.note("only " + std::string(to_string(eligible.front())) +
                 " is eligible: the fallback part of this case needs two implementations and was not run");
    return;
  }
  const Implementation first = eligible[0], second = eligible[1];
  AttentionOptions fallback_options{{first, second}};
  fallback_options.capability_overrides.push_back(capability_of(first) + "=false");
  fallback_options.strict = false;
  const AttentionDecision fallback = explain_attention(device, params, false, fallback_options);
  context.require(fallback.found && fallback.chosen == second && fallback.fell_back,
                  "with " + capability_of(first) + "=false, explain_attention should fall back to " +
                      std::string(to_string(second)) + ":\n" + fallback.to_string());
  const auto& reasons = candidate_of(fallback, first).reasons;
  context.require(!reasons.empty() && reasons.front().find("(override by") != std::string::npos,
                  "the fallback's reason does not cite the override layer: " +
                      (reasons.empty() ? std::string("no reason") : reasons.front()));
  const AttentionDecision ran = run_tiny(device, params, fallback_options);
  context.require(ran.chosen == second, "the fallback ran " + std::string(to_string(ran.chosen)));
  fallback_options.strict = true;
  try {
    run_tiny(device, params, fallback_options);
  } catch (const Error& error) {
    const std::string message = error.what();
    context.require(error.code() == StatusCode::unsupported,
                    "strict mode refused the fallback as " + std::string(to_string(error.code())) +
                        ", expected unsupported: " + message);
    context.require(message.find("strict mode is on (AttentionOptions::strict)") != std::string::npos,
                    "strict mode refused the fallback without saying strict mode was on and why: " + message);
    context.note("fallback " + std::string(to_string(first)) + " -> " + std::string(to_string(second)) +
                 " ran; in strict mode it was refused: " + message);
    return;
  }
  context.fail("in strict mode the fallback from " + std::string(to_string(first)) + " to " +
               std::string(to_string(second)) + " ran instead of being refused");
}

// ---- performance -----------------------------------------------------------

// A forward problem on the device: Q, K, V of seeded random values (kept
// for the reference) and an O of NaNs.
struct ForwardProblem {
  ForwardProblem(const CaseContext& context, const AttentionParams& params, std::string_view seed_purpose)
      : r(params.resolved()),
        q(context.device(), params.dtype, *r.q_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_qk),
        k(context.device(), params.dtype, *r.k_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_qk),
        v(context.device(), params.dtype, *r.v_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_v),
        o(context.device(), params.dtype, *r.o_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_v) {
    std::mt19937 generator(context.seed(seed_purpose));
    q_values = random_values(q.elements(), params.dtype, generator);
    k_values = random_values(k.elements(), params.dtype, generator);
    v_values = random_values(v.elements(), params.dtype, generator);
    q.upload(q_values);
    k.upload(k_values);
    v.upload(v_values);
  }
  AttentionParams r;  // resolved
  DeviceTensor q, k, v, o;
  std::vector<double> q_values, k_values, v_values;
};

// The reference of O for one query head of a problem (batch 0), against the
// whole problem's O: checking a sampled head costs a fraction of the full
// reference and still fails a kernel that skips or garbles its work.
void check_sampled_head(CaseContext& context, const std::string& what, const AttentionParams& params,
                        std::int64_t head, const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, const std::vector<double>& o) {
  const AttentionParams r = params.resolved();
  const std::int64_t kv_head = head / (r.heads_q / r.heads_kv);
  auto slice = [](const std::vector<double>& tensor, std::int64_t index, std::int64_t seq, std::int64_t dim) {
    const auto begin = tensor.begin() + static_cast<std::ptrdiff_t>(index * seq * dim);
    return std::vector<double>(begin, begin + static_cast<std::ptrdiff_t>(seq * dim));
  };
  AttentionParams one = params;
  one.batch = 1;
  one.heads_q = one.heads_kv = 1;
  const AttentionForwardReference expected = attention_reference_forward(
      one, slice(q, head, r.seq_q, r.head_dim_qk), slice(k, kv_head, r.seq_kv, r.head_dim_qk),
      slice(v, kv_head, r.seq_kv, r.head_dim_v));
  const Tolerance tolerance = attention_tolerance(params.dtype);
  const Comparison comparison = compare_to_reference(slice(o, head, r.seq_q, r.head_dim_v), expected.o, tolerance);
  const std::string tensor = "O of query head " + std::to_string(head);
  context.measure({"sampled " + tensor + " error/allowed", comparison.worst_ratio, "", 1.0, {}, "<=", ""});
  if (!comparison.ok())
    context.fail(what + " computed a wrong result: " + comparison.describe(tensor, tolerance));
}

void flash_forward_rate(CaseContext& context) {
  const AttentionOptions only = claim_under_test(context, Implementation::flash);
  AttentionParams params;
  params.batch = 1;
  params.heads_q = 16;
  params.heads_kv = 4;
  params.seq_q = params.seq_kv = context.quick() ? 512 : 1024;
  params.head_dim_qk = 128;
  params.dtype = DType::bf16;
  const auto reasons = ineligible_because(context.device(), params, only, false);
  if (!reasons.empty()) context.skip("flash does not take " + params.describe() + ": " + reasons.front());

  const Device& device = context.device();
  const AttentionParams r = params.resolved();
  const ForwardProblem problem(context, params, "flash forward rate");
  const DeviceTensor &q = problem.q, &k = problem.k, &v = problem.v, &o = problem.o;
  const std::vector<double>&q_values = problem.q_values, &k_values = problem.k_values, &v_values = problem.v_values;
  const Stream stream = device.create_stream();
  auto launch = [&] { attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref(), {}, only); };

  launch();  // warm-up: workspace, code paths, caches
  stream.synchronize();
  const double flop = 4.0 * static_cast<double>(r.batch * r.heads_q) * static_cast<double>(r.seq_q) *
                      static_cast<double>(r.seq_kv) * static_cast<double>(r.head_dim_qk);
  SpanTimer timer(context, stream);
  auto timed = [&](int repetitions) {
    timer.start();
    for (int i = 0; i < repetitions; ++i) launch();
    return timer.stop(std::to_string(repetitions) + " flash forwards of " + params.describe());
  };
  // Enough repetitions for a span worth trusting (a quarter second), then
  // repeated runs of that span; the last run's O is checked.
  int repetitions = 1;
  for (double seconds = timed(repetitions); seconds < 0.25 && repetitions < 4096; seconds = timed(repetitions))
    repetitions = static_cast<int>(std::min(4096.0, repetitions * std::clamp(0.3 / seconds, 2.0, 64.0)));
  std::vector<double> runs;
  for (int run = 0; run < (context.quick() ? 3 : 5); ++run) {
    o.ref().buffer.fill(0, o.ref().buffer.size(), 0xFF, 1);  // NaN: an O the last run does not write fails
    runs.push_back(flop * repetitions / timed(repetitions) / 1e12);
  }
  const std::vector<double> o_values = o.download();
  for (const std::int64_t head : {std::int64_t{0}, r.heads_q - 1})
    check_sampled_head(context, "the timed flash forward", params, head, q_values, k_values, v_values, o_values);
  judge_minimum(context, "flash_forward_rate", spread_of(runs), "TFLOP/s", "attention.flash.forward.min_tflops",
                "flash attention forward of " + params.describe() + " (" + std::to_string(repetitions) +
                    " per run)");
}

// ---- stress -----------------------------------------------------------------

// Attention forward (two GEMMs and a softmax per head, by the implementation
// the runtime picks) for the profile's stress time with telemetry watched.
// The first result is checked against the reference on two heads; every
// later one must equal it bit for bit, so a result that drifts as the device
// heats up fails.
void compute_soak(CaseContext& context) {
  const Device& device = context.device();
  const bool gpu = device.info().type != DeviceType::cpu;
  AttentionParams params;
  params.batch = 1;
  params.heads_q = params.heads_kv = gpu ? 16 : 4;
  params.seq_q = params.seq_kv = gpu ? (context.quick() ? 1024 : 2048) : 256;
  params.head_dim_qk = gpu ? 128 : 64;
  params.dtype = DType::bf16;
  if (!ineligible_because(device, params, {{Implementation::flash}}, false).empty() &&
      !ineligible_because(device, params, {{Implementation::math}}, false).empty())
    params.dtype = DType::f32;
  const AttentionParams r = params.resolved();
  const ForwardProblem problem(context, params, "compute soak");
  const DeviceTensor &q = problem.q, &k = problem.k, &v = problem.v, &o = problem.o;
  const Stream stream = device.create_stream();
  const Buffer& output = o.ref().buffer;
  std::vector<std::uint8_t> first(output.size()), latest(output.size());
  const AttentionDecision decision = attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref());
  stream.synchronize();
  output.read(0, first.data(), first.size());
  const std::vector<double> o_values = o.download();
  for (const std::int64_t head : {std::int64_t{0}, r.heads_q - 1})
    check_sampled_head(context, "the first run", params, head, problem.q_values, problem.k_values, problem.v_values,
                       o_values);

  StressWatch watch(context, std::chrono::milliseconds(250));
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::duration<double>(context.settings().stress_seconds);
  long long iterations = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    output.fill(0, output.size(), 0xFF, 1);  // NaN: a run that writes nothing cannot match
    attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref());
    stream.synchronize();
    output.read(0, latest.data(), latest.size());
    context.require_equal_bytes(latest.data(), first.data(), first.size(),
                                "O of run " + std::to_string(iterations + 2) + " against the first run");
    ++iterations;
    watch.poll();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double flop = 4.0 * static_cast<double>(r.batch * r.heads_q) * static_cast<double>(r.seq_q) *
                      static_cast<double>(r.seq_kv) * static_cast<double>(r.head_dim_qk);
  context.measure({"runs", static_cast<double>(iterations), "", {}, {}, "", ""});
  context.measure({"rate", iterations > 0 ? flop * static_cast<double>(iterations) / seconds / 1e12 : 0.0, "TFLOP/s",
                   {}, {}, "", ""});
  context.require(iterations > 0, "no run completed within " + std::to_string(context.settings().stress_seconds) +
                                      " s");
  context.note(std::to_string(iterations + 1) + " " + std::string(to_string(decision.chosen)) + " forwards of " +
               params.describe() + " in " + with_precision(seconds, 3) + " s, each identical to the first");
  watch.finish();
}

// ---- the FP32 GEMM corner case ---------------------------------------------

// A reported accuracy loss of FP32 GEMMs on tensor cores (data/quirks.toml,
// numerics.f32_gemm_full_precision): large-magnitude inputs with a k that is
// no multiple of a tile. The math path runs both GEMMs of attention in f32:
// Q·Kᵀ with k = head dim 72, P·V with k = seq_kv 37.
constexpr const char* f32_gemm_capability = "numerics.f32_gemm_full_precision";

// "quirk <id> ...: reason" when a quirk reports this device, else "".
std::string f32_gemm_quirk(const Device& device) {
  for (const CapabilityLayer& layer : effective_capability(device, f32_gemm_capability).layers)
    if (layer.layer == "quirk") return layer.source + (layer.reason.empty() ? "" : ": " + layer.reason);
  return {};
}

struct AttentionOutputs {
  std::vector<double> o, lse;
};

AttentionOutputs run_math_forward(const Device& device, const AttentionParams& params, const std::vector<double>& q_values,
                                  const std::vector<double>& k_values, const std::vector<double>& v_values) {
  const AttentionParams r = params.resolved();
  DeviceTensor q(device, params.dtype, *r.q_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_qk);
  DeviceTensor k(device, params.dtype, *r.k_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_qk);
  DeviceTensor v(device, params.dtype, *r.v_strides, r.batch, r.heads_kv, r.seq_kv, r.head_dim_v);
  DeviceTensor o(device, params.dtype, *r.o_strides, r.batch, r.heads_q, r.seq_q, r.head_dim_v);
  const TensorStrides lse_strides{r.heads_q * r.seq_q, r.seq_q, 1, 1};
  DeviceTensor lse(device, DType::f32, lse_strides, r.batch, r.heads_q, r.seq_q, 1);
  q.upload(q_values);
  k.upload(k_values);
  v.upload(v_values);
  const Stream stream = device.create_stream();
  attention_forward(stream, params, q.ref(), k.ref(), v.ref(), o.ref(), lse.ref(), {{Implementation::math}});
  stream.synchronize();
  return {o.download(), lse.download()};
}

void f32_gemm_corner_case(CaseContext& context) {
  const Device& device = context.device();
  const std::string quirk = f32_gemm_quirk(device);
  const std::string reported = quirk.empty() ? "" : " (reported for this device: " + quirk + ")";
  AttentionParams params;
  params.batch = 1;
  params.heads_q = params.heads_kv = 2;
  params.seq_q = 33;
  params.seq_kv = 37;
  params.head_dim_qk = 72;
  params.dtype = DType::f32;
  params.return_lse = true;
  // |q·k| reaches ~3e6: the scale brings the logits back to a few units, so
  // the softmax stays far from one-hot and every product counts.
  params.softmax_scale = 1e-6f;
  const auto reasons = ineligible_because(device, params, {{Implementation::math}}, false);
  if (!reasons.empty())
    context.skip("f32 math attention cannot run on this device, so no FP32 GEMM can be checked through the API: " +
                 reasons.front() + reported);

  const AttentionParams r = params.resolved();
  std::mt19937 generator(context.seed("f32 gemm"));
  std::uniform_real_distribution<double> large(-1024.0, 1024.0), small(-1.0, 1.0);
  auto values = [&](std::int64_t count, double offset, std::uniform_real_distribution<double>& spread) {
    std::vector<double> result(static_cast<std::size_t>(count));
    for (auto& value : result) value = round_to(DType::f32, offset + spread(generator));
    return result;
  };
  const std::vector<double> q_values = values(r.batch * r.heads_q * r.seq_q * r.head_dim_qk, 0.0, large);
  const std::vector<double> k_values = values(r.batch * r.heads_kv * r.seq_kv * r.head_dim_qk, 0.0, large);
  // 4096 plus a small part: a 10-bit mantissa (TF32) keeps none of the small part.
  const std::vector<double> v_values = values(r.batch * r.heads_kv * r.seq_kv * r.head_dim_v, 4096.0, small);

  const AttentionOutputs on_device = run_math_forward(device, params, q_values, k_values, v_values);
  const AttentionForwardReference expected = attention_reference_forward(params, q_values, k_values, v_values);
  Judge judge(context, "f32_gemm");
  judge.check("O vs reference", on_device.o, expected.o, attention_tolerance(DType::f32));
  judge.check("LSE vs reference", on_device.lse, expected.lse, lse_tolerance());
  if (device.backend_name() != "host") {
    // The host backend is the reference every primitive is held to.
    RuntimeOptions host_only;
    host_only.backends = {"host"};
    const Runtime host_runtime = Runtime::create(host_only);
    const AttentionOutputs on_host = run_math_forward(host_runtime.device("host:0"), params, q_values, k_values, v_values);
    judge.check("O vs host", on_device.o, on_host.o, attention_tolerance(DType::f32));
  }
  if (!judge.failed().empty())
    context.fail("FP32 GEMMs in f32 math attention (" + params.describe() + ", large-magnitude inputs, k = 72 and 37) "
                 "are out of tolerance" + reported + ":" + judge.lines());
  context.note("FP32 GEMMs in f32 math attention (" + params.describe() +
               ", large-magnitude inputs, k = 72 and 37) match the reference" +
               (device.backend_name() != "host" ? " and the host backend" : "") +
               (quirk.empty() ? "" : "; the reported corner case (" + quirk + ") did not show here") + ":" +
               judge.lines());
}

}  // namespace

void register_cases_attention(Registry& registry) {
  for (const Implementation implementation : {Implementation::fused, Implementation::flash, Implementation::math}) {
    const std::string name(to_string(implementation));
    for (const bool backward : {false, true})
      for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        const std::string direction = backward ? "backward" : "forward";
        const std::string type(to_string(dtype));
        registry.add({"numerics.attention." + name + "." + direction + "." + type, Tier::numerics,
                      name + " attention " +
                          (backward ? "forward, then backward from its O and LSE," : "forward (O and LSE)") + " in " +
                          type + " against the double-precision reference: GQA, causal bottom-right with seq_q != "
                          "seq_kv, head dim 128",
                      capability_of(implementation), false, 0,
                      [=](CaseContext& context) { numerics(context, implementation, backward, dtype); }});
      }
    registry.add({"numerics.attention." + name + ".key_ranges", Tier::numerics,
                  name + " attention forward and backward with per-query key ranges (AttentionOptions::key_ranges) "
                         "in f32 and bf16 against the double-precision reference: a GQA batch padded on the left "
                         "and on the right, and three documents packed into one row, causal within each",
                  capability_of(implementation), false, 0, [=](CaseContext& context) {
                    std::vector<NamedShape> shapes = key_range_shapes(DType::f32);
                    for (NamedShape& shape : key_range_shapes(DType::bf16)) {
                      shape.name += "_bf16";
                      shapes.push_back(std::move(shape));
                    }
                    judge_shapes(context, implementation, shapes, true, WhenAllDeclined::skip);
                  }});
    if (implementation != Implementation::math)
      registry.add({"numerics.attention." + name + ".probe", Tier::numerics,
                    name + " attention runs and matches the reference on this device (bf16, f16, f32; forward and "
                           "backward); the verdict is cached for attention selection",
                    capability_of(implementation), true, 0,
                    [=](CaseContext& context) { probe(context, implementation); }});
  }
  registry.add({"numerics.attention.math.f32_gemm_corner_case", Tier::numerics,
                "the FP32 GEMMs of f32 math attention on large-magnitude inputs with k no multiple of a tile (head "
                "dim 72, seq_kv 37) against the double-precision reference and the host backend; the corner case "
                "data/quirks.toml reports for the PPU (numerics.f32_gemm_full_precision)",
                "", false, 0, f32_gemm_corner_case});
  registry.add({"api.attention.explain_and_strict", Tier::api,
                "explain_attention lists every candidate with its reasons and chooses the first eligible one; a "
                "fallback runs, and HAL_ATTN_STRICT=1 refuses it",
                "", false, 0, explain_and_strict});
  registry.add({"stress.compute.attention", Tier::stress,
                "attention forward (two GEMMs and a softmax per head) for the profile's stress time, every result "
                "identical to the first, which matches the reference; telemetry watched: fails on clocks held down "
                "by heat, power brake or hardware slowdown and on critical health events",
                "", false, 0, compute_soak, [](const CaseSettings& settings) { return settings.stress_seconds + 2; }});
  registry.add({"performance.attention.flash.forward_rate", Tier::performance,
                "flash attention forward TFLOP/s (bf16, GQA 16/4 heads, head dim 128, seq 512 quick / 1024 full) "
                "against the profile minimum: the mean of repeated timed runs, each run's timing checked and the last "
                "run's O checked against the reference on two heads",
                "attention.flash", false, 0, flash_forward_rate,
                [](const CaseSettings& settings) { return settings.quick ? 4.0 : 10.0; }});
}

}  // namespace hal::conformance::cases
