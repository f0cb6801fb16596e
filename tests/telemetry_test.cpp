// Telemetry: the host's sysfs/procfs parsers against fixture trees
// (tests/data/host_telemetry: a machine with every source; host_telemetry_vm:
// procfs only, as in a VM), the API over the host plugin, the health rules
// and the health monitor.
#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "device_test_support.hpp"
#include "hal/hal.hpp"
#include "scoped_environment.hpp"
#include "telemetry_sources.hpp"

namespace fs = std::filesystem;
using hal::Unavailable;

namespace {

const fs::path fixture = fs::path(HAL_TEST_DATA_DIR) / "host_telemetry";
const fs::path vm_fixture = fs::path(HAL_TEST_DATA_DIR) / "host_telemetry_vm";

// A writable copy of a fixture, removed afterwards.
struct FixtureCopy {
  fs::path root;
  explicit FixtureCopy(const fs::path& from) {
    root = fs::temp_directory_path() /
           ("hal-telemetry-" + std::to_string(::getpid()) + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::copy(from, root, fs::copy_options::recursive);
  }
  ~FixtureCopy() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  void write(const std::string& relative, const std::string& text) const { std::ofstream(root / relative) << text; }
};

hal_telemetry_snapshot_v1 read_host(const fs::path& root, hal::host::TelemetryBaseline& baseline,
                                    std::vector<int> cpus = {0, 1, 2, 3}) {
  hal_telemetry_snapshot_v1 out{};
  out.struct_size = sizeof(out);
  hal::host::HostTelemetry(root).read({0, std::move(cpus), true}, baseline, out);
  return out;
}

std::string detail(const hal_telemetry_reading_v1& field) { return field.detail != nullptr ? field.detail : ""; }

hal::Device host_device() {
  static const hal::Runtime runtime = hal::Runtime::create();
  return runtime.device("host:0");
}

}  // namespace

TEST_SUITE("host telemetry sources") {
  TEST_CASE("a machine with every source: hwmon, RAPL, cpufreq, EDAC, /proc/stat") {
    hal::host::TelemetryBaseline baseline;
    const hal_telemetry_snapshot_v1 out = read_host(fixture, baseline);
    CHECK(std::string(out.source) == "sysfs " + fixture.string());
    REQUIRE(out.core_temperature.availability == HAL_TELEMETRY_AVAILABLE);
    CHECK(out.core_temperature.real == doctest::Approx(54.0));  // "Package id 0", not "Core 0"
    CHECK(out.slowdown_temperature.real == doctest::Approx(85.0));
    CHECK(out.shutdown_temperature.real == doctest::Approx(100.0));
    CHECK(out.memory_temperature.real == doctest::Approx(41.25));  // jc42; the nvme sensor is not memory
    CHECK(out.hotspot_temperature.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(out.energy.real == doctest::Approx(123.456789));
    CHECK(out.power_limit.real == doctest::Approx(125.0));
    CHECK(out.power_draw.availability == HAL_TELEMETRY_NEEDS_INTERVAL);
    CHECK(out.compute_clock.integer == 2700);  // mean of 2400..3000 MHz
    CHECK(out.compute_clock_max.integer == 3700);
    CHECK(out.memory_clock.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(out.compute_utilization.availability == HAL_TELEMETRY_NEEDS_INTERVAL);
    CHECK(out.ecc_enabled.integer == 1);
    CHECK(out.ecc_corrected_volatile.integer == 5);
    CHECK(out.ecc_uncorrected_volatile.integer == 1);
    CHECK(out.ecc_corrected_aggregate.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(out.pcie_width.availability == HAL_TELEMETRY_NOT_SUPPORTED);
  }

  TEST_CASE("one NUMA node of several counts only its own EDAC controller") {
    hal::host::TelemetryBaseline baseline;
    hal_telemetry_snapshot_v1 out{};
    out.struct_size = sizeof(out);
    hal::host::HostTelemetry(fixture).read({1, {2, 3}, false}, baseline, out);
    CHECK(out.ecc_corrected_volatile.integer == 2);
    CHECK(out.ecc_uncorrected_volatile.integer == 1);
    CHECK(out.compute_clock.integer == 2900);
  }

  TEST_CASE("rates come from the change since the previous reading") {
    const FixtureCopy copy(fixture);
    hal::host::TelemetryBaseline baseline;
    const auto before = std::chrono::steady_clock::now();
    read_host(copy.root, baseline);
    // Per CPU: 60 ticks busy, 20 idle, 20 stolen by the hypervisor.
    std::string stat = "cpu  0 0 0 0 0 0 0 0 0 0\n";
    for (int cpu = 0; cpu < 4; ++cpu) stat += "cpu" + std::to_string(cpu) + " 1060 0 500 10020 100 0 25 145 0 0\n";
    copy.write("proc/stat", stat);
    copy.write("sys/class/powercap/intel-rapl:0/energy_uj", "125456789\n");  // 2 J more
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const hal_telemetry_snapshot_v1 out = read_host(copy.root, baseline);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    CHECK(out.compute_utilization.real == doctest::Approx(60.0));
    CHECK(out.steal.real == doctest::Approx(20.0));
    REQUIRE(out.power_draw.availability == HAL_TELEMETRY_AVAILABLE);
    CHECK(out.power_draw.real >= 2.0 / elapsed);
    CHECK(out.power_draw.real <= 2.0 / 0.02);
  }

  TEST_CASE("a VM with procfs only says per field what is missing") {
    hal::host::TelemetryBaseline baseline;
    const hal_telemetry_snapshot_v1 out = read_host(vm_fixture, baseline);
    CHECK(out.core_temperature.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(detail(out.core_temperature).find("coretemp") != std::string::npos);
    CHECK(out.energy.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(detail(out.energy).find("intel-rapl:0") != std::string::npos);
    CHECK(out.ecc_enabled.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(detail(out.ecc_enabled).find("EDAC") != std::string::npos);
    REQUIRE(out.compute_clock.availability == HAL_TELEMETRY_AVAILABLE);
    CHECK(out.compute_clock.integer == 2151);  // /proc/cpuinfo's cpu MHz, mean of 2000.5..2300.5
    CHECK(out.compute_clock_max.availability == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(detail(out.compute_clock_max).find("cpufreq") != std::string::npos);
  }

  TEST_CASE("a CPU missing from /proc/stat and a malformed file are read failures that name them") {
    const FixtureCopy copy(fixture);
    copy.write("sys/class/hwmon/hwmon0/temp1_input", "garbage\n");
    hal::host::TelemetryBaseline baseline;
    const hal_telemetry_snapshot_v1 out = read_host(copy.root, baseline, {0, 7});
    CHECK(out.core_temperature.availability == HAL_TELEMETRY_READ_FAILED);
    CHECK(detail(out.core_temperature).find("'garbage', not a number") != std::string::npos);
    CHECK(out.compute_utilization.availability == HAL_TELEMETRY_READ_FAILED);
    CHECK(detail(out.compute_utilization).find("lists 1 of this device's 2 CPUs") != std::string::npos);
  }

  TEST_CASE("a refused read needs root; a missing file is not supported") {
    CHECK(hal::host::availability_for_errno(EACCES) == HAL_TELEMETRY_NEEDS_ROOT);
    CHECK(hal::host::availability_for_errno(EPERM) == HAL_TELEMETRY_NEEDS_ROOT);
    CHECK(hal::host::availability_for_errno(ENOENT) == HAL_TELEMETRY_NOT_SUPPORTED);
    CHECK(hal::host::availability_for_errno(EIO) == HAL_TELEMETRY_READ_FAILED);
  }
}

TEST_SUITE("telemetry api") {
  TEST_CASE("the host plugin reads the root HAL_HOST_TELEMETRY_ROOT names") {
    const hal::testing::ScopedEnvironment environment{{"HAL_HOST_TELEMETRY_ROOT", fixture.string()}};
    const hal::Runtime runtime = hal::Runtime::create();
    const hal::TelemetrySnapshot snapshot = hal::telemetry(runtime.device("host:0"));
    CHECK(snapshot.device_id == "host:0");
    CHECK(snapshot.source == "sysfs " + fixture.string());
    CHECK(snapshot.temperature.core_celsius.value() == doctest::Approx(54.0));
    CHECK(snapshot.ecc.enabled.value());
    CHECK(snapshot.power.limit_watts.value() == doctest::Approx(125.0));
    CHECK_FALSE(snapshot.pcie.width.available());
    CHECK(snapshot.pcie.width.reason() == Unavailable::not_supported);
    CHECK_THROWS_WITH_AS(snapshot.pcie.width.value(),
                         doctest::Contains("not available: not supported (the CPU is not a PCIe device)"), hal::Error);
  }

  TEST_CASE("on this machine every host field is a value or a reason, never left unreported") {
    const hal::testing::ScopedEnvironment environment{{"HAL_HOST_TELEMETRY_ROOT", std::nullopt}};
    const hal::TelemetrySnapshot s = hal::telemetry(host_device());
    CHECK(s.source == "sysfs /");
    auto reported = [](const auto& reading) { return reading.available() || reading.reason() != Unavailable::not_reported; };
    const std::vector<std::pair<std::string, bool>> fields = {
        {"core", reported(s.temperature.core_celsius)},    {"hotspot", reported(s.temperature.hotspot_celsius)},
        {"memory", reported(s.temperature.memory_celsius)}, {"slowdown", reported(s.temperature.slowdown_limit_celsius)},
        {"draw", reported(s.power.draw_watts)},             {"energy", reported(s.power.energy_joules)},
        {"clock", reported(s.clocks.compute_mhz)},          {"clock max", reported(s.clocks.compute_max_mhz)},
        {"util", reported(s.utilization.compute_percent)},  {"steal", reported(s.utilization.steal_percent)},
        {"events", reported(s.clock_events.reasons)},       {"ecc", reported(s.ecc.enabled)},
        {"ue", reported(s.ecc.uncorrected_volatile)},       {"pages", reported(s.retired_pages.pending)},
        {"remap", reported(s.row_remapping.failed)},        {"pcie", reported(s.pcie.generation)},
        {"links", reported(s.interconnect.links_total)}};
    for (const auto& [field, is_reported] : fields) {
      CAPTURE(field);
      CHECK(is_reported);
    }
    // Every Linux has /proc/cpuinfo or cpufreq.
    CHECK(s.clocks.compute_mhz.available());
  }

  TEST_CASE("health problems: critical first, said as a person says them") {
    hal::TelemetrySnapshot snapshot;
    CHECK(hal::health_problems(snapshot).empty());  // nothing known is nothing wrong
    snapshot.retired_pages.pending_pages = hal::Reading<std::uint64_t>::of(2);
    snapshot.pcie.width = hal::Reading<std::uint64_t>::of(8);
    snapshot.pcie.width_max = hal::Reading<std::uint64_t>::of(16);
    snapshot.ecc.uncorrected_volatile = hal::Reading<std::uint64_t>::of(1);
    snapshot.clock_events.reasons =
        hal::Reading<std::uint64_t>::of(static_cast<std::uint64_t>(hal::ClockEventReason::hardware_thermal) |
                                        static_cast<std::uint64_t>(hal::ClockEventReason::idle));
    const auto problems = hal::health_problems(snapshot);
    REQUIRE(problems.size() == 4);
    CHECK(problems[0].severity == hal::Severity::critical);
    CHECK(problems[0].message == "1 uncorrected ECC error since the driver loaded");
    CHECK(problems[1].message == "clocks held down: hardware_thermal");
    CHECK(problems[2].severity == hal::Severity::warning);
    CHECK(problems[2].message == "2 pages pending retirement");
    CHECK(problems[3].message == "PCIe link x8 of x16");
    CHECK(hal::describe_clock_event_reasons(0) == "none");
  }

  TEST_CASE("the health monitor reports an uncorrected ECC count that rises while it waits") {
    const FixtureCopy copy(fixture);
    const hal::testing::ScopedEnvironment environment{{"HAL_HOST_TELEMETRY_ROOT", copy.root.string()}};
    const hal::Runtime runtime = hal::Runtime::create();
    const hal::Device device = runtime.device("host:0");
    hal::HealthMonitor monitor(device, std::chrono::milliseconds(10));
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(0)).has_value());  // the state at creation is no event
    std::thread raise([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      copy.write("sys/devices/system/edac/mc/mc0/ue_count", "2\n");
    });
    const std::optional<hal::HealthEvent> event = monitor.wait(std::chrono::seconds(5));
    raise.join();
    hal::testing::check_health_event(event, {.kind = hal::HealthEventKind::uncorrected_ecc, .code = 2,
                                             .device_id = "host:0", .description = "2 more uncorrected ECC errors"});
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(30)).has_value());
  }

  TEST_CASE("bad monitor arguments name the value and what is allowed") {
    CHECK_THROWS_WITH_AS(hal::HealthMonitor(host_device(), std::chrono::milliseconds(0)),
                         doctest::Contains("poll interval of 0 ms for host:0 must be at least 1 ms"), hal::Error);
    hal::HealthMonitor monitor(host_device());
    CHECK_THROWS_WITH_AS(monitor.wait(std::chrono::milliseconds(-5)),
                         doctest::Contains("timeout of -5 ms for host:0 must be 0 or more"), hal::Error);
  }
}
