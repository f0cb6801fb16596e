#include "loader.hpp"

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/dll/shared_library.hpp>

#include "abi.hpp"
#include "symbol_table.hpp"

namespace hal::detail {

LoadedBackend::~LoadedBackend() {
  if (table != nullptr && context != nullptr) table->shutdown(context);
}

Status LoadedBackend::error(hal_status code, std::string_view operation) const {
  hal_error_info_v1 info{};
  info.struct_size = sizeof(info);
  table->get_last_error(&info);
  std::string message = std::string(operation) + " failed in the " + name + " backend";
  if (info.message != nullptr && *info.message != '\0') message += ": " + std::string(info.message);
  return Status(detail::from_abi(code), std::move(message), info.native_code);
}

namespace {

// Whether the plugin's table is long enough to hold the field at offset.
bool table_has(const hal_backend_v1* table, std::size_t offset, std::size_t size) {
  return table->struct_size >= offset + size;
}

// The sub-table `member` (at offset in the table), or nullptr where the
// plugin's table is too short to hold it, the plugin left it unset, or it is
// smaller than hal's struct.
template <typename SubTable>
const SubTable* sub_table(const hal_backend_v1* table, std::size_t offset, const SubTable* hal_backend_v1::*member) {
  if (!table_has(table, offset, sizeof(table->*member))) return nullptr;
  const SubTable* sub = table->*member;
  return sub != nullptr && sub->struct_size >= sizeof(SubTable) ? sub : nullptr;
}

}  // namespace

const hal_attention_v3* LoadedBackend::attention() const {
  const auto* attention = sub_table(table, offsetof(hal_backend_v1, attention), &hal_backend_v1::attention);
  return attention != nullptr && attention->supports != nullptr && attention->workspace_size != nullptr &&
                 attention->forward != nullptr && attention->backward != nullptr
             ? attention
             : nullptr;
}

const hal_interop_v1* LoadedBackend::interop() const {
  return sub_table(table, offsetof(hal_backend_v1, interop), &hal_backend_v1::interop);
}

const hal_telemetry_v1* LoadedBackend::telemetry() const {
  const auto* telemetry = sub_table(table, offsetof(hal_backend_v1, telemetry), &hal_backend_v1::telemetry);
  return telemetry != nullptr && telemetry->snapshot != nullptr ? telemetry : nullptr;
}

const hal_memory_test_v1* LoadedBackend::memory_test() const {
  const auto* memory_test = sub_table(table, offsetof(hal_backend_v1, memory_test), &hal_backend_v1::memory_test);
  return memory_test != nullptr && memory_test->run_element != nullptr ? memory_test : nullptr;
}

const hal_topology_v1* LoadedBackend::topology() const {
  const auto* topology = sub_table(table, offsetof(hal_backend_v1, topology), &hal_backend_v1::topology);
  return topology != nullptr && topology->device_links != nullptr ? topology : nullptr;
}

const hal_collectives_v1* LoadedBackend::collectives() const {
  return sub_table(table, offsetof(hal_backend_v1, collectives), &hal_backend_v1::collectives);
}

namespace {

constexpr std::string_view plugin_prefix = "libhal_backend_";
constexpr std::string_view plugin_suffix = ".so";

// The v1 table's functions, as shims/symbol_table.hpp lists a vendor
// library's: X(field, type, requirement). Every one of them is required.
#define HAL_BACKEND_V1_FUNCTIONS(X)                                                                                    \
  X(get_last_error, decltype(hal_backend_v1::get_last_error), required)                                                \
  X(initialize, decltype(hal_backend_v1::initialize), required)                                                        \
  X(shutdown, decltype(hal_backend_v1::shutdown), required)                                                            \
  X(device_count, decltype(hal_backend_v1::device_count), required)                                                    \
  X(device_info, decltype(hal_backend_v1::device_info), required)                                                      \
  X(buffer_allocate, decltype(hal_backend_v1::buffer_allocate), required)                                              \
  X(buffer_free, decltype(hal_backend_v1::buffer_free), required)                                                      \
  X(buffer_host_address, decltype(hal_backend_v1::buffer_host_address), required)                                      \
  X(buffer_device_address, decltype(hal_backend_v1::buffer_device_address), required)                                  \
  X(copy_host_to_device, decltype(hal_backend_v1::copy_host_to_device), required)                                      \
  X(copy_device_to_host, decltype(hal_backend_v1::copy_device_to_host), required)                                      \
  X(copy_device_to_device, decltype(hal_backend_v1::copy_device_to_device), required)                                  \
  X(fill, decltype(hal_backend_v1::fill), required)                                                                    \
  X(stream_create, decltype(hal_backend_v1::stream_create), required)                                                  \
  X(stream_destroy, decltype(hal_backend_v1::stream_destroy), required)                                                \
  X(stream_synchronize, decltype(hal_backend_v1::stream_synchronize), required)                                        \
  X(stream_query, decltype(hal_backend_v1::stream_query), required)                                                    \
  X(stream_wait_event, decltype(hal_backend_v1::stream_wait_event), required)                                          \
  X(stream_host_callback, decltype(hal_backend_v1::stream_host_callback), required)                                    \
  X(event_create, decltype(hal_backend_v1::event_create), required)                                                    \
  X(event_destroy, decltype(hal_backend_v1::event_destroy), required)                                                  \
  X(event_record, decltype(hal_backend_v1::event_record), required)                                                    \
  X(event_query, decltype(hal_backend_v1::event_query), required)                                                      \
  X(event_synchronize, decltype(hal_backend_v1::event_synchronize), required)                                          \
  X(event_elapsed_milliseconds, decltype(hal_backend_v1::event_elapsed_milliseconds), required)

// "device_info, fill" for the required functions the plugin left NULL.
std::string missing_functions(const hal_backend_v1& table) {
  return shims::SymbolResolution::join(
      shims::absent_symbols(HAL_SYMBOL_SPECS(HAL_BACKEND_V1_FUNCTIONS, table, "")).missing_required);
}

void forward_backend_log(void* user_data, hal_log_level level, const char* message) {
  const auto* backend_name = static_cast<const std::string*>(user_data);
  log_message(level, *backend_name + ": " + (message != nullptr ? message : ""));
}

PluginLoad failure(BackendState state, std::string reason) { return {nullptr, state, std::move(reason)}; }

}  // namespace

std::string backend_name_from_filename(const std::filesystem::path& path) {
  const std::string filename = path.filename().string();
  if (filename.size() <= plugin_prefix.size() + plugin_suffix.size() || !filename.starts_with(plugin_prefix) ||
      !filename.ends_with(plugin_suffix))
    return {};
  return filename.substr(plugin_prefix.size(), filename.size() - plugin_prefix.size() - plugin_suffix.size());
}

PluginLoad load_plugin(const std::filesystem::path& path, const std::vector<PluginOption>& options) {
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    // RTLD_LOCAL keeps each backend's vendor symbols to itself.
    library->load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& error) {
    return failure(BackendState::error, "cannot open plugin: " + std::string(error.what()));
  }
  if (!library->has(HAL_BACKEND_ENTRY_SYMBOL))
    return failure(BackendState::error, std::string("plugin does not export the entry symbol '") +
                                            HAL_BACKEND_ENTRY_SYMBOL + "'; it is not a hal backend or was built wrong");
  auto query = library->get<const hal_backend_v1*(std::uint32_t)>(HAL_BACKEND_ENTRY_SYMBOL);
  const hal_backend_v1* table = query(host_max_abi_version);
  if (table == nullptr)
    return failure(BackendState::error, "plugin returned no table for ABI version " +
                                            std::to_string(host_max_abi_version) +
                                            " or below; rebuild the plugin against this libhal");
  if (table->abi_version < HAL_BACKEND_ABI_MIN_VERSION || table->abi_version > host_max_abi_version)
    return failure(BackendState::error,
                   "plugin offers ABI version " + std::to_string(table->abi_version) + " but libhal loads versions " +
                       std::to_string(HAL_BACKEND_ABI_MIN_VERSION) + " to " + std::to_string(host_max_abi_version) +
                       (table->abi_version != 0 && table->abi_version < HAL_BACKEND_ABI_MIN_VERSION
                            ? " (version 2 changed the attention table's entries); rebuild the "
                              "plugin against this libhal's hal/backend_abi.h"
                            : "; rebuild one to match"));
  if (table->struct_size < minimum_backend_table_size_v1)
    return failure(BackendState::error, "plugin table struct_size is " + std::to_string(table->struct_size) +
                                            " bytes, smaller than the " +
                                            std::to_string(minimum_backend_table_size_v1) +
                                            " bytes of a v1 table; the plugin was built against another header");
  if (const std::string missing = missing_functions(*table); !missing.empty())
    return failure(BackendState::error, "plugin table lacks required functions: " + missing);

