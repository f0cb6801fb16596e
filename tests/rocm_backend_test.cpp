// The ROCm backend through hal's public API, against the fake HIP runtime
// in tests/fakes/fake_hip_runtime. ctest runs each suite in its own process
// with the runtime identity in the environment (see rocm_tests.cmake).
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "device_test_support.hpp"
#include "hal/hal.hpp"
#include "scoped_environment.hpp"

using hal::BackendState;
using hal::MemoryKind;
using hal::StatusCode;
using hal::testing::capability;
using hal::testing::check_error;
using hal::testing::contains;
using hal::testing::counting_bytes;
using hal::testing::read_all;
using hal::testing::ScopedEnvironment;
using hal::testing::StreamGate;

namespace {

// hipError_t values, as the HIP headers number them.
constexpr long long hip_out_of_memory = 2, hip_no_device = 100, hip_illegal_address = 700, hip_launch_failure = 719,
                    hip_not_supported = 801, hip_unknown = 999;

constexpr bool built_with_kernels = std::string_view(HAL_ROCM_CODE_OBJECT_ARCHITECTURES) != "";

struct FakeRuntimeFixture {
  explicit FakeRuntimeFixture(const char* runtime = HAL_FAKE_HIP_RUNTIME_PATH)
      : environment{{"HAL_HIP_RUNTIME", runtime}, {"HAL_BACKENDS", "host,rocm"}, {"HAL_FAKE_HIP_FAIL", std::nullopt}},
        runtime(hal::Runtime::create(hal::testing::options_without_config_file())) {}
  ScopedEnvironment environment;
  hal::Runtime runtime;

  const hal::BackendReport& report() const {
    const hal::BackendReport* found = runtime.find_backend("rocm");
    REQUIRE(found != nullptr);
    return *found;
  }
  hal::Device device(int index = 0) const {
    REQUIRE_MESSAGE(report().state == BackendState::loaded, report().reason);
    return runtime.device("rocm:" + std::to_string(index));
  }
};

struct Rocm5RuntimeFixture : FakeRuntimeFixture {
  Rocm5RuntimeFixture() : FakeRuntimeFixture(HAL_FAKE_HIP_ROCM5_RUNTIME_PATH) {}
};

// What a framework does through the HIP runtime hal loaded: its own
// allocations and streams on the device it sets current, and the fake's
// counters of host registrations.
class HipFramework {
 public:
  static constexpr hal::dlpack::DLDeviceType dlpack_type = hal::dlpack::kDLROCM;
  HipFramework() : library_(dlopen(HAL_FAKE_HIP_RUNTIME_PATH, RTLD_NOW | RTLD_LOCAL)) {
    REQUIRE_MESSAGE(library_ != nullptr, dlerror());
  }
  HipFramework(const HipFramework&) = delete;
  ~HipFramework() { dlclose(library_); }

  template <typename Function, typename... Arguments>
  int call(const char* name, Arguments... arguments) const {
    void* address = dlsym(library_, name);
    REQUIRE_MESSAGE(address != nullptr, name);
    return reinterpret_cast<Function*>(address)(arguments...);
  }

  void* alloc_device(int ordinal, std::size_t bytes) const {
    REQUIRE(call<int(int)>("hipSetDevice", ordinal) == 0);
    void* memory = nullptr;
    REQUIRE(call<int(void**, std::size_t)>("hipMalloc", &memory, bytes) == 0);
    return memory;
  }
  void free_device(int, void* memory) const { CHECK(call<int(void*)>("hipFree", memory) == 0); }
  void* alloc_pinned(std::size_t bytes) const {
    void* memory = nullptr;
    REQUIRE(call<int(void**, std::size_t, unsigned)>("hipHostMalloc", &memory, bytes, 0u) == 0);
    return memory;
  }
  void free_pinned(void* memory) const { CHECK(call<int(void*)>("hipHostFree", memory) == 0); }
  void* create_stream() const {
    void* stream = nullptr;
    REQUIRE(call<int(void**, unsigned)>("hipStreamCreateWithFlags", &stream, 1u) == 0);
    return stream;
  }
  void destroy_stream(void* stream) const { CHECK(call<int(void*)>("hipStreamDestroy", stream) == 0); }
  // The framework's stream waits at this point until the gate opens.
  StreamGate block(void* stream) const {
    StreamGate gate;
    using Callback = void (*)(void*, int, void*);
    const Callback wait = [](void*, int, void* latch) { StreamGate::wait_on_latch(latch); };
    REQUIRE(call<int(void*, Callback, void*, unsigned)>("hipStreamAddCallback", stream, wait, gate.latch_for_vendor(), 0u) == 0);
    return gate;
  }
  int host_registrations() const { return call<int()>("hal_fake_hip_host_registrations"); }
  int host_unregistrations() const { return call<int()>("hal_fake_hip_host_unregistrations"); }
  int device_synchronizations() const { return call<int()>("hal_fake_hip_device_synchronizes"); }

