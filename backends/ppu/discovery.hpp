// Finding T-Head PPUs and their software without loading any vendor library:
// PCI vendor id 0x1ded in sysfs, /dev/alixpu* nodes, the SDK root and its
// VERSION.txt, the driver module's version. Every root is a parameter so
// tests point discovery at a fixture tree.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend_options.hpp"

namespace hal::ppu {

inline constexpr std::string_view pci_vendor_id = "0x1ded";
// The driver version the backend needs at least.
inline constexpr std::string_view minimum_driver_version = "1.1.0";

struct Version {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const Version&) const = default;
  std::string to_string() const;
};
// The first dotted number ("1.4.1", "v1.4", "PPU SDK 1.4.0-rc2") in text.
std::optional<Version> parse_version(std::string_view text);

// Where discovery looks; each field says where its value came from.
struct Roots {
  std::string sysfs = "/sys";
  std::string dev = "/dev";
};
// The backend options sysfs_root / dev_root (HAL_PPU_SYSFS_ROOT /
// HAL_PPU_DEV_ROOT set them), else /sys and /dev.
Roots choose_roots(const backend::BackendOptions& options);

struct PciDevice {
  std::string bus_id;     // the sysfs directory name, "0000:3b:00.0"
  std::string device_id;  // "0x...", from sysfs
  std::string name;       // product_name from sysfs when the driver gives one
  int numa_node = -1;
};
// PCI functions whose vendor is 0x1ded, sorted by bus id.
std::vector<PciDevice> find_pci_devices(const std::string& sysfs_root);
// <dev root>/alixpu*, sorted.
std::vector<std::string> find_device_nodes(const std::string& dev_root);

struct DriverVersion {
  std::string path;  // <sysfs root>/module/alixpu/version
  std::string text;  // "" when the file is absent
  std::optional<Version> version;
};
DriverVersion read_driver_version(const std::string& sysfs_root);

struct Sdk {
  std::string root;          // "" when none was found
  std::string source;        // "PPU_SDK", "PPU_SDK_HOME", "backend option sdk", "standard path"
  std::string version_text;  // the first line of VERSION.txt
  std::optional<Version> version;
  std::vector<std::string> tried;  // every root looked at, with what was found
};
// The SDK root: PPU_SDK, PPU_SDK_HOME, the option sdk, /opt/ppu-sdk,
// /usr/local/PPU_SDK, first existing directory wins.
Sdk find_sdk(const std::string& option_sdk);

// A library in one of dirs, by base name ("libcuda.so"): the path found and
// the version its file name carries (libcudnn.so.9.1.0 -> "9.1.0").
struct LibraryFile {
  std::string path;
  std::string version;
  std::vector<std::string> tried;
};
LibraryFile find_library(const std::vector<std::string>& dirs, const std::string& base_name);

// ACCL-P, the PPU's NCCL-compatible collectives, found by install path only:
// the name pccl is shared with unrelated libraries.
struct Collectives {
  std::string root;
  std::string version;
  std::vector<std::string> tried;
};
Collectives find_collectives(const std::string& option_accl, const Sdk& sdk);

// "PPU-ZW810E" -> "ZW810E"; the name itself when it has no "PPU-" prefix.
std::string model_from_name(const std::string& name);
// The ISA generation of a known model, "" when unknown.
std::string isa_generation(const std::string& model);

}  // namespace hal::ppu
