// The ppu backend against a fixture sysfs/dev/SDK tree made in a temporary
// directory. Discovery alone needs nothing else; the backend runs work
// through the CUDA core on the SDK's libcuda, which in the fixture is the fake
// CUDA driver (tests/fakes) copied into <sdk>/lib64 and started in its PPU
// identity (HAL_FAKE_CUDA_IDENTITY=ppu, set by CTest).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>
#include <sys/wait.h>

#include "discovery.hpp"
#include "hal/capabilities.hpp"
#include "hal/hal.hpp"
#include "command_output.hpp"
#include "scoped_environment.hpp"
#ifdef HAL_PPU_TEST_TOOLS
#include <nlohmann/json.hpp>
#endif

namespace fs = std::filesystem;
using hal::BackendState;
using hal::testing::ScopedEnvironment;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// A machine with one PPU (0000:e1:00.0, the fake CUDA driver's bus id for
// its first device), one NVIDIA GPU, the alixpu driver, an SDK and ACCL-P.
// The SDK's libcuda is the fake driver where the build has one, else an
// empty file (enough for discovery, which never opens it).
struct Fixture {
  fs::path root;
  Fixture(const std::string& sdk_version = "1.4.1", const std::string& driver_version = "1.2.0") {
    std::string pattern = (fs::temp_directory_path() / "hal-ppu-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    root = pattern;
    const fs::path pci = root / "sys/bus/pci/devices";
    write(pci / "0000:e1:00.0/vendor", "0x1ded");
    write(pci / "0000:e1:00.0/device", "0x8100");
    write(pci / "0000:e1:00.0/numa_node", "1");
    write(pci / "0000:e1:00.0/product_name", "PPU-ZW810E");
    write(pci / "0000:3b:00.0/vendor", "0x10de");
    write(pci / "0000:3b:00.0/device", "0x20b2");
    write(root / "sys/module/alixpu/version", driver_version);
    write(root / "dev/alixpu0", "");
    write(root / "sdk/VERSION.txt", sdk_version);
#ifdef HAL_FAKE_CUDA_DRIVER_PATH
    // A copy, not a link: a new file is a new library with its own devices.
    fs::create_directories(root / "sdk/lib64");
    fs::copy_file(HAL_FAKE_CUDA_DRIVER_PATH, root / "sdk/lib64/libcuda.so.1.4.1");
#else
    write(root / "sdk/lib64/libcuda.so.1.4.1", "");
#endif
    write(root / "sdk/lib64/libcudnn.so.9.1.0", "");
    write(root / "accl-p/VERSION.txt", "ACCL-P 2.3.0");
  }
  ~Fixture() {
    std::error_code error;
    fs::remove_all(root, error);
  }
  ScopedEnvironment environment(const std::string& backends = "ppu") const {
    return ScopedEnvironment{{"HAL_PPU_SYSFS_ROOT", (root / "sys").string()},
                             {"HAL_PPU_DEV_ROOT", (root / "dev").string()},
                             {"PPU_SDK", (root / "sdk").string()},
                             {"PPU_SDK_HOME", std::nullopt},
                             {"ACCL_P_HOME", (root / "accl-p").string()},
                             {"HAL_BACKENDS", backends}};
  }
};

[[maybe_unused]] hal::RuntimeOptions default_options() {
  hal::RuntimeOptions options;
  options.config = hal::Config{};  // the user's config file must not change the tests
  return options;
}

[[maybe_unused]] std::string axis(const hal::DeviceInfo& info, const std::string& key) {
  for (const auto& [name, value] : info.version_axes)
    if (name == key) return value;
  return "(absent)";
}

}  // namespace

