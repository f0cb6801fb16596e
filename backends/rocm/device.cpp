// ROCm device discovery: identity, memory, clocks, version axes and the
// capabilities each device declares.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pci_bus_id.hpp"
#include "vendor.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::rocm {
namespace {

// As rocm-smi shows it: "GPU-" and the 16 bytes in hex.
std::string format_uuid(const hipUUID& uuid) {
  std::string text = "GPU-";
  for (const char byte : uuid.bytes) {
    char digits[3];
    std::snprintf(digits, sizeof(digits), "%02x", static_cast<unsigned char>(byte));
    text += digits;
  }
  return text;
}

// libamdhip64 drives only AMD GPUs; sysfs, where it lists the device, has
// the last word.
std::string vendor_from_sysfs(const std::string& pci_bus_id) {
  const std::string id = backend::read_pci_sysfs(pci_bus_id, "vendor");
  if (id.empty() || id == "0x1002") return "AMD";
  return "unknown (PCI vendor " + id + ")";
}

class DeviceReader {
 public:
  DeviceReader(const Context& context, RocmDevice& device) : context_(context), device_(device) {}

  int attribute(hipDeviceAttribute_t which, const char* name) {
    int value = 0;
    const hipError_t error = context_.api().hipDeviceGetAttribute(&value, which, device_.ordinal);
    if (error != hipSuccess) {
      context_.log_message(HAL_LOG_WARNING, std::string("hipDeviceGetAttribute(") + name + ") failed for rocm:" +
                                                std::to_string(device_.ordinal) + ": " +
                                                context_.runtime->describe(error) + "; reported as 0");
      return 0;
    }
    return value;
  }

 private:
  const Context& context_;
  RocmDevice& device_;
};

hal_status describe_device(const Context& context, int ordinal, RocmDevice& device) {
  const auto& api = context.api();
  const std::string which = "rocm:" + std::to_string(ordinal);
  device.ordinal = ordinal;

  char name[256] = {};
  if (hal_status status = context.check(api.hipDeviceGetName(name, sizeof(name) - 1, ordinal),
                                        "hipDeviceGetName for " + which);
      status != HAL_OK)
    return status;
  device.name = name;

  // Slack after the struct: a runtime whose R0000 layout grew must not write
  // past what hal handed it.
  struct {
    hipDeviceProp_t properties;
    unsigned char slack[1024];
  } properties{};
  if (hal_status status = context.check(api.hipGetDevicePropertiesR0000(&properties.properties, ordinal),
                                        "hipGetDeviceProperties for " + which);
      status != HAL_OK)
    return status;
  const char* arch = properties.properties.gcnArchName;
  device.gcn_arch_name.assign(arch, strnlen(arch, sizeof(properties.properties.gcnArchName)));

  if (api.hipDeviceGetUuid != nullptr) {
    hipUUID uuid{};
    if (hal_status status = context.check(api.hipDeviceGetUuid(&uuid, ordinal), "hipDeviceGetUuid for " + which);
        status != HAL_OK)
      return status;
    device.uuid = format_uuid(uuid);
  }

  char bus_id[64] = {};
  if (api.hipDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, ordinal) == hipSuccess)
    device.pci_bus_id = abi::normalize_pci_bus_id(bus_id).value_or("");
  device.numa_node = backend::numa_node_from_sysfs(device.pci_bus_id);
  device.vendor = vendor_from_sysfs(device.pci_bus_id);

  std::size_t total = 0;
  if (hal_status status = context.check(api.hipDeviceTotalMem(&total, ordinal), "hipDeviceTotalMem for " + which);
      status != HAL_OK)
    return status;
  device.total_memory = total;

  DeviceReader reader(context, device);
  device.compute_units =
      static_cast<std::uint32_t>(reader.attribute(hipDeviceAttributeMultiprocessorCount, "compute units"));
  device.clock_mhz = static_cast<std::uint32_t>(reader.attribute(hipDeviceAttributeClockRate, "clock") / 1000);
  device.memory_clock_mhz =
      static_cast<std::uint32_t>(reader.attribute(hipDeviceAttributeMemoryClockRate, "memory clock") / 1000);
  device.managed_memory = reader.attribute(hipDeviceAttributeManagedMemory, "managed memory") != 0;
  const bool concurrent_managed =
      reader.attribute(hipDeviceAttributeConcurrentManagedAccess, "concurrent managed access") != 0;
  const bool maps_host_memory = reader.attribute(hipDeviceAttributeCanMapHostMemory, "map host memory") != 0;
  const int warp_size = reader.attribute(hipDeviceAttributeWarpSize, "wavefront size");
  device.warp_size = static_cast<std::uint32_t>(warp_size);
  device.max_shared_bytes = static_cast<std::uint32_t>(
      reader.attribute(hipDeviceAttributeMaxSharedMemoryPerBlock, "shared memory per block"));

  backend::DeviceDescription& description = device.description;
  description.add_version("backend", HAL_VERSION_STRING);
  // The runtime (libamdhip64) and the kernel driver are updated separately.
  description.add_version("hip_runtime", shims::HipRuntime::format_version(context.runtime_version));
  description.add_version("hip_driver", shims::HipRuntime::format_version(context.driver_version));
  description.add_version("hip_headers", shims::HipRuntime::format_version(HIP_VERSION));
  if (context.rccl) description.add_version("rccl", context.rccl->version());

