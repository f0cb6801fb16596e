// What a backend declares about one device: version axes and capabilities,
// with the strings they point to kept alive for the backend context's life,
// plus the identity Linux gives every PCI device in sysfs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/backend_abi.h"

namespace hal::backend {

class DeviceDescription {
 public:
  void add_version(std::string axis, std::string value);
  void add_bool(std::string key, bool value, std::string note = {});
  void add_int(std::string key, std::int64_t value, std::string note = {});
  void add_string(std::string key, std::string value, std::string note = {});

  // Points the ABI views into the stored strings; call once nothing more is
  // added (a later add invalidates them until the next finalize).
  void finalize();

  const std::vector<hal_key_value_v1>& version_axes() const { return version_axes_; }
  const std::vector<hal_capability_v1>& capabilities() const { return capabilities_; }
  // Fills the version and capability fields of info.
  void describe(hal_device_info_v1& info) const;

 private:
  void add(std::string key, hal_capability_type type, std::int64_t int_value, std::string string_value,
           std::string note);
  struct CapabilityStrings {
    std::string key, string_value, note;
  };
  std::vector<std::pair<std::string, std::string>> version_strings_;
  std::vector<hal_key_value_v1> version_axes_;
  std::vector<CapabilityStrings> capability_strings_;
  std::vector<hal_capability_v1> capabilities_;
};

// The first line of /sys/bus/pci/devices/<pci_bus_id>/<attribute>; "" when
// absent (no sysfs, a device the kernel does not list, an empty id).
std::string read_pci_sysfs(const std::string& pci_bus_id, const std::string& attribute);
// The NUMA node sysfs gives the device; -1 when unknown.
int numa_node_from_sysfs(const std::string& pci_bus_id);

}  // namespace hal::backend
