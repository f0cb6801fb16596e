// The PPU backend's plugin table: it finds T-Head PPUs and their software
// and reports them truthfully. Running work needs the CUDA backend's code as
// a linkable library, which it is not yet, so every work entry point says so.
#include <memory>
#include <new>
#include <type_traits>

#include "backend_options.hpp"
#include "device_description.hpp"
#include "discovery.hpp"
#include "last_error.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

struct hal_backend_context {
  struct Device {
    std::string name, vendor = "T-Head", pci_bus_id;
    int numa_node = -1;
    hal::backend::DeviceDescription description;
  };
  std::vector<std::unique_ptr<Device>> devices;
};

namespace hal::ppu {
namespace {
using backend::fail;
using backend::succeed;

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : "; ") + item;
  return text;
}

void get_last_error(hal_error_info_v1* out) { backend::read_last_error(out); }

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  if (init == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "initialize needs init and out");
  if (init->struct_size < sizeof(hal_backend_init_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "init struct_size " + std::to_string(init->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    auto options = backend::read_backend_options(
        *init, "ppu", {"sdk", "sysfs_root", "dev_root", "accl"},
        "sdk (the PPU SDK root), sysfs_root, dev_root (where to look for devices) and accl (the ACCL-P root)");
    const Roots roots = choose_roots(options);
    const std::vector<PciDevice> pci = find_pci_devices(roots.sysfs);
    const std::vector<std::string> nodes = find_device_nodes(roots.dev);
    if (pci.empty())
      return fail(HAL_ERROR_NOT_PRESENT,
                  "no T-Head PPU found: no PCI device with vendor " + std::string(pci_vendor_id) + " under " +
                      roots.sysfs + "/bus/pci/devices" +
                      (nodes.empty() ? ", no " + roots.dev + "/alixpu* device node"
                                     : "; " + std::to_string(nodes.size()) + " " + roots.dev +
                                           "/alixpu* node(s) exist, so the driver may be loaded without its PCI "
                                           "devices visible here"));

    const DriverVersion driver = read_driver_version(roots.sysfs);
    const auto minimum = parse_version(minimum_driver_version);
    if (!driver.version)
      return fail(HAL_ERROR_UNSUPPORTED,
                  "found " + std::to_string(pci.size()) + " PPU(s) but no readable driver version at " + driver.path +
                      (driver.text.empty() ? "" : " (it reads '" + driver.text + "')") +
                      "; the ppu backend needs the alixpu driver " + std::string(minimum_driver_version) + " or later");
    if (*driver.version < *minimum)
      return fail(HAL_ERROR_UNSUPPORTED, "the PPU driver is " + driver.version->to_string() + " (" + driver.path +
                                             "); the ppu backend needs " + std::string(minimum_driver_version) +
                                             " or later: upgrade the alixpu driver");

    const Sdk sdk = find_sdk(options["sdk"]);
    if (sdk.root.empty())
      return fail(HAL_ERROR_NOT_PRESENT, "found " + std::to_string(pci.size()) + " PPU(s) but no PPU SDK; looked at " +
                                             (sdk.tried.empty() ? std::string("nothing") : join(sdk.tried)) +
                                             " (set PPU_SDK or [backend.ppu] sdk)");
    const std::vector<std::string> library_dirs = {sdk.root + "/lib64", sdk.root + "/lib"};
    const LibraryFile runtime = find_library(library_dirs, "libcuda.so");
    if (runtime.path.empty())
      return fail(HAL_ERROR_NOT_PRESENT, "found " + std::to_string(pci.size()) + " PPU(s) and the SDK at " + sdk.root +
                                             " but not its CUDA-compatible runtime library; tried " +
                                             join(runtime.tried));
    const LibraryFile dnn = find_library(library_dirs, "libcudnn.so");
    const Collectives collectives = find_collectives(options["accl"], sdk);

    auto context = std::make_unique<hal_backend_context>();
    for (const auto& found : pci) {
      auto device = std::make_unique<hal_backend_context::Device>();
      device->name = !found.name.empty() ? found.name : "T-Head PPU [1ded:" + found.device_id.substr(2) + "]";
      device->pci_bus_id = found.bus_id;
      device->numa_node = found.numa_node;
      auto& description = device->description;
      description.add_version("sdk", sdk.version ? sdk.version->to_string() : "unknown");
      description.add_version("driver", driver.version->to_string());
      description.add_version("runtime", runtime.version.empty() ? "unknown" : runtime.version);
      description.add_version("dnn", dnn.version.empty() ? (dnn.path.empty() ? "not found" : "unknown") : dnn.version);
      description.add_version("collectives", collectives.root.empty()      ? "not found"
                                             : collectives.version.empty() ? "unknown"
                                                                           : "ACCL-P " + collectives.version);
      const std::string model = model_from_name(device->name);
      description.add_string("ppu.model", model,
                             found.name.empty() ? "no product name in sysfs" : "from the device name");
      const std::string generation = isa_generation(model);
      description.add_string("ppu.isa_generation", generation.empty() ? "unknown" : generation,
                             generation.empty() ? "model not in hal's table" : "from the model");
      description.add_string("ppu.sdk_root", sdk.root, "found through " + sdk.source);
      description.add_string("ppu.runtime_library", runtime.path, "the SDK's CUDA-compatible driver library");
      description.add_string("ppu.collectives_root", collectives.root.empty() ? "not found" : collectives.root,
                             "ACCL-P, found by install path: " + join(collectives.tried));
      description.add_bool("memory.device", false,
                           "the ppu backend does not run work yet: it needs the CUDA backend's code as a library");
      description.finalize();
      context->devices.push_back(std::move(device));
    }
    *out = context.release();
    return succeed();
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, "out of host memory while initializing the ppu backend");
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("initializing the ppu backend failed: ") + error.what());
  }
}

