// CUDA device discovery: identity, memory, clocks, version axes and the
// capabilities each device declares.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cuda_backend.hpp"
#include "kernels.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::cuda {
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

// 12040 -> "12.4"
std::string format_cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Formatted as nvidia-smi shows it, so users can match the two.
std::string format_uuid(const CUuuid& uuid) {
  static constexpr int group_ends[] = {4, 6, 8, 10, 16};
  std::string text = "GPU-";
  int group = 0;
  for (int i = 0; i < 16; ++i) {
    char digits[3];
    std::snprintf(digits, sizeof(digits), "%02x", static_cast<unsigned char>(uuid.bytes[i]));
    text += digits;
    if (i + 1 == group_ends[group] && i + 1 < 16) {
      text += '-';
      ++group;
    }
  }
  return text;
}

// The PCI vendor as sysfs knows it: the driver API cannot tell an NVIDIA GPU
// from a CUDA-compatible device of another vendor.
std::string vendor_from_sysfs(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return "unknown";
  const std::string id = read_first_line("/sys/bus/pci/devices/" + pci_bus_id + "/vendor");
  if (id == "0x10de") return "NVIDIA";
  if (id == "0x1ded") return "T-Head";
  return id.empty() ? "unknown" : "unknown (PCI vendor " + id + ")";
}

int numa_node_from_sysfs(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) return -1;
  const std::string text = read_first_line("/sys/bus/pci/devices/" + pci_bus_id + "/numa_node");
  try {
    return text.empty() ? -1 : std::max(std::stoi(text), -1);
  } catch (const std::exception&) {
    return -1;
  }
}

class DeviceBuilder {
 public:
  DeviceBuilder(const Context& context, CudaDevice& device) : context_(context), device_(device) {}

  int attribute(CUdevice_attribute which, const char* name) {
    int value = 0;
    const CUresult result = context_.api().cuDeviceGetAttribute(&value, which, device_.handle);
    if (result != CUDA_SUCCESS) {
      context_.log_message(HAL_LOG_WARNING, std::string("cuDeviceGetAttribute(") + name + ") failed: " +
                                                context_.driver->describe(result) + "; reported as 0");
      return 0;
    }
    return value;
  }

  void add_bool(std::string key, bool value, std::string note = {}) {
    add(std::move(key), HAL_CAPABILITY_BOOL, value ? 1 : 0, {}, std::move(note));
  }
  void add_int(std::string key, std::int64_t value, std::string note = {}) {
    add(std::move(key), HAL_CAPABILITY_INT, value, {}, std::move(note));
  }
  void add_string(std::string key, std::string value, std::string note = {}) {
    add(std::move(key), HAL_CAPABILITY_STRING, 0, std::move(value), std::move(note));
  }

  // Pointers into the string vectors are taken once they stop growing.
  void finalize() {
    device_.version_axes.clear();
    for (const auto& [key, value] : device_.version_strings)
      device_.version_axes.push_back({key.c_str(), value.c_str()});
    for (std::size_t i = 0; i < device_.capabilities.size(); ++i) {
      const auto& strings = device_.capability_strings[i];
      device_.capabilities[i].key = strings.key.c_str();
      device_.capabilities[i].string_value =
          device_.capabilities[i].type == HAL_CAPABILITY_STRING ? strings.string_value.c_str() : nullptr;
      device_.capabilities[i].note = strings.note.empty() ? nullptr : strings.note.c_str();
    }
  }

 private:
  void add(std::string key, hal_capability_type type, std::int64_t int_value, std::string string_value,
           std::string note) {
    device_.capability_strings.push_back({std::move(key), std::move(string_value), std::move(note)});
    hal_capability_v1 capability{};
    capability.type = type;
    capability.int_value = int_value;
    device_.capabilities.push_back(capability);
  }

  const Context& context_;
  CudaDevice& device_;
};

