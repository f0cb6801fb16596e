#include "hal/topology.hpp"
#include "pci_bus_id.hpp"

#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>
#include <thread>
#include <utility>

namespace hal {

namespace {

// hwloc components hal keeps out of the load:
// - those that find devices by calling into vendor libraries. hal's backends
//   discover devices themselves; initialising CUDA, ROCm or an OpenCL/GL
//   stack inside the process is slow and must not happen before a
//   conformance run forks its children.
// - "pci" (libpciaccess): hwloc's Linux backend reads the same devices from
//   sysfs, while libpciaccess keeps global state that is orphaned when hwloc
//   unloads the plugin, which LeakSanitizer reports. The price is that PCI
//   vendor and device names are not looked up.
constexpr const char* kExcludedComponents[] = {
    "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero", "pci",
};

// Owns an hwloc topology handle.
class HwlocTopology {
 public:
  HwlocTopology() = default;
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  ~HwlocTopology() {
    if (handle_ != nullptr) hwloc_topology_destroy(handle_);
  }

  // Empty on success, else what failed.
  std::string init_and_load(const TopologyOptions& options) {
    if (hwloc_topology_init(&handle_) != 0) {
      handle_ = nullptr;
      return describe_failure("hwloc_topology_init");
    }
    for (const char* component : kExcludedComponents) {
      // Fails only for components this hwloc build lacks, which is the goal.
      hwloc_topology_set_components(handle_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
    }
    const hwloc_type_filter_e io_filter =
        options.include_pci ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT : HWLOC_TYPE_FILTER_KEEP_NONE;
    if (hwloc_topology_set_type_filter(handle_, HWLOC_OBJ_BRIDGE, io_filter) != 0 ||
        hwloc_topology_set_type_filter(handle_, HWLOC_OBJ_PCI_DEVICE, io_filter) != 0) {
      return describe_failure("hwloc_topology_set_type_filter");
    }
    // OS devices (sda, eth0, ...) are not part of hal's model.
    hwloc_topology_set_type_filter(handle_, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE);
    if (hwloc_topology_load(handle_) != 0) return describe_failure("hwloc_topology_load");
    return {};
  }

  hwloc_topology_t get() const { return handle_; }

 private:
  static std::string describe_failure(const char* call) {
    return std::string(call) + " failed: " + std::generic_category().message(errno);
  }

  hwloc_topology_t handle_ = nullptr;
};

CpuSet cpu_set_from_bitmap(hwloc_const_bitmap_t bitmap) {
  CpuSet set;
  // A negative weight marks an infinite set, which no real cpuset is.
  if (bitmap == nullptr || hwloc_bitmap_weight(bitmap) <= 0) return set;
  for (int cpu = hwloc_bitmap_first(bitmap); cpu != -1; cpu = hwloc_bitmap_next(bitmap, cpu)) {
    set.cpus.push_back(cpu);
  }
  return set;
}

std::string info_or_empty(hwloc_obj_t object, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(object, name);
  return value != nullptr ? value : "";
}

void read_packages(hwloc_topology_t topology, Topology& result) {
  hwloc_obj_t package = nullptr;
  while ((package = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_PACKAGE, package)) != nullptr) {
    result.packages.push_back(Package{
        .os_index = static_cast<int>(package->os_index),
        .core_count = hwloc_get_nbobjs_inside_cpuset_by_type(topology, package->cpuset, HWLOC_OBJ_CORE),
        .cpus = cpu_set_from_bitmap(package->cpuset),
        .model = info_or_empty(package, "CPUModel"),
    });
  }
}

void read_numa_nodes(hwloc_topology_t topology, Topology& result) {
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
    result.numa_nodes.push_back(NumaNode{
        .os_index = static_cast<int>(node->os_index),
        .memory_bytes = node->attr->numanode.local_memory,
        .cpus = cpu_set_from_bitmap(node->cpuset),
    });
  }
}

std::string pci_name(hwloc_obj_t device) {
  std::string vendor = info_or_empty(device, "PCIVendor");
  std::string model = info_or_empty(device, "PCIDevice");
  if (vendor.empty() || model.empty()) return vendor + model;
  return vendor + " " + model;
}

void read_pci_devices(hwloc_topology_t topology, Topology& result) {
  hwloc_obj_t device = nullptr;
  while ((device = hwloc_get_next_pcidev(topology, device)) != nullptr) {
    const auto& pci = device->attr->pcidev;
    char bus_id[32];
    std::snprintf(bus_id, sizeof bus_id, "%04x:%02x:%02x.%x", static_cast<unsigned>(pci.domain),
                  static_cast<unsigned>(pci.bus), static_cast<unsigned>(pci.dev), static_cast<unsigned>(pci.func));
    // Locality is that of the nearest CPU-side object the device hangs off.
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topology, device);
    int numa_node = -1;
    if (local != nullptr && local->nodeset != nullptr && hwloc_bitmap_weight(local->nodeset) == 1) {
      numa_node = hwloc_bitmap_first(local->nodeset);
    }
    result.pci_devices.push_back(PciDevice{
        .bus_id = bus_id,
        .vendor_id = pci.vendor_id,
        .device_id = pci.device_id,
        .class_id = pci.class_id,
        .name = pci_name(device),
        .numa_node = numa_node,
        .local_cpus = local != nullptr ? cpu_set_from_bitmap(local->cpuset) : CpuSet{},
    });
  }
}