 private:
  void* library_;
};

struct RocmInteropFixture : FakeRuntimeFixture {
  HipFramework framework;
};

const hal::BackendReport& rocm_report(const hal::Runtime& runtime) {
  const hal::BackendReport* report = runtime.find_backend("rocm");
  REQUIRE(report != nullptr);
  return *report;
}

}  // namespace

using GpuSemanticsFixture = FakeRuntimeFixture;
// Delays the fake runtime's null stream (gpu_semantics_cases.inc); a real runtime ignores it.
constexpr const char* null_stream_delay_variable = "HAL_FAKE_HIP_NULL_STREAM_DELAY_MS";
using GpuInteropFixture = RocmInteropFixture;

TEST_SUITE("rocm interop") {
#include "gpu_interop_cases.inc"

  // The fake runtime orders its null stream as HIP does (legacy default
  // stream): a null-stream call waits for the device's blocking streams, not
  // for non-blocking ones nor for another device's work.
  TEST_CASE_FIXTURE(RocmInteropFixture,
                    "the fake runtime's null stream is ordered with the device's blocking streams") {
    constexpr int copy_to_host = 2;  // hipMemcpyDeviceToHost
    const HipFramework& hip = framework;
    void* value = hip.alloc_device(0, sizeof(std::int32_t));
    REQUIRE(hip.call<int(void*, int, std::size_t)>("hipMemsetD32", value, 1, std::size_t{1}) == 0);
    // hipMemcpy of `value` on a thread of its own (the current device is per thread).
    const auto read_on = [&](int device) {
      return std::async(std::launch::async, [&hip, value, device] {
        std::int32_t host = 0;
        REQUIRE(hip.call<int(int)>("hipSetDevice", device) == 0);
        REQUIRE(hip.call<int(void*, const void*, std::size_t, int)>("hipMemcpy", &host, value, sizeof(host),
                                                                    copy_to_host) == 0);
        return host;
      });
    };
    const auto create_stream = [&](unsigned flags) {
      void* stream = nullptr;
      REQUIRE(hip.call<int(void**, unsigned)>("hipStreamCreateWithFlags", &stream, flags) == 0);
      return stream;
    };
    const auto set_on = [&](void* stream, int to) {
      REQUIRE(hip.call<int(void*, int, std::size_t, void*)>("hipMemsetD32Async", value, to, std::size_t{1}, stream) ==
              0);
    };
    // A new stream (hipStreamCreateWithFlags `flags`) held at a gate, then setting `value` to `to`.
    struct Held {
      void* stream;
      StreamGate gate;
    };
    const auto held_stream_setting = [&](unsigned flags, int to) {
      void* stream = create_stream(flags);
      Held held{stream, hip.block(stream)};
      set_on(stream, to);
      return held;
    };

    SUBCASE("a blocking stream's earlier work lands before the null stream's copy") {
      Held blocking = held_stream_setting(0u, 7);  // hipStreamDefault
      std::future<std::int32_t> read = read_on(0);
      CHECK(read.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);
      blocking.gate.open();
      CHECK(read.get() == 7);
      hip.destroy_stream(blocking.stream);
    }
    SUBCASE("a non-blocking stream's work is not waited for") {
      Held non_blocking = held_stream_setting(1u, 9);  // hipStreamNonBlocking
      std::future<std::int32_t> read = read_on(0);
      REQUIRE(read.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
      CHECK(read.get() == 1);  // before the memset behind the gate
      non_blocking.gate.open();
      REQUIRE(hip.call<int(void*)>("hipStreamSynchronize", non_blocking.stream) == 0);
      CHECK(read_on(0).get() == 9);
      hip.destroy_stream(non_blocking.stream);
    }
    SUBCASE("each device has its own null stream") {
      Held blocking = held_stream_setting(0u, 5);  // device 0's
      // Device 0's null stream now holds a memset behind the gate; device 1's is free.
      REQUIRE(hip.call<int(void*, int, std::size_t)>("hipMemsetD32", value, 6, std::size_t{1}) == 0);
      std::future<std::int32_t> other_device = read_on(1);
      REQUIRE(other_device.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
      CHECK(other_device.get() == 1);
      blocking.gate.open();
      CHECK(read_on(0).get() == 6);
      hip.destroy_stream(blocking.stream);
    }
    SUBCASE("work on a blocking stream waits for the null stream's earlier work") {
      void* blocking = create_stream(0u);
      void* gated = create_stream(0u);
      StreamGate gate = hip.block(gated);
      // The null stream's memset waits for `gated`; the blocking stream's for that memset.
      REQUIRE(hip.call<int(void*, int, std::size_t)>("hipMemsetD32", value, 3, std::size_t{1}) == 0);
      set_on(blocking, 4);
      CHECK(hip.call<int(void*)>("hipStreamQuery", blocking) != 0);  // hipErrorNotReady: held behind the gate
      gate.open();
      REQUIRE(hip.call<int(void*)>("hipStreamSynchronize", blocking) == 0);
      CHECK(read_on(0).get() == 4);
      hip.destroy_stream(gated);
      hip.destroy_stream(blocking);
    }
    hip.free_device(0, value);
  }
}

// The fake runtime's failures and the HIP errors that follow (gpu_fake_error_cases.inc).
using GpuFakeFixture = FakeRuntimeFixture;
const hal::testing::FakeVendor fake_vendor{.backend = "rocm",
                                           .fail_variable = "HAL_FAKE_HIP_FAIL",
                                           .fill_async = "hipMemsetD8Async",
                                           .copy_to_host = "hipMemcpy",
                                           .copy_to_device = "hipMemcpy",
                                           .allocate = "hipMalloc",
                                           .out_of_memory = {"hipErrorOutOfMemory", hip_out_of_memory},
                                           .illegal_address = {"hipErrorIllegalAddress", hip_illegal_address},
                                           .launch_failure = {"hipErrorLaunchFailure", hip_launch_failure},
                                           .not_supported = {"hipErrorNotSupported", hip_not_supported},
                                           .unknown = {"hipErrorUnknown", hip_unknown}};

// The memory test kernel on the fake runtime, which loads the code object's
// entry for the device (HAL_FAKE_HIP_CODE_OBJECTS=1, set by the test's
// environment) and runs the kernel in the SIMT emulator.
using GpuMemoryTestFixture = FakeRuntimeFixture;
constexpr const char* stuck_bits_variable = "HAL_FAKE_HIP_STUCK_BITS";
bool faults_injectable() { return true; }

TEST_SUITE("rocm memory test") {
#include "gpu_memory_test_cases.inc"
}

TEST_SUITE("fake runtime") {
#include "gpu_semantics_cases.inc"

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "devices are enumerated with their identity and memory") {
    REQUIRE_MESSAGE(report().state == BackendState::loaded, report().reason);
    CHECK(report().device_count == 2);
    const hal::DeviceInfo& first = device(0).info();
    const hal::DeviceInfo& second = device(1).info();
    CHECK(first.type == hal::DeviceType::gpu);
    CHECK(first.name == "AMD Instinct MI210");
    CHECK(second.name == "AMD Instinct MI100");
    CHECK(first.uuid == "GPU-0123456789abcdef0011223344556677");
    CHECK(second.uuid == "GPU-fedcba98765432100011223344556677");
    // The runtime's "0000:C1:00.0" comes out normalized.
    CHECK(first.pci_bus_id == "0000:c1:00.0");
    CHECK(second.pci_bus_id == "0000:c2:00.0");
    if (!std::filesystem::exists("/sys/bus/pci/devices/" + first.pci_bus_id)) {
      CHECK(first.numa_node == -1);
      CHECK(first.vendor == "AMD");
    }
    CHECK(first.total_memory == (1ull << 30));
    CHECK(second.total_memory == (512ull << 20));
    CHECK(first.free_memory == first.total_memory);
    CHECK(first.compute_units == 104);
    CHECK(first.clock_mhz == 1700);
    CHECK(first.memory_clock_mhz == 1600);
    CHECK(capability(first, "rocm.gcn_arch_name").value_string() == "gfx90a:sramecc+:xnack-");
    CHECK(capability(second, "rocm.gcn_arch_name").value_string() == "gfx908:sramecc+:xnack-");
    CHECK(capability(first, "rocm.wavefront_size").value_string() == "64");
  }

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "runtime and driver versions are separate axes; capabilities say why") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.version("hip_runtime") == "6.2.41134");
    CHECK(info.version("hip_driver") == "6.2.41134");
    CHECK(info.version("hip_headers").has_value());
    CHECK(device(0).supports("memory.managed"));
    CHECK(contains(capability(info, "memory.managed").note, "no concurrent host access"));
    CHECK(device(0).supports("memory.host_pinned"));
    CHECK(device(0).supports("p2p"));
    CHECK(contains(capability(info, "p2p").note, "rocm:1"));
    CHECK_FALSE(device(0).supports("collectives"));
    // Flash and math are declared while the code object may load (on first
    // use; the fake's fails then, gpu_attention_test.cpp); fused has no library.
    CHECK_FALSE(device(0).supports("attention.fused"));
    for (const char* key : {"attention.fused", "attention.flash", "attention.math"}) {
      CAPTURE(key);
      CHECK_FALSE(capability(info, key).note.empty());
    }
  }

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "a code object that does not load is refused at first use, with the reason") {
    const hal::Capability& kernels = capability(device(0).info(), "kernels");
    hal::AttentionParams params;
    params.seq_q = 16;
    const hal::AttentionDecision decision = hal::explain_attention(device(0), params);
    CHECK_FALSE(decision.found);
    const std::string flash = hal::testing::candidate_reasons(decision, hal::AttentionImplementation::flash);
    if (built_with_kernels) {
      CHECK(device(0).supports("kernels"));
      CHECK(contains(kernels.note, "first use"));
      CHECK(contains(flash, "hipModuleLoadData failed on rocm:0 (gfx90a:sramecc+:xnack-)"));
      CHECK(contains(flash, "hipErrorNoBinaryForGpu"));
      CHECK(contains(flash, HAL_ROCM_CODE_OBJECT_ARCHITECTURES));
    } else {
      CHECK_FALSE(device(0).supports("kernels"));
      CHECK(contains(kernels.note, "built without hipcc"));
      CHECK(contains(capability(device(0).info(), "attention.flash").note, kernels.note));
    }
  }

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "the calling thread's current device is the same after hal worked on another") {
    void* runtime = dlopen(HAL_FAKE_HIP_RUNTIME_PATH, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(runtime != nullptr);
    // hipError_t is an int-sized enum; hipSuccess is 0.
    const auto set_device = reinterpret_cast<int (*)(int)>(dlsym(runtime, "hipSetDevice"));
    const auto get_device = reinterpret_cast<int (*)(int*)>(dlsym(runtime, "hipGetDevice"));
    REQUIRE(static_cast<bool>(set_device));  // doctest cannot print a function pointer
    REQUIRE(static_cast<bool>(get_device));
    for (const int own : {0, 1}) {
      CAPTURE(own);
      std::thread framework([&] {
        REQUIRE(set_device(own) == 0);
        for (const int other : {0, 1}) {
          hal::Buffer buffer = device(other).allocate(256);
          hal::Stream stream = device(other).create_stream();
          stream.fill(buffer, 0, 256, 0x3c, 1);
          stream.synchronize();
          CHECK(read_all(buffer) == std::vector<std::uint8_t>(256, 0x3c));
          (void)device(other).free_memory();
        }
        int current = -1;
        CHECK(get_device(&current) == 0);
        CHECK(current == own);
      });
      framework.join();
    }
    dlclose(runtime);
  }

  TEST_CASE("the code object is loaded on a device's first attention call, not at discovery") {
    void* runtime = dlopen(HAL_FAKE_HIP_RUNTIME_PATH, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(runtime != nullptr);
    const auto module_loads = reinterpret_cast<int (*)()>(dlsym(runtime, "hal_fake_hip_module_loads"));
    REQUIRE(static_cast<bool>(module_loads));
    const int before = module_loads();
    {
      const FakeRuntimeFixture hal;
      (void)hal.device(0).info();
      CHECK(module_loads() == before);
      hal::AttentionParams params;
      params.seq_q = 16;
      (void)hal::explain_attention(hal.device(0), params);
      (void)hal::explain_attention(hal.device(0), params);
      CHECK(module_loads() == before + (built_with_kernels ? 1 : 0));
    }
    dlclose(runtime);
  }

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "devices are found by UUID and PCI bus id") {
    CHECK(runtime.device("GPU-fedcba98765432100011223344556677") == device(1));
    CHECK(runtime.device("0000:c1:00.0") == device(0));
  }




  TEST_CASE_FIXTURE(FakeRuntimeFixture, "copies between devices and free memory accounting") {
    const std::uint64_t free_before = device(1).free_memory();
    hal::Buffer source = device(0).allocate(1 << 20);
    hal::Buffer target = device(1).allocate(1 << 20);
    CHECK(device(1).free_memory() <= free_before - (1 << 20));
    const auto bytes = counting_bytes(1 << 20, 3);
    source.write(0, bytes.data(), bytes.size());
    target.copy_from(0, source, 0, bytes.size());
    CHECK(read_all(target) == bytes);
    hal::Stream stream = device(1).create_stream();
    std::vector<std::uint8_t> back(4096, 0);
    stream.copy_to_host(back.data(), target, 4096, back.size());
    stream.synchronize();
    CHECK(std::equal(back.begin(), back.end(), bytes.begin() + 4096));
    target.free();
    CHECK(device(1).free_memory() == free_before);
  }

#include "gpu_fake_error_cases.inc"

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "a stream the runtime cannot create is out_of_memory, saying what to free") {
    environment.set("HAL_FAKE_HIP_FAIL", "hipStreamCreateWithFlags=2");
    check_error([&] { (void)device(0).create_stream(); }, StatusCode::out_of_memory,
                {"creating a stream on rocm:0", "free device memory"}, hip_out_of_memory);
  }

  TEST_CASE_FIXTURE(FakeRuntimeFixture, "the device is made current on every calling thread") {
    hal::Device gpu = device(1);
    const std::uint64_t free_before = gpu.free_memory();
    std::vector<std::uint8_t> read_back;
    std::uint64_t free_during = 0;
    std::thread worker([&] {
      // A fresh thread starts on device 0; the backend must switch it.
      hal::Buffer buffer = gpu.allocate(1 << 20);
      buffer.fill(0, 1 << 20, 0x5a);
      read_back = read_all(buffer);
      free_during = gpu.free_memory();
    });
    worker.join();
    CHECK(read_back == std::vector<std::uint8_t>(1 << 20, 0x5a));
    CHECK(free_during == free_before - (1 << 20));  // counted against rocm:1, not rocm:0
  }

  TEST_CASE("the config's [backend.rocm] runtime option locates the runtime") {
    ScopedEnvironment environment{{"HAL_HIP_RUNTIME", std::nullopt}, {"HAL_BACKENDS", "rocm"}};
    hal::RuntimeOptions options = hal::testing::options_without_config_file();
    options.config->backend_options["rocm"]["runtime"] = HAL_FAKE_HIP_RUNTIME_DIR;  // a directory works too
    const hal::Runtime runtime = hal::Runtime::create(options);
    CHECK_MESSAGE(rocm_report(runtime).state == BackendState::loaded, rocm_report(runtime).reason);
    CHECK(rocm_report(runtime).device_count == 2);
  }

  TEST_CASE("an explicit runtime path that does not exist is the only path tried") {
    ScopedEnvironment environment{{"HAL_HIP_RUNTIME", "/nonexistent/dir/libamdhip64.so.6"}, {"HAL_BACKENDS", "rocm"}};
    const hal::Runtime runtime = hal::Runtime::create(hal::testing::options_without_config_file());
    const hal::BackendReport& report = rocm_report(runtime);
    CHECK(report.state == BackendState::unavailable);
    CHECK(contains(report.reason, "[HAL_HIP_RUNTIME] /nonexistent/dir/libamdhip64.so.6: not found"));
    CHECK(contains(report.reason, "nothing else was searched"));
    CHECK_FALSE(contains(report.reason, "[system]"));
  }

  TEST_CASE("a library that is not a HIP runtime is an error naming the missing functions") {
    ScopedEnvironment environment{{"HAL_HIP_RUNTIME", HAL_HOST_PLUGIN_PATH}, {"HAL_BACKENDS", "rocm"}};
    const hal::Runtime runtime = hal::Runtime::create(hal::testing::options_without_config_file());
    const hal::BackendReport& report = rocm_report(runtime);
    CHECK(report.state == BackendState::error);
    CHECK(contains(report.reason, "lacks required functions"));
    CHECK(contains(report.reason, "hipInit"));
    CHECK(contains(report.reason, "hipGetDevicePropertiesR0000|hipGetDeviceProperties"));
  }
}

