// The environment manifest: what exactly ran, so a result can be reproduced
// or explained (a different driver, library build or env flag).
#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "hal/conformance/report.hpp"
#include "hal/probe_cache.hpp"

extern char** environ;

namespace hal::conformance {
namespace {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "";
}

std::string os_name() {
  std::ifstream release("/etc/os-release");
  for (std::string line; std::getline(release, line);)
    if (line.starts_with("PRETTY_NAME=")) {
      std::string value = line.substr(12);
      value.erase(std::remove(value.begin(), value.end(), '"'), value.end());
      return value;
    }
  return "";
}

std::string libhal_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&hal::known_backend_names), &info) != 0 && info.dli_fname != nullptr)
    return std::filesystem::weakly_canonical(info.dli_fname).string();
  return "";
}

// Every shared object mapped into this process, in load order.
std::vector<std::string> mapped_libraries() {
  std::vector<std::string> libraries;
  std::set<std::string> seen;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const auto name = std::filesystem::path(path).filename().string();
    if (name.find(".so") == std::string::npos) continue;
    if (seen.insert(path).second) libraries.push_back(path);
  }
  return libraries;
}

LibraryFile describe_file(std::string role, const std::string& path) {
  LibraryFile file;
  file.role = std::move(role);
  file.path = path;
  std::error_code error;
  file.size = std::filesystem::file_size(path, error);
  try {
    file.sha256 = sha256_file(path);
  } catch (const std::exception& failure) {
    file.problem = failure.what();
  }
  return file;
}

}  // namespace

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  if (context == nullptr || EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context);
    throw std::runtime_error("OpenSSL cannot start a SHA-256 digest");
  }
  std::array<char, 1 << 16> chunk{};
  while (file.read(chunk.data(), chunk.size()) || file.gcount() > 0)
    EVP_DigestUpdate(context, chunk.data(), static_cast<std::size_t>(file.gcount()));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest, &length);
  EVP_MD_CTX_free(context);
  static const char hex[] = "0123456789abcdef";
  std::string text;
  for (unsigned int i = 0; i < length; ++i) {
    text += hex[digest[i] >> 4];
    text += hex[digest[i] & 15];
  }
  return text;
}

bool is_behaviour_variable(std::string_view name) {
  static constexpr std::string_view prefixes[] = {
      "HAL_",  "NVTE_", "CUDA_", "CUDNN_", "CUBLAS", "NCCL_",  "NVIDIA_", "HIP_",    "HSA_",     "ROCR_",
      "ROCM_", "RCCL_", "AMD_",  "PPU_",   "ACCL_",  "GLOO_",  "OMP_",    "OPENBLAS_", "MKL_",   "TORCH_",
      "PYTORCH_", "OMPI_", "PMIX_"};
  static constexpr std::string_view exact[] = {"LD_LIBRARY_PATH", "LD_PRELOAD", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
                                               "MASTER_ADDR",     "MASTER_PORT", "RANK",          "WORLD_SIZE",
                                               "LOCAL_RANK",      "LOCAL_WORLD_SIZE"};
  return std::any_of(std::begin(prefixes), std::end(prefixes), [&](auto prefix) { return name.starts_with(prefix); }) ||
         std::find(std::begin(exact), std::end(exact), name) != std::end(exact);
}

Manifest collect_manifest(const Runtime& runtime, const std::string& hal_version) {
  Manifest manifest;
  manifest.hal_version = hal_version;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  manifest.hostname = host;
  utsname system{};
  uname(&system);
  manifest.kernel = std::string(system.sysname) + " " + system.release + " " + system.version;
  manifest.machine = system.machine;
  manifest.os = os_name();
  manifest.cpu = cpu_model();
  manifest.probe_cache_path = ProbeCache::default_path(runtime.config().probes_cache_dir).string();

  std::set<std::string> described;
  auto add = [&](std::string role, const std::string& path) {
    if (path.empty()) return;
    std::error_code error;
    const std::string canonical = std::filesystem::weakly_canonical(path, error).string();
    if (!described.insert(error ? path : canonical).second) return;
    manifest.libraries.push_back(describe_file(std::move(role), error ? path : canonical));
  };
  std::error_code error;
  add("executable", std::filesystem::read_symlink("/proc/self/exe", error).string());
  add("libhal", libhal_path());
  for (const auto& backend : runtime.backends())
    if (backend.state == BackendState::loaded) add("backend " + backend.name, backend.path);
  // Vendor libraries the backends loaded (libcuda, libcudnn, ...) and the system ones.
  for (const auto& path : mapped_libraries()) add("loaded", path);

  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view variable(*entry);
    const auto equals = variable.find('=');
    if (equals == std::string_view::npos) continue;
    if (is_behaviour_variable(variable.substr(0, equals)))
      manifest.environment.emplace_back(std::string(variable.substr(0, equals)), std::string(variable.substr(equals + 1)));
  }
  std::sort(manifest.environment.begin(), manifest.environment.end());
  return manifest;
}

DeviceRecord describe_device(const Device& device) {
  const DeviceInfo& info = device.info();
  DeviceRecord record{device.id(), info.backend, info.name, info.vendor, info.uuid,
                      std::string(to_string(info.type)), info.pci_bus_id, info.total_memory, info.version_axes, {}};
  for (const auto& capability : info.capabilities) record.capabilities.emplace_back(capability.key, capability.value_string());
  return record;
}

}  // namespace hal::conformance
