#include "library_loader.hpp"
#include "symbol_table.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "environment.hpp"

namespace hal::shims {
namespace {


std::vector<std::string> glob_directories(const std::string& pattern) {
  std::vector<std::string> matches;
  glob_t result{};
  if (glob(pattern.c_str(), GLOB_ONLYDIR | GLOB_NOSORT, nullptr, &result) == 0) {
    for (std::size_t i = 0; i < result.gl_pathc; ++i) matches.emplace_back(result.gl_pathv[i]);
  }
  globfree(&result);
  std::sort(matches.begin(), matches.end());
  return matches;
}

bool is_directory(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

bool exists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

// Directories that resolve to the same place are searched once.
void append_unique(std::vector<std::string>& directories, std::set<std::string>& seen, const std::string& directory) {
  std::error_code error;
  const auto canonical = std::filesystem::weakly_canonical(directory, error);
  const std::string key = error ? directory : canonical.string();
  if (seen.insert(key).second) directories.push_back(directory);
}

// Link-time stubs (toolkit lib64/stubs) export the API but fail every call;
// loading one instead of the real driver would turn "no driver" into nonsense.
bool is_link_time_stub(const std::string& path) {
  for (const auto& part : std::filesystem::path(path)) {
    if (part == "stubs") return true;
  }
  return false;
}

class Search {
 public:
  explicit Search(const LibraryRequest& request) : request_(request) {}

  // Returns true when the library is open.
  bool try_path(const std::string& where, const std::string& path) {
    if (is_link_time_stub(path)) {
      note(where, path, "skipped: a link-time stub, never loaded at run time");
      return false;
    }
    dlerror();
    const int flags = RTLD_NOW | RTLD_LOCAL | (request_.never_unload ? RTLD_NODELETE : 0);
    void* handle = dlopen(path.c_str(), flags);
    if (handle == nullptr) {
      const char* error = dlerror();
      note(where, path, error != nullptr ? error : "dlopen failed without a message");
      return false;
    }
    SharedLibrary library = SharedLibrary::from_handle(handle, path);
    if (is_link_time_stub(library.path())) {
      note(where, path, "rejected: resolved to the link-time stub " + library.path());
      return false;  // library closes here
    }
    note(where, path, "loaded " + library.path());
    result_.library = std::move(library);
    return true;
  }

  bool try_directory(const std::string& where, const std::string& directory) {
    for (const auto& soname : request_.sonames) {
      const std::string path = (std::filesystem::path(directory) / soname).string();
      if (!exists(path)) {
        note(where, path, "not found");
        continue;
      }
      if (try_path(where, path)) return true;
    }
    return false;
  }

  void note(const std::string& where, const std::string& path, std::string outcome) {
    result_.attempts.push_back({where, path, std::move(outcome)});
  }

  LibraryLoad take() { return std::move(result_); }

 private:
  const LibraryRequest& request_;
  LibraryLoad result_;
};

}  // namespace

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    close();
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

SharedLibrary SharedLibrary::from_handle(void* handle, const std::string& requested) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0')
    return SharedLibrary(handle, map->l_name);
  return SharedLibrary(handle, requested);
}

void* SharedLibrary::find(const char* symbol) const {
  return handle_ != nullptr ? dlsym(handle_, symbol) : nullptr;
}

void SharedLibrary::close() {
  if (handle_ != nullptr) dlclose(handle_);
  handle_ = nullptr;
}

std::string LibraryLoad::describe_attempts() const {
  std::string text;
  for (const auto& attempt : attempts) {
    if (!text.empty()) text += "; ";
    text += "[" + attempt.where + "] " + attempt.path + ": " + attempt.outcome;
  }
  return text.empty() ? "nothing was tried" : text;
}

std::vector<std::string> toolkit_library_directories() {
  std::vector<std::string> directories;
  std::set<std::string> seen;
  for (const std::string& root : {abi::environment_value("CUDA_HOME").value_or(""), abi::environment_value("CUDA_PATH").value_or(""), std::string("/usr/local/cuda")}) {
    if (root.empty()) continue;
    for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"}) {
      const std::string directory = (std::filesystem::path(root) / sub).string();
      if (is_directory(directory)) append_unique(directories, seen, directory);
    }
  }
  return directories;
}

std::vector<std::pair<std::string, std::string>> rocm_library_directories() {
  std::vector<std::pair<std::string, std::string>> directories;
  if (const std::string rocm_path = abi::environment_value("ROCM_PATH").value_or(""); !rocm_path.empty())
    directories.emplace_back("ROCM_PATH", (std::filesystem::path(rocm_path) / "lib").string());
  directories.emplace_back("/opt/rocm", "/opt/rocm/lib");
  return directories;
}

LibraryRequest rocm_library_request(std::string display_name, std::vector<std::string> sonames,
                                    std::string environment_variable, ConfiguredPath configured) {
  return {.display_name = std::move(display_name),
          .sonames = std::move(sonames),
          .configured = std::move(configured),
          .environment_variable = std::move(environment_variable),
          .search_toolkit = false,
          .search_python_packages = false,
          .install_directories = rocm_library_directories(),
          .never_unload = true};
}

