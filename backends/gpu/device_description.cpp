#include "device_description.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <type_traits>

namespace hal::backend {

void DeviceDescription::add_version(std::string axis, std::string value) {
  version_strings_.emplace_back(std::move(axis), std::move(value));
}

void DeviceDescription::add_bool(std::string key, bool value, std::string note) {
  add(std::move(key), HAL_CAPABILITY_BOOL, value ? 1 : 0, {}, std::move(note));
}

void DeviceDescription::add_int(std::string key, std::int64_t value, std::string note) {
  add(std::move(key), HAL_CAPABILITY_INT, value, {}, std::move(note));
}

void DeviceDescription::add_string(std::string key, std::string value, std::string note) {
  add(std::move(key), HAL_CAPABILITY_STRING, 0, std::move(value), std::move(note));
}

void DeviceDescription::add(std::string key, hal_capability_type type, std::int64_t int_value, std::string string_value,
                            std::string note) {
  capability_strings_.push_back({std::move(key), std::move(string_value), std::move(note)});
  hal_capability_v1 capability{};
  capability.type = type;
  capability.int_value = int_value;
  capabilities_.push_back(capability);
}

void DeviceDescription::finalize() {
  version_axes_.clear();
  for (const auto& [axis, value] : version_strings_) version_axes_.push_back({axis.c_str(), value.c_str()});
  for (std::size_t i = 0; i < capabilities_.size(); ++i) {
    const auto& strings = capability_strings_[i];
    capabilities_[i].key = strings.key.c_str();
    capabilities_[i].string_value =
        capabilities_[i].type == HAL_CAPABILITY_STRING ? strings.string_value.c_str() : nullptr;
    capabilities_[i].note = strings.note.empty() ? nullptr : strings.note.c_str();
  }
}

void DeviceDescription::describe(hal_device_info_v1& info) const {
  info.version_axes = version_axes_.data();
  info.version_axis_count = static_cast<std::uint32_t>(version_axes_.size());
  info.capabilities = capabilities_.data();
  info.capability_count = static_cast<std::uint32_t>(capabilities_.size());
}

std::string read_pci_sysfs(const std::string& pci_bus_id, const std::string& attribute) {
  if (pci_bus_id.empty()) return {};
  std::ifstream file("/sys/bus/pci/devices/" + pci_bus_id + "/" + attribute);
  std::string line;
  std::getline(file, line);
  return line;
}

int numa_node_from_sysfs(const std::string& pci_bus_id) {
  const std::string text = read_pci_sysfs(pci_bus_id, "numa_node");
  try {
    return text.empty() ? -1 : std::max(std::stoi(text), -1);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace hal::backend
