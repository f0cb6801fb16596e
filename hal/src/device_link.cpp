// Links between devices: NVLink peers from the backend's topology sub-table
// (its management library), PCIe ceilings from both devices' telemetry.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hal/device.hpp"
#include "hal/telemetry.hpp"
#include "hal/topology.hpp"
#include "loaded_backend.hpp"

namespace hal {
namespace {

// Payload GB/s of one lane, one way, after line coding: 8b/10b up to gen2,
// 128b/130b for gen3 to gen5, FLIT (242 of 256 bytes) from gen6.
std::optional<double> lane_gbps(std::uint64_t generation) {
  switch (generation) {
    case 1: return 2.5 * 8 / 10 / 8;
    case 2: return 5.0 * 8 / 10 / 8;
    case 3: return 8.0 * 128 / 130 / 8;
    case 4: return 16.0 * 128 / 130 / 8;
    case 5: return 32.0 * 128 / 130 / 8;
    case 6: return 64.0 * 242 / 256 / 8;
    case 7: return 128.0 * 242 / 256 / 8;
  }
  return std::nullopt;
}

struct PcieLink {
  std::optional<double> gbps;
  std::string text;  // "PCIe gen4 x16" or why unknown
};

// A device's own PCIe link at its best: the maximum generation and width
// (a link downtrains when idle), else the current ones.
PcieLink pcie_of(const Device& device) {
  try {
    const PcieTelemetry pcie = telemetry(device).pcie;
    const Reading<std::uint64_t>& generation = pcie.generation_max.available() ? pcie.generation_max : pcie.generation;
    const Reading<std::uint64_t>& width = pcie.width_max.available() ? pcie.width_max : pcie.width;
    if (!generation.available() || !width.available())
      return {std::nullopt, device.id() + "'s PCIe link is not reported (" +
                                (generation.available() ? width.reason_text() : generation.reason_text()) + ")"};
    const std::optional<double> lane = lane_gbps(generation.value());
    const std::string text = "PCIe gen" + std::to_string(generation.value()) + " x" + std::to_string(width.value());
    if (!lane) return {std::nullopt, device.id() + "'s " + text + " is a generation hal does not know"};
    return {*lane * static_cast<double>(width.value()), text};
  } catch (const Error& error) {
    return {std::nullopt, device.id() + " reports no telemetry: " + error.what()};
  }
}

}  // namespace

std::string_view to_string(DeviceLinkKind kind) {
  switch (kind) {
    case DeviceLinkKind::unknown: return "unknown";
    case DeviceLinkKind::pcie: return "PCIe";
    case DeviceLinkKind::nvlink: return "NVLink";
  }
  return "unknown";
}

DeviceLink device_link(const Device& from, const Device& to) {
  if (from == to)
    throw Error(StatusCode::invalid_argument, "device_link: " + from.id() + " twice; give two devices of one backend");
  if (from.backend_name() != to.backend_name())
    throw Error(StatusCode::invalid_argument, "device_link: " + from.id() + " and " + to.id() +
                                                  " are devices of two backends; links join devices of one backend");
  DeviceLink link;
  const PcieLink a = pcie_of(from), b = pcie_of(to);
  if (a.gbps && b.gbps) {
    link.pcie_gbps = std::min(*a.gbps, *b.gbps);
    link.pcie = *a.gbps <= *b.gbps ? a.text : b.text;
  } else {
    link.pcie = a.gbps ? b.text : a.text;
  }

  const auto& backend = detail::Access::backend(from);
  const hal_topology_v1* topology = backend->topology();
  if (topology == nullptr) {
    link.detail = "the " + from.backend_name() + " backend reports no links between devices";
    return link;
  }
  std::vector<hal_device_link_v1> links(64);
  for (auto& entry : links) entry.struct_size = sizeof(entry);
  std::uint32_t count = 0;
  if (topology->device_links(backend->context, from.index(), links.data(), static_cast<std::uint32_t>(links.size()),
                             &count) != HAL_OK) {
    link.detail = backend->error(HAL_ERROR_UNSUPPORTED, "reading the links of " + from.id()).message();
    return link;
  }
  links.resize(std::min<std::size_t>(count, links.size()));
  const std::optional<std::string> target = normalize_pci_bus_id(to.info().pci_bus_id);
  std::uint32_t unnamed = 0;
  for (const hal_device_link_v1& entry : links) {
    if (entry.kind != HAL_DEVICE_LINK_NVLINK || entry.active == 0) continue;
    const std::optional<std::string> peer = normalize_pci_bus_id(entry.peer_pci_bus_id);
    if (!peer) ++unnamed;
    else if (target && *peer == *target) ++link.nvlinks;
  }
  if (link.nvlinks > 0) {
    link.kind = DeviceLinkKind::nvlink;
    link.detail = std::to_string(link.nvlinks) + " active NVLink" + (link.nvlinks == 1 ? "" : "s") + " from " +
                  from.id() + " reach " + to.id();
  } else if (unnamed > 0) {
    link.detail = std::to_string(unnamed) + " active NVLink" + (unnamed == 1 ? "" : "s") + " of " + from.id() +
                  " reach devices its management library does not name";
  } else {
    link.kind = DeviceLinkKind::pcie;
    link.detail = "no active NVLink of " + from.id() + " reaches " + to.id() + " (" + std::to_string(links.size()) +
                  " NVLink" + (links.size() == 1 ? "" : "s") + " in all)";
  }
  return link;
}

}  // namespace hal
