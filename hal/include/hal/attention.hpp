// Scaled dot-product attention: parameters, forward/backward, and the
// explainable choice between implementations (fused -> flash -> math).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hal/device.hpp"
#include "hal/dtype.hpp"
#include "hal/memory.hpp"
#include "hal/stream.hpp"

namespace hal {

enum class AttentionImplementation : std::uint32_t { fused = 0, flash = 1, math = 2 };
std::string_view to_string(AttentionImplementation implementation);
std::optional<AttentionImplementation> parse_attention_implementation(std::string_view text);

// Memory order of Q, K, V, O when no explicit strides are given.
enum class AttentionLayout { bshd, bhsd };
enum class MaskAlignment : std::uint32_t { top_left = 0, bottom_right = 1 };

// Element strides named by axis, whatever the memory order.
struct TensorStrides {
  std::int64_t batch = 0, head = 0, seq = 0, dim = 0;
  bool operator==(const TensorStrides&) const = default;
};

// One attention problem. Dropout is not offered. Masking: key j is visible to
// query i when, with d = j - (i + offset), offset = 0 (top_left) or
// seq_kv - seq_q (bottom_right): causal needs d <= 0, window_left >= 0 needs
// d >= -window_left, window_right >= 0 needs d <= window_right. A query that
// sees no key gets O = 0 and LSE = -inf. With key_ranges, each query also
// sees only the keys of its own interval (AttentionOptions::key_ranges).
struct AttentionParams {
  std::int64_t batch = 1;
  std::int64_t heads_q = 1;
  std::int64_t heads_kv = 0;     // 0: same as heads_q; fewer: GQA/MQA, must divide heads_q
  std::int64_t seq_q = 1;
  std::int64_t seq_kv = 0;       // 0: same as seq_q
  std::int64_t head_dim_qk = 64;
  std::int64_t head_dim_v = 0;   // 0: same as head_dim_qk
  DType dtype = DType::f32;      // f32, f16 or bf16
  AttentionLayout layout = AttentionLayout::bshd;
  bool causal = false;
  MaskAlignment alignment = MaskAlignment::top_left;
  std::int64_t window_left = -1;   // -1: unbounded
  std::int64_t window_right = -1;  // -1: unbounded
  std::optional<float> softmax_scale{};  // default 1/sqrt(head_dim_qk)
  bool return_lse = false;              // LSE: f32, contiguous [batch, heads_q, seq_q]
  // The call passes per-query key ranges (AttentionOptions::key_ranges): key
  // padding on either side, packed sequences, any one-interval-per-query mask.
  bool key_ranges = false;
  // Explicit strides (elements) override the layout's; non-contiguous is fine.
  // Every member has an initializer, so a problem may be written with
  // designated initializers naming only what differs.
  std::optional<TensorStrides> q_strides{}, k_strides{}, v_strides{}, o_strides{};
  std::optional<TensorStrides> grad_o_strides{}, grad_q_strides{}, grad_k_strides{}, grad_v_strides{};

  // The same problem with every default made explicit (heads_kv, seq_kv,
  // head_dim_v, softmax_scale and all eight strides set); throws
  // invalid_argument naming any bad value.
  AttentionParams resolved() const;
  // "b=1 hq=32 hkv=8 sq=2048 skv=2048 d=128/128 f32 bshd causal(top_left)"
  std::string describe() const;
  // Floating-point operations of one call, the count every hal benchmark
  // divides by: 2 (head_dim_qk + head_dim_v) per (query, key) pair the mask
  // lets through forward, 2 (3 head_dim_qk + 2 head_dim_v) backward.
  double flops(bool backward = false) const;
};

struct TensorRef {
  Buffer buffer;
  std::uint64_t offset = 0;  // bytes from the buffer's start; with no buffer, a borrowed address (below)

