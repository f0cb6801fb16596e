// Choosing an attention implementation, explaining the choice, and running it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
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

using Order = detail::AttentionOrder;

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

// The order in effect without a per-call one: the attention.order setting
// (from HAL_ATTN_BACKENDS, the NVTE_* switches or the file), then the
// device's default, then the built-in order.
Order configured_order(const Device& device, const Settings& settings) {
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

// A boolean capability the device's backend declares true.
bool declares(const Device& device, const char* key) {
  const Capability* capability = device.info().find_capability(key);
  const bool* value = capability ? std::get_if<bool>(&capability->value) : nullptr;
  return value != nullptr && *value;
}

const detail::AttentionDeviceFacts& device_facts(const Device& device, detail::LoadedBackend& backend) {
  std::atomic<const detail::AttentionDeviceFacts*>& slot = backend.attention_device_slots[device.index()];
  if (const detail::AttentionDeviceFacts* published = slot.load(std::memory_order_acquire)) return *published;
  std::lock_guard lock(backend.attention_mutex);
  auto found = backend.attention_devices.find(device.index());
  if (found == backend.attention_devices.end()) {
    found = backend.attention_devices
                .emplace(device.index(),
                         detail::AttentionDeviceFacts{configured_order(device, *backend.settings),
                                                      declares(device, "attention.borrowed_addresses"),
                                                      declares(device, "attention.key_ranges")})
                .first;
  }
  slot.store(&found->second, std::memory_order_release);
  return found->second;  // map nodes stay put: the reference outlives the lock
}

// The order in effect: per call, else the device's configured one.
const Order& resolve_order(const AttentionOptions& options, const detail::AttentionDeviceFacts& facts,
                           Order& per_call) {
  if (!options.implementations.empty()) {
    per_call = {options.implementations, "per-call choice"};
    return per_call;
  }
  return facts.configured_order;
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
  if (params.key_ranges) {  // a quirk, probe or override may take them away from a backend that declares them
    const EffectiveCapability ranges =
        detail::effective_capability(device, "attention.key_ranges", capability_overrides);
    if (!ranges.value) {
      candidate.reasons.push_back("the " + backend.name + " backend takes no per-query key ranges (capability "
                                  "attention.key_ranges is not declared)");
      return candidate;
    }
    if (!ranges.is_true()) {
      candidate.reasons.push_back(describe_layer(ranges));
      return candidate;
    }
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

// The decision cache's key: the device, every number of the call's params,
// the pass, strict mode and the order; per-call capability overrides (rare)
// as text. Built on every call, so it is numbers, not text.
detail::AttentionDecisionKey decision_key(const Device& device, const hal_attention_params_v1& p, bool backward,
                                          const Order& order, bool per_call_order, bool strict,
                                          const std::vector<std::string>& capability_overrides) {
  detail::AttentionDecisionKey key;
  std::size_t n = 0;
  auto add = [&](std::int64_t value) { key.numbers[n++] = value; };
  add(device.index());
  for (std::int64_t value : {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.head_dim_qk, p.head_dim_v,
                             p.window_left, p.window_right})
    add(value);
  std::int32_t scale_bits = 0;
  static_assert(sizeof(scale_bits) == sizeof(p.softmax_scale));
  std::memcpy(&scale_bits, &p.softmax_scale, sizeof(scale_bits));
  add(scale_bits);
  add(static_cast<std::int64_t>(p.dtype) | static_cast<std::int64_t>(p.alignment) << 8 | std::int64_t{p.causal} << 16 |
      std::int64_t{p.return_lse} << 17 | std::int64_t{backward} << 18 | std::int64_t{strict} << 19 |
      std::int64_t{per_call_order} << 20 | std::int64_t{p.key_ranges != 0} << 21 |
      std::int64_t{p.address_alignment} << 32);
  for (const auto* s : {&p.q_strides, &p.k_strides, &p.v_strides, &p.o_strides, &p.grad_o_strides,
                        &p.grad_q_strides, &p.grad_k_strides, &p.grad_v_strides})
    for (std::int64_t value : {s->batch, s->head, s->seq, s->dim}) add(value);
  std::int64_t implementations = 0;
  for (auto implementation : order.implementations)
    implementations = implementations << 4 | (static_cast<std::int64_t>(implementation) + 1);
  add(implementations);
  for (const auto& item : capability_overrides) key.overrides.append(item).push_back('|');
  if (n != detail::AttentionDecisionKey::count) std::abort();  // a field added above without growing the key
  return key;
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
  bool debug = false;
  bool strict_from_options = false;
  const Settings* settings = nullptr;
  // For the refusal: "AttentionOptions::strict", "HAL_ATTN_STRICT=1", ...
  std::string strict_source() const {
    return strict_from_options ? "AttentionOptions::strict" : settings->at("attention.strict").origin();
  }
};

Modes modes_of(const AttentionOptions& options, const Settings& settings) {
  return {options.strict.value_or(settings.values().attention_strict),
          options.debug.value_or(settings.values().attention_debug), options.strict.has_value(), &settings};
}

// The decision for a call: cached per key, logged in debug mode, warned once
// when it falls to math, and an error when nothing (or, strict, not the
// first choice) is eligible. The decision returned lives in the backend's
// cache; on the cached path nothing is allocated or formatted.
const AttentionDecision& decide_for_call(const Device& device, const detail::AttentionDeviceFacts& facts,
                                         const AttentionParams& params, const hal_attention_params_v1& resolved,
                                         bool backward, const AttentionOptions& options) {
  detail::LoadedBackend& backend = *detail::Access::backend(device);
  const Modes modes = modes_of(options, *backend.settings);
  Order per_call;
  const Order& order = resolve_order(options, facts, per_call);
  const detail::AttentionDecisionKey key = decision_key(device, resolved, backward, order,
                                                        !options.implementations.empty(), modes.strict,
                                                        options.capability_overrides);
  auto what = [&] {
    return std::string(backward ? "attention backward" : "attention forward") + " on " + device.id() + " for " +
           params.describe();
  };
  const AttentionDecision* decision = nullptr;
  bool fresh = false;
  {
    std::lock_guard lock(backend.attention_mutex);
    if (auto cached = backend.attention_decisions.find(key); cached != backend.attention_decisions.end()) {
      decision = &cached->second;
    } else {
      // Node-based: the entry stays where it is while others are added.
      decision = &backend.attention_decisions
                      .emplace(key, decide(device, resolved, backward, order, options.capability_overrides))
                      .first->second;
      fresh = true;
    }
  }
  if (fresh && modes.debug) std::fprintf(stderr, "hal: %s:\n%s", what().c_str(), decision->to_string().c_str());
  if (!decision->found)
    throw Error(StatusCode::unsupported, "no attention implementation can run " + what() + ": " +
                                             first_reasons(*decision) +
                                             "; see 'halinfo attention' for the full explanation");
  if (decision->fell_back && modes.strict)
    throw Error(StatusCode::unsupported, what() + " would fall back to " + std::string(to_string(decision->chosen)) +
                                             " and strict mode is on (" + modes.strict_source() +
                                             "): " + first_reasons(*decision));
  if (fresh && decision->fell_back && decision->chosen == AttentionImplementation::math) {
    std::lock_guard lock(backend.attention_mutex);
    if (backend.attention_warned.insert(key).second)
      detail::log_message(HAL_LOG_WARNING,
                          what() + " falls back to the math implementation, which needs " +
                              megabytes(decision->candidates.back().workspace_bytes) + " of scratch memory (" +
                              first_reasons(*decision) + ")");
  }
  return *decision;
}

// A borrowed address: the device's backend must take them, and the address
// must be a multiple of the element size; its extent is the caller's word.
hal_tensor_ref_v1 borrowed_tensor(const Device& device, const detail::AttentionDeviceFacts& facts, std::uint64_t address,
                                  detail::AttentionTensor which, std::size_t element) {
  if (!facts.takes_borrowed_addresses)
    throw Error(StatusCode::unsupported, std::string("attention tensor ") + detail::attention_tensor_name(which) +
                                             " is a borrowed address, and the " + device.backend_name() +
                                             " backend of " + device.id() +
                                             " does not take them (no capability attention.borrowed_addresses); "
                                             "import the memory into a Buffer instead");
  if (address % element != 0)
    throw Error(StatusCode::invalid_argument, std::string("attention tensor ") + detail::attention_tensor_name(which) +
                                                  " address " + std::to_string(address) +
                                                  " is not a multiple of the " + std::to_string(element) +
                                                  "-byte element size");
  return {nullptr, address};
}

hal_tensor_ref_v1 checked_tensor(const Device& device, const detail::AttentionDeviceFacts& facts,
                                 const TensorRef& tensor, const hal_attention_params_v1& params,
                                 detail::AttentionTensor which, DType expected) {
  const auto& held = detail::Access::state(tensor.buffer);
  const std::size_t element = size_in_bytes(expected);
  if (!held && tensor.offset != 0) return borrowed_tensor(device, facts, tensor.offset, which, element);
  const std::uint64_t bytes = detail::attention_tensor_bytes(params, which);
  // The common case checked without building any text; the errors below say what is wrong.
  if (held && held->device == device && held->fits(tensor.offset, bytes) && tensor.offset % element == 0)
    return held->ref(tensor.offset);
  const char* name = detail::attention_tensor_name(which);
  const auto& state = detail::usable_state(held, std::string("attention tensor ") + name);
  if (!(state.device == device))
    throw Error(StatusCode::invalid_argument, std::string("attention tensor ") + name + " is in a buffer on " +
                                                  state.device.id() + ", but the stream runs on " + device.id());
  state.check_range(tensor.offset, bytes, std::string("attention tensor ") + name + " (" + std::to_string(bytes) +
                                              " bytes of " + std::string(to_string(expected)) + ")");
  if (tensor.offset % element != 0)
    throw Error(StatusCode::invalid_argument, std::string("attention tensor ") + name + " offset " +
                                                  std::to_string(tensor.offset) + " is not a multiple of the " +
                                                  std::to_string(element) + "-byte element size");
  return state.ref(tensor.offset);
}

// The call's params with address_alignment set from its tensors' device
// addresses (unused tensors have no buffer; the int32 key ranges do not
// count), so an implementation that needs aligned tensors declines a call
// whose tensors are not.
hal_attention_params_v1 with_address_alignment(const Device& device, hal_attention_params_v1 params,
                                               const hal_tensor_ref_v1* tensors, std::size_t count) {
  constexpr std::uint64_t most = 256;
  const hal_backend_v1& table = *detail::Access::backend(device)->table;
  std::uint64_t bits = most;
  for (std::size_t i = 0; i < count; ++i) {
    if (tensors[i].buffer != nullptr)
      bits |= reinterpret_cast<std::uintptr_t>(table.buffer_device_address(tensors[i].buffer)) + tensors[i].offset;
    else
      bits |= tensors[i].offset;  // a borrowed address, or 0 for no tensor
  }
  params.address_alignment = static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
  return params;
}

const detail::StreamState& stream_state(const Stream& stream) {
  if (!detail::Access::state(stream)) throw Error(StatusCode::invalid_argument, "attention: the stream is empty");
  return *detail::Access::state(stream);
}

// Runs the chosen implementation on the checked tensors (forward's 5 or
// backward's 9, in the ABI's order, then the key ranges when the call has
// them), in the caller's workspace when given.
void enqueue(const detail::StreamState& stream, const AttentionDecision& decision,
             const hal_attention_params_v1& resolved, bool backward, const hal_tensor_ref_v1* tensors,
             const AttentionOptions& options) {
  const Device& device = stream.device;
  const detail::LoadedBackend& backend = *detail::Access::backend(device);
  auto what = [&] {
    return "enqueueing " + std::string(to_string(decision.chosen)) + " attention " +
           (backward ? "backward" : "forward") + " on " + device.id();
  };
  hal_attention_call_v1 call{};
  call.struct_size = sizeof(call);
  call.implementation = detail::to_abi(decision.chosen);
  call.params = &resolved;
  call.tensors = tensors;
  call.tensor_count = hal_attention_tensor_count(&resolved, backward ? 1 : 0);
  if (const auto& workspace_state = detail::Access::state(options.workspace.buffer)) {
    const auto& workspace = detail::usable_state(workspace_state, "attention workspace");
    if (!(workspace.device == device))
      throw Error(StatusCode::invalid_argument,
                  "the attention workspace is a " + workspace.describe() + ", but the stream runs on " + device.id());
    workspace.check_range(options.workspace.offset, 0, "attention workspace");
    call.workspace = workspace.ref(options.workspace.offset);
    call.workspace_bytes = workspace.size - options.workspace.offset;
  }
  const hal_attention_v3& table = *backend.attention();
  backend.check(backward ? table.backward(stream.handle, &call) : table.forward(stream.handle, &call), what);
}

// The call's key ranges: present exactly when params.key_ranges says so, and
// only for a backend that declares it takes them.
hal_tensor_ref_v1 key_ranges_tensor(const Device& device, const detail::AttentionDeviceFacts& facts,
                                    const AttentionParams& params, const hal_attention_params_v1& resolved,
                                    const AttentionOptions& options) {
  const bool given = detail::Access::state(options.key_ranges.buffer) || options.key_ranges.offset != 0;
  if (!params.key_ranges) {
    if (given)
      throw Error(StatusCode::invalid_argument,
                  "AttentionOptions::key_ranges is given but AttentionParams::key_ranges is false; set it to pass "
                  "key ranges, or leave the tensor empty");
    return {nullptr, 0};
  }
  if (!given)
    throw Error(StatusCode::invalid_argument,
                "AttentionParams::key_ranges is true but AttentionOptions::key_ranges is empty; pass an int32 "
                "[batch, seq_q, 2] tensor");
  if (!facts.takes_key_ranges)
    throw Error(StatusCode::unsupported, "attention key ranges are not taken by the " + device.backend_name() +
                                             " backend of " + device.id() +
                                             " (no capability attention.key_ranges); mask with causal and the "
                                             "windows only, or run on a device that declares it");
  return checked_tensor(device, facts, options.key_ranges, resolved, detail::AttentionTensor::key_ranges, DType::i32);
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
  Order per_call;
  return decide(device, resolved, backward,
                resolve_order(options, device_facts(device, *detail::Access::backend(device)), per_call),
                options.capability_overrides);
}

const AttentionDecision& attention_decision(const Device& device, const AttentionParams& params, bool backward,
                                            const AttentionOptions& options) {
  return decide_for_call(device, device_facts(device, *detail::Access::backend(device)), params,
                         detail::to_abi(params), backward, options);
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

const AttentionDecision& attention_forward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                           const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                           const TensorRef& lse, const AttentionOptions& options) {
  const Device& device = stream_state(stream).device;
  const hal_attention_params_v1 resolved = detail::to_abi(params);
  const detail::AttentionDeviceFacts& facts = device_facts(device, *detail::Access::backend(device));
  using detail::AttentionTensor;
  const hal_tensor_ref_v1 q_ref = checked_tensor(device, facts, q, resolved, AttentionTensor::q, params.dtype);
  const hal_tensor_ref_v1 k_ref = checked_tensor(device, facts, k, resolved, AttentionTensor::k, params.dtype);
  const hal_tensor_ref_v1 v_ref = checked_tensor(device, facts, v, resolved, AttentionTensor::v, params.dtype);
  const hal_tensor_ref_v1 o_ref = checked_tensor(device, facts, o, resolved, AttentionTensor::o, params.dtype);
  hal_tensor_ref_v1 lse_ref{nullptr, 0};
  if (params.return_lse) lse_ref = checked_tensor(device, facts, lse, resolved, AttentionTensor::lse, DType::f32);
  const hal_tensor_ref_v1 refs[] = {q_ref, k_ref, v_ref, o_ref, lse_ref,
                                    key_ranges_tensor(device, facts, params, resolved, options)};
  const hal_attention_params_v1 call = with_address_alignment(device, resolved, refs, 5);
  const AttentionDecision& decision = decide_for_call(device, facts, params, call, false, options);
  enqueue(stream_state(stream), decision, call, false, refs, options);
  return decision;
}

const AttentionDecision& attention_backward(const Stream& stream, const AttentionParams& params, const TensorRef& q,
                                            const TensorRef& k, const TensorRef& v, const TensorRef& o,
                                            const TensorRef& grad_o, const TensorRef& lse, const TensorRef& grad_q,
                                            const TensorRef& grad_k, const TensorRef& grad_v,
                                            const AttentionOptions& options) {
  const Device& device = stream_state(stream).device;
  const hal_attention_params_v1 resolved = detail::to_abi(params);
  const detail::AttentionDeviceFacts& facts = device_facts(device, *detail::Access::backend(device));
  using detail::AttentionTensor;
  const hal_tensor_ref_v1 refs[] = {
      checked_tensor(device, facts, q, resolved, AttentionTensor::q, params.dtype),
      checked_tensor(device, facts, k, resolved, AttentionTensor::k, params.dtype),
      checked_tensor(device, facts, v, resolved, AttentionTensor::v, params.dtype),
      checked_tensor(device, facts, o, resolved, AttentionTensor::o, params.dtype),
      checked_tensor(device, facts, grad_o, resolved, AttentionTensor::grad_o, params.dtype),
      checked_tensor(device, facts, lse, resolved, AttentionTensor::lse, DType::f32),
      checked_tensor(device, facts, grad_q, resolved, AttentionTensor::grad_q, params.dtype),
      checked_tensor(device, facts, grad_k, resolved, AttentionTensor::grad_k, params.dtype),
      checked_tensor(device, facts, grad_v, resolved, AttentionTensor::grad_v, params.dtype),
      key_ranges_tensor(device, facts, params, resolved, options)};
  const hal_attention_params_v1 call = with_address_alignment(device, resolved, refs, 9);
  const AttentionDecision& decision = decide_for_call(device, facts, params, call, true, options);
  enqueue(stream_state(stream), decision, call, true, refs, options);
  return decision;
}

}  // namespace hal