TEST_SUITE("ppu discovery") {
  TEST_CASE("discovery finds PCI vendor 0x1ded and ignores others") {
    const Fixture fixture;
    const auto devices = hal::ppu::find_pci_devices((fixture.root / "sys").string());
    REQUIRE(devices.size() == 1);
    CHECK(devices[0].bus_id == "0000:e1:00.0");
    CHECK(devices[0].device_id == "0x8100");
    CHECK(devices[0].numa_node == 1);
    CHECK(devices[0].name == "PPU-ZW810E");
    CHECK(hal::ppu::find_device_nodes((fixture.root / "dev").string()).size() == 1);
    CHECK(hal::ppu::find_pci_devices((fixture.root / "nowhere").string()).empty());
  }

  TEST_CASE("versions parse from the texts SDKs and drivers write") {
    using hal::ppu::parse_version;
    CHECK(parse_version("1.4.1")->to_string() == "1.4.1");
    CHECK(parse_version("PPU SDK v1.4.0-rc2\n")->to_string() == "1.4.0");
    CHECK(parse_version("1.4")->to_string() == "1.4.0");
    CHECK(*parse_version("1.4.0") < *parse_version("1.4.1"));
    CHECK(*parse_version("1.10.0") > *parse_version("1.9.9"));
    CHECK_FALSE(parse_version("").has_value());
    CHECK_FALSE(parse_version("release 7").has_value());
    CHECK_FALSE(parse_version("x1.4").has_value());
  }

  TEST_CASE("the SDK root comes from PPU_SDK first and reports its version") {
    const Fixture fixture("PPU SDK 1.4.0");
    ScopedEnvironment environment{{"PPU_SDK", (fixture.root / "sdk").string()}, {"PPU_SDK_HOME", "/no/such/dir"}};
    const hal::ppu::Sdk sdk = hal::ppu::find_sdk("");
    CHECK(sdk.root == (fixture.root / "sdk").string());
    CHECK(sdk.source == "PPU_SDK");
    CHECK(sdk.version->to_string() == "1.4.0");
    ScopedEnvironment missing{{"PPU_SDK", "/no/such/sdk"}, {"PPU_SDK_HOME", std::nullopt}};
    const hal::ppu::Sdk from_option = hal::ppu::find_sdk((fixture.root / "sdk").string());
    CHECK(from_option.source == "backend option sdk");
    CHECK(contains(from_option.tried.front(), "/no/such/sdk (PPU_SDK): not a directory"));
  }

  TEST_CASE("model and ISA generation come from the device name") {
    CHECK(hal::ppu::model_from_name("PPU-ZW810E") == "ZW810E");
    CHECK(hal::ppu::isa_generation("ZW810E") == "zhenwu-810");
    CHECK(hal::ppu::isa_generation("XY100") == "");
  }

  TEST_CASE("a library's release comes from its file name, never from the ABI major alone") {
    const Fixture fixture;
    const std::string lib64 = (fixture.root / "sdk/lib64").string();
    CHECK(hal::ppu::find_library({lib64}, "libcudnn.so").version == "9.1.0");
    fs::remove(fixture.root / "sdk/lib64/libcuda.so.1.4.1");
    write(fixture.root / "sdk/lib64/libcuda.so.1", "");
    const hal::ppu::LibraryFile runtime = hal::ppu::find_library({lib64, "/no/such/dir"}, "libcuda.so");
    CHECK(runtime.path == lib64 + "/libcuda.so.1");
    CHECK(runtime.version.empty());
    CHECK(hal::ppu::find_library({"/no/such/dir"}, "libcuda.so").tried.front() ==
          "/no/such/dir/libcuda.so*: not found");
  }
}