  description.add_string("rocm.gcn_arch_name", device.gcn_arch_name,
                         "the ISA and its target features (sramecc, xnack) as the runtime reports them");
  description.add_int("rocm.wavefront_size", warp_size);
  description.add_bool("memory.device", true);
  description.add_bool("memory.host_pinned", maps_host_memory,
                       maps_host_memory ? "page-locked with hipHostMalloc, mapped into the device's address space"
                                        : "the device cannot map host memory");
  description.add_bool("memory.managed", device.managed_memory,
                       device.managed_memory
                           ? (concurrent_managed ? "hipMallocManaged; host and device may access it concurrently"
                                                 : "hipMallocManaged; no concurrent host access while the device "
                                                   "works (xnack off)")
                           : "hipDeviceAttributeManagedMemory is 0 on this device");
  description.add_bool("streams", true);
  description.add_bool("events.timing", true);
  description.add_int("memory.l2_cache_bytes", reader.attribute(hipDeviceAttributeL2CacheSize, "L2 cache size"));
  description.add_int("memory.bus_width_bits", reader.attribute(hipDeviceAttributeMemoryBusWidth, "memory bus width"));
  description.add_bool("collectives", context.collectives && context.collectives->available(),
                       context.collectives ? context.collectives->capability_note() : context.rccl_status);
  return HAL_OK;
}

std::uint32_t device_index(const Context& context, const RocmDevice& device) {
  for (std::uint32_t index = 0; index < context.devices.size(); ++index)
    if (context.devices[index].get() == &device) return index;
  return 0;  // unreachable: device is one of context.devices
}

// Needs every device known; added after discovery.
void add_late_capabilities(const Context& context, RocmDevice& device) {
  backend::DeviceDescription& description = device.description;
  // Loading needs the device current, so discovery only says whether the code object can be loaded.
  const std::string missing = kernels_missing(context, device);
  device.kernel_status = missing.empty() ? backend::kernels_loaded_on_first_use : missing;
  description.add_bool("kernels", missing.empty(), device.kernel_status);
  context.attention->describe(device_index(context, device), description);

  if (context.api().hipDeviceCanAccessPeer == nullptr) {
    description.add_bool("p2p", false, "the HIP runtime lacks hipDeviceCanAccessPeer");
    return;
  }
  std::string peers;
  for (std::uint32_t other = 0; other < context.devices.size(); ++other) {
    if (context.devices[other].get() == &device) continue;
    int can_access = 0;
    if (context.api().hipDeviceCanAccessPeer(&can_access, device.ordinal, context.devices[other]->ordinal) ==
            hipSuccess &&
        can_access != 0)
      peers += (peers.empty() ? "" : ", ") + std::string("rocm:") + std::to_string(other);
  }
  if (context.devices.size() < 2)
    description.add_bool("p2p", false, "no other ROCm device");
  else
    description.add_bool("p2p", !peers.empty(), peers.empty() ? "no peer is reachable" : "peer access to " + peers);
}

}  // namespace

std::string base_architecture(std::string_view gcn_arch_name) {
  return std::string(gcn_arch_name.substr(0, gcn_arch_name.find(':')));
}

hal_status discover_devices(Context& context) {
  const auto& api = context.api();
  const std::string where = "the HIP runtime at " + context.runtime->path();
  // hipInit's own status is not telling (ROCm 5 returns hipErrorInvalidDevice
  // without a GPU); the device count says whether there is anything to use.
  const hipError_t init = api.hipInit(0);
  int count = 0;
  const hipError_t counted = api.hipGetDeviceCount(&count);
  if (counted == hipErrorNoDevice || (counted == hipSuccess && count == 0))
    return fail(HAL_ERROR_NOT_PRESENT,
                where + " found no device (hipGetDeviceCount: " + context.runtime->describe(counted) +
                    ", hipInit: " + context.runtime->describe(init) +
                    "); check /dev/kfd access (the render and video groups) and HIP_VISIBLE_DEVICES. Library search: " +
                    context.runtime->attempts(),
                counted);
  if (counted != hipSuccess)
    return fail(status_of(counted),
                "hipGetDeviceCount failed for " + where + ": " + context.runtime->describe(counted) +
                    "; check that the amdgpu kernel driver matches the runtime (rocm-smi, dmesg)",
                counted);
  if (hal_status status = context.check(api.hipRuntimeGetVersion(&context.runtime_version), "hipRuntimeGetVersion");
      status != HAL_OK)
    return status;
  if (hal_status status = context.check(api.hipDriverGetVersion(&context.driver_version), "hipDriverGetVersion");
      status != HAL_OK)
    return status;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    auto device = std::make_unique<RocmDevice>();
    if (hal_status status = describe_device(context, ordinal, *device); status != HAL_OK) return status;
    context.devices.push_back(std::move(device));
  }
  for (const auto& device : context.devices) {
    add_late_capabilities(context, *device);
    device->description.finalize();
  }
  return HAL_OK;
}

std::uint64_t RocmVendor::free_memory(const Context& context, std::uint32_t index) {
  std::size_t free = 0, total = 0;
  const backend::CurrentDevice scope = context.current_device(index);
  if (scope && context.api().hipMemGetInfo(&free, &total) == hipSuccess) return free;
  context.log_message(HAL_LOG_WARNING, "cannot read the free memory of " + context.device_id(index) + "; reported as 0");
  return 0;
}

}  // namespace hal::rocm
