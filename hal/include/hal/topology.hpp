// The machine's CPU, NUMA and PCI layout, as hwloc sees it, and the links
// between devices, as their backends' management libraries report them.
//
// hal uses it to place host memory and threads next to a device and to show
// the layout in halinfo. Loading never throws: when hwloc fails, Topology
// carries the reason in `error` and a best-effort CPU count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hal {

class Device;

// A set of logical CPUs, by operating-system index (the numbers taskset and
// /proc/cpuinfo use).
struct CpuSet {
  std::vector<int> cpus;  // ascending, no duplicates

  // Ranges compressed the way the kernel's cpulist files write them:
  // "0-3,8,10-11". Empty set: "".
  std::string to_string() const;
  bool empty() const { return cpus.empty(); }
  bool contains(int cpu) const;
};

struct NumaNode {
  int os_index = -1;
  std::uint64_t memory_bytes = 0;
  CpuSet cpus;  // empty for memory-only nodes (e.g. CXL or device memory)
};

// A CPU socket.
struct Package {
  int os_index = -1;
  int core_count = 0;
  CpuSet cpus;
  std::string model;  // e.g. "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"; empty when unknown
};

struct PciDevice {
  std::string bus_id;  // "0000:3b:00.0": lower-case, 4-digit domain
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  // Base class << 8 | subclass (0x0302 = 3D controller), as hwloc reports it:
  // without the programming-interface byte.
  std::uint32_t class_id = 0;
  std::string name;    // vendor and device names when the system provides them; often empty
  int numa_node = -1;  // -1 when the device is not local to exactly one NUMA node
  CpuSet local_cpus;   // the CPUs closest to the device
};

struct TopologyOptions {
  // PCI discovery costs several times the CPU-only load, so it is opt-in.
  bool include_pci = false;
};

struct Topology {
  std::vector<Package> packages;
  int core_count = 0;
  int processing_unit_count = 0;  // hardware threads the process may use
  std::vector<NumaNode> numa_nodes;
  std::vector<PciDevice> pci_devices;
  bool pci_loaded = false;  // PCI discovery was requested and ran
  // Non-empty when hwloc could not load the topology; then only the counts
  // are filled, from the C library, and everything else is empty.
  std::string error;

  static Topology load(const TopologyOptions& options = {});

  // Accepts any common spelling of a PCI address: "3b:00.0", "0000:3B:00.0",
  // "00000000:3b:00.0" (CUDA's form). nullptr when absent or malformed.
  const PciDevice* find_pci(std::string_view bus_id) const;
  // os_index of the NUMA node holding `cpu`, or -1 when none does.
  int numa_node_of_cpu(int cpu) const;
};

// How one device reaches another of its backend.
enum class DeviceLinkKind { unknown, pcie, nvlink };
std::string_view to_string(DeviceLinkKind kind);

struct DeviceLink {
  DeviceLinkKind kind = DeviceLinkKind::unknown;
  std::uint32_t nvlinks = 0;  // active NVLinks from one to the other
  // The most PCIe carries one way between them: the lower of the two
  // devices' maximum link generation x width, after line coding (a gen4 x16
  // link: 31.5 GB/s). nullopt when a device's link is not reported.
  std::optional<double> pcie_gbps;
  std::string pcie;    // "PCIe gen4 x16", or why it is unknown
  std::string detail;  // where `kind` comes from, or why it is unknown
};

// The link from `from` to `to`, two devices of one backend: NVLink when the
// backend's management library reports active NVLinks of `from` reaching
// `to`, PCIe when it reports none that do, unknown (detail says why) when the
// backend reports no links or an active link's far end is not named. Reads
// both devices' telemetry. Throws invalid_argument for the same device twice
// or devices of two backends.
DeviceLink device_link(const Device& from, const Device& to);

// The canonical "dddd:bb:dd.f" form (lower-case hex, at least four domain
// digits) of any of the spellings find_pci accepts; nullopt when malformed.
std::optional<std::string> normalize_pci_bus_id(std::string_view bus_id);

}  // namespace hal
