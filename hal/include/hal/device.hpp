// Device and DeviceInfo: what a device is and what it can do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace hal {

namespace detail {
struct LoadedBackend;
struct Access;
}

class Buffer;
class Stream;
class Event;
struct ExternalMemory;  // interop.hpp
struct NativeStream;    // interop.hpp

// The values are the plugin ABI's codes (checked in the library).
enum class DeviceType : std::uint32_t { cpu = 0, gpu = 1, accelerator = 2 };
enum class MemoryKind : std::uint32_t { device = 0, host_pinned = 1, managed = 2 };

std::string_view to_string(DeviceType type);
std::string_view to_string(MemoryKind kind);

// A typed capability value as the backend declares it ("attention.flash" = true).
struct Capability {
  std::string key;
  std::variant<bool, std::int64_t, double, std::string> value;
  std::string note;  // why, or where the value came from
  std::string value_string() const;
};

// A snapshot of a device taken at discovery (free_memory: see Device::free_memory).
struct DeviceInfo {
  static constexpr int schema_version = 1;
  std::string backend;
  std::uint32_t index = 0;
  DeviceType type = DeviceType::cpu;
  std::string name;
  std::string vendor;
  std::string uuid;
  std::string pci_bus_id;
  int numa_node = -1;
  std::uint64_t total_memory = 0;
  std::uint64_t free_memory = 0;
  std::uint32_t compute_units = 0;
  std::uint32_t clock_mhz = 0;
  std::uint32_t memory_clock_mhz = 0;
  // Each version axis on its own: driver, runtime, every vendor library.
  std::vector<std::pair<std::string, std::string>> version_axes;
  std::vector<Capability> capabilities;
  // Backends whose view of this same device (same PCI bus id, or UUID) the
  // runtime does not list: a PPU is also a CUDA device to the cuda backend.
  std::vector<std::string> supersedes;

  const Capability* find_capability(std::string_view key) const;
  std::optional<std::string> version(std::string_view axis) const;
};

// Devices come from a Runtime (Runtime::devices, Runtime::device).
class Device {
 public:
  // "host:0", "cuda:1"
  std::string id() const;
  const DeviceInfo& info() const { return *info_; }
  const std::string& backend_name() const { return info_->backend; }
  std::uint32_t index() const { return index_; }
  // Read now, not at discovery.
  std::uint64_t free_memory() const;
  // True when the capability is declared as a true bool.
  bool supports(std::string_view capability_key) const;

  // alignment: a power of two; 0 means the backend's default (at least 64).
  Buffer allocate(std::uint64_t size, MemoryKind kind = MemoryKind::device, std::uint64_t alignment = 0) const;
  Stream create_stream() const;
  Event create_event() const;
  // Interop (hal/interop.hpp): memory and streams other code owns.
  // Throws unsupported when the backend cannot (the host has no native
  // streams), invalid_argument naming what the memory really is.
  Buffer import_memory(const ExternalMemory& memory) const;
  Stream wrap_native_stream(const NativeStream& stream) const;

  bool operator==(const Device& other) const {
    return backend_ == other.backend_ && index_ == other.index_;
  }

 private:
  friend struct detail::Access;
  Device(std::shared_ptr<detail::LoadedBackend> backend, std::uint32_t index, DeviceInfo info);

  std::shared_ptr<detail::LoadedBackend> backend_;
  std::uint32_t index_;
  std::shared_ptr<const DeviceInfo> info_;
};

}  // namespace hal