int cpu_count_from_c_library() {
  if (unsigned count = std::thread::hardware_concurrency(); count > 0) return static_cast<int>(count);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

Topology fallback_topology(std::string error) {
  Topology result;
  result.error = std::move(error) +
                 "; CPU counts come from the C library and the NUMA and PCI layout is unknown. "
                 "Run lstopo to diagnose, and check HWLOC_* environment variables such as "
                 "HWLOC_XMLFILE or HWLOC_SYNTHETIC";
  result.processing_unit_count = cpu_count_from_c_library();
  // Without hwloc there is no way to tell cores from hardware threads.
  result.core_count = result.processing_unit_count;
  return result;
}

}  // namespace

bool CpuSet::contains(int cpu) const { return std::binary_search(cpus.begin(), cpus.end(), cpu); }

std::string CpuSet::to_string() const {
  std::vector<int> sorted = cpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string text;
  for (std::size_t first = 0; first < sorted.size();) {
    std::size_t last = first;
    while (last + 1 < sorted.size() && sorted[last + 1] == sorted[last] + 1) ++last;
    if (!text.empty()) text += ',';
    text += std::to_string(sorted[first]);
    if (last > first) text += '-' + std::to_string(sorted[last]);
    first = last + 1;
  }
  return text;
}

Topology Topology::load(const TopologyOptions& options) {
  try {
    HwlocTopology hwloc;
    if (std::string failure = hwloc.init_and_load(options); !failure.empty()) {
      return fallback_topology(std::move(failure));
    }
    Topology result;
    result.core_count = hwloc_get_nbobjs_by_type(hwloc.get(), HWLOC_OBJ_CORE);
    result.processing_unit_count = hwloc_get_nbobjs_by_type(hwloc.get(), HWLOC_OBJ_PU);
    read_packages(hwloc.get(), result);
    read_numa_nodes(hwloc.get(), result);
    if (options.include_pci) {
      read_pci_devices(hwloc.get(), result);
      result.pci_loaded = true;
    }
    return result;
  } catch (const std::exception& exception) {
    return fallback_topology(std::string("reading the hwloc topology failed: ") + exception.what());
  }
}

const PciDevice* Topology::find_pci(std::string_view bus_id) const {
  std::optional<std::string> wanted = normalize_pci_bus_id(bus_id);
  if (!wanted) return nullptr;
  auto found = std::find_if(pci_devices.begin(), pci_devices.end(),
                            [&](const PciDevice& device) { return device.bus_id == *wanted; });
  return found != pci_devices.end() ? &*found : nullptr;
}

int Topology::numa_node_of_cpu(int cpu) const {
  for (const NumaNode& node : numa_nodes) {
    if (node.cpus.contains(cpu)) return node.os_index;
  }
  return -1;
}

std::optional<std::string> normalize_pci_bus_id(std::string_view bus_id) {
  return abi::normalize_pci_bus_id(bus_id);
}

}  // namespace hal
