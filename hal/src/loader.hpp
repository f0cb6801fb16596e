// Internal: opening one backend plugin and checking its table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hal/runtime.hpp"
#include "loaded_backend.hpp"

namespace hal::detail {

// The highest ABI libhal speaks and the smallest table it accepts for v1:
// the table as first published, up to the collectives; fields appended since
// (interop) are optional and read only when struct_size covers them.
constexpr std::uint32_t host_max_abi_version = HAL_BACKEND_ABI_VERSION;
constexpr std::size_t minimum_backend_table_size_v1 = offsetof(hal_backend_v1, interop);

struct PluginLoad {
  std::shared_ptr<LoadedBackend> backend;  // null unless state == loaded
  BackendState state = BackendState::error;
  std::string reason;
};

// One of the backend's settings as initialize receives it: where its value
// came from is the variable's name ("HAL_CUDA_DRIVER") or "config".
struct PluginOption {
  std::string key;
  std::string value;
  std::string source;
};

// Opens the plugin, negotiates the ABI, validates the table and initializes
// it. Never throws: every failure becomes state + reason.
PluginLoad load_plugin(const std::filesystem::path& path, const std::vector<PluginOption>& options);

// "libhal_backend_cuda.so" -> "cuda"; "" when the name does not match.
std::string backend_name_from_filename(const std::filesystem::path& path);

}  // namespace hal::detail
