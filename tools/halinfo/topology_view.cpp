// halinfo topo: where each device sits relative to packages, NUMA nodes and CPUs.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "text_report.hpp"

namespace halinfo {
namespace {

struct DevicePlacement {
  std::string id;
  std::string pci_bus_id;
  int numa_node = -1;
  hal::CpuSet local_cpus;
};

// PCI devices take hwloc's view; host devices stand for their NUMA node.
DevicePlacement place(const hal::Device& device, const hal::Topology& topology) {
  const hal::DeviceInfo& info = device.info();
  DevicePlacement placement{device.id(), info.pci_bus_id, info.numa_node, {}};
  if (const hal::PciDevice* pci = info.pci_bus_id.empty() ? nullptr : topology.find_pci(info.pci_bus_id)) {
    placement.local_cpus = pci->local_cpus;
    if (placement.numa_node < 0) placement.numa_node = pci->numa_node;
    return placement;
  }
  for (const auto& node : topology.numa_nodes)
    if (node.os_index == placement.numa_node) placement.local_cpus = node.cpus;
  if (placement.local_cpus.empty() && topology.numa_nodes.size() <= 1)
    for (const auto& package : topology.packages)
      placement.local_cpus.cpus.insert(placement.local_cpus.cpus.end(), package.cpus.cpus.begin(),
                                       package.cpus.cpus.end());
  return placement;
}

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return text;
}

}  // namespace

void print_topology(const hal::Runtime&, const std::vector<hal::Device>& devices, bool json, std::ostream& out) {
  bool any_pci = false;
  for (const auto& device : devices) any_pci |= !device.info().pci_bus_id.empty();
  // PCI discovery is several times slower, so only when a device needs it.
  const hal::Topology topology = hal::Topology::load({.include_pci = any_pci});
  std::vector<DevicePlacement> placements;
  for (const auto& device : devices) placements.push_back(place(device, topology));

  if (json) {
    nlohmann::json document = {{"schema", "hal.topo/1"},
                               {"error", topology.error},
                               {"core_count", topology.core_count},
                               {"processing_unit_count", topology.processing_unit_count}};
    document["packages"] = nlohmann::json::array();
    for (const auto& package : topology.packages)
      document["packages"].push_back({{"os_index", package.os_index},
                                      {"model", package.model},
                                      {"core_count", package.core_count},
                                      {"cpus", package.cpus.to_string()}});
    document["numa_nodes"] = nlohmann::json::array();
    for (const auto& node : topology.numa_nodes)
      document["numa_nodes"].push_back(
          {{"os_index", node.os_index}, {"memory_bytes", node.memory_bytes}, {"cpus", node.cpus.to_string()}});
    document["devices"] = nlohmann::json::array();
    for (const auto& placement : placements)
      document["devices"].push_back({{"id", placement.id},
                                     {"pci_bus_id", placement.pci_bus_id},
                                     {"numa_node", placement.numa_node},
                                     {"local_cpus", placement.local_cpus.to_string()}});
    out << document.dump(2) << "\n";
    return;
  }

  if (!topology.error.empty()) out << "hwloc could not load the topology: " << topology.error << "\n";
  out << "Machine: " << topology.packages.size() << " package(s), " << topology.core_count << " cores, "
      << topology.processing_unit_count << " hardware threads, " << topology.numa_nodes.size()
      << " NUMA node(s)\n";
  for (const auto& package : topology.packages)
    out << "  package " << package.os_index << ": " << (package.model.empty() ? "CPU" : package.model) << ", "
        << package.core_count << " cores, CPUs " << package.cpus.to_string() << "\n";
  for (const auto& node : topology.numa_nodes)
    out << "  NUMA node " << node.os_index << ": " << gib(node.memory_bytes) << ", CPUs "
        << (node.cpus.empty() ? "none" : node.cpus.to_string()) << "\n";
  out << "Devices\n";
  for (const auto& placement : placements) {
    out << "  " << placement.id;
    if (!placement.pci_bus_id.empty()) out << "  PCI " << placement.pci_bus_id;
    out << "  NUMA node " << (placement.numa_node < 0 ? std::string("unknown") : std::to_string(placement.numa_node))
        << "  local CPUs " << (placement.local_cpus.empty() ? "unknown" : placement.local_cpus.to_string()) << "\n";
  }
}

}  // namespace halinfo