#ifdef HAL_FAKE_CUDA_DRIVER_PATH
TEST_SUITE("ppu fixture") {

  TEST_CASE("the backend reports a PPU as T-Head with each version axis on its own") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("ppu");
    REQUIRE(report != nullptr);
    REQUIRE_MESSAGE(report->state == BackendState::loaded, report->reason);
    REQUIRE(runtime.devices().size() == 1);
    const hal::DeviceInfo& info = runtime.devices()[0].info();
    CHECK(info.vendor == "T-Head");
    CHECK(info.name == "PPU-ZW810E");
    CHECK(info.pci_bus_id == "0000:e1:00.0");
    CHECK(info.numa_node == 1);
    CHECK(axis(info, "sdk") == "1.4.1");
    CHECK(axis(info, "driver") == "1.2.0");
    CHECK(axis(info, "runtime") == "1.4.1");
    CHECK(axis(info, "dnn") == "9.1.0");
    CHECK(axis(info, "collectives") == "ACCL-P 2.3.0");
    CHECK(runtime.devices()[0].info().find_capability("ppu.isa_generation")->value_string() == "zhenwu-810");
  }

  TEST_CASE("no PPU: unavailable, saying where it looked") {
    const Fixture fixture;
    fs::remove_all(fixture.root / "sys/bus/pci/devices/0000:e1:00.0");
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("ppu");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->reason, "vendor 0x1ded"));
    CHECK(contains(report->reason, (fixture.root / "sys/bus/pci/devices").string()));
  }

  TEST_CASE("a PPU without the SDK's runtime library is unavailable, naming the paths tried") {
    const Fixture fixture;
    fs::remove(fixture.root / "sdk/lib64/libcuda.so.1.4.1");
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("ppu");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->reason, (fixture.root / "sdk/lib64/libcuda.so*").string()));
    CHECK(contains(report->reason, (fixture.root / "sdk/lib/libcuda.so*").string()));
  }

  TEST_CASE("an SDK libcuda that cannot be opened leaves the backend unavailable, naming the file and why") {
    const Fixture fixture;
    const fs::path runtime_library = fixture.root / "sdk/lib64/libcuda.so.1.4.1";
    fs::remove(runtime_library);
    write(runtime_library, "");  // not a shared library
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("ppu");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->reason, "CUDA-compatible driver of the PPU SDK"));
    CHECK(contains(report->reason, runtime_library.string()));
    CHECK(runtime.devices().empty());
  }

  TEST_CASE("a driver older than 1.1.0 is refused with the version found and needed") {
    const Fixture fixture("1.4.1", "1.0.9");
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("ppu");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::error);
    CHECK(contains(report->reason, "1.0.9"));
    CHECK(contains(report->reason, "1.1.0 or later"));
    CHECK(runtime.devices().empty());
  }

  TEST_CASE("HGGC_AUTO_DISPATCH_BARRIER is a hazard with SDK 1.4.0 and not with 1.4.1") {
    for (const std::string sdk : {"1.4.0", "1.4.1"}) {
      CAPTURE(sdk);
      const Fixture fixture(sdk);
      const auto environment = fixture.environment();
      ScopedEnvironment barrier{{"HGGC_AUTO_DISPATCH_BARRIER", "1"}};
      const hal::Runtime runtime = hal::Runtime::create(default_options());
      REQUIRE(runtime.devices().size() == 1);
      const auto hazards = hal::environment_hazards(runtime.devices()[0]);
      if (sdk == "1.4.0") {
        REQUIRE(hazards.size() == 1);
        CHECK(hazards[0].quirk_id == "ppu-hggc-auto-dispatch-barrier-hang");
        CHECK(contains(hazards[0].message, "1.4.1"));
        CHECK(contains(hazards[0].message, "unset HGGC_AUTO_DISPATCH_BARRIER"));
      } else {
        CHECK(hazards.empty());
      }
    }
  }

  TEST_CASE("fused attention is excluded on a PPU by the shipped quirk, with its reason") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::EffectiveCapability fused = hal::effective_capability(runtime.devices()[0], "attention.fused");
    CHECK(fused.value == "false");
    const auto quirk = std::find_if(fused.layers.begin(), fused.layers.end(), [](const hal::CapabilityLayer& layer) {
      return layer.layer == "quirk" && contains(layer.source, "ppu-cudnn-no-fused-mha") &&
             contains(layer.source, "source: hal issue 8");
    });
    REQUIRE(quirk != fused.layers.end());
  }

  TEST_CASE("memory of every kind, copies and fills run on the PPU through the SDK's libcuda") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::Device& device = runtime.devices()[0];
    CHECK(device.id() == "ppu:0");
    std::vector<std::uint8_t> pattern(4096);
    for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::uint8_t>(i * 7 + 3);
    for (const hal::MemoryKind kind : {hal::MemoryKind::device, hal::MemoryKind::host_pinned, hal::MemoryKind::managed}) {
      CAPTURE(hal::to_string(kind));
      hal::Buffer buffer = device.allocate(pattern.size(), kind, 4096);
      CHECK(reinterpret_cast<std::uintptr_t>(buffer.device_address()) % 4096 == 0);
      buffer.write(100, pattern.data() + 100, 1000);
      std::vector<std::uint8_t> back(1000);
      buffer.read(100, back.data(), back.size());
      CHECK(std::equal(back.begin(), back.end(), pattern.begin() + 100));
    }
    hal::Buffer source = device.allocate(pattern.size());
    hal::Buffer target = device.allocate(pattern.size());
    source.write(0, pattern.data(), pattern.size());
    target.copy_from(16, source, 32, 256);
    target.fill(0, 16, 0xAB, 1);
    target.fill(272, 8, 0xBEEF, 2);
    target.fill(280, 16, 0x01020304, 4);
    std::vector<std::uint8_t> expected(296);
    std::fill(expected.begin(), expected.begin() + 16, 0xAB);
    std::copy(pattern.begin() + 32, pattern.begin() + 288, expected.begin() + 16);
    for (int i = 0; i < 4; ++i) expected[272 + 2 * i] = 0xEF, expected[273 + 2 * i] = 0xBE;
    for (int i = 0; i < 4; ++i)
      for (int b = 0; b < 4; ++b) expected[280 + 4 * i + b] = static_cast<std::uint8_t>(4 - b);
    std::vector<std::uint8_t> got(expected.size());
    target.read(0, got.data(), got.size());
    CHECK(got == expected);
  }

  TEST_CASE("streams, events and host callbacks run in order on the PPU") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::Device& device = runtime.devices()[0];
    const hal::Stream first = device.create_stream(), second = device.create_stream();
    const hal::Event start = device.create_event(), copied = device.create_event();
    hal::Buffer buffer = device.allocate(1 << 16);
    std::vector<std::uint8_t> input(1 << 16), output(1 << 16, 0);
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<std::uint8_t>(i ^ (i >> 8));
    std::atomic<int> callbacks{0};
    bool callback_saw_data = false;
    first.record(start);
    first.copy_to_device(buffer, 0, input.data(), input.size());
    first.record(copied);
    second.wait(copied);  // the second stream reads only after the first wrote
    second.copy_to_host(output.data(), buffer, 0, output.size());
    second.enqueue_host_callback([&](const hal::Status& status) {
      callback_saw_data = status.ok() && output == input;
      ++callbacks;
    });
    second.synchronize();
    first.synchronize();
    CHECK(callbacks == 1);
    CHECK(callback_saw_data);
    CHECK(copied.is_complete());
    CHECK(hal::Event::elapsed_milliseconds(start, copied) >= 0.0);
    CHECK(first.is_idle());
  }

  TEST_CASE("driver errors name the PPU and the SDK's libcuda is the only one used") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    // NVIDIA's settings are not the PPU's: they must change nothing here.
    ScopedEnvironment nvidia{{"HAL_CUDA_DRIVER", "/no/such/libcuda.so.1"}, {"HAL_CUDNN", "/no/such/libcudnn.so.9"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::Device& device = runtime.devices()[0];
    try {
      (void)device.allocate(200ull << 30);  // the fake PPU has 96 GiB
      FAIL("allocating 200 GiB on a 96 GiB PPU succeeded");
    } catch (const hal::Error& error) {
      CHECK(error.code() == hal::StatusCode::out_of_memory);
      CHECK(contains(error.what(), "memory on ppu:0"));
    }
    const hal::DeviceInfo& info = device.info();
    CHECK(contains(info.find_capability("ppu.runtime_library")->value_string(), "sdk/lib64/libcuda.so.1.4.1"));
    // The SDK's libcudnn (an empty file in the fixture) is tried by its path, nothing else.
    const hal::Capability* dnn = info.find_capability("library.cudnn");
    REQUIRE(dnn != nullptr);
    CHECK(dnn->value_string() == "false");
    CHECK(contains(dnn->note, (fixture.root / "sdk/lib64/libcudnn.so.9.1.0").string()));
    CHECK_FALSE(contains(dnn->note, "/no/such/libcudnn.so.9"));
    const hal::Capability* collectives = info.find_capability("library.nccl");
    REQUIRE(collectives != nullptr);
    CHECK(collectives->value_string() == "false");
    CHECK(contains(collectives->note, "no libpccl.so* under ACCL-P at " + (fixture.root / "accl-p").string()));
  }

#ifdef HAL_FAKE_NCCL_PATH
  TEST_CASE("collectives come from ACCL-P, found by its install path, through the CUDA core's engine") {
    const Fixture fixture;
    fs::create_directories(fixture.root / "accl-p/lib64");
    fs::copy_file(HAL_FAKE_NCCL_PATH, fixture.root / "accl-p/lib64/libpccl.so.2.28.9");
    const auto environment = fixture.environment();
    ScopedEnvironment nvidia{{"HAL_NCCL", "/no/such/libnccl.so.2"}};  // NVIDIA's setting: not the PPU's
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::DeviceInfo& info = runtime.devices()[0].info();
    const hal::Capability* library = info.find_capability("library.nccl");
    REQUIRE(library != nullptr);
    CHECK(library->value_string() == "true");
    CHECK(contains(library->note, (fixture.root / "accl-p/lib64/libpccl.so.2.28.9").string()));
    const hal::Capability* collectives = info.find_capability("collectives");
    REQUIRE(collectives != nullptr);
    CHECK(collectives->value_string() == "true");
    CHECK(contains(collectives->note, "accl-p"));
  }
#endif

  TEST_CASE("telemetry comes from the SDK's HGML; what this HGML lacks is not supported, never a crash") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    {
      const hal::Runtime runtime = hal::Runtime::create(default_options());
      const hal::TelemetrySnapshot snapshot = hal::telemetry(runtime.device("ppu:0"));
      CHECK(snapshot.temperature.core_celsius.reason() == hal::Unavailable::library_missing);
      CHECK(contains(snapshot.temperature.core_celsius.detail(), (fixture.root / "sdk/lib64").string()));
    }
    fs::copy_file(HAL_FAKE_HGML_PATH, fixture.root / "sdk/lib64/libhgml.so");
    ScopedEnvironment hgml{{"HAL_FAKE_NVML_PCI_BUS_IDS", "00000000:E1:00.0"},
                           {"HAL_FAKE_NVML_TEMPERATURE", "63"},
                           {"HAL_FAKE_NVML_CLOCK_EVENTS", "0x20"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::TelemetrySnapshot snapshot = hal::telemetry(runtime.device("ppu:0"));
    CHECK(snapshot.source == "hgml 550.54.15");
    CHECK(snapshot.temperature.core_celsius.value() == 63.0);
    // Only the old clock-event name is exported here; it is the fallback.
    CHECK(snapshot.clock_events.reasons.value() == static_cast<std::uint64_t>(hal::ClockEventReason::software_thermal));
    CHECK(snapshot.row_remapping.pending.reason() == hal::Unavailable::not_supported);
    CHECK(contains(snapshot.row_remapping.pending.detail(), "hgmlDeviceGetRemappedRows is not in"));
    CHECK(snapshot.temperature.memory_celsius.reason() == hal::Unavailable::not_supported);
    hal::HealthMonitor monitor(runtime.device("ppu:0"), std::chrono::milliseconds(10));  // no event API in this HGML
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(30)).has_value());
  }

  TEST_CASE("attention explain on the PPU excludes fused citing the quirk and never picks it") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    const hal::Device& device = runtime.devices()[0];
    hal::AttentionParams params;
    params.batch = 1;
    params.heads_q = params.heads_kv = 4;
    params.seq_q = params.seq_kv = 128;
    params.head_dim_qk = 64;
    params.dtype = hal::DType::bf16;
    const hal::AttentionDecision decision = hal::explain_attention(device, params);
    const hal::AttentionCandidate& fused = decision.candidates[0];
    REQUIRE(fused.implementation == hal::AttentionImplementation::fused);
    CHECK_FALSE(fused.eligible);
    REQUIRE_FALSE(fused.reasons.empty());
    CHECK(contains(fused.reasons.front(), "ppu-cudnn-no-fused-mha"));
    // Flash comes next and is what the PPU runs: no quirk withholds it. On the
    // fake driver no kernel image loads, so there it is out for that reason only.
    REQUIRE(decision.order.size() >= 2);
    CHECK(decision.order[0] == hal::AttentionImplementation::fused);
    CHECK(decision.order[1] == hal::AttentionImplementation::flash);
    const hal::AttentionCandidate& flash = decision.candidates[1];
    REQUIRE(flash.implementation == hal::AttentionImplementation::flash);
    for (const std::string& reason : flash.reasons) CHECK_FALSE(contains(reason, "quirk"));
    if (flash.eligible) {
      CHECK(decision.chosen == hal::AttentionImplementation::flash);
    } else {
      REQUIRE_FALSE(flash.reasons.empty());
      CHECK(contains(flash.reasons.front(), "no usable kernels on this device"));
    }
    CHECK_FALSE((decision.found && decision.chosen == hal::AttentionImplementation::fused));

    // TransformerEngine's switches steer the PPU like any CUDA device.
    ScopedEnvironment transformer_engine{{"NVTE_FUSED_ATTN", "0"}, {"NVTE_FLASH_ATTN", "1"}};
    const hal::Runtime steered_runtime = hal::Runtime::create(default_options());  // reads the switches
    const hal::AttentionDecision steered = hal::explain_attention(steered_runtime.devices()[0], params);
    CHECK(steered.order_source == "NVTE_FUSED_ATTN=0 NVTE_FLASH_ATTN=1");
    CHECK(std::find(steered.order.begin(), steered.order.end(), hal::AttentionImplementation::fused) ==
          steered.order.end());
    CHECK(steered.order.front() == hal::AttentionImplementation::flash);
    CHECK_FALSE(steered.candidates[0].in_order);
  }
}

