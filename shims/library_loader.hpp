// Opens a vendor library at run time, searching the places vendors and pip
// put it, and remembers every path tried with what went wrong there.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hal::shims {

// An open shared library; closes it when destroyed.
class SharedLibrary {
 public:
  SharedLibrary() = default;
  SharedLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  // Takes a dlopen handle; path() is the file the dynamic linker resolved
  // `requested` (a soname or a path) to.
  static SharedLibrary from_handle(void* handle, const std::string& requested);
  SharedLibrary(SharedLibrary&& other) noexcept { *this = std::move(other); }
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;
  ~SharedLibrary() { close(); }

  bool is_open() const { return handle_ != nullptr; }
  // The file that was opened, as the dynamic linker resolved it.
  const std::string& path() const { return path_; }
  // The address of an exported symbol, or nullptr.
  void* find(const char* symbol) const;
  // The dlopen handle, for vendor code that resolves its own symbols (the cuDNN frontend).
  void* native_handle() const { return handle_; }

 private:
  void close();
  void* handle_ = nullptr;
  std::string path_;
};

// A library's path as the user set it, and where: the variable's name
// ("HAL_CUDA_DRIVER") or "config". libhal reads both the config file and the
// variables and hands the backend its options with their sources.
struct ConfiguredPath {
  ConfiguredPath(std::string path = {}, std::string source = "config")
      : path(std::move(path)), source(std::move(source)) {}
  ConfiguredPath(const char* path) : ConfiguredPath(std::string(path)) {}
  std::string path;  // "" when unset
  std::string source;
};

struct LoadAttempt {
  std::string where;    // "HAL_CUDA_DRIVER", "CUDA_HOME", "python site-packages", "system"
  std::string path;     // the file or soname handed to the dynamic linker
  std::string outcome;  // "loaded" or why not (dlerror, "not found", ...)
};

// Every member has an initializer, so a request may be written with
// designated initializers naming only what it sets.
struct LibraryRequest {
  std::string display_name{};          // "CUDA driver": used in messages
  std::vector<std::string> sonames{};  // file names to look for, in order: {"libcuda.so.1"}
  // An explicit file (or directory holding one of the sonames), from the
  // backend's options. When set, nothing else is searched: the user asked for
  // that library.
  ConfiguredPath configured{};
  // The variable that sets `configured` ("HAL_CUDA_DRIVER"), named in advice.
  std::string environment_variable{};
  bool search_toolkit = true;        // $CUDA_HOME, $CUDA_PATH, /usr/local/cuda
  bool search_python_packages = true;  // site-packages/nvidia/*/lib
  // Vendor install directories searched after an explicit path and before
  // the CUDA stages, each reported under its label: {"ROCM_PATH", "/opt/rocm-6.1/lib"}.
  std::vector<std::pair<std::string, std::string>> install_directories{};
  // What to do when nothing is found, for the message ("install ROCm, set
  // ROCM_PATH, or set HAL_HIP_RUNTIME to the library"); empty: set the
  // environment variable.
  std::string not_found_advice{};
  // Keeps the library mapped after close: drivers start threads and
  // register exit handlers that must not outlive their code.
  bool never_unload = false;
};

struct LibraryLoad {
  SharedLibrary library;
  std::vector<LoadAttempt> attempts;
  bool loaded() const { return library.is_open(); }
  // "tried: A (why); B (why)" for error messages and reports.
  std::string describe_attempts() const;
};

// Never throws; a library that cannot be found is a LibraryLoad with no library.
LibraryLoad load_library(const LibraryRequest& request);

// The search stages, exposed for tests and for halinfo-style reports.
std::vector<std::string> toolkit_library_directories();
// The ROCm install's library directories, as install_directories lists
// them: $ROCM_PATH/lib when ROCM_PATH is set, then /opt/rocm/lib.
std::vector<std::pair<std::string, std::string>> rocm_library_directories();
// A library of the ROCm install: an explicit path, else the ROCm directories
// and the system, never a CUDA toolkit or Python packages; kept mapped, as
// ROCm's libraries start threads and register exit handlers.
LibraryRequest rocm_library_request(std::string display_name, std::vector<std::string> sonames,
                                    std::string environment_variable, ConfiguredPath configured = {});
// site-packages / dist-packages directories found from prefixes derived
// without running Python: virtualenv, conda, pyenv, user and system paths.
std::vector<std::string> python_site_package_directories();

}  // namespace hal::shims
