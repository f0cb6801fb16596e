// Choosing an attention implementation, explaining the choice, and running it.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "abi.hpp"
#include "attention_internal.hpp"
#include "hal/capabilities.hpp"
#include "loaded_backend.hpp"

namespace hal {
namespace {

using detail::all_attention_implementations;

struct Order {
  std::vector<AttentionImplementation> implementations;
  std::string source;
};

std::vector<AttentionImplementation> parse_order(const std::vector<std::string>& names, const std::string& source) {
  std::vector<AttentionImplementation> order;
  for (const auto& name : names) {
    auto implementation = parse_attention_implementation(name);
    if (!implementation)
      throw Error(StatusCode::invalid_argument,
                  source + " names '" + name + "', which is not an attention implementation; use fused, flash, math");
    order.push_back(*implementation);
  }
  return order;
}

// The order in effect: per call, then the attention.order setting (from
// HAL_ATTN_BACKENDS, the NVTE_* switches or the file), then the device's
// default, then the built-in order.
Order resolve_order(const Device& device, const AttentionOptions& options, const Settings& settings) {
  if (!options.implementations.empty()) return {options.implementations, "per-call choice"};
  const Setting& setting = settings.at("attention.order");
  // The environment's order stands even when it leaves nothing (every NVTE_* switch off).
  if (setting.from(SettingSource::Kind::environment))
    return {parse_order(settings.values().attention_order, setting.source_text()), setting.source_text()};
  if (!settings.values().attention_order.empty())
    return {parse_order(settings.values().attention_order, "config attention.order"), "config attention.order"};
  if (const Capability* preferred = device.info().find_capability("attention.preferred_order"))
    if (const auto* text = std::get_if<std::string>(&preferred->value))
      return {parse_order(parse_attention_order(*text, device.backend_name() + " backend default"),
                          device.backend_name() + " backend default"),
              device.backend_name() + " backend default"};
  return {{all_attention_implementations, all_attention_implementations + 3}, "built-in order"};
}

std::string describe_layer(const EffectiveCapability& capability) {
  const CapabilityLayer& layer = capability.layers.back();
  std::string text = "capability " + capability.key + " is " + layer.value + " (" + layer.layer + " by " + layer.source;
  if (!layer.reason.empty()) text += ": " + layer.reason;
  return text + ")";
}

std::vector<std::string> backend_reasons(const detail::LoadedBackend& backend, const Device& device,
                                         AttentionImplementation implementation,
                                         const hal_attention_params_v1& params, bool backward) {
  char text[2048] = {};
  const hal_status code = backend.attention()->supports(backend.context, device.index(),
                                                        detail::to_abi(implementation),
                                                        &params, backward ? 1 : 0, text, sizeof(text));
  if (code != HAL_OK) return {backend.error(code, "asking whether attention is supported").message()};
  std::vector<std::string> reasons;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) reasons.push_back(line);
  return reasons;
}

AttentionCandidate evaluate(const detail::LoadedBackend& backend, const Device& device,
                            AttentionImplementation implementation, const hal_attention_params_v1& params,
                            bool backward, const std::vector<std::string>& capability_overrides) {
  AttentionCandidate candidate{implementation, true, false, false, {}, 0};
  const std::string key = "attention." + std::string(to_string(implementation));
  const EffectiveCapability capability = detail::effective_capability(device, key, capability_overrides);
  candidate.declared = !capability.layers.empty() && capability.layers.front().layer == "declared" &&
                       capability.layers.front().value == "true";
  // A capability turned off (declared, or by a quirk, probe or override) is
  // the reason to cite, with or without an attention table: it is what
  // stays true once the backend gains one.
  if (capability.value && !capability.is_true()) {
    candidate.reasons.push_back(describe_layer(capability));
    return candidate;
  }
  if (backend.attention() == nullptr) {
    candidate.reasons.push_back("the " + backend.name + " backend offers no attention");
    return candidate;
  }
  if (!capability.value) {
    candidate.reasons.push_back("capability " + key + " is not declared by the " + backend.name + " backend");
    return candidate;
  }
  candidate.reasons = backend_reasons(backend, device, implementation, params, backward);
  candidate.eligible = candidate.reasons.empty();
  std::uint64_t bytes = 0;
  if (candidate.eligible &&
      backend.attention()->workspace_size(backend.context, device.index(),
                                          detail::to_abi(implementation), &params,
                                          backward ? 1 : 0, &bytes) == HAL_OK)
    candidate.workspace_bytes = bytes;
  return candidate;
}

// Numbers appended with to_chars: the key is built on every call, and a
// stream's locale machinery would cost more than the rest of a small call.
class KeyText {
 public:
  template <class Number>
  KeyText& operator<<(Number value) {
    char digits[32];
    const auto result = std::to_chars(digits, digits + sizeof(digits), value);
    text_.append(digits, result.ptr);
    return *this;
  }
  KeyText& operator<<(char value) {
    text_.push_back(value);
    return *this;
  }
  KeyText& operator<<(std::string_view value) {
    text_.append(value);
    return *this;
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

std::string cache_key(const hal_attention_params_v1& p, bool backward, const Order& order, bool strict,
                      const std::vector<std::string>& capability_overrides) {
  KeyText key;
  auto strides = [&](const hal_tensor_strides_v1& s) { key << s.batch << ',' << s.head << ',' << s.seq << ',' << s.dim << ';'; };
  key << p.batch << ' ' << p.heads_q << ' ' << p.heads_kv << ' ' << p.seq_q << ' ' << p.seq_kv << ' '
      << p.head_dim_qk << ' ' << p.head_dim_v << ' ' << static_cast<int>(p.dtype) << ' ' << p.causal << ' '
      << static_cast<int>(p.alignment) << ' ' << p.window_left << ' ' << p.window_right << ' ' << p.softmax_scale
      << ' ' << p.return_lse << ' ' << p.address_alignment << ' ';
  for (const auto* s : {&p.q_strides, &p.k_strides, &p.v_strides, &p.o_strides, &p.grad_o_strides,
                        &p.grad_q_strides, &p.grad_k_strides, &p.grad_v_strides})
    strides(*s);
  key << static_cast<int>(backward) << static_cast<int>(strict) << std::string_view(order.source) << '|';
  for (auto implementation : order.implementations) key << std::string_view(to_string(implementation)) << ',';
  // Per-call capability overrides change the layers, so they are part of the key.
  for (const auto& item : capability_overrides) key << '|' << std::string_view(item);
  return key.take();
}

AttentionDecision decide(const Device& device, const hal_attention_params_v1& params, bool backward,
                         const Order& order, const std::vector<std::string>& capability_overrides) {
  const detail::LoadedBackend& backend = *detail::Access::backend(device);
  AttentionDecision decision;
  decision.order = order.implementations;
  decision.order_source = order.source;
  for (auto implementation : all_attention_implementations) {
    AttentionCandidate candidate = evaluate(backend, device, implementation, params, backward, capability_overrides);
    candidate.in_order = std::find(order.implementations.begin(), order.implementations.end(), implementation) !=
                         order.implementations.end();
    decision.candidates.push_back(std::move(candidate));
  }
  for (auto implementation : order.implementations) {
    const auto& candidate = decision.candidates[static_cast<std::size_t>(implementation)];
    if (candidate.eligible) {
      decision.chosen = implementation;
      decision.found = true;
      break;
    }
  }
  // Not offering an implementation at all is no fallback; losing one the
  // backend declares is.
  for (auto implementation : order.implementations) {
    if (decision.found && implementation == decision.chosen) break;
    if (decision.candidates[static_cast<std::size_t>(implementation)].declared) decision.fell_back = true;
  }
  return decision;
}

std::string megabytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string first_reasons(const AttentionDecision& decision) {
  std::string text;
  for (const auto& candidate : decision.candidates) {
    if (!text.empty()) text += "; ";
    text += std::string(to_string(candidate.implementation)) + ": ";
    if (!candidate.in_order) text += "not in the order (" + decision.order_source + ")";
    else if (candidate.eligible) text += "eligible";
    else text += candidate.reasons.empty() ? "ineligible" : candidate.reasons.front();
  }
  return text;
}

// Strict and debug mode for a call: its options, else the settings.
struct Modes {
  bool strict = false;
  std::string strict_source;  // for the refusal: "AttentionOptions::strict", "HAL_ATTN_STRICT=1", ...
  bool debug = false;
};

Modes modes_of(const AttentionOptions& options, const Settings& settings) {
  Modes modes;
  modes.strict = options.strict.value_or(settings.values().attention_strict);
  modes.strict_source = options.strict ? "AttentionOptions::strict" : settings.at("attention.strict").origin();
  modes.debug = options.debug.value_or(settings.values().attention_debug);
  return modes;
}

// The decision for a call: cached per key, logged in debug mode, warned once
// when it falls to math, and an error when nothing (or, strict, not the
// first choice) is eligible.
AttentionDecision decide_for_call(const Device& device, const AttentionParams& params,
                                  const hal_attention_params_v1& resolved, bool backward,
                                  const AttentionOptions& options) {
  detail::LoadedBackend& backend = *detail::Access::backend(device);
  const Modes modes = modes_of(options, *backend.settings);
  const Order order = resolve_order(device, options, *backend.settings);
  const std::string key = cache_key(resolved, backward, order, modes.strict, options.capability_overrides);
  const std::string what = std::string(backward ? "attention backward" : "attention forward") + " on " + device.id() +
                           " for " + params.describe();
  AttentionDecision decision;
  bool fresh = false;
  {
    std::lock_guard lock(backend.attention_mutex);
    if (auto cached = backend.attention_decisions.find(key); cached != backend.attention_decisions.end()) {
      decision = cached->second;
    } else {
      decision = decide(device, resolved, backward, order, options.capability_overrides);
      backend.attention_decisions.emplace(key, decision);
      fresh = true;
    }
  }
  if (fresh && modes.debug) std::fprintf(stderr, "hal: %s:\n%s", what.c_str(), decision.to_string().c_str());
  if (!decision.found)
    throw Error(StatusCode::unsupported, "no attention implementation can run " + what + ": " +
                                             first_reasons(decision) +
                                             "; see 'halinfo attention' for the full explanation");
  if (decision.fell_back && modes.strict)
    throw Error(StatusCode::unsupported, what + " would fall back to " + std::string(to_string(decision.chosen)) +
                                             " and strict mode is on (" + modes.strict_source +
                                             "): " + first_reasons(decision));
  if (fresh && decision.fell_back && decision.chosen == AttentionImplementation::math) {
    std::lock_guard lock(backend.attention_mutex);
    if (backend.attention_warned.insert(key).second)
      detail::log_message(HAL_LOG_WARNING,
                          what + " falls back to the math implementation, which needs " +
                              megabytes(decision.candidates.back().workspace_bytes) + " of scratch memory (" +
                              first_reasons(decision) + ")");
  }
  return decision;
}

hal_tensor_ref_v1 checked_tensor(const Device& device, const TensorRef& tensor, const hal_attention_params_v1& params,
                                 detail::AttentionTensor which, DType expected) {
  const char* name = detail::attention_tensor_name(which);
  const auto& state = detail::usable_state(detail::Access::state(tensor.buffer), std::string("attention tensor ") + name);
  if (!(state.device == device))
    throw Error(StatusCode::invalid_argument, std::string("attention tensor ") + name + " is in a buffer on " +
                                                  state.device.id() + ", but the stream runs on " + device.id());
  const std::uint64_t bytes = detail::attention_tensor_bytes(params, which);
  state.check_range(tensor.offset, bytes, std::string("attention tensor ") + name + " (" + std::to_string(bytes) +
                                              " bytes of " + std::string(to_string(expected)) + ")");
  const std::size_t element = size_in_bytes(expected);
  if (tensor.offset % element != 0)
    throw Error(StatusCode::invalid_argument, std::string("attention tensor ") + name + " offset " +
                                                  std::to_string(tensor.offset) + " is not a multiple of the " +
                                                  std::to_string(element) + "-byte element size");
  return state.ref(tensor.offset);
}

// The call's params with address_alignment set from its tensors' device
// addresses (unused tensors have no buffer), so an implementation that needs
// aligned tensors declines a call whose tensors are not.
hal_attention_params_v1 with_address_alignment(const Device& device, hal_attention_params_v1 params,
                                               const hal_tensor_ref_v1* tensors, std::size_t count) {
  constexpr std::uint64_t most = 256;
  const hal_backend_v1& table = *detail::Access::backend(device)->table;
  std::uint64_t bits = most;
  for (std::size_t i = 0; i < count; ++i)
    if (tensors[i].buffer != nullptr)
      bits |= reinterpret_cast<std::uintptr_t>(table.buffer_device_address(tensors[i].buffer)) + tensors[i].offset;
  params.address_alignment = static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
  return params;
}

const detail::StreamState& stream_state(const Stream& stream) {
  if (!detail::Access::state(stream)) throw Error(StatusCode::invalid_argument, "attention: the stream is empty");
  return *detail::Access::state(stream);
}

// Runs the chosen implementation on the checked tensors (forward's 5 or
// backward's 9, in the ABI's order), in the caller's workspace when given.
void enqueue(const detail::StreamState& stream, const AttentionDecision& decision,
             const hal_attention_params_v1& resolved, bool backward, const hal_tensor_ref_v1* tensors,
             const AttentionOptions& options) {
  const Device& device = stream.device;
  const detail::LoadedBackend& backend = *detail::Access::backend(device);
  const std::string what = "enqueueing " + std::string(to_string(decision.chosen)) + " attention " +
                           (backward ? "backward" : "forward") + " on " + device.id();
  const auto& workspace_state = detail::Access::state(options.workspace.buffer);
  if (!workspace_state) {
    const hal_attention_v1& table = *backend.attention();
    const auto t = tensors;
    backend.check(backward ? table.backward(stream.handle, detail::to_abi(decision.chosen), &resolved, t[0], t[1], t[2],
                                            t[3], t[4], t[5], t[6], t[7], t[8])
                           : table.forward(stream.handle, detail::to_abi(decision.chosen), &resolved, t[0], t[1], t[2],
                                           t[3], t[4]),
                  what);
    return;
  }
  const auto& workspace = detail::usable_state(workspace_state, "attention workspace");
  if (!(workspace.device == device))
    throw Error(StatusCode::invalid_argument, "the attention workspace is a " + workspace.describe() +
                                                  ", but the stream runs on " + device.id());
  workspace.check_range(options.workspace.offset, 0, "attention workspace");
  const hal_attention_v2* table = backend.attention_v2();
  if (table == nullptr)
    throw Error(StatusCode::unsupported, "the " + device.backend_name() +
                                             " backend's attention takes no caller workspace (its plugin has no "
                                             "hal_attention_v2); leave AttentionOptions::workspace empty");
  backend.check(table->run(stream.handle, detail::to_abi(decision.chosen), &resolved, backward ? 1 : 0, tensors,
                           backward ? 9u : 5u, workspace.ref(options.workspace.offset),
                           workspace.size - options.workspace.offset),
                what);
}

}  // namespace

std::string AttentionDecision::to_string() const {
  std::ostringstream text;
  text << "  order: ";
  for (std::size_t i = 0; i < order.size(); ++i) text << (i ? "," : "") << hal::to_string(order[i]);
  text << " (" << order_source << ")\n";
  for (const auto& candidate : candidates) {
    std::string state;
    if (found && candidate.implementation == chosen) state = fell_back ? "CHOSEN (fallback)" : "CHOSEN";
    else if (!candidate.in_order) state = "not in order";
    else state = candidate.eligible ? "eligible" : "ineligible";
    text << "  " << hal::to_string(candidate.implementation) << std::string(7 - hal::to_string(candidate.implementation).size(), ' ')
         << state << std::string(state.size() < 19 ? 19 - state.size() : 1, ' ');
    if (candidate.eligible) text << "scratch " << megabytes(candidate.workspace_bytes);
    for (std::size_t i = 0; i < candidate.reasons.size(); ++i) text << (i ? "; " : "") << candidate.reasons[i];
    text << "\n";
  }
  if (!found) text << "  nothing eligible\n";
  return text.str();
}

AttentionDecision explain_attention(const Device& device, const AttentionParams& params, bool backward,
                                    const AttentionOptions& options) {
  const hal_attention_params_v1 resolved = detail::to_abi(params);
  return decide(device, resolved, backward, resolve_order(device, options, *detail::Access::backend(device)->settings),
                options.capability_overrides);
}

std::uint64_t attention_workspace_size(const Device& device, const AttentionParams& params, bool backward,
                                       const AttentionOptions& options) {
  const AttentionDecision decision = explain_attention(device, params, backward, options);
  if (!decision.found)
    throw Error(StatusCode::unsupported, "no attention implementation is eligible for " + params.describe() + " on " +
                                             device.id() + ":\n" + decision.to_string());
  for (const auto& candidate : decision.candidates)
    if (candidate.implementation == decision.chosen) return candidate.workspace_bytes;
  return 0;
}

AttentionDecision attention_forward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                    const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                    const TensorRef& lse, const AttentionOptions& options) {
  const Device& device = stream_state(stream).device;
  const hal_attention_params_v1 resolved = detail::to_abi(params);
  using detail::AttentionTensor;
  const hal_tensor_ref_v1 q_ref = checked_tensor(device, q, resolved, AttentionTensor::q, params.dtype);
  const hal_tensor_ref_v1 k_ref = checked_tensor(device, k, resolved, AttentionTensor::k, params.dtype);
  const hal_tensor_ref_v1 v_ref = checked_tensor(device, v, resolved, AttentionTensor::v, params.dtype);
  const hal_tensor_ref_v1 o_ref = checked_tensor(device, o, resolved, AttentionTensor::o, params.dtype);
  hal_tensor_ref_v1 lse_ref{nullptr, 0};
  if (params.return_lse) lse_ref = checked_tensor(device, lse, resolved, AttentionTensor::lse, DType::f32);
  const hal_tensor_ref_v1 refs[] = {q_ref, k_ref, v_ref, o_ref, lse_ref};
  const hal_attention_params_v1 call = with_address_alignment(device, resolved, refs, std::size(refs));
  const AttentionDecision decision = decide_for_call(device, params, call, false, options);
  enqueue(stream_state(stream), decision, call, false, refs, options);
  return decision;
}

AttentionDecision attention_backward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                     const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                     const TensorRef& grad_o, const TensorRef& lse, const TensorRef& grad_q,
                                     const TensorRef& grad_k, const TensorRef& grad_v,
                                     const AttentionOptions& options) {
  const Device& device = stream_state(stream).device;
  const hal_attention_params_v1 resolved = detail::to_abi(params);
  using detail::AttentionTensor;
  const hal_tensor_ref_v1 refs[] = {
      checked_tensor(device, q, resolved, AttentionTensor::q, params.dtype),
      checked_tensor(device, k, resolved, AttentionTensor::k, params.dtype),
      checked_tensor(device, v, resolved, AttentionTensor::v, params.dtype),
      checked_tensor(device, o, resolved, AttentionTensor::o, params.dtype),
      checked_tensor(device, grad_o, resolved, AttentionTensor::grad_o, params.dtype),
      checked_tensor(device, lse, resolved, AttentionTensor::lse, DType::f32),
      checked_tensor(device, grad_q, resolved, AttentionTensor::grad_q, params.dtype),
      checked_tensor(device, grad_k, resolved, AttentionTensor::grad_k, params.dtype),
      checked_tensor(device, grad_v, resolved, AttentionTensor::grad_v, params.dtype)};
  const hal_attention_params_v1 call = with_address_alignment(device, resolved, refs, std::size(refs));
  const AttentionDecision decision = decide_for_call(device, params, call, true, options);
  enqueue(stream_state(stream), decision, call, true, refs, options);
  return decision;
}

}  // namespace hal
