#include "discovery.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <type_traits>
#include <utility>

#include "environment.hpp"

namespace hal::ppu {
namespace fs = std::filesystem;
namespace {

std::string first_line(const fs::path& path) {
  std::ifstream file(path);
  std::string line;
  if (!file || !std::getline(file, line)) return {};
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}


bool is_directory(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

}  // namespace

std::string Version::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::optional<Version> parse_version(std::string_view text) {
  for (std::size_t start = 0; start < text.size(); ++start) {
    if (!std::isdigit(static_cast<unsigned char>(text[start]))) continue;
    // "v1.4" is a version; "x1.4" and the "4.1" inside "1.4.1" are not.
    if (start > 0) {
      const char before = text[start - 1];
      const bool v_prefix = (before == 'v' || before == 'V') &&
                            (start == 1 || !std::isalnum(static_cast<unsigned char>(text[start - 2])));
      if (before == '.' || (std::isalnum(static_cast<unsigned char>(before)) && !v_prefix)) continue;
    }
    int parts[3] = {0, 0, 0};
    int count = 0;
    std::size_t position = start;
    while (count < 3 && position < text.size() && std::isdigit(static_cast<unsigned char>(text[position]))) {
      int value = 0;
      while (position < text.size() && std::isdigit(static_cast<unsigned char>(text[position]))) {
        if (value > 100000) return std::nullopt;  // no version component is this large
        value = value * 10 + (text[position++] - '0');
      }
      parts[count++] = value;
      if (position + 1 < text.size() && text[position] == '.' &&
          std::isdigit(static_cast<unsigned char>(text[position + 1])))
        ++position;
      else
        break;
    }
    if (count >= 2) return Version{parts[0], parts[1], parts[2]};
    start = position;
  }
  return std::nullopt;
}

Roots choose_roots(const backend::BackendOptions& options) {
  Roots roots;
  if (const std::string& sysfs = options.value("sysfs_root"); !sysfs.empty()) roots.sysfs = sysfs;
  if (const std::string& dev = options.value("dev_root"); !dev.empty()) roots.dev = dev;
  return roots;
}

std::vector<PciDevice> find_pci_devices(const std::string& sysfs_root) {
  std::vector<PciDevice> devices;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(fs::path(sysfs_root) / "bus/pci/devices", error)) {
    if (lower(first_line(entry.path() / "vendor")) != pci_vendor_id) continue;
    PciDevice device;
    device.bus_id = lower(entry.path().filename().string());
    device.device_id = lower(first_line(entry.path() / "device"));
    device.name = first_line(entry.path() / "product_name");
    const std::string numa = first_line(entry.path() / "numa_node");
    device.numa_node = numa.empty() ? -1 : std::atoi(numa.c_str());
    devices.push_back(std::move(device));
  }
  std::sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) { return a.bus_id < b.bus_id; });
  return devices;
}

std::vector<std::string> find_device_nodes(const std::string& dev_root) {
  std::vector<std::string> nodes;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dev_root, error))
    if (entry.path().filename().string().starts_with("alixpu")) nodes.push_back(entry.path().string());
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

DriverVersion read_driver_version(const std::string& sysfs_root) {
  DriverVersion driver;
  driver.path = (fs::path(sysfs_root) / "module/alixpu/version").string();
  driver.text = first_line(driver.path);
  driver.version = parse_version(driver.text);
  return driver;
}

Sdk find_sdk(const std::string& option_sdk) {
  Sdk sdk;
  const std::pair<std::string, std::string> candidates[] = {
      {abi::environment_value("PPU_SDK").value_or(""), "PPU_SDK"},     {abi::environment_value("PPU_SDK_HOME").value_or(""), "PPU_SDK_HOME"},
      {option_sdk, "backend option sdk"},      {"/opt/ppu-sdk", "standard path"},
      {"/usr/local/PPU_SDK", "standard path"},
  };
  for (const auto& [root, source] : candidates) {
    if (root.empty()) continue;
    if (!is_directory(root)) {
      sdk.tried.push_back(root + " (" + source + "): not a directory");
      continue;
    }
    sdk.root = root;
    sdk.source = source;
    sdk.version_text = first_line(fs::path(root) / "VERSION.txt");
    sdk.version = parse_version(sdk.version_text);
    sdk.tried.push_back(root + " (" + source + "): " +
                        (sdk.version ? "SDK " + sdk.version->to_string() : "no readable version in VERSION.txt"));
    return sdk;
  }
  return sdk;
}

LibraryFile find_library(const std::vector<std::string>& dirs, const std::string& base_name) {
  LibraryFile library;
  for (const auto& dir : dirs) {
    std::error_code error;
    std::string best_name;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      // The longest matching name carries the most version digits.
      if (name.starts_with(base_name) && name.size() > best_name.size() &&
          (name.size() == base_name.size() || name[base_name.size()] == '.'))
        best_name = name;
    }
    if (best_name.empty()) {
      library.tried.push_back(dir + "/" + base_name + "*: not found");
      continue;
    }
    library.path = dir + "/" + best_name;
    // libcuda.so.1 carries only the ABI major, not a release version.
    if (const std::string suffix = best_name.substr(std::min(best_name.size(), base_name.size() + 1));
        parse_version(suffix))
      library.version = suffix;
    library.tried.push_back(library.path + ": found");
    return library;
  }
  return library;
}

Collectives find_collectives(const std::string& option_accl, const Sdk& sdk) {
  Collectives collectives;
  std::vector<std::string> roots = {option_accl, abi::environment_value("ACCL_P_HOME").value_or(""), "/opt/accl-p"};
  if (!sdk.root.empty()) roots.push_back(sdk.root + "/accl-p");
  for (const auto& root : roots) {
    if (root.empty()) continue;
    if (!is_directory(root)) {
      collectives.tried.push_back(root + ": not a directory");
      continue;
    }
    collectives.root = root;
    const auto version = parse_version(first_line(fs::path(root) / "VERSION.txt"));
    collectives.version = version ? version->to_string() : "";
    collectives.tried.push_back(root + ": found");
    return collectives;
  }
  return collectives;
}

std::string model_from_name(const std::string& name) {
  constexpr std::string_view prefix = "PPU-";
  return name.starts_with(prefix) ? name.substr(prefix.size()) : name;
}

std::string isa_generation(const std::string& model) {
  // Only models whose generation is published; anything else stays unknown.
  static const std::pair<std::string_view, std::string_view> known[] = {{"ZW810", "zhenwu-810"}};
  for (const auto& [prefix, generation] : known)
    if (model.starts_with(prefix)) return std::string(generation);
  return {};
}

}  // namespace hal::ppu
