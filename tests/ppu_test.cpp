// The ppu backend against a fixture sysfs/dev/SDK tree made in a temporary
// directory: discovery, version requirements, the shipped PPU quirks, and
// (with the fake CUDA driver in its PPU identity) that a PPU is listed once.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "discovery.hpp"
#include "hal/capabilities.hpp"
#include "hal/hal.hpp"
#include "scoped_environment.hpp"

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
    write(root / "sdk/lib64/libcuda.so.1.4.1", "");
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

hal::RuntimeOptions default_options() {
  hal::RuntimeOptions options;
  options.config = hal::Config{};  // the user's config file must not change the tests
  return options;
}

std::string axis(const hal::DeviceInfo& info, const std::string& key) {
  for (const auto& [name, value] : info.version_axes)
    if (name == key) return value;
  return "(absent)";
}

}  // namespace

TEST_SUITE("ppu fixture") {
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
      return layer.layer == "quirk" && contains(layer.source, "ppu-cudnn-no-fused-mha");
    });
    REQUIRE(quirk != fused.layers.end());
  }

  TEST_CASE("work entry points refuse, naming what is missing") {
    const Fixture fixture;
    const auto environment = fixture.environment();
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.devices().size() == 1);
    try {
      (void)runtime.devices()[0].create_stream();
      FAIL("a stream was created on the ppu backend");
    } catch (const hal::Error& error) {
      CHECK(error.code() == hal::StatusCode::unsupported);
      CHECK(contains(error.what(), "does not run work yet"));
    }
  }
}

#ifdef HAL_FAKE_CUDA_DRIVER_PATH
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