TEST_SUITE("foreign architecture") {
  TEST_CASE_FIXTURE(FakeRuntimeFixture, "an architecture the plugin has no code object for is named as the reason") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.name == "AMD Instinct MI300X");
    const hal::Capability& kernels = capability(info, "kernels");
    CHECK_FALSE(device(0).supports("kernels"));
    if (built_with_kernels) {
      CHECK(contains(kernels.note, "no code object for rocm:0 (gfx942:sramecc+:xnack+)"));
      CHECK(contains(kernels.note, "HAL_ROCM_ARCHITECTURES including gfx942"));
    }
    // xnack+ lets host and device touch managed memory together.
    CHECK(contains(capability(info, "memory.managed").note, "concurrently"));
    CHECK(contains(capability(info, "p2p").note, "no other ROCm device"));
  }
}

// An RDNA GPU (gfx1030, 32-wide wavefronts) whose code object loads
// (HAL_FAKE_HIP_CODE_OBJECTS=1): the fake finds kernels by their symbols in
// the bundle entry for gfx1030, records launches and runs them in the SIMT emulator.
TEST_SUITE("rdna code object") {
  TEST_CASE_FIXTURE(FakeRuntimeFixture, "flash attention launches only kernels the HIP image has, whatever the wavefront width") {
    if (!built_with_kernels) return;
    REQUIRE(device(0).supports("kernels"));
    void* fake = dlopen(HAL_FAKE_HIP_RUNTIME_PATH, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    REQUIRE(fake != nullptr);
    const auto launched = reinterpret_cast<int (*)(char*, int)>(dlsym(fake, "hal_fake_hip_launched_kernels"));
    REQUIRE(static_cast<bool>(launched));
    for (const hal::DType dtype : {hal::DType::f16, hal::DType::bf16, hal::DType::f32}) {
      CAPTURE(hal::to_string(dtype));
      hal::AttentionParams params;
      params.batch = 1, params.heads_q = params.heads_kv = 2, params.seq_q = params.seq_kv = 32;
      params.head_dim_qk = params.head_dim_v = 64;
      params.dtype = dtype;
      const std::uint64_t bytes = 2 * 32 * 64 * hal::size_in_bytes(dtype);
      const hal::Buffer q = device(0).allocate(bytes), o = device(0).allocate(bytes);
      hal::AttentionOptions options;
      options.implementations = {hal::AttentionImplementation::flash};
      const hal::Stream stream = device(0).create_stream();
      const int before = launched(nullptr, 0);
      const hal::AttentionDecision decision = hal::attention_forward(stream, params, {q, 0}, {q, 0}, {q, 0}, {o, 0}, {}, options);
      stream.synchronize();
      CHECK(decision.chosen == hal::AttentionImplementation::flash);
      char names[4096];
      REQUIRE(launched(names, sizeof(names)) == before + 1);
      const std::string all = names, last = all.substr(all.rfind(',') + 1);
      CHECK(last == "hal_flash_attention_forward_d64");  // never the CUDA image's _mma_ kernels
    }
    dlclose(fake);
  }
}

TEST_SUITE("rocm5 runtime") {
  TEST_CASE_FIXTURE(Rocm5RuntimeFixture, "a ROCm 5 runtime works through its own exports") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.version("hip_runtime") == "5.2.21153");
    CHECK(capability(info, "rocm.gcn_arch_name").value_string() == "gfx90a:sramecc+:xnack-");
    // Without managed memory the kind is refused up front, saying what to do.
    CHECK_FALSE(device(0).supports("memory.managed"));
    check_error([&] { (void)device(0).allocate(64, MemoryKind::managed); }, StatusCode::unsupported,
                {"does not support managed memory", "allocate device memory and copy"});
  }

  TEST_CASE_FIXTURE(Rocm5RuntimeFixture, "host callbacks run through hipStreamAddCallback and see the stream's status") {
    hal::Stream stream = device(0).create_stream();
    hal::Buffer buffer = device(0).allocate(64, MemoryKind::host_pinned);
    stream.fill(buffer, 0, 64, 0x24);
    std::atomic<int> seen{-1};
    std::atomic<bool> ok{false};
    stream.enqueue_host_callback([&](const hal::Status& status) {
      seen = static_cast<const std::uint8_t*>(buffer.host_address())[0];
      ok = status.is_ok();
    });
    stream.synchronize();
    CHECK(seen == 0x24);
    CHECK(ok);

    environment.set("HAL_FAKE_HIP_FAIL", "hipMemsetD8Async=700");
    hal::Stream faulty = device(0).create_stream();
    faulty.fill(buffer, 0, 64, 1);
    std::atomic<int> callback_status{-1};
    faulty.enqueue_host_callback(
        [&](const hal::Status& status) { callback_status = static_cast<int>(status.code()); });
    check_error([&] { faulty.synchronize(); }, StatusCode::device_lost, {"hipErrorIllegalAddress"});
    CHECK(callback_status == static_cast<int>(StatusCode::device_lost));
  }
}

