// PCI bus ids in one spelling, so that ids from sysfs, a vendor driver and a
// user compare equal and name sysfs paths.
#pragma once

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace hal::abi {

// "0000:3b:00.0" (lower-case hex, 4-digit domain) for any of "3b:00.0",
// "0000:3B:00.0", "00000000:3B:00.0"; nullopt when the text is not
// [domain:]bus:device.function with each part in range.
inline std::optional<std::string> normalize_pci_bus_id(std::string_view bus_id) {
  auto parse_hex = [](std::string_view text, unsigned max_value) -> std::optional<unsigned> {
    unsigned value = 0;
    if (text.empty() || text.size() > 8) return std::nullopt;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    if (error != std::errc() || end != text.data() + text.size() || value > max_value) return std::nullopt;
    return value;
  };
  const std::size_t dot = bus_id.rfind('.');
  const std::size_t last_colon = bus_id.rfind(':', dot);
  if (dot == std::string_view::npos || last_colon == std::string_view::npos) return std::nullopt;
  const std::size_t first_colon = bus_id.rfind(':', last_colon == 0 ? 0 : last_colon - 1);
  const bool has_domain = first_colon != std::string_view::npos && first_colon != last_colon;
  const std::string_view domain_text = has_domain ? bus_id.substr(0, first_colon) : "0";
  const std::string_view bus_text =
      has_domain ? bus_id.substr(first_colon + 1, last_colon - first_colon - 1) : bus_id.substr(0, last_colon);
  const auto domain = parse_hex(domain_text, 0xffffffff);
  const auto bus = parse_hex(bus_text, 0xff);
  const auto device = parse_hex(bus_id.substr(last_colon + 1, dot - last_colon - 1), 0x1f);
  const auto function = parse_hex(bus_id.substr(dot + 1), 0x7);
  if (!domain || !bus || !device || !function) return std::nullopt;
  char normalized[32];
  std::snprintf(normalized, sizeof normalized, "%04x:%02x:%02x.%x", *domain, *bus, *device, *function);
  return std::string(normalized);
}

}  // namespace hal::abi
