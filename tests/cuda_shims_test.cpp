// The run-time library search and symbol tables of shims/.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cublas.hpp"
#include "cudnn.hpp"
#include "library_loader.hpp"
#include "nccl.hpp"
#include "scoped_environment.hpp"
#include "symbol_table.hpp"

using hal::testing::ScopedEnvironment;
namespace shims = hal::shims;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// A temporary directory removed at the end of the test.
struct TemporaryDirectory {
  fs::path path = fs::temp_directory_path() / ("hal-shims-test-" + std::to_string(::getpid()));
  TemporaryDirectory() { fs::create_directories(path); }
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// An RCCL-like list: all-to-all spelled two ways, one function without names.
#define HAL_TEST_FUNCTIONS(X)                                                                                          \
  X(all_to_all, int (*)(), optional, "ncclAlltoAll", "ncclAllToAll")                                                   \
  X(get_version, int (*)(), required, "ncclGetVersion")                                                                \
  X(finalize, int (*)(), optional, "ncclCommFinalize")                                                                 \
  X(init_rank, int (*)(), required, "ncclCommInitRank")                                                                \
  X(ncclCommDestroy, int (*)(), required)
struct TestApi {
  HAL_SYMBOL_FIELDS(HAL_TEST_FUNCTIONS)
};

shims::LibraryRequest fake_driver_request() {
  shims::LibraryRequest request;
  request.display_name = "test library";
  request.sonames = {"libcuda.so.1"};
  request.environment_variable = "HAL_SHIMS_TEST_LIBRARY";
  return request;
}

}  // namespace