void shutdown(hal_backend_context* context) { delete context; }

hal_status device_count(hal_backend_context* context, std::uint32_t* count) {
  if (context == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_count needs out");
  *count = static_cast<std::uint32_t>(context->devices.size());
  return succeed();
}

hal_status device_info(hal_backend_context* context, std::uint32_t device, hal_device_info_v1* info) {
  if (context == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  if (device >= context->devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range; there are " +
                                                std::to_string(context->devices.size()) + " PPUs");
  if (info == nullptr || info->struct_size < sizeof(hal_device_info_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_info needs a v1 hal_device_info_v1 with struct_size set");
  const auto& found = *context->devices[device];
  info->type = HAL_DEVICE_TYPE_ACCELERATOR;
  info->name = found.name.c_str();
  info->vendor = found.vendor.c_str();
  info->uuid = "";
  info->pci_bus_id = found.pci_bus_id.c_str();
  info->numa_node = found.numa_node;
  info->total_memory = 0;  // unknown without the runtime
  info->free_memory = 0;
  info->compute_units = 0;
  info->clock_mhz = 0;
  info->memory_clock_mhz = 0;
  found.description.describe(*info);
  return succeed();
}

// Every entry point that would run work: no handle can exist, so each
// refuses with the same reason.
template <typename Function>
struct Refuse;
template <typename Result, typename... Arguments>
struct Refuse<Result (*)(Arguments...)> {
  static Result call(Arguments...) {
    const hal_status status =
        fail(HAL_ERROR_UNSUPPORTED,
             "the ppu backend does not run work yet (no memory, streams or events): that needs the CUDA backend's "
             "code as a shared library; see docs/backends/ppu.md");
    if constexpr (std::is_same_v<Result, hal_status>)
      return status;
    else
      return nullptr;
  }
};

constexpr hal_backend_v1 make_table() {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = 1;
  table.name = "ppu";
  table.version = HAL_VERSION_STRING;
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = device_count;
  table.device_info = device_info;
  table.buffer_allocate = Refuse<decltype(table.buffer_allocate)>::call;
  table.buffer_free = Refuse<decltype(table.buffer_free)>::call;
  table.buffer_host_address = Refuse<decltype(table.buffer_host_address)>::call;
  table.buffer_device_address = Refuse<decltype(table.buffer_device_address)>::call;
  table.copy_host_to_device = Refuse<decltype(table.copy_host_to_device)>::call;
  table.copy_device_to_host = Refuse<decltype(table.copy_device_to_host)>::call;
  table.copy_device_to_device = Refuse<decltype(table.copy_device_to_device)>::call;
  table.fill = Refuse<decltype(table.fill)>::call;
  table.stream_create = Refuse<decltype(table.stream_create)>::call;
  table.stream_destroy = Refuse<decltype(table.stream_destroy)>::call;
  table.stream_synchronize = Refuse<decltype(table.stream_synchronize)>::call;
  table.stream_query = Refuse<decltype(table.stream_query)>::call;
  table.stream_wait_event = Refuse<decltype(table.stream_wait_event)>::call;
  table.stream_host_callback = Refuse<decltype(table.stream_host_callback)>::call;
  table.event_create = Refuse<decltype(table.event_create)>::call;
  table.event_destroy = Refuse<decltype(table.event_destroy)>::call;
  table.event_record = Refuse<decltype(table.event_record)>::call;
  table.event_query = Refuse<decltype(table.event_query)>::call;
  table.event_synchronize = Refuse<decltype(table.event_synchronize)>::call;
  table.event_elapsed_milliseconds = Refuse<decltype(table.event_elapsed_milliseconds)>::call;
  table.attention = nullptr;
  table.collectives = nullptr;
  return table;
}

constexpr hal_backend_v1 ppu_table = make_table();

}  // namespace
}  // namespace hal::ppu

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  return host_max_abi_version >= 1 ? &hal::ppu::ppu_table : nullptr;
}
