// The loader reports every broken plugin precisely while host keeps working.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hal/hal.hpp"
#include "scoped_environment.hpp"

using hal::BackendState;
using hal::testing::ScopedEnvironment;

namespace {

const hal::BackendReport& report_of(const hal::Runtime& runtime, std::string_view name) {
  const hal::BackendReport* report = runtime.find_backend(name);
  REQUIRE_MESSAGE(report != nullptr, "no report for backend " << name);
  return *report;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

void check_host_works(const hal::Runtime& runtime) {
  CHECK(report_of(runtime, "host").state == BackendState::loaded);
  hal::Device device = runtime.device("host:0");
  hal::Buffer buffer = device.allocate(16);
  const std::uint32_t value = 0xdeadbeef;
  buffer.write(4, &value, sizeof(value));
  std::uint32_t read_back = 0;
  buffer.read(4, &read_back, sizeof(read_back));
  CHECK(read_back == value);
}

}  // namespace

TEST_CASE("each broken plugin is reported with its fault while host keeps working") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_BROKEN_PLUGIN_DIR},
                                {"HAL_BACKENDS", std::nullopt},
                                {"HAL_BACKENDS_FORCE", std::nullopt},
                                {"HAL_CONFIG", "/nonexistent-dir-for-tests/none.toml"}};
  environment.set("HAL_CONFIG", std::nullopt);
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  const hal::Runtime runtime = hal::Runtime::create(options);

  struct Expected {
    const char* name;
    BackendState state;
    const char* reason_part;
  };
  const Expected expectations[] = {
      {"broken_wrong_abi", BackendState::error, "ABI version 99"},
      {"broken_old_abi", BackendState::error,
       "plugin offers ABI version 1 but libhal loads versions 2 to 2 (version 2 changed the attention table's "
       "entries); rebuild the plugin against this libhal's hal/backend_abi.h"},
      {"broken_no_entry", BackendState::error, "does not export the entry symbol 'hal_backend_query'"},
      {"broken_null_table", BackendState::error, "returned no table"},
      {"broken_small_struct", BackendState::error, "struct_size is 16 bytes"},
      {"broken_missing_function", BackendState::error, "lacks required functions: device_info"},
      {"broken_init_fails", BackendState::error, "simulated driver failure"},
      {"broken_vendor_missing", BackendState::unavailable, "libfakevendor.so.1 not found"},
      {"broken_garbage", BackendState::error, "cannot open plugin"},
  };
  for (const auto& expected : expectations) {
    CAPTURE(expected.name);
    const hal::BackendReport& report = report_of(runtime, expected.name);
    CHECK(report.state == expected.state);
    CHECK_MESSAGE(contains(report.reason, expected.reason_part), report.reason);
    REQUIRE_FALSE(report.paths_tried.empty());
    CHECK(contains(report.paths_tried.front(), HAL_BROKEN_PLUGIN_DIR));
    CHECK(report.device_count == 0);
  }
  check_host_works(runtime);
}

TEST_CASE("backends without a plugin are unavailable with every path tried") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", std::nullopt},
                                {"HAL_BACKENDS_FORCE", std::nullopt}};
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  const hal::Runtime runtime = hal::Runtime::create(options);
  // A known backend this build has no plugin for (CMake says which); host
  // is always built; cuda and ppu when the CUDA headers are there, rocm with
  // the HIP headers.
  const std::string unbuilt = HAL_TEST_UNBUILT_BACKEND;
  if (unbuilt.empty()) {
    MESSAGE("every known backend is built here; checking that each has its plugin");
    for (const char* name : {"host", "cuda", "ppu", "rocm"}) {
      CAPTURE(name);
      CHECK_FALSE(report_of(runtime, name).path.empty());
    }
  } else {
    const hal::BackendReport& missing = report_of(runtime, unbuilt);
    CHECK(missing.state == BackendState::unavailable);
    CHECK(contains(missing.reason, "libhal_backend_" + unbuilt + ".so was not found"));
    CHECK(missing.paths_tried.size() == runtime.search_directories().size());
    CHECK(std::all_of(missing.paths_tried.begin(), missing.paths_tried.end(),
                      [](const std::string& path) { return contains(path, "not found"); }));
  }
  check_host_works(runtime);
}