  auto backend = std::make_shared<LoadedBackend>();
  backend->library = std::move(library);
  backend->table = table;
  backend->name = table->name != nullptr ? table->name : backend_name_from_filename(path);
  backend->path = path.string();

  std::vector<hal_key_value_v1> option_pairs;
  std::vector<const char*> option_sources;
  for (const PluginOption& option : options) {
    option_pairs.push_back({option.key.c_str(), option.value.c_str()});
    option_sources.push_back(option.source.c_str());
  }
  hal_backend_init_v1 init{};
  init.struct_size = sizeof(init);
  init.abi_version = table->abi_version;
  init.log = &forward_backend_log;
  init.log_user_data = &backend->name;  // lives as long as the backend
  init.options = option_pairs.data();
  init.option_count = static_cast<std::uint32_t>(option_pairs.size());
  init.option_sources = option_sources.data();

  hal_backend_context* context = nullptr;
  const hal_status code = table->initialize(&init, &context);
  if (code != HAL_OK) {
    const Status status = backend->error(code, "initializing the backend");
    backend->table = nullptr;  // nothing to shut down
    // A missing vendor library is an expected state, not a fault.
    return failure(code == HAL_ERROR_NOT_PRESENT ? BackendState::unavailable : BackendState::error,
                   status.message());
  }
  if (context == nullptr) {
    backend->table = nullptr;
    return failure(BackendState::error, "plugin initialize succeeded but returned no context");
  }
  backend->context = context;
  return {std::move(backend), BackendState::loaded, {}};
}

}  // namespace hal::detail