namespace {

// A virtual environment is a prefix with pyvenv.cfg; its interpreter is in bin/.
bool is_virtual_environment(const std::filesystem::path& prefix) {
  std::error_code error;
  return !prefix.empty() && std::filesystem::is_regular_file(prefix / "pyvenv.cfg", error);
}

// Virtual environments in use without VIRTUAL_ENV: the one whose Python is
// this process (hal imported from Python), and those whose bin/ is on PATH
// (as container images put /opt/venv/bin there).
std::vector<std::string> virtual_environments_in_use() {
  std::vector<std::string> prefixes;
  std::error_code error;
  const std::filesystem::path executable = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error && is_virtual_environment(executable.parent_path().parent_path()))
    prefixes.push_back(executable.parent_path().parent_path().string());
  std::stringstream path(abi::environment_value("PATH").value_or(""));
  for (std::string entry; std::getline(path, entry, ':');) {
    const std::filesystem::path prefix = std::filesystem::path(entry).parent_path();
    if (!entry.empty() && is_virtual_environment(prefix)) prefixes.push_back(prefix.string());
  }
  return prefixes;
}

}  // namespace

std::vector<std::string> python_site_package_directories() {
  std::vector<std::string> prefixes;
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (std::string prefix = abi::environment_value(variable).value_or(""); !prefix.empty()) prefixes.push_back(prefix);
  }
  for (const auto& prefix : virtual_environments_in_use()) prefixes.push_back(prefix);
  if (std::string pyenv = abi::environment_value("PYENV_ROOT").value_or(""); !pyenv.empty()) {
    for (const auto& version : glob_directories(pyenv + "/versions/*")) prefixes.push_back(version);
  }
  for (const auto& version : glob_directories("/root/.pyenv/versions/*")) prefixes.push_back(version);
  if (std::string home = abi::environment_value("HOME").value_or(""); !home.empty()) {
    prefixes.push_back(home + "/.local");
    for (const auto& version : glob_directories(home + "/.pyenv/versions/*")) prefixes.push_back(version);
  }
  for (const char* prefix : {"/opt/conda", "/usr/local", "/usr"}) prefixes.emplace_back(prefix);

  std::vector<std::string> directories;
  std::set<std::string> seen;
  for (const auto& prefix : prefixes) {
    for (const char* pattern : {"/lib/python3*/site-packages", "/lib/python3*/dist-packages", "/lib/python3/dist-packages"}) {
      for (const auto& directory : glob_directories(prefix + pattern)) append_unique(directories, seen, directory);
    }
  }
  return directories;
}

LibraryLoad load_library(const LibraryRequest& request) {
  Search search(request);

  // 1. An explicit path: the only candidate, so a wrong setting is visible.
  const std::string& explicit_path = request.configured.path;
  const std::string& explicit_source = request.configured.source;
  if (!explicit_path.empty()) {
    if (is_directory(explicit_path))
      search.try_directory(explicit_source, explicit_path);
    else if (!exists(explicit_path))
      search.note(explicit_source, explicit_path, "not found (set explicitly, so nothing else was searched)");
    else
      search.try_path(explicit_source, explicit_path);
    return search.take();
  }

  // 2. Vendor install directories; a missing one is listed, as a tried place.
  for (const auto& [label, directory] : request.install_directories) {
    if (!is_directory(directory)) {
      search.note(label, directory, "no such directory");
      continue;
    }
    if (search.try_directory(label, directory)) return search.take();
  }

  // 3. The CUDA toolkit.
  if (request.search_toolkit) {
    for (const auto& directory : toolkit_library_directories())
      if (search.try_directory("CUDA toolkit", directory)) return search.take();
  }

  // 4. pip wheels: site-packages/nvidia/<package>/lib. Only directories that
  // hold the library are listed, or every wheel would appear in the report.
  if (request.search_python_packages) {
    const auto sites = python_site_package_directories();
    bool any_candidate = false;
    for (const auto& site : sites) {
      for (const auto& directory : glob_directories(site + "/nvidia/*/lib")) {
        for (const auto& soname : request.sonames) {
          const std::string path = directory + "/" + soname;
          if (!exists(path)) continue;
          any_candidate = true;
          if (search.try_path("python site-packages", path)) return search.take();
        }
      }
    }
    if (!any_candidate) {
      std::string searched;
      for (const auto& site : sites) append_listed(searched, site + "/nvidia/*/lib", ", ");
      search.note("python site-packages", searched.empty() ? "(no site-packages directory found)" : searched,
                  "not found");
    }
  }

  // 5. The system's search path (ld.so.cache, LD_LIBRARY_PATH).
  for (const auto& soname : request.sonames)
    if (search.try_path("system", soname)) return search.take();
  return search.take();
}

}  // namespace hal::shims