TEST_SUITE("shims") {
  TEST_CASE("a configured file is loaded, reported under its source as the only attempt") {
    shims::LibraryRequest request = fake_driver_request();
    request.configured = {HAL_FAKE_CUDA_DRIVER_PATH, "HAL_SHIMS_TEST_LIBRARY"};
    const shims::LibraryLoad load = shims::load_library(request);
    REQUIRE(load.loaded());
    CHECK(load.library.find("cuInit") != nullptr);
    CHECK(load.library.find("no_such_symbol") == nullptr);
    REQUIRE(load.attempts.size() == 1);
    CHECK(load.attempts[0].where == "HAL_SHIMS_TEST_LIBRARY");
    CHECK(contains(load.attempts[0].outcome, "loaded"));
  }

  TEST_CASE("a configured path that is missing is the only attempt: nothing else is searched") {
    // The variable is advice only: the shim never reads it (libhal delivers settings as options).
    ScopedEnvironment environment{{"HAL_SHIMS_TEST_LIBRARY", HAL_FAKE_CUDA_DRIVER_PATH}};
    shims::LibraryRequest request = fake_driver_request();
    request.configured = "/nonexistent/libcuda.so.1";
    const shims::LibraryLoad load = shims::load_library(request);
    CHECK_FALSE(load.loaded());
    REQUIRE(load.attempts.size() == 1);
    CHECK(contains(load.describe_attempts(), "[config] /nonexistent/libcuda.so.1: not found"));
    request.configured = HAL_FAKE_CUDA_DRIVER_PATH;
    const shims::LibraryLoad configured = shims::load_library(request);
    CHECK(configured.loaded());
    CHECK(configured.attempts.at(0).where == "config");
  }

  TEST_CASE("a file that is not a library is reported with the dynamic linker's error") {
    TemporaryDirectory directory;
    const fs::path garbage = directory.path / "libcuda.so.1";
    std::ofstream(garbage) << "not an ELF file\n";
    shims::LibraryRequest request = fake_driver_request();
    request.configured = garbage.string();
    const shims::LibraryLoad load = shims::load_library(request);
    CHECK_FALSE(load.loaded());
    REQUIRE(load.attempts.size() == 1);
    CHECK(contains(load.attempts[0].outcome, "libcuda.so.1"));  // dlerror names the file
  }

  TEST_CASE("link-time stubs are never loaded") {
    TemporaryDirectory directory;
    const fs::path stubs = directory.path / "stubs";
    fs::create_directories(stubs);
    fs::copy_file(HAL_FAKE_CUDA_DRIVER_PATH, stubs / "libcuda.so.1");
    shims::LibraryRequest request = fake_driver_request();
    request.configured = (stubs / "libcuda.so.1").string();
    const shims::LibraryLoad load = shims::load_library(request);
    CHECK_FALSE(load.loaded());
    CHECK(contains(load.describe_attempts(), "link-time stub"));
  }

  TEST_CASE("a virtualenv whose bin is on PATH is searched without VIRTUAL_ENV") {
    TemporaryDirectory directory;
    const fs::path wheel = directory.path / "lib/python3.11/site-packages/nvidia/fake_driver/lib";
    fs::create_directories(wheel);
    fs::create_directories(directory.path / "bin");
    fs::copy_file(HAL_FAKE_CUDA_DRIVER_PATH, wheel / "libcuda.so.1");
    const char* path = std::getenv("PATH");
    const std::string bin = (directory.path / "bin").string();
    {
      // Without pyvenv.cfg the directory is not a virtual environment.
      ScopedEnvironment environment{{"VIRTUAL_ENV", std::nullopt}, {"PATH", bin + ":" + (path != nullptr ? path : "")}};
      const auto sites = shims::python_site_package_directories();
      CHECK(std::find(sites.begin(), sites.end(), (directory.path / "lib/python3.11/site-packages").string()) ==
            sites.end());
    }
    std::ofstream(directory.path / "pyvenv.cfg") << "home = /usr/bin\n";
    ScopedEnvironment environment{{"VIRTUAL_ENV", std::nullopt},
                                  {"CONDA_PREFIX", std::nullopt},
                                  {"PATH", bin + ":" + (path != nullptr ? path : "")}};
    const auto sites = shims::python_site_package_directories();
    REQUIRE_FALSE(sites.empty());
    CHECK(sites.front() == (directory.path / "lib/python3.11/site-packages").string());
    shims::LibraryRequest request = fake_driver_request();
    request.search_toolkit = false;
    const shims::LibraryLoad load = shims::load_library(request);
    REQUIRE_MESSAGE(load.loaded(), load.describe_attempts());
    CHECK(contains(load.library.path(), "nvidia/fake_driver/lib/libcuda.so.1"));
  }

  TEST_CASE("pip wheels under a virtualenv's site-packages are searched before the system") {
    TemporaryDirectory directory;
    const fs::path wheel = directory.path / "lib/python3.11/site-packages/nvidia/fake_driver/lib";
    fs::create_directories(wheel);
    fs::copy_file(HAL_FAKE_CUDA_DRIVER_PATH, wheel / "libcuda.so.1");
    ScopedEnvironment environment{{"VIRTUAL_ENV", directory.path.string()}};
    shims::LibraryRequest request = fake_driver_request();
    request.search_toolkit = false;
    const auto sites = shims::python_site_package_directories();
    REQUIRE_FALSE(sites.empty());
    CHECK(sites.front() == (directory.path / "lib/python3.11/site-packages").string());
    const shims::LibraryLoad load = shims::load_library(request);
    REQUIRE_MESSAGE(load.loaded(), load.describe_attempts());
    CHECK(load.attempts.back().where == "python site-packages");
    CHECK(contains(load.library.path(), "nvidia/fake_driver/lib/libcuda.so.1"));
  }

  TEST_CASE("the toolkit directories come from CUDA_HOME first") {
    TemporaryDirectory directory;
    fs::create_directories(directory.path / "lib64");
    ScopedEnvironment environment{{"CUDA_HOME", directory.path.string()}, {"CUDA_PATH", std::nullopt}};
    const auto directories = shims::toolkit_library_directories();
    REQUIRE_FALSE(directories.empty());
    CHECK(directories.front() == (directory.path / "lib64").string());
  }

  TEST_CASE("symbol tables take the first alternative found and report what is missing") {
    // An RCCL-like library: all-to-all spelled ncclAllToAll, no ncclCommFinalize.
    const std::map<std::string, int> exported = {{"ncclAllToAll", 1}, {"ncclGetVersion", 2}, {"ncclCommDestroy", 3}};
    TestApi api;
    const shims::SymbolResolution resolution = shims::resolve_symbols(
        HAL_SYMBOL_SPECS(HAL_TEST_FUNCTIONS, api, ""), [&](const shims::SymbolSpec&, const shims::SymbolName& name) {
          auto found = exported.find(name.name);
          // Distinct non-null addresses stand for the exported functions.
          return found == exported.end() ? nullptr : reinterpret_cast<void*>(static_cast<std::uintptr_t>(found->second));
        });
    CHECK(reinterpret_cast<std::uintptr_t>(api.all_to_all) == 1);
    CHECK(reinterpret_cast<std::uintptr_t>(api.get_version) == 2);
    CHECK(reinterpret_cast<void*>(api.finalize) == nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(api.ncclCommDestroy) == 3);  // no names: the field's own
    CHECK_FALSE(resolution.complete());
    CHECK(resolution.missing_required == std::vector<std::string>{"ncclCommInitRank"});
    CHECK(resolution.missing_optional == std::vector<std::string>{"ncclCommFinalize"});
  }

  TEST_CASE("a prefix goes before every listed name; a versioned function is named by its field") {
    TestApi api;
    std::vector<std::string> asked;
    const shims::SymbolResolution prefixed = shims::resolve_symbols(
        HAL_SYMBOL_SPECS(HAL_TEST_FUNCTIONS, api, "x_"), [&](const shims::SymbolSpec&, const shims::SymbolName& name) {
          asked.push_back(name.name);
          return nullptr;
        });
    CHECK(asked.front() == "x_ncclAlltoAll");
    CHECK(prefixed.missing_optional.front() == "x_ncclAlltoAll|x_ncclAllToAll");
    CHECK(prefixed.missing_required.back() == "x_ncclCommDestroy");

    int (*versioned)() = nullptr;
    const std::vector<shims::SymbolSpec> specs = {
        shims::symbol(versioned, "cuDeviceGetUuid", shims::Requirement::required, "",
                      {{"cuDeviceGetUuid_v2", 11040}, {"cuDeviceGetUuid", 9020}})};
    std::vector<int> versions;
    const shims::SymbolResolution missing =
        shims::resolve_symbols(specs, [&](const shims::SymbolSpec& spec, const shims::SymbolName& name) {
          CHECK(std::string(spec.field) == "cuDeviceGetUuid");
          versions.push_back(name.version);
          return nullptr;
        });
    CHECK(versions == std::vector<int>{11040, 9020});
    CHECK(missing.missing_required == std::vector<std::string>{"cuDeviceGetUuid"});
    CHECK(shims::absent_symbols(specs).missing_required == std::vector<std::string>{"cuDeviceGetUuid"});
  }

  TEST_CASE("vendor version numbers are decoded in each release's encoding") {
    CHECK(shims::Cudnn::format_version(91900) == "9.19.0");
    CHECK(shims::Cudnn::format_version(8907) == "8.9.7");
    CHECK(shims::Nccl::format_version(22809) == "2.28.9");
    CHECK(shims::Nccl::format_version(2708) == "2.7.8");
  }

  TEST_CASE("cuBLAS: a missing library names every path tried, one without its GEMM is unusable") {
    const shims::LoadResult<shims::Cublas> absent =
        shims::Cublas::load({"/nonexistent/lib/libcublas.so.13", "HAL_CUBLAS"});
    CHECK(absent.library == nullptr);
    CHECK(contains(absent.message, "cuBLAS (libcublas.so.13 or libcublas.so.12) was not found"));
    CHECK(contains(absent.message, "[HAL_CUBLAS] /nonexistent/lib/libcublas.so.13: not found"));
    // The fake driver is a library, but not cuBLAS.
    const shims::LoadResult<shims::Cublas> unusable = shims::Cublas::load({HAL_FAKE_CUDA_DRIVER_PATH, "HAL_CUBLAS"});
    CHECK(unusable.library == nullptr);
    CHECK(contains(unusable.message, "lacks required functions (cublasCreate_v2"));
    CHECK(contains(unusable.message, "cublasGemmStridedBatchedEx"));
  }

  TEST_CASE("cuBLAS from the toolkit resolves every function the math path needs") {
    const std::string toolkit_cublas = "/usr/local/cuda/lib64/libcublas.so.13";
    if (!fs::exists(toolkit_cublas)) {
      MESSAGE("no toolkit cuBLAS at " << toolkit_cublas << "; nothing to check");
      return;
    }
    const shims::LoadResult<shims::Cublas> load = shims::Cublas::load(toolkit_cublas);
    REQUIRE_MESSAGE(load.library != nullptr, load.message);
    CHECK(load.library->version().rfind("13.", 0) == 0);
    CHECK(contains(load.library->describe(CUBLAS_STATUS_NOT_SUPPORTED), "cuBLAS status 15"));
  }

  TEST_CASE("a library lacking required NCCL functions is unusable, with the names") {
    // The fake driver exports none of NCCL's functions.
    shims::LibraryRequest request = shims::Nccl::nvidia_request(HAL_FAKE_CUDA_DRIVER_PATH);
    const shims::LoadResult<shims::Nccl> load = shims::Nccl::load(request);
    CHECK(load.library == nullptr);
    CHECK(contains(load.message, "lacks required functions (ncclGetVersion"));
  }

  TEST_CASE("NCCL-compatible libraries: optional entries by release, RCCL's spelling and search") {
    const shims::LoadResult<shims::Nccl> modern = shims::Nccl::load(shims::Nccl::nvidia_request(HAL_FAKE_NCCL_PATH));
    REQUIRE_MESSAGE(modern.library != nullptr, modern.message);
    CHECK(modern.library->version() == "2.28.9");
    CHECK(modern.library->display_name() == "NCCL (libnccl.so.2)");
    CHECK((modern.library->api().CommInitRankConfig != nullptr));
    CHECK((modern.library->api().AllToAll != nullptr));
    CHECK((modern.library->api().Gather != nullptr));
    CHECK(modern.library->missing_optional() == std::vector<std::string>{"ncclCommFinalize"});

    const shims::LoadResult<shims::Nccl> legacy = shims::Nccl::load(shims::Nccl::nvidia_request(HAL_FAKE_NCCL_LEGACY_PATH));
    REQUIRE_MESSAGE(legacy.library != nullptr, legacy.message);
    CHECK(legacy.library->version() == "2.8.4");
    CHECK((legacy.library->api().CommInitRankConfig == nullptr));
    CHECK((legacy.library->api().AllToAll == nullptr));
    const auto& missing = legacy.library->missing_optional();
    CHECK(std::find(missing.begin(), missing.end(), "ncclAlltoAll|ncclAllToAll") != missing.end());
    CHECK(std::find(missing.begin(), missing.end(), "ncclCommInitRankConfig") != missing.end());

    const shims::LibraryRequest rccl = shims::Nccl::amd_request("");
    CHECK(rccl.sonames.front() == "librccl.so.1");
    CHECK(rccl.environment_variable == "HAL_RCCL");
    CHECK_FALSE(rccl.search_toolkit);
    CHECK(rccl.install_directories.back().second == "/opt/rocm/lib");
  }
}
