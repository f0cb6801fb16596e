// The ROCm backend's telemetry against the fake HIP runtime and the fake
// AMD SMI / rocm_smi in tests/fakes/fake_amd_smi. ctest gives the HIP
// runtime two GPUs at 0000:c1:00.0 and 0000:c2:00.0; each test lists them
// to the SMI library in the other order (see rocm_tests.cmake).
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "device_test_support.hpp"
#include "hal/hal.hpp"
#include "hal/telemetry.hpp"
#include "scoped_environment.hpp"

using hal::Unavailable;
using hal::testing::check_health_event;
using hal::testing::contains;

namespace {

constexpr const char* missing_amd_smi = "/nonexistent/libamd_smi.so";
constexpr const char* missing_rocm_smi = "/nonexistent/librocm_smi64.so";

// The fake's resolution, microjoules per count.
constexpr double energy_resolution_uj = 15.25;

// A runtime on the fake HIP runtime with the fake AMD SMI as its telemetry
// library, the SMI listing the GPUs in reverse, and no other script.
struct SmiFixture {
  hal::testing::ScopedEnvironment environment{
      {"HAL_HIP_RUNTIME", HAL_FAKE_HIP_RUNTIME_PATH},
      {"HAL_BACKENDS", "host,rocm"},
      {"HAL_AMD_SMI", HAL_FAKE_AMD_SMI_PATH},
      {"HAL_ROCM_SMI", missing_rocm_smi},
      {"HAL_FAKE_AMD_SMI_BDF", "0000:c2:00.0,0000:c1:00.0"},
      {"HAL_FAKE_AMD_SMI_VERSION", std::nullopt},
      {"HAL_FAKE_AMD_SMI_STATUS", std::nullopt},
      {"HAL_FAKE_AMD_SMI_EDGE", std::nullopt},
      {"HAL_FAKE_AMD_SMI_POWER", std::nullopt},
      {"HAL_FAKE_AMD_SMI_POWER_CAP", std::nullopt},
      {"HAL_FAKE_AMD_SMI_UNCORRECTED", std::nullopt},
      {"HAL_FAKE_AMD_SMI_UNCORRECTED_RISE", std::nullopt},
      {"HAL_FAKE_AMD_SMI_BAD_PAGES", std::nullopt},
      {"HAL_FAKE_AMD_SMI_EVENTS", std::nullopt},
  };
  // Started by the first device(): libhal reads the settings (HAL_AMD_SMI,
  // HAL_ROCM_SMI) when a runtime starts, so a test scripts them before.
  mutable std::optional<hal::Runtime> runtime;