hal_status describe_device(const Context& context, int ordinal, CudaDevice& device) {
  const auto& api = context.api();
  const std::string which = "device " + std::to_string(ordinal);

  char name[256] = {};
  if (hal_status status = context.check(api.cuDeviceGetName(name, sizeof(name) - 1, device.handle),
                                        "cuDeviceGetName for " + which);
      status != HAL_OK)
    return status;
  device.name = name;

  CUuuid uuid{};
  if (hal_status status = context.check(api.cuDeviceGetUuid(&uuid, device.handle), "cuDeviceGetUuid for " + which);
      status != HAL_OK)
    return status;
  device.uuid = format_uuid(uuid);

  char bus_id[64] = {};
  if (api.cuDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device.handle) == CUDA_SUCCESS)
    device.pci_bus_id = normalize_pci_bus_id(bus_id);
  device.numa_node = numa_node_from_sysfs(device.pci_bus_id);
  device.vendor = vendor_from_sysfs(device.pci_bus_id);

  std::size_t total = 0;
  if (hal_status status = context.check(api.cuDeviceTotalMem(&total, device.handle), "cuDeviceTotalMem for " + which);
      status != HAL_OK)
    return status;
  device.total_memory = total;

  DeviceBuilder builder(context, device);
  device.multiprocessors =
      static_cast<std::uint32_t>(builder.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors"));
  device.clock_mhz = static_cast<std::uint32_t>(builder.attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock") / 1000);
  device.memory_clock_mhz =
      static_cast<std::uint32_t>(builder.attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "memory clock") / 1000);
  device.compute_major = builder.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability major");
  device.compute_minor = builder.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability minor");
  device.managed_memory = builder.attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "managed memory") != 0;
  const bool concurrent_managed =
      builder.attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "concurrent managed access") != 0;
  const bool maps_host_memory = builder.attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, "map host memory") != 0;

  device.version_strings = {{"backend", HAL_VERSION_STRING},
                            {"driver", format_cuda_version(context.driver_version)},
                            {"cuda_headers", format_cuda_version(CUDA_VERSION)}};
  if (context.cudnn) device.version_strings.emplace_back("cudnn", context.cudnn->version());
  if (context.nccl) device.version_strings.emplace_back("nccl", context.nccl->version());

  builder.add_string("cuda.compute_capability",
                     std::to_string(device.compute_major) + "." + std::to_string(device.compute_minor),
                     "as reported by the driver; a CUDA-compatible device reports one without being that NVIDIA "
                     "architecture, so nothing is derived from it");
  builder.add_bool("memory.device", true);
  builder.add_bool("memory.host_pinned", maps_host_memory,
                   maps_host_memory ? "page-locked with cuMemHostAlloc, mapped into the device's address space"
                                    : "the device cannot map host memory");
  builder.add_bool("memory.managed", device.managed_memory,
                   device.managed_memory ? (concurrent_managed ? "cuMemAllocManaged; host and device may access it "
                                                                 "concurrently"
                                                              : "cuMemAllocManaged; no concurrent host access while "
                                                                "the device works")
                                         : "CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0 on this device");
  builder.add_bool("streams", true);
  builder.add_bool("events.timing", true);
  builder.add_int("memory.l2_cache_bytes", builder.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size"));
  builder.add_int("memory.bus_width_bits",
                  builder.attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "memory bus width"));
  builder.add_int("cuda.max_shared_memory_per_block_optin",
                  builder.attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory opt-in"));
  builder.add_bool("library.cudnn", context.cudnn != nullptr, context.cudnn_status);
  builder.add_bool("library.nccl", context.nccl != nullptr, context.nccl_status);
  builder.add_bool("collectives", false, "not built into the CUDA backend yet");
  builder.add_bool("kernels", device.kernels_usable, device.kernels_status);
  for (const char* key : {"attention.fused", "attention.flash", "attention.math"})
    builder.add_bool(key, false, "not built yet in the CUDA backend");
  return HAL_OK;
}