  // Memory hal did not allocate (a framework's tensor), by its address on the
  // stream's device: borrowed for the call, with nothing imported or looked
  // up. hal checks its alignment, not its extent (it has none to check
  // against); the caller keeps it alive until the stream's work on it is
  // done. For devices whose backend declares attention.borrowed_addresses.
  static TensorRef borrowed(const void* address) { return {Buffer{}, reinterpret_cast<std::uintptr_t>(address)}; }
};

struct AttentionCandidate {
  AttentionImplementation implementation;
  bool in_order = true;   // part of the order in effect
  bool declared = false;  // the backend declares the capability (before quirks, probes, overrides)
  bool eligible = false;
  // Why not, most decisive first; each names the layer that said so.
  std::vector<std::string> reasons;
  std::uint64_t workspace_bytes = 0;
};

struct AttentionDecision {
  AttentionImplementation chosen = AttentionImplementation::math;
  bool found = false;                      // false: nothing eligible
  std::vector<AttentionImplementation> order;
  std::string order_source;                // "per-call", "HAL_ATTN_BACKENDS", "NVTE_* variables", ...
  std::vector<AttentionCandidate> candidates;  // fused, flash, math: every one
  // An implementation the backend declares, earlier in the order, was
  // rejected (by a quirk, probe, override or its supports() reasons).
  bool fell_back = false;
  // A table for people: one line per candidate with decision and reasons.
  std::string to_string() const;
};

struct AttentionOptions {
  // Per-call order; outranks every other source.
  std::vector<AttentionImplementation> implementations;
  // The caller's device scratch, from workspace.offset to the end of its
  // buffer, at least attention_workspace_size() bytes: the call then
  // allocates nothing (framework allocators, CUDA graph capture). Empty
  // buffer: the backend allocates its own. GPU backends take it; the host
  // backend's scratch is host memory of its own (unsupported there).
  TensorRef workspace = {};
  // With params.key_ranges (and only then): int32 [batch, seq_q, 2],
  // contiguous, on the stream's device: query i of batch row b sees key j
  // only if ranges[b][i][0] <= j < ranges[b][i][1] (clamped to [0, seq_kv];
  // begin >= end: no key), the same for every head, on top of causal and
  // the windows. For devices whose backend declares attention.key_ranges.
  TensorRef key_ranges = {};
  // Fail instead of falling back from the order's first choice; nullopt: the
  // attention.strict setting (HAL_ATTN_STRICT).
  std::optional<bool> strict = std::nullopt;
  // Print each new decision to stderr; nullopt: attention.debug (HAL_ATTN_DEBUG).
  std::optional<bool> debug = std::nullopt;
  // Capability values for this call ("attention.flash=false"), the top
  // layer, above the capabilities.overrides setting.
  std::vector<std::string> capability_overrides = {};
};

// Which implementation would run, and why each other did not. Reads the
// order sources and capability layers; never runs anything.
AttentionDecision explain_attention(const Device& device, const AttentionParams& params, bool backward = false,
                                    const AttentionOptions& options = {});

// The decision attention_forward/backward use for these params, made once
// and then looked up (the runtime keeps it; the reference is valid while the
// runtime lives). Params without tensors claim no address alignment, so an
// implementation that needs aligned tensors may be decided otherwise than for
// a call. Throws as those calls do when nothing (or, strict, not the first
// choice) is eligible.
const AttentionDecision& attention_decision(const Device& device, const AttentionParams& params, bool backward = false,
                                            const AttentionOptions& options = {});

// Scratch bytes the implementation explain_attention() chooses needs for one
// call; throws unsupported when nothing is eligible.
std::uint64_t attention_workspace_size(const Device& device, const AttentionParams& params, bool backward = false,
                                       const AttentionOptions& options = {});

// Enqueue on the stream; returns the decision that was used, which the
// device's runtime keeps (a reference valid while the runtime lives; the
// decision is made once per problem and looked up after that). Throws
// unsupported when nothing is eligible (listing each candidate's first
// reason), or in strict mode when the first choice is not eligible.
const AttentionDecision& attention_forward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                           const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                           const TensorRef& lse = {}, const AttentionOptions& options = {});
// lse from the forward pass is required (run the forward with return_lse).
const AttentionDecision& attention_backward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                            const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                            const TensorRef& grad_o, const TensorRef& lse, const TensorRef& grad_q,
                                            const TensorRef& grad_k, const TensorRef& grad_v,
                                            const AttentionOptions& options = {});

}  // namespace hal