TEST_CASE("HAL_BACKENDS filters before any plugin is opened") {
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  SUBCASE("a list keeps only those backends") {
    ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_BROKEN_PLUGIN_DIR}, {"HAL_BACKENDS", "host"}};
    const hal::Runtime runtime = hal::Runtime::create(options);
    const hal::BackendReport& broken = report_of(runtime, "broken_init_fails");
    CHECK(broken.state == BackendState::disabled);
    CHECK(contains(broken.reason, "excluded by HAL_BACKENDS=host"));
    CHECK(broken.paths_tried.empty());  // never opened
    check_host_works(runtime);
  }
  SUBCASE("!name drops a backend") {
    ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", "!host"}};
    const hal::Runtime runtime = hal::Runtime::create(options);
    CHECK(report_of(runtime, "host").state == BackendState::disabled);
    CHECK(runtime.devices().empty());
  }
  SUBCASE("an unknown name is an error that lists the known ones") {
    ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", "host,cdua"}};
    try {
      hal::Runtime::create(options);
      FAIL("expected an error");
    } catch (const hal::Error& error) {
      CHECK(error.code() == hal::StatusCode::invalid_argument);
      CHECK(contains(error.what(), "cdua"));
      CHECK(contains(error.what(), "host, cuda, ppu, rocm"));
    }
  }
  SUBCASE("mixing kept and dropped names is an error") {
    ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", "host,!cuda"}};
    CHECK_THROWS_WITH_AS(hal::Runtime::create(options), doctest::Contains("mixes backends to skip with backends to load"), hal::Error);
  }
  SUBCASE("RuntimeOptions::backends outranks the variable for one runtime") {
    ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_BROKEN_PLUGIN_DIR}, {"HAL_BACKENDS", "!host"}};
    options.backends = {"host"};
    const hal::Runtime runtime = hal::Runtime::create(options);
    CHECK(contains(report_of(runtime, "broken_init_fails").reason, "excluded by RuntimeOptions::backends"));
    check_host_works(runtime);
    options.backends = {"host", "!rocm"};
    CHECK_THROWS_WITH_AS(hal::Runtime::create(options), doctest::Contains("RuntimeOptions::backends"), hal::Error);
  }
}

TEST_CASE("HAL_BACKENDS_FORCE loads exactly the given plugins") {
  ScopedEnvironment environment{{"HAL_BACKENDS_FORCE", HAL_HOST_PLUGIN_PATH},
                                {"HAL_BACKEND_PATH", HAL_BROKEN_PLUGIN_DIR},
                                {"HAL_BACKENDS", std::nullopt}};
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  const hal::Runtime runtime = hal::Runtime::create(options);
  REQUIRE(runtime.backends().size() == 1);
  CHECK(runtime.backends().front().name == "host");
  CHECK(runtime.backends().front().path == HAL_HOST_PLUGIN_PATH);
  check_host_works(runtime);
}

TEST_CASE("devices are found by id, UUID, and unknown ids list the ones there are") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", "host"}};
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  const hal::Runtime runtime = hal::Runtime::create(options);
  const hal::Device device = runtime.device("host:0");
  CHECK(runtime.device(device.info().uuid) == device);
  CHECK_FALSE(runtime.find_device("host:7"));
  CHECK_THROWS_WITH_AS(runtime.device("cuda:3"), doctest::Contains("devices here: host:0"), hal::Error);
}

TEST_CASE("the host device describes itself completely") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", std::nullopt}, {"HAL_BACKENDS", "host"}};
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  const hal::Runtime runtime = hal::Runtime::create(options);
  const hal::DeviceInfo& info = runtime.device("host:0").info();
  CHECK(info.backend == "host");
  CHECK(info.type == hal::DeviceType::cpu);
  CHECK_FALSE(info.name.empty());
  CHECK_FALSE(info.vendor.empty());
  CHECK(info.uuid.starts_with("host-"));
  CHECK(info.total_memory > 0);
  CHECK(info.free_memory > 0);
  CHECK(info.free_memory <= info.total_memory);
  CHECK(info.compute_units >= 1);
  CHECK(info.version("backend").has_value());
  CHECK(info.version("kernel").has_value());
  CHECK(runtime.device("host:0").supports("memory.managed"));
  CHECK_FALSE(runtime.device("host:0").supports("no.such.capability"));
}