TEST_SUITE("no device") {
  TEST_CASE("a runtime that finds no device makes the backend unavailable, saying so") {
    ScopedEnvironment environment{{"HAL_HIP_RUNTIME", HAL_FAKE_HIP_RUNTIME_PATH}, {"HAL_BACKENDS", "host,rocm"}};
    const hal::Runtime runtime = hal::Runtime::create(hal::testing::options_without_config_file());
    const hal::BackendReport& report = rocm_report(runtime);
    CHECK(report.state == BackendState::unavailable);
    CHECK(contains(report.reason, "found no device"));
    CHECK(contains(report.reason, "hipErrorNoDevice"));
    CHECK(contains(report.reason, "[HAL_HIP_RUNTIME] " HAL_FAKE_HIP_RUNTIME_PATH ": loaded"));
    CHECK(runtime.find_backend("host")->state == BackendState::loaded);
  }
}

TEST_SUITE("no runtime") {
  TEST_CASE("without a usable runtime the plugin loads and reports unavailable with every path tried") {
    ScopedEnvironment environment{{"HAL_HIP_RUNTIME", std::nullopt},
                                  {"ROCM_PATH", "/nonexistent/rocm"},
                                  {"HAL_BACKENDS", "host,rocm"}};
    const hal::Runtime runtime = hal::Runtime::create(hal::testing::options_without_config_file());
    const hal::BackendReport& report = rocm_report(runtime);
    if (report.state == BackendState::loaded) {
      MESSAGE("this machine has an AMD GPU (" << report.device_count << " devices): nothing to check here");
      return;
    }
    INFO(report.reason);
    CHECK(report.state == BackendState::unavailable);
    CHECK(contains(report.path, "libhal_backend_rocm.so"));
    if (!std::filesystem::exists("/dev/kfd")) {
      // No AMD kernel driver: the runtime is not even loaded, and the reason
      // still says where it would have been searched.
      CHECK(contains(report.reason, "/dev/kfd"));
      CHECK(contains(report.reason, "/nonexistent/rocm/lib (no such directory)"));
      CHECK(contains(report.reason, "libamdhip64.so.6"));
    } else {
      CHECK(contains(report.reason, "[ROCM_PATH] /nonexistent/rocm/lib: no such directory"));
      CHECK(contains(report.reason, "[/opt/rocm] /opt/rocm/lib"));
      CHECK(contains(report.reason, "[system] libamdhip64.so."));
      // Either no library at all, or one that sees no GPU.
      CHECK((contains(report.reason, "was not found") || contains(report.reason, "found no device")));
    }
    CHECK(runtime.find_backend("host")->state == BackendState::loaded);
    CHECK(runtime.device("host:0").info().type == hal::DeviceType::cpu);
  }
}
