#include "attention_view.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "hal/capabilities.hpp"

namespace halinfo {
namespace {

[[noreturn]] void bad(const std::string& message) { throw hal::Error(hal::StatusCode::invalid_argument, message); }

std::int64_t parse_count(const std::string& text, const std::string& what) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') bad(what + " '" + text + "' is not a whole number");
  return value;
}

// Every layer that spoke about the implementation's capability, so an
// eligible candidate still shows who vouched for it (a probe, a declaration).
nlohmann::json capability_json(const hal::Device& device, hal::AttentionImplementation implementation) {
  const hal::EffectiveCapability capability =
      hal::effective_capability(device, "attention." + std::string(hal::to_string(implementation)));
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : capability.layers)
    layers.push_back({{"layer", layer.layer}, {"value", layer.value}, {"source", layer.source}, {"reason", layer.reason}});
  return {{"key", capability.key},
          {"value", capability.value ? nlohmann::json(*capability.value) : nlohmann::json()},
          {"decided_by", capability.decided_by},
          {"layers", layers}};
}

}  // namespace

hal::AttentionParams parse_attention_query(const AttentionQuery& query) {
  hal::AttentionParams params;
  std::istringstream fields(query.shape);
  for (std::string field; std::getline(fields, field, ',');) {
    const auto equals = field.find('=');
    if (equals == std::string::npos) bad("--shape field '" + field + "' is not key=value (keys: b hq hkv sq skv d dv)");
    const std::string key = field.substr(0, equals);
    const std::int64_t value = parse_count(field.substr(equals + 1), "--shape " + key);
    if (key == "b") params.batch = value;
    else if (key == "hq") params.heads_q = value;
    else if (key == "hkv") params.heads_kv = value;
    else if (key == "sq") params.seq_q = value;
    else if (key == "skv") params.seq_kv = value;
    else if (key == "d") params.head_dim_qk = value;
    else if (key == "dv") params.head_dim_v = value;
    else bad("--shape key '" + key + "' is unknown; use b hq hkv sq skv d dv");
  }
  const auto dtype = hal::parse_dtype(query.dtype);
  if (!dtype) bad("--dtype '" + query.dtype + "' is unknown; use f32, f16 or bf16");
  params.dtype = *dtype;
  params.causal = query.causal;
  if (query.alignment == "top_left") params.alignment = hal::MaskAlignment::top_left;
  else if (query.alignment == "bottom_right") params.alignment = hal::MaskAlignment::bottom_right;
  else bad("--alignment '" + query.alignment + "' is unknown; use top_left or bottom_right");
  if (!query.window.empty()) {
    const auto comma = query.window.find(',');
    if (comma == std::string::npos) bad("--window '" + query.window + "' is not LEFT,RIGHT (-1 for unbounded)");
    params.window_left = parse_count(query.window.substr(0, comma), "--window left");
    params.window_right = parse_count(query.window.substr(comma + 1), "--window right");
  }
  params.resolved();  // reject bad shapes before explaining anything
  return params;
}

void print_attention(const std::vector<hal::Device>& devices, const AttentionQuery& query, bool json,
                     std::ostream& out) {
  const hal::AttentionParams params = parse_attention_query(query);
  nlohmann::json document = {{"schema", "hal.attention-explain/1"},
                             {"params", params.describe()},
                             {"backward", query.backward},
                             {"devices", nlohmann::json::array()}};
  for (const auto& device : devices) {
    const hal::AttentionDecision decision = hal::explain_attention(device, params, query.backward);
    if (!json) {
      out << device.id() << " (" << device.info().name << "), " << (query.backward ? "backward" : "forward") << ", "
          << params.describe() << "\n"
          << decision.to_string();
      for (const auto& hazard : hal::environment_hazards(device)) out << "  HAZARD " << hazard.message << "\n";
      continue;
    }
    nlohmann::json candidates = nlohmann::json::array();
    for (const auto& candidate : decision.candidates)
      candidates.push_back({{"implementation", std::string(hal::to_string(candidate.implementation))},
                            {"in_order", candidate.in_order},
                            {"declared", candidate.declared},
                            {"eligible", candidate.eligible},
                            {"reasons", candidate.reasons},
                            {"workspace_bytes", candidate.workspace_bytes},
                            {"capability", capability_json(device, candidate.implementation)}});
    nlohmann::json order = nlohmann::json::array();
    for (auto implementation : decision.order) order.push_back(std::string(hal::to_string(implementation)));
    document["devices"].push_back(
        {{"id", device.id()},
         {"chosen", decision.found ? nlohmann::json(std::string(hal::to_string(decision.chosen))) : nlohmann::json()},
         {"fell_back", decision.fell_back},
         {"order", order},
         {"order_source", decision.order_source},
         {"candidates", candidates}});
  }
  if (json) out << document.dump(2) << "\n";
}

}  // namespace halinfo
