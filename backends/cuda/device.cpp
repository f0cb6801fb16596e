// CUDA device discovery: identity, memory, clocks, version axes and the
// capabilities each device declares.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "vendor.hpp"
#include "pci_bus_id.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::cuda {

std::string format_cuda_version(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

namespace {

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

// Reads device attributes, logging (not failing on) the ones the driver refuses.
class AttributeReader {
 public:
  AttributeReader(const Context& context, const CudaDevice& device) : context_(context), device_(device) {}

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

 private:
  const Context& context_;
  const CudaDevice& device_;
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
    device.pci_bus_id = abi::normalize_pci_bus_id(bus_id).value_or("");

  std::size_t total = 0;
  if (hal_status status = context.check(api.cuDeviceTotalMem(&total, device.handle), "cuDeviceTotalMem for " + which);
      status != HAL_OK)
    return status;
  device.total_memory = total;

  AttributeReader reader(context, device);
  device.compute_units =
      static_cast<std::uint32_t>(reader.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors"));
  device.clock_mhz = static_cast<std::uint32_t>(reader.attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock") / 1000);
  device.memory_clock_mhz =
      static_cast<std::uint32_t>(reader.attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "memory clock") / 1000);
  device.compute_major = reader.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability major");
  device.compute_minor = reader.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability minor");
  device.managed_memory = reader.attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "managed memory") != 0;
  device.memory_pools = api.cuMemPoolCreate != nullptr && api.cuMemPoolDestroy != nullptr &&
                        api.cuMemPoolSetAttribute != nullptr && api.cuMemAllocFromPoolAsync != nullptr &&
                        api.cuMemFreeAsync != nullptr &&
                        reader.attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, "memory pools") != 0;
  const bool concurrent_managed =
      reader.attribute(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, "concurrent managed access") != 0;
  const bool maps_host_memory = reader.attribute(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, "map host memory") != 0;

  // Vendor, NUMA node, version axes and what the compute capability means
  // come from the plugin's profile.
  context.profile.identify(context, device);
  backend::DeviceDescription& description = device.description;
  description.add_string("cuda.compute_capability",
                     std::to_string(device.compute_major) + "." + std::to_string(device.compute_minor),
                     "as reported by the driver; a CUDA-compatible device reports one without being that NVIDIA "
                     "architecture (cuda.compute_capability.meaning says which), so nothing is derived from it");
  description.add_bool("memory.device", true);
  description.add_bool("memory.host_pinned", maps_host_memory,
                   maps_host_memory ? "page-locked with cuMemHostAlloc, mapped into the device's address space"
                                    : "the device cannot map host memory");
  description.add_bool("memory.managed", device.managed_memory,
                   device.managed_memory ? (concurrent_managed ? "cuMemAllocManaged; host and device may access it "
                                                                 "concurrently"
                                                              : "cuMemAllocManaged; no concurrent host access while "
                                                                "the device works")
                                         : "CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0 on this device");
  description.add_bool("streams", true);
  description.add_bool("events.timing", true);
  description.add_int("memory.l2_cache_bytes", reader.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size"));
  description.add_int("memory.bus_width_bits",
                  reader.attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "memory bus width"));
  device.max_shared_bytes = static_cast<std::uint32_t>(
      reader.attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory opt-in"));
  device.warp_size = static_cast<std::uint32_t>(reader.attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE, "warp size"));
  description.add_int("cuda.max_shared_memory_per_block_optin", device.max_shared_bytes);
  description.add_bool("library.cudnn", context.cudnn != nullptr, context.cudnn_status);
  description.add_bool("library.nvrtc", context.nvrtc != nullptr, context.nvrtc_status);
  description.add_bool("library.nccl", context.nccl != nullptr, context.nccl_status);
  description.add_bool("collectives", context.collectives && context.collectives->available(),
                       context.collectives ? context.collectives->capability_note() : context.nccl_status);
  // Loading needs the device's context, so discovery only says whether the image can be loaded.
  const std::string missing = kernels_missing(context);
  device.kernels_status = missing.empty() ? backend::kernels_loaded_on_first_use : missing;
  description.add_bool("kernels", missing.empty(), device.kernels_status);
  if (context.cublas) description.add_version("cublas", context.cublas->version());
  context.attention->describe(static_cast<std::uint32_t>(ordinal), description);
  return HAL_OK;
}

// Peer access needs every device known; added after discovery.
void add_peer_capability(const Context& context, std::uint32_t index) {
  CudaDevice& device = *context.devices[index];
  backend::DeviceDescription& description = device.description;
  if (context.api().cuDeviceCanAccessPeer == nullptr) {
    description.add_bool("p2p", false, "the driver lacks cuDeviceCanAccessPeer");
    return;
  }
  std::string peers;
  for (std::uint32_t other = 0; other < context.devices.size(); ++other) {
    if (other == index) continue;
    int can_access = 0;
    if (context.api().cuDeviceCanAccessPeer(&can_access, device.handle, context.devices[other]->handle) ==
            CUDA_SUCCESS &&
        can_access != 0)
      shims::append_listed(peers, context.device_id(other), ", ");
  }
  if (context.devices.size() < 2)
    description.add_bool("p2p", false, "no other device on the " + context.profile.backend + " backend");
  else
    description.add_bool("p2p", !peers.empty(), peers.empty() ? "no peer is reachable" : "peer access to " + peers);
}

}  // namespace

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
    if (hal_status status = context.check(api.cuDeviceGet(&context.devices.back()->handle, ordinal),
                                          "cuDeviceGet for device " + std::to_string(ordinal));
        status != HAL_OK)
      return status;
    if (hal_status status = describe_device(context, ordinal, *context.devices.back()); status != HAL_OK)
      return status;
  }
  for (std::uint32_t index = 0; index < context.devices.size(); ++index) {
    add_peer_capability(context, index);
    context.devices[index]->description.finalize();
  }
  return HAL_OK;
}

// cuMemGetInfo needs the device's context, and asking about a device must
// not create one (it costs device memory): until hal works on the device its
// free memory reads 0.
std::uint64_t CudaVendor::free_memory(const Context& context, std::uint32_t index) {
  const CudaDevice& device = *context.devices[index];
  if (!device.context_held.load(std::memory_order_acquire)) {
    context.log_message(HAL_LOG_DEBUG, "the free memory of " + context.device_id(index) +
                                           " is read once hal uses the device; reported as 0 until then");
    return 0;
  }
  std::size_t free = 0, total = 0;
  const backend::CurrentDevice scope = context.current_device(index);
  if (scope && context.api().cuMemGetInfo(&free, &total) == CUDA_SUCCESS) return free;
  context.log_message(HAL_LOG_WARNING, "cannot read the free memory of " + context.device_id(index) +
                                           "; its primary context is unusable, reported as 0");
  return 0;
}

}  // namespace hal::cuda