// Peer access needs every device known; added after discovery.
void add_peer_capability(const Context& context, std::uint32_t index) {
  CudaDevice& device = *context.devices[index];
  DeviceBuilder builder(context, device);
  if (context.api().cuDeviceCanAccessPeer == nullptr) {
    builder.add_bool("p2p", false, "the driver lacks cuDeviceCanAccessPeer");
    return;
  }
  std::string peers;
  for (std::uint32_t other = 0; other < context.devices.size(); ++other) {
    if (other == index) continue;
    int can_access = 0;
    if (context.api().cuDeviceCanAccessPeer(&can_access, device.handle, context.devices[other]->handle) ==
            CUDA_SUCCESS &&
        can_access != 0)
      shims::append_listed(peers, "cuda:" + std::to_string(other), ", ");
  }
  if (context.devices.size() < 2)
    builder.add_bool("p2p", false, "no other CUDA device");
  else
    builder.add_bool("p2p", !peers.empty(), peers.empty() ? "no peer is reachable" : "peer access to " + peers);
}

}  // namespace

std::string normalize_pci_bus_id(std::string_view text) {
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  char trailing = 0;
  const std::string copy(text);
  if (std::sscanf(copy.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &slot, &function, &trailing) != 4) return {};
  if (domain > 0xffff || bus > 0xff || slot > 0x1f || function > 0x7) return {};
  char normalized[16];
  std::snprintf(normalized, sizeof(normalized), "%04x:%02x:%02x.%x", domain, bus, slot, function);
  return normalized;
}

hal_status discover_devices(Context& context) {
  const auto& api = context.api();
  const CUresult init = api.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE)
    return fail(HAL_ERROR_NOT_PRESENT,
                "the CUDA driver at " + context.driver->path() + " found no device (cuInit: " +
                    context.driver->describe(init) + "); check CUDA_VISIBLE_DEVICES and that the GPU is visible",
                init);
  if (init != CUDA_SUCCESS)
    return fail(status_of(init),
                "cuInit failed for the driver at " + context.driver->path() + ": " + context.driver->describe(init) +
                    "; check that the kernel module matches the driver library (nvidia-smi)",
                init);
  if (hal_status status = context.check(api.cuDriverGetVersion(&context.driver_version), "cuDriverGetVersion");
      status != HAL_OK)
    return status;
  int count = 0;
  if (hal_status status = context.check(api.cuDeviceGetCount(&count), "cuDeviceGetCount"); status != HAL_OK)
    return status;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    context.devices.push_back(std::make_unique<CudaDevice>());
    // Kernel-based capabilities are declared from what the device could load and run.
    if (hal_status status = context.check(api.cuDeviceGet(&context.devices.back()->handle, ordinal),
                                          "cuDeviceGet for device " + std::to_string(ordinal));
        status != HAL_OK)
      return status;
    load_kernels(context, static_cast<std::uint32_t>(ordinal));
    if (hal_status status = describe_device(context, ordinal, *context.devices.back()); status != HAL_OK)
      return status;
  }
  for (std::uint32_t index = 0; index < context.devices.size(); ++index) {
    add_peer_capability(context, index);
    DeviceBuilder(context, *context.devices[index]).finalize();
  }
  return HAL_OK;
}

void fill_device_info(const Context& context, std::uint32_t index, hal_device_info_v1& info) {
  const CudaDevice& device = *context.devices[index];
  info.type = HAL_DEVICE_TYPE_GPU;
  info.name = device.name.c_str();
  info.vendor = device.vendor.c_str();
  info.uuid = device.uuid.c_str();
  info.pci_bus_id = device.pci_bus_id.c_str();
  info.numa_node = device.numa_node;
  info.total_memory = device.total_memory;
  info.free_memory = 0;
  std::size_t free = 0, total = 0;
  if (context.make_current(index) == HAL_OK && context.api().cuMemGetInfo(&free, &total) == CUDA_SUCCESS)
    info.free_memory = free;
  else
    context.log_message(HAL_LOG_WARNING, "cannot read the free memory of cuda:" + std::to_string(index) +
                                             "; its primary context is unusable, reported as 0");
  info.compute_units = device.multiprocessors;
  info.clock_mhz = device.clock_mhz;
  info.memory_clock_mhz = device.memory_clock_mhz;
  info.version_axes = device.version_axes.data();
  info.version_axis_count = static_cast<std::uint32_t>(device.version_axes.size());
  info.capabilities = device.capabilities.data();
  info.capability_count = static_cast<std::uint32_t>(device.capabilities.size());
}

}  // namespace hal::cuda