#ifdef HAL_PPU_TEST_TOOLS
namespace {

using hal::testing::CommandResult;

// stdout only: the tools' logs go to stderr.
CommandResult run(const std::string& command) { return hal::testing::run_command(command + " 2>/dev/null"); }

}  // namespace

TEST_SUITE("ppu tools") {
  TEST_CASE("halinfo --json shows the PPU as T-Head with its flagged compute capability and version axes") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const CommandResult result = run(std::string(HALINFO_PATH) + " --json");
    REQUIRE(result.exit_code == 0);
    const nlohmann::json document = nlohmann::json::parse(result.output);
    REQUIRE(document["devices"].size() == 1);
    const nlohmann::json& device = document["devices"][0];
    CHECK(device["id"] == "ppu:0");
    CHECK(device["vendor"] == "T-Head");
    CHECK(device["name"] == "PPU-ZW810E");
    CHECK(device["pci_bus_id"] == "0000:e1:00.0");
    const nlohmann::json& capabilities = device["capabilities"];
    CHECK(capabilities["cuda.compute_capability"]["value"] == "8.0");
    CHECK(capabilities["cuda.compute_capability.meaning"]["value"] == "compatibility");
    CHECK(contains(capabilities["cuda.compute_capability.meaning"]["note"].get<std::string>(),
                   "not an NVIDIA architecture"));
    CHECK(capabilities["ppu.model"]["value"] == "ZW810E");
    CHECK(capabilities["ppu.isa_generation"]["value"] == "zhenwu-810");
    CHECK(capabilities["memory.device"]["value"] == true);
    const nlohmann::json& versions = device["versions"];
    CHECK(versions["sdk"] == "1.4.1");
    CHECK(versions["driver"] == "1.2.0");
    CHECK(versions["runtime"] == "1.4.1");
    CHECK(versions["cuda_api"] == "13.0");
    CHECK(versions["dnn"] == "9.1.0");
    CHECK(versions["collectives"] == "ACCL-P 2.3.0");
  }

  TEST_CASE("halinfo attention on the PPU shows fused excluded with the quirk cited") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const CommandResult text = run(std::string(HALINFO_PATH) + " attention --shape b=1,hq=8,hkv=8,sq=256,skv=256,d=64");
    REQUIRE(text.exit_code == 0);
    CHECK(contains(text.output, "ppu:0"));
    CHECK(contains(text.output, "ppu-cudnn-no-fused-mha"));
    const CommandResult json =
        run(std::string(HALINFO_PATH) + " attention --json --shape b=1,hq=8,hkv=8,sq=256,skv=256,d=64");
    REQUIRE(json.exit_code == 0);
    const nlohmann::json document = nlohmann::json::parse(json.output);
    REQUIRE(document["devices"].size() == 1);
    bool fused_cites_quirk = false;
    for (const auto& candidate : document["devices"][0]["candidates"])
      if (candidate["implementation"] == "fused")
        fused_cites_quirk = candidate["eligible"] == false &&
                            contains(candidate["reasons"][0].get<std::string>(), "ppu-cudnn-no-fused-mha");
    CHECK(fused_cites_quirk);
  }

  TEST_CASE("halconform on the PPU: fused attention UNSUPPORTED, the FP32 GEMM check SKIPPED, each citing its quirk") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const fs::path reports = fixture.root / "reports";
    const CommandResult result = run(std::string(HALCONFORM_PATH) +
                                     " --device ppu:0 --tier numerics --filter 'numerics.attention.fused.*' --filter "
                                     "numerics.attention.math.f32_gemm_corner_case --report-dir " +
                                     reports.string());
    CAPTURE(result.output);
    REQUIRE(fs::exists(reports / "conformance.json"));
    std::ifstream stream(reports / "conformance.json");
    const nlohmann::json document = nlohmann::json::parse(stream);
    int fused_cases = 0, gemm_cases = 0;
    for (const auto& entry : document["results"]) {
      if (entry["case"] == "numerics.attention.math.f32_gemm_corner_case") {
        ++gemm_cases;
        // No attention table on the PPU yet: f32 math cannot run, and the skip says which quirk stays unverified.
        CHECK(entry["outcome"] == "SKIPPED");
        CHECK(contains(entry["evidence"]["message"].get<std::string>(), "ppu-f32-gemm-tensor-core-corner-case"));
        continue;
      }
      if (!entry["case"].get<std::string>().starts_with("numerics.attention.fused.")) continue;
      ++fused_cases;
      CHECK(entry["outcome"] == "UNSUPPORTED");
      CHECK(contains(entry["evidence"]["message"].get<std::string>(), "ppu-cudnn-no-fused-mha"));
    }
    CHECK(fused_cases == 8);  // forward and backward in three dtypes, key ranges, and the probe
    CHECK(gemm_cases == 1);
  }
}
#endif

TEST_SUITE("ppu and cuda") {
  TEST_CASE("a PPU the cuda backend also sees is listed once, by the ppu backend") {
    const Fixture fixture;
    ScopedEnvironment driver{{"HAL_CUDA_DRIVER", HAL_FAKE_CUDA_DRIVER_PATH}};
    {
      const auto environment = fixture.environment("cuda");
      const hal::Runtime runtime = hal::Runtime::create(default_options());
      REQUIRE(runtime.devices().size() == 1);  // alone, the cuda backend lists it
      CHECK(runtime.devices()[0].info().backend == "cuda");
    }
    const auto environment = fixture.environment("cuda,ppu");
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    CHECK(runtime.devices()[0].info().backend == "ppu");
    CHECK(runtime.find_backend("cuda")->device_count == 0);
  }
}
#endif
