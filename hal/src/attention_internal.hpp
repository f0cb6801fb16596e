// Internal: attention helpers shared by attention.cpp and attention_select.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention_contract.hpp"
#include "hal/attention.hpp"
#include "hal/backend_abi.h"
#include "hal/capabilities.hpp"

namespace hal::detail {

constexpr AttentionImplementation all_attention_implementations[] = {
    AttentionImplementation::fused, AttentionImplementation::flash, AttentionImplementation::math};

// The implementations to try, in order, and who set that order.
struct AttentionOrder {
  std::vector<AttentionImplementation> implementations;
  std::string source;
};

// What attention calls read of a device, found once (settings and declared
// capabilities are fixed for a runtime's life).
struct AttentionDeviceFacts {
  AttentionOrder configured_order;  // without a per-call order
  bool takes_borrowed_addresses = false;
  bool takes_key_ranges = false;
};

// What a cached attention decision depends on (attention_select.cpp fills
// it): numbers, so that the per-call lookup formats nothing.
struct AttentionDecisionKey {
  static constexpr std::size_t count = 45;
  std::array<std::int64_t, count> numbers;  // every one written by the maker (not zeroed first: a hot path)
  std::string overrides;  // per-call capability overrides, joined; usually empty
  bool operator==(const AttentionDecisionKey&) const = default;
};

struct AttentionDecisionKeyHash {
  // Four independent lanes, so the multiplies do not wait on each other.
  std::size_t operator()(const AttentionDecisionKey& key) const noexcept {
    constexpr std::uint64_t prime = 0x100000001b3ull;
    std::uint64_t a = 0x9e3779b97f4a7c15ull, b = 0xbf58476d1ce4e5b9ull, c = 0x94d049bb133111ebull,
                  d = 0x2545f4914f6cdd1dull;
    const auto* n = reinterpret_cast<const std::uint64_t*>(key.numbers.data());
    std::size_t i = 0;
    for (; i + 4 <= AttentionDecisionKey::count; i += 4) {
      a = (a ^ n[i]) * prime;
      b = (b ^ n[i + 1]) * prime;
      c = (c ^ n[i + 2]) * prime;
      d = (d ^ n[i + 3]) * prime;
    }
    for (; i < AttentionDecisionKey::count; ++i) a = (a ^ n[i]) * prime;
    const std::uint64_t hash = a ^ (b << 1) ^ (c << 2) ^ (d << 3);
    return static_cast<std::size_t>(key.overrides.empty() ? hash : hash ^ std::hash<std::string>{}(key.overrides));
  }
};

// The tensors of a call, as the ABI lists them (hal/abi/attention_contract.hpp).
using abi::attention_tensor_bytes;
using abi::attention_tensor_name;
using abi::AttentionTensor;

// effective_capability with a call's own overrides ("attention.flash=false")
// as the top layer (capabilities.cpp).
EffectiveCapability effective_capability(const Device& device, const std::string& key,
                                         const std::vector<std::string>& per_call_overrides);

}  // namespace hal::detail
