// Effective capabilities: what a backend declares, corrected by shipped quirks
// data, verified by conformance probes, and finally overridden by the user.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hal/device.hpp"

namespace hal {

struct CapabilityLayer {
  std::string layer;   // "declared", "quirk", "probe", "override"
  std::string value;   // as text: "true", "false", "8.0", ...
  std::string source;  // quirk id and file, probe date, the env variable, ...
  std::string reason;
};

struct EffectiveCapability {
  std::string key;
  std::optional<std::string> value;  // nullopt: nobody said anything
  std::string decided_by;            // the layer whose value stands
  std::vector<CapabilityLayer> layers;  // every layer that spoke, in order
  bool is_true() const { return value && *value == "true"; }
};

// Layers in order: declared, quirk, probe, override (HAL_CAPABILITY_OVERRIDES
// = "attention.fused=false,attention.flash=true").
EffectiveCapability effective_capability(const Device& device, const std::string& key);

// Known environment hazards for this device (an env variable set that is
// known to hang or corrupt on this SDK), each with its fix.
struct Hazard {
  std::string quirk_id;
  std::string message;
};
std::vector<Hazard> environment_hazards(const Device& device);

}  // namespace hal