  hal::Device device(int index) const {
    if (!runtime) runtime = hal::Runtime::create(hal::testing::options_without_config_file());
    const hal::BackendReport* report = runtime->find_backend("rocm");
    REQUIRE(report != nullptr);
    REQUIRE_MESSAGE(report->state == hal::BackendState::loaded, report->reason);
    return runtime->device("rocm:" + std::to_string(index));
  }
  void script(const std::string& name, const std::string& value) { environment.set(name, value); }
  hal::TelemetrySnapshot read(int index) const { return hal::telemetry(device(index)); }
  // Device 0's snapshot, from a library that reports `version`.
  hal::TelemetrySnapshot read_from_version(const std::string& version) {
    script("HAL_FAKE_AMD_SMI_VERSION", version);
    return read(0);
  }
};

// Two GPUs scripted in the SMI library's order: c2 first, then c1.
void script_two_gpus(SmiFixture& fixture) {
  fixture.script("HAL_FAKE_AMD_SMI_EDGE", "52,41");
  fixture.script("HAL_FAKE_AMD_SMI_HOTSPOT", "70,61");
  fixture.script("HAL_FAKE_AMD_SMI_VRAM", "58,49");
  fixture.script("HAL_FAKE_AMD_SMI_POWER", "310,205");
  fixture.script("HAL_FAKE_AMD_SMI_POWER_CAP", "550,300");
  fixture.script("HAL_FAKE_AMD_SMI_GFX_MHZ", "1800/2100,1500/1700");
  fixture.script("HAL_FAKE_AMD_SMI_MEM_MHZ", "1600/1600,1200/1300");
  fixture.script("HAL_FAKE_AMD_SMI_GFX_BUSY", "90,25");
  fixture.script("HAL_FAKE_AMD_SMI_MEM_BUSY", "40,8");
  fixture.script("HAL_FAKE_AMD_SMI_CORRECTED", "7,2");
  fixture.script("HAL_FAKE_AMD_SMI_UNCORRECTED", "1,0");
  fixture.script("HAL_FAKE_AMD_SMI_BAD_PAGES", "-,RRP");
  fixture.script("HAL_FAKE_AMD_SMI_PCIE_SPEED", "16000,8000");
  fixture.script("HAL_FAKE_AMD_SMI_PCIE_WIDTH", "16,8");
  fixture.script("HAL_FAKE_AMD_SMI_REPLAY", "5,3");
}

template <typename T>
void check_value(const hal::Reading<T>& reading, const T& expected) {
  INFO("reason: ", reading.reason_text());
  REQUIRE(reading.available());
  CHECK(reading.value() == expected);
}

template <typename T>
void check_missing(const hal::Reading<T>& reading, Unavailable reason, std::initializer_list<std::string_view> parts) {
  CHECK_FALSE(reading.available());
  CHECK(reading.reason() == reason);
  for (const std::string_view part : parts) {
    INFO("detail: ", reading.detail(), " lacks: ", std::string(part));
    CHECK(contains(reading.detail(), part));
  }
}

// Every reading of a snapshot, named, as (available, reason, detail).
struct FieldState {
  std::string name;
  bool available;
  Unavailable reason;
  std::string detail;
};
std::vector<FieldState> every_field(const hal::TelemetrySnapshot& s) {
  std::vector<FieldState> fields;
  auto add = [&](const char* name, const auto& reading) {
    fields.push_back({name, reading.available(), reading.reason(), reading.detail()});
  };
  add("core", s.temperature.core_celsius); add("hotspot", s.temperature.hotspot_celsius);
  add("memory temperature", s.temperature.memory_celsius); add("slowdown", s.temperature.slowdown_limit_celsius);
  add("shutdown", s.temperature.shutdown_limit_celsius); add("draw", s.power.draw_watts);
  add("limit", s.power.limit_watts); add("energy", s.power.energy_joules);
  add("compute clock", s.clocks.compute_mhz); add("compute clock max", s.clocks.compute_max_mhz);
  add("memory clock", s.clocks.memory_mhz); add("memory clock max", s.clocks.memory_max_mhz);
  add("compute utilization", s.utilization.compute_percent); add("memory utilization", s.utilization.memory_percent);
  add("steal", s.utilization.steal_percent); add("clock events", s.clock_events.reasons);
  add("vendor mask", s.clock_events.vendor_mask); add("ecc enabled", s.ecc.enabled);
  add("ce volatile", s.ecc.corrected_volatile); add("ue volatile", s.ecc.uncorrected_volatile);
  add("ce aggregate", s.ecc.corrected_aggregate); add("ue aggregate", s.ecc.uncorrected_aggregate);
  add("retired sbe", s.retired_pages.single_bit); add("retired dbe", s.retired_pages.double_bit);
  add("retirement pending", s.retired_pages.pending); add("pending pages", s.retired_pages.pending_pages);
  add("remap corrected", s.row_remapping.corrected); add("remap uncorrected", s.row_remapping.uncorrected);
  add("remap pending", s.row_remapping.pending); add("remap failed", s.row_remapping.failed);
  add("pcie generation", s.pcie.generation); add("pcie generation max", s.pcie.generation_max);
  add("pcie width", s.pcie.width); add("pcie width max", s.pcie.width_max);
  add("pcie replays", s.pcie.replay_count); add("links active", s.interconnect.links_active);
  add("links total", s.interconnect.links_total); add("link errors", s.interconnect.error_count);
  return fields;
}

// One of the fake's counters, reached through the same file hal opens.
int fake_counter(const char* hook) {
  void* library = dlopen(HAL_FAKE_AMD_SMI_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(library != nullptr, dlerror());
  void* address = dlsym(library, hook);
  REQUIRE(address != nullptr);
  const int count = reinterpret_cast<int (*)()>(address)();
  dlclose(library);
  return count;
}
int init_calls() { return fake_counter("hal_fake_amd_smi_init_calls"); }
int event_registrations() { return fake_counter("hal_fake_amd_smi_event_registrations"); }

}  // namespace

TEST_SUITE("amd smi telemetry") {
  TEST_CASE_FIXTURE(SmiFixture, "each device reads the SMI GPU at its PCI address, not the one at its index") {
    script_two_gpus(*this);
    REQUIRE(device(0).info().pci_bus_id == "0000:c1:00.0");
    const hal::TelemetrySnapshot first = read(0);
    CHECK(first.source == "amd-smi 24.6.2");
    CHECK(first.device_id == "rocm:0");
    check_value(first.temperature.core_celsius, 41.0);
    check_value(first.temperature.hotspot_celsius, 61.0);
    check_value(first.temperature.memory_celsius, 49.0);
    check_value(first.temperature.slowdown_limit_celsius, 90.0);
    check_value(first.temperature.shutdown_limit_celsius, 105.0);
    // 24.x: no current socket power on this GPU, so the average; the cap in uW.
    check_value(first.power.draw_watts, 205.0);
    check_value(first.power.limit_watts, 300.0);
    check_value(first.power.energy_joules, 1000000 * energy_resolution_uj / 1e6);
    check_value<std::uint64_t>(first.clocks.compute_mhz, 1500);
    check_value<std::uint64_t>(first.clocks.compute_max_mhz, 1700);
    check_value<std::uint64_t>(first.clocks.memory_mhz, 1200);
    check_value<std::uint64_t>(first.clocks.memory_max_mhz, 1300);
    check_value(first.utilization.compute_percent, 25.0);
    check_value(first.utilization.memory_percent, 8.0);
    check_value(first.ecc.enabled, true);
    check_value<std::uint64_t>(first.ecc.corrected_volatile, 2);
    check_value<std::uint64_t>(first.ecc.uncorrected_volatile, 0);
    check_value<std::uint64_t>(first.retired_pages.double_bit, 2);
    check_value(first.retired_pages.pending, true);
    check_value<std::uint64_t>(first.retired_pages.pending_pages, 1);
    check_value<std::uint64_t>(first.pcie.generation, 3);
    check_value<std::uint64_t>(first.pcie.width, 8);
    check_value<std::uint64_t>(first.pcie.generation_max, 5);
    check_value<std::uint64_t>(first.pcie.width_max, 16);
    check_value<std::uint64_t>(first.pcie.replay_count, 3);

    const hal::TelemetrySnapshot second = read(1);
    check_value(second.temperature.core_celsius, 52.0);
    check_value(second.power.draw_watts, 310.0);
    check_value(second.power.limit_watts, 550.0);
    check_value<std::uint64_t>(second.clocks.compute_mhz, 1800);
    check_value<std::uint64_t>(second.ecc.uncorrected_volatile, 1);
    check_value<std::uint64_t>(second.retired_pages.double_bit, 0);
    check_value(second.retired_pages.pending, false);
    check_value<std::uint64_t>(second.pcie.generation, 4);
    check_value<std::uint64_t>(second.pcie.replay_count, 5);

    // What is wrong, as halinfo health says it.
    const auto first_problems = hal::health_problems(first);
    REQUIRE(first_problems.size() == 2);
    CHECK(first_problems[0].message == "1 page pending retirement");
    CHECK(first_problems[1].message == "PCIe link x8 of x16");
    const auto second_problems = hal::health_problems(second);
    REQUIRE_FALSE(second_problems.empty());
    CHECK(second_problems[0].severity == hal::Severity::critical);
    CHECK(second_problems[0].message == "1 uncorrected ECC error since the driver loaded");
  }

  TEST_CASE_FIXTURE(SmiFixture, "every field is a value or a reason; what AMD has not is said so") {
    const hal::TelemetrySnapshot s = read(0);
    for (const FieldState& field : every_field(s)) {
      CAPTURE(field.name);
      CHECK((field.available || field.reason != Unavailable::not_reported));
      if (!field.available) CHECK_FALSE(field.detail.empty());
    }
    check_missing(s.clock_events.reasons, Unavailable::not_supported, {"amdsmi_gpu_metrics_t"});
    check_missing(s.row_remapping.pending, Unavailable::not_supported, {"retire bad pages"});
    check_missing(s.ecc.uncorrected_aggregate, Unavailable::not_supported, {"since the driver loaded"});
    check_missing(s.retired_pages.single_bit, Unavailable::not_supported, {"uncorrectable errors only"});
    check_missing(s.interconnect.links_total, Unavailable::not_supported, {"xGMI"});
    check_missing(s.utilization.steal_percent, Unavailable::not_supported, {"virtual machine"});
  }

  TEST_CASE_FIXTURE(SmiFixture, "the energy counter rises from one snapshot to the next") {
    const double first = read(0).power.energy_joules.value();
    const double second = read(0).power.energy_joules.value();
    CHECK(second - first == doctest::Approx(65536 * energy_resolution_uj / 1e6));
  }

  TEST_CASE_FIXTURE(SmiFixture, "an unsupported reading is not_supported and a refused one needs_root, each saying why") {
    script("HAL_FAKE_AMD_SMI_STATUS", "amdsmi_get_temp_metric.vram=2,amdsmi_get_energy_count=10");
    const hal::TelemetrySnapshot s = read(0);
    check_missing(s.temperature.memory_celsius, Unavailable::not_supported,
                  {"amdsmi_get_temp_metric(vram, current)", "AMDSMI_STATUS_NOT_SUPPORTED"});
    check_missing(s.power.energy_joules, Unavailable::needs_root,
                  {"amdsmi_get_energy_count", "AMDSMI_STATUS_NO_PERM"});
    CHECK(s.power.energy_joules.reason_text() ==
          "needs root (amdsmi_get_energy_count: AMDSMI_STATUS_NO_PERM - Permission Denied)");
    check_value(s.temperature.core_celsius, 45.0);  // the others are still read
    check_value(s.power.draw_watts, 300.0);
  }

  TEST_CASE_FIXTURE(SmiFixture, "an I/O error is read_failed with the library's words") {
    script("HAL_FAKE_AMD_SMI_STATUS", "amdsmi_get_gpu_activity=12");
    const hal::TelemetrySnapshot s = read(0);
    check_missing(s.utilization.compute_percent, Unavailable::read_failed, {"AMDSMI_STATUS_IO - I/O Error"});
    check_missing(s.utilization.memory_percent, Unavailable::read_failed, {"amdsmi_get_gpu_activity"});
  }

  TEST_CASE_FIXTURE(SmiFixture, "without AMD SMI or rocm_smi every field is library_missing and says where hal looked") {
    script("HAL_AMD_SMI", missing_amd_smi);
    const hal::TelemetrySnapshot s = read(0);
    CHECK(contains(s.source, "none: "));
    for (const FieldState& field : every_field(s)) {
      CAPTURE(field.name);
      CHECK_FALSE(field.available);
      CHECK(field.reason == Unavailable::library_missing);
      CHECK(contains(field.detail, "AMD SMI (libamd_smi.so) was not found"));
      CHECK(contains(field.detail, missing_amd_smi));
      CHECK(contains(field.detail, "rocm_smi (librocm_smi64.so) was not found"));
      CHECK(contains(field.detail, missing_rocm_smi));
    }
    CHECK_FALSE(read(1).temperature.core_celsius.available());  // asked again, still no crash
  }

  TEST_CASE_FIXTURE(SmiFixture, "nothing is opened before the first snapshot, and it is opened once") {
    const int before = init_calls();
    (void)device(0).info();
    (void)device(1).info();
    CHECK(init_calls() == before);
    (void)read(0);
    CHECK(init_calls() == before + 1);
    (void)read(1);
    (void)read(0);
    CHECK(init_calls() == before + 1);
  }

  TEST_CASE_FIXTURE(SmiFixture, "a device the SMI library does not list is an error naming both sides") {
    script("HAL_FAKE_AMD_SMI_BDF", "0000:c3:00.0");
    hal::testing::check_error([&] { (void)read(0); }, hal::StatusCode::not_present,
                              {"rocm:0", "0000:c1:00.0", "0000:c3:00.0", "amd-smi 24.6.2"});
  }

  TEST_CASE_FIXTURE(SmiFixture, "rocm_smi serves when AMD SMI is missing, matched by PCI address too") {
    script("HAL_AMD_SMI", missing_amd_smi);
    script("HAL_ROCM_SMI", HAL_FAKE_ROCM_SMI_DIR);
    script_two_gpus(*this);
    const hal::TelemetrySnapshot s = read(0);
    CHECK(s.source == "rocm-smi 5.0.0");
    check_value(s.temperature.core_celsius, 41.0);  // from millidegrees
    check_value(s.temperature.slowdown_limit_celsius, 90.0);
    check_value(s.power.draw_watts, 205.0);  // from microwatts
    check_value(s.power.limit_watts, 300.0);
    check_value(s.power.energy_joules, 1000000 * energy_resolution_uj / 1e6);
    check_value<std::uint64_t>(s.clocks.compute_mhz, 1500);  // ROCm 5's rsmi_frequencies_t
    check_value<std::uint64_t>(s.clocks.memory_max_mhz, 1300);
    check_value(s.utilization.compute_percent, 25.0);
    check_value<std::uint64_t>(s.ecc.corrected_volatile, 2);  // summed over the enabled blocks
    check_value<std::uint64_t>(s.retired_pages.double_bit, 2);
    check_value<std::uint64_t>(s.retired_pages.pending_pages, 1);
    check_value<std::uint64_t>(s.pcie.generation, 3);
    check_value<std::uint64_t>(s.pcie.width, 8);
    check_missing(s.pcie.width_max, Unavailable::not_supported, {"power states"});
    check_value<std::uint64_t>(s.pcie.replay_count, 3);
    check_value(read(1).temperature.core_celsius, 52.0);
  }

  TEST_CASE_FIXTURE(SmiFixture, "rocm_smi 7 (ROCm 6) is read with its own frequency layout; 6.x is not guessed at") {
    script("HAL_AMD_SMI", missing_amd_smi);
    script("HAL_ROCM_SMI", HAL_FAKE_ROCM_SMI_DIR);
    script_two_gpus(*this);
    SUBCASE("7.0.0") {
      const hal::TelemetrySnapshot s = read_from_version("7.0.0");
      CHECK(s.source == "rocm-smi 7.0.0");
      check_value<std::uint64_t>(s.clocks.compute_mhz, 1500);
      check_value<std::uint64_t>(s.clocks.compute_max_mhz, 1700);
      check_value<std::uint64_t>(s.pcie.generation, 3);
    }
    SUBCASE("6.1.0") {
      const hal::TelemetrySnapshot s = read_from_version("6.1.0");
      check_missing(s.clocks.compute_mhz, Unavailable::not_supported, {"rocm_smi 6.1.0", "rsmi_frequencies_t"});
      check_missing(s.pcie.generation, Unavailable::not_supported, {"rocm_smi 6.1.0"});
      check_value(s.temperature.core_celsius, 41.0);
    }
  }

  TEST_CASE_FIXTURE(SmiFixture, "a rising uncorrectable ECC count is an uncorrected_ecc health event") {
    script("HAL_FAKE_AMD_SMI_UNCORRECTED", "0");
    script("HAL_FAKE_AMD_SMI_UNCORRECTED_RISE", "2");  // two more at every read
    hal::HealthMonitor monitor(device(0), std::chrono::milliseconds(5));
    check_health_event(monitor.wait(std::chrono::seconds(5)),
                       {.kind = hal::HealthEventKind::uncorrected_ecc, .code = 2, .device_id = "rocm:0",
                        .description = "2 more uncorrected ECC errors"});
  }

  TEST_CASE_FIXTURE(SmiFixture, "struct layouts are read only for the AMD SMI releases they belong to") {
    script_two_gpus(*this);
    SUBCASE("23.4.0 (ROCm 6.0): no amdsmi_get_pcie_info yet, power cap in watts, 32-byte error counts") {
      const hal::TelemetrySnapshot s = read_from_version("23.4.0");
      CHECK(s.source == "amd-smi 23.4.0");
      check_missing(s.pcie.generation, Unavailable::not_supported, {"AMD SMI 23.4.0", "amdsmi_get_pcie_info"});
      check_missing(s.pcie.width_max, Unavailable::not_supported, {"23.4.0"});
      check_value(s.power.limit_watts, 300.0);  // not 0.0003: this release reports watts
      check_value(s.power.draw_watts, 205.0);
      check_value<std::uint64_t>(s.ecc.corrected_volatile, 2);
      check_value<std::uint64_t>(s.pcie.replay_count, 3);  // a scalar call, any release
    }
    SUBCASE("24.5.1: still watts") { check_value(read_from_version("24.5.1").power.limit_watts, 300.0); }
    SUBCASE("25.2.0 (ROCm 6.4): the version without the year; unchecked layouts are not read") {
      const hal::TelemetrySnapshot s = read_from_version("25.2.0");
      CHECK(s.source == "amd-smi 25.2.0");
      check_missing(s.power.draw_watts, Unavailable::not_supported, {"AMD SMI 25.2.0", "amdsmi_power_info_t"});
      check_missing(s.pcie.generation, Unavailable::not_supported, {"AMD SMI 25.2.0", "amdsmi_pcie_info_t"});
      check_value(s.power.limit_watts, 300.0);  // amdsmi_power_cap_info_t is the same from 23.4 to 26.x
      check_value<std::uint64_t>(s.clocks.compute_mhz, 1500);
      check_value(s.temperature.core_celsius, 41.0);
    }
    SUBCASE("26.1.0 (ROCm 7): the 192-byte power info and the maximum generation's own member") {
      const hal::TelemetrySnapshot s = read_from_version("26.1.0");
      CHECK(s.source == "amd-smi 26.1.0");
      check_value(s.power.draw_watts, 205.0);
      check_value<std::uint64_t>(s.pcie.generation, 3);
      check_value<std::uint64_t>(s.pcie.generation_max, 5);
      check_value<std::uint64_t>(s.pcie.width_max, 16);
    }
    SUBCASE("27.0.0: newer than every layout hal knows, so only the scalar calls are read") {
      const hal::TelemetrySnapshot s = read_from_version("27.0.0");
      check_missing(s.power.draw_watts, Unavailable::not_supported, {"AMD SMI 27.0.0"});
      check_missing(s.power.limit_watts, Unavailable::not_supported, {"AMD SMI 27.0.0", "amdsmi_power_cap_info_t"});
      check_missing(s.clocks.compute_mhz, Unavailable::not_supported, {"AMD SMI 27.0.0", "amdsmi_frequencies_t"});
      check_missing(s.ecc.uncorrected_volatile, Unavailable::not_supported, {"amdsmi_error_count_t"});
      check_value(s.temperature.core_celsius, 41.0);
      check_value(s.power.energy_joules, 1000000 * energy_resolution_uj / 1e6);
      check_value(s.ecc.enabled, true);
    }
    SUBCASE("23.2.0 (ROCm 5.7): older than every layout hal knows, so AMD SMI is not used") {
      const hal::TelemetrySnapshot s = read_from_version("23.2.0");
      check_missing(s.temperature.core_celsius, Unavailable::read_failed,
                    {"AMD SMI 23.2.0", "predates 23.4.0", "rocm_smi (librocm_smi64.so) was not found"});
    }
  }

  TEST_CASE_FIXTURE(SmiFixture, "AMD SMI events reach the watches of their own device, and registrations end with them") {
    // SMI GPU 1 is c1 (rocm:0), GPU 0 is c2 (rocm:1).
    script("HAL_FAKE_AMD_SMI_EVENTS",
           "1:1:page fault at 0x7f0000001000;0:3:reset for a ring timeout;1:2:edge at 95 C;1:5:gfx ring timeout");
    {
      hal::HealthMonitor first(device(0), std::chrono::milliseconds(5));
      hal::HealthMonitor second(device(1), std::chrono::milliseconds(5));
      CHECK(event_registrations() == 2);
      // The first wait takes both devices' events from AMD SMI's one queue.
      check_health_event(first.wait(std::chrono::seconds(5)),
                         {.kind = hal::HealthEventKind::xid, .code = 1, .device_id = "rocm:0",
                          .description = "AMD SMI event 1, GPU VM fault: page fault at 0x7f0000001000"});
      check_health_event(first.wait(std::chrono::seconds(5)),
                         {.kind = hal::HealthEventKind::thermal,
                          .description = "AMD SMI event 2, thermal throttling: edge at 95 C"});
      check_health_event(first.wait(std::chrono::seconds(5)),
                         {.kind = hal::HealthEventKind::xid,
                          .description = "AMD SMI event 5, ring hang: gfx ring timeout"});
      CHECK_FALSE(first.wait(std::chrono::milliseconds(20)).has_value());

      check_health_event(second.wait(std::chrono::seconds(5)),
                         {.code = 3, .device_id = "rocm:1",
                          .description = "AMD SMI event 3, GPU reset starting: reset for a ring timeout"});
      CHECK_FALSE(second.wait(std::chrono::milliseconds(20)).has_value());
    }
    CHECK(event_registrations() == 0);
  }

  TEST_CASE_FIXTURE(SmiFixture, "AMD SMI 26.x events carry 256-character messages; 5 is no ring hang there") {
    script("HAL_FAKE_AMD_SMI_VERSION", "26.1.0");
    const std::string message(120, 'x');
    script("HAL_FAKE_AMD_SMI_EVENTS", "1:5:migration;1:4:" + message);
    hal::HealthMonitor monitor(device(0), std::chrono::milliseconds(5));
    check_health_event(monitor.wait(std::chrono::seconds(5)),
                       {.code = 4, .description = "AMD SMI event 4, GPU reset done: " + message});
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(20)).has_value());
  }

  TEST_CASE_FIXTURE(SmiFixture, "without an event stream hal reads, the monitor compares snapshots") {
    script("HAL_FAKE_AMD_SMI_EVENTS", "1:1:page fault");
    SUBCASE("AMD SMI 25.x, whose event record hal has not checked") {
      script("HAL_FAKE_AMD_SMI_VERSION", "25.2.0");
    }
    SUBCASE("rocm_smi") {
      script("HAL_AMD_SMI", missing_amd_smi);
      script("HAL_ROCM_SMI", HAL_FAKE_ROCM_SMI_DIR);
    }
    script("HAL_FAKE_AMD_SMI_UNCORRECTED_RISE", "1");
    hal::HealthMonitor monitor(device(0), std::chrono::milliseconds(5));
    CHECK(event_registrations() == 0);
    // From snapshots, not the VM fault.
    check_health_event(monitor.wait(std::chrono::seconds(5)), {.kind = hal::HealthEventKind::uncorrected_ecc});
  }

  TEST_CASE_FIXTURE(SmiFixture, "a failing event read is an error naming the call") {
    script("HAL_FAKE_AMD_SMI_STATUS", "amdsmi_get_gpu_event_notification=12");
    hal::HealthMonitor monitor(device(0), std::chrono::milliseconds(5));
    CHECK_THROWS_WITH_AS((void)monitor.wait(std::chrono::milliseconds(50)),
                         doctest::Contains("amdsmi_get_gpu_event_notification: AMDSMI_STATUS_IO"), hal::Error);
  }
}
