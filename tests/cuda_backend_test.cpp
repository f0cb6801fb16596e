// The CUDA backend through hal's public API, against the fake driver in
// tests/fakes/fake_cuda_driver. ctest runs each suite in its own process
// with the driver identity in the environment (see cuda_tests.cmake).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>

#include <nlohmann/json.hpp>

#include <cuda.h>
#include <cudnn_version.h>
#include <nccl.h>

#include "command_output.hpp"
#include "memtest_report.hpp"
#include "core_test_support.hpp"
#include "hal/capabilities.hpp"
#include "hal/collectives.hpp"
#include "hal/hal.hpp"
#include "scoped_environment.hpp"
#include "scratch_directory.hpp"

using hal::BackendState;
using hal::MemoryKind;
using hal::StatusCode;
using hal::testing::ScopedEnvironment;
using hal_test::check_error;
using hal_test::counting_bytes;
using hal_test::read_all;
using hal_test::StreamGate;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

hal::RuntimeOptions default_options() {
  hal::RuntimeOptions options;
  options.config = hal::Config{};  // the user's config file must not change the tests
  return options;
}

// The fake driver, or with HAL_TEST_CUDA_DRIVER=system the machine's own
// (how scripts/gpu-check.sh runs the "cuda semantics" suite on a GPU).
std::string fake_driver_path() {
  const char* moved = std::getenv("HAL_TEST_FAKE_CUDA_DRIVER");  // a build tree carried to another machine
  return moved != nullptr && *moved != '\0' ? moved : HAL_FAKE_CUDA_DRIVER_PATH;
}

std::optional<std::string> driver_under_test() {
  const char* choice = std::getenv("HAL_TEST_CUDA_DRIVER");
  if (choice != nullptr && std::string_view(choice) == "system") return std::nullopt;
  return fake_driver_path();
}

// A runtime with the CUDA backend on the driver under test; no cuDNN or
// NCCL unless a test asks for them, so results do not depend on the machine.
struct FakeDriverFixture {
  ScopedEnvironment environment{{"HAL_CUDA_DRIVER", driver_under_test()},
                                {"HAL_BACKENDS", "host,cuda"},
                                {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"},
                                {"HAL_NCCL", "/nonexistent/libnccl.so.2"},
                                {"HAL_FAKE_CUDA_FAIL", std::nullopt},
                                {"HAL_FAKE_CUDA_NO_PROC_ADDRESS", std::nullopt}};
  hal::Runtime runtime = hal::Runtime::create(default_options());

  const hal::BackendReport& report() const {
    const hal::BackendReport* found = runtime.find_backend("cuda");
    REQUIRE(found != nullptr);
    return *found;
  }
  hal::Device device(int index = 0) const {
    const hal::BackendReport& cuda = report();  // not inside the assertion: doctest cannot nest them
    REQUIRE_MESSAGE(cuda.state == BackendState::loaded, cuda.reason);
    return runtime.device("cuda:" + std::to_string(index));
  }
};

const hal::Capability& capability(const hal::DeviceInfo& info, std::string_view key) {
  const hal::Capability* found = info.find_capability(key);
  REQUIRE_MESSAGE(found != nullptr, "no capability " << key);
  return *found;
}

// The fake driver's own entry points and test hooks, from the copy hal loads
// (dlopen of the same path shares it), so a test can act as a framework
// would on its thread and see what hal left there.
class FakeDriver {
 public:
  FakeDriver() : library_(dlopen(fake_driver_path().c_str(), RTLD_NOW | RTLD_LOCAL)) {
    REQUIRE_MESSAGE(library_ != nullptr, dlerror());
  }
  FakeDriver(const FakeDriver&) = delete;
  FakeDriver& operator=(const FakeDriver&) = delete;
  ~FakeDriver() { dlclose(library_); }

  template <typename Function>
  Function* function(const char* name) const {
    void* address = dlsym(library_, name);
    REQUIRE_MESSAGE(address != nullptr, name);
    return reinterpret_cast<Function*>(address);
  }
  int primary_context_retains(int device) const {
    return function<int(int)>("hal_fake_cuda_primary_context_retains")(device);
  }
  int current_device() const { return function<int()>("hal_fake_cuda_current_device")(); }
  int module_loads() const { return function<int()>("hal_fake_cuda_module_loads")(); }
  // Retains device's primary context and makes it current, as a framework does.
  CUcontext make_primary_current(int device) const {
    CUcontext context = nullptr;
    REQUIRE(function<decltype(cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain")(&context, device) == CUDA_SUCCESS);
    REQUIRE(function<decltype(cuCtxSetCurrent)>("cuCtxSetCurrent")(context) == CUDA_SUCCESS);
    return context;
  }
  void release_primary(int device) const {
    function<decltype(cuCtxSetCurrent)>("cuCtxSetCurrent")(nullptr);
    CHECK(function<CUresult(CUdevice)>("cuDevicePrimaryCtxRelease_v2")(device) == CUDA_SUCCESS);
  }

 private:
  void* library_;
};

// The fake driver's stream capture and graph entry points, as a framework
// (torch.cuda.graph) calls them on its thread.
struct GraphCalls {
  explicit GraphCalls(const FakeDriver& driver)
      : begin(driver.function<decltype(cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2")),
        end(driver.function<decltype(cuStreamEndCapture)>("cuStreamEndCapture")),
        instantiate(driver.function<decltype(cuGraphInstantiateWithFlags)>("cuGraphInstantiateWithFlags")),
        launch(driver.function<decltype(cuGraphLaunch)>("cuGraphLaunch")),
        destroy_executable(driver.function<decltype(cuGraphExecDestroy)>("cuGraphExecDestroy")),
        destroy_graph(driver.function<decltype(cuGraphDestroy)>("cuGraphDestroy")) {}
  // Captures in global mode what call() enqueues on the stream: the capture's end and its graph. The capture
  // ends however call() leaves, so a failed check cannot leave it refusing the next tests' calls.
  template <typename Call>
  std::pair<CUresult, CUgraph> capture(CUstream stream, Call&& call) const {
    REQUIRE(begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    try {
      call();
    } catch (...) {
      if (end(stream, &graph) == CUDA_SUCCESS) destroy_graph(graph);
      throw;
    }
    const CUresult ended = end(stream, &graph);
    return {ended, graph};
  }
  // Instantiates the graph, launches it `times` on the stream, and destroys both (launches still run).
  void replay(CUgraph graph, CUstream stream, int times) const {
    CUgraphExec executable = nullptr;
    REQUIRE(instantiate(&executable, graph, 0) == CUDA_SUCCESS);
    for (int launch_index = 0; launch_index < times; ++launch_index) CHECK(launch(executable, stream) == CUDA_SUCCESS);
    CHECK(destroy_executable(executable) == CUDA_SUCCESS);
    CHECK(destroy_graph(graph) == CUDA_SUCCESS);
  }
  decltype(cuStreamBeginCapture_v2)* begin;
  decltype(cuStreamEndCapture)* end;
  decltype(cuGraphInstantiateWithFlags)* instantiate;
  decltype(cuGraphLaunch)* launch;
  decltype(cuGraphExecDestroy)* destroy_executable;
  decltype(cuGraphDestroy)* destroy_graph;
};

// Allocation, copies, fills, a stream and an event on `gpu`: the entry points
// that need its context.
void work_on(const hal::Device& gpu) {
  hal::Buffer buffer = gpu.allocate(4096);
  const auto bytes = counting_bytes(4096, 5);
  buffer.write(0, bytes.data(), bytes.size());
  hal::Stream stream = gpu.create_stream();
  stream.fill(buffer, 0, 64, 0x11, 1);
  hal::Event event = gpu.create_event();
  stream.record(event);
  event.synchronize();
  stream.synchronize();
  CHECK(read_all(buffer)[0] == 0x11);
}

// What a framework does through the driver hal loaded: its own allocations
// and streams, made with the device's primary context current as a framework
// keeps it, and the fake's counters of host registrations.
struct CudaFramework {
  static constexpr hal::dlpack::DLDeviceType dlpack_type = hal::dlpack::kDLCUDA;
  FakeDriver driver;
  // Held for the framework's lifetime: a primary context's memory goes with its last release.
  CUcontext contexts[2] = {driver.make_primary_current(0), driver.make_primary_current(1)};

  CudaFramework(const CudaFramework&) = delete;
  CudaFramework() { set_current(nullptr); }
  ~CudaFramework() {
    driver.release_primary(0);
    driver.release_primary(1);
  }
  void set_current(CUcontext context) const {
    REQUIRE(driver.function<decltype(cuCtxSetCurrent)>("cuCtxSetCurrent")(context) == CUDA_SUCCESS);
  }
  template <typename Call>
  void on_device(int ordinal, Call&& call) const {
    set_current(contexts[ordinal]);
    call();
    set_current(nullptr);
  }
  void* alloc_device(int ordinal, std::size_t bytes) const {
    CUdeviceptr address = 0;
    on_device(ordinal, [&] { REQUIRE(driver.function<decltype(cuMemAlloc_v2)>("cuMemAlloc_v2")(&address, bytes) == CUDA_SUCCESS); });
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address));
  }
  void free_device(int ordinal, void* memory) const {
    on_device(ordinal, [&] {
      CHECK(driver.function<decltype(cuMemFree_v2)>("cuMemFree_v2")(reinterpret_cast<std::uintptr_t>(memory)) == CUDA_SUCCESS);
    });
  }
  void* alloc_pinned(std::size_t bytes) const {
    void* host = nullptr;
    on_device(0, [&] { REQUIRE(driver.function<decltype(cuMemHostAlloc)>("cuMemHostAlloc")(&host, bytes, 0) == CUDA_SUCCESS); });
    return host;
  }
  void free_pinned(void* host) const {
    on_device(0, [&] { CHECK(driver.function<decltype(cuMemFreeHost)>("cuMemFreeHost")(host) == CUDA_SUCCESS); });
  }
  void* create_stream() const {
    CUstream stream = nullptr;
    on_device(0, [&] {
      REQUIRE(driver.function<decltype(cuStreamCreate)>("cuStreamCreate")(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    });
    return stream;
  }
  void destroy_stream(void* stream) const {
    on_device(0, [&] {
      CHECK(driver.function<decltype(cuStreamDestroy_v2)>("cuStreamDestroy_v2")(static_cast<CUstream>(stream)) == CUDA_SUCCESS);
    });
  }
  // The framework's stream waits at this point until the gate opens.
  StreamGate block(void* stream) const {
    StreamGate gate;
    on_device(0, [&] {
      REQUIRE(driver.function<decltype(cuLaunchHostFunc)>("cuLaunchHostFunc")(
                  static_cast<CUstream>(stream), &StreamGate::wait_on_latch, gate.latch_for_vendor()) == CUDA_SUCCESS);
    });
    return gate;
  }
  int host_registrations() const { return driver.function<int()>("hal_fake_cuda_host_registrations")(); }
  int host_unregistrations() const { return driver.function<int()>("hal_fake_cuda_host_unregistrations")(); }
  int device_synchronizations() const { return driver.function<int()>("hal_fake_cuda_context_synchronizes")(); }
};

struct CudaInteropFixture : FakeDriverFixture {
  CudaFramework framework;
};

bool sysfs_has(const std::string& pci_bus_id) {
  return std::filesystem::exists("/sys/bus/pci/devices/" + pci_bus_id);
}

}  // namespace

// The shared cases run on the fake driver, and on a real GPU with
// HAL_TEST_CUDA_DRIVER=system (scripts/gpu-check.sh).
using GpuSemanticsFixture = FakeDriverFixture;
// Delays the fake driver's default stream (gpu_semantics_cases.inc); a real driver ignores it.
constexpr const char* null_stream_delay_variable = "HAL_FAKE_CUDA_NULL_STREAM_DELAY_MS";
using GpuInteropFixture = CudaInteropFixture;

TEST_SUITE("cuda interop") {
#include "gpu_interop_cases.inc"
}

// The fake driver's failures and the CUDA errors that follow (gpu_fake_error_cases.inc).
using GpuFakeFixture = FakeDriverFixture;
const hal::testing::FakeVendor fake_vendor{
    .backend = "cuda",
    .fail_variable = "HAL_FAKE_CUDA_FAIL",
    .fill_async = "cuMemsetD8Async",
    .copy_to_host = "cuMemcpyDtoH",
    .copy_to_device = "cuMemcpyHtoD",
    .allocate = "cuMemAlloc",
    .out_of_memory = {"CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY},
    .illegal_address = {"CUDA_ERROR_ILLEGAL_ADDRESS", CUDA_ERROR_ILLEGAL_ADDRESS},
    .launch_failure = {"CUDA_ERROR_LAUNCH_FAILED", CUDA_ERROR_LAUNCH_FAILED},
    .not_supported = {"CUDA_ERROR_NOT_SUPPORTED", CUDA_ERROR_NOT_SUPPORTED},
    .unknown = {"CUDA_ERROR_UNKNOWN", CUDA_ERROR_UNKNOWN}};

// The memory test kernel on the fake driver (in the SIMT emulator), and on a
// real GPU with HAL_TEST_CUDA_DRIVER=system (scripts/gpu-check.sh).
using GpuMemoryTestFixture = FakeDriverFixture;
constexpr const char* stuck_bits_variable = "HAL_FAKE_CUDA_STUCK_BITS";
bool faults_injectable() { return driver_under_test().has_value(); }

TEST_SUITE("cuda memory test") {
#include "gpu_memory_test_cases.inc"
}

TEST_SUITE("cuda semantics") {
#include "gpu_semantics_cases.inc"

  TEST_CASE_FIXTURE(FakeDriverFixture, "devices are found by UUID and PCI bus id") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.uuid.starts_with("GPU-"));
    CHECK(runtime.device(info.uuid) == device(0));
    REQUIRE_FALSE(info.pci_bus_id.empty());
    CHECK(runtime.device(info.pci_bus_id) == device(0));
  }








  TEST_CASE_FIXTURE(FakeDriverFixture, "device-to-device copies work within and across devices") {
    const bool two_devices = runtime.find_backend("cuda")->device_count > 1;
    hal::Buffer source = device(0).allocate(1 << 20);
    hal::Buffer target = device(two_devices ? 1 : 0).allocate(1 << 20);
    const auto bytes = counting_bytes(1 << 20, 3);
    source.write(0, bytes.data(), bytes.size());
    target.copy_from(0, source, 0, bytes.size());
    CHECK(read_all(target) == bytes);
    hal::Stream stream = device(0).create_stream();
    stream.copy(source, 100, target, 0, 1000);
    stream.synchronize();
    std::vector<std::uint8_t> expected = bytes;
    std::copy(bytes.begin(), bytes.begin() + 1000, expected.begin() + 100);
    CHECK(read_all(source) == expected);
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "more device memory than the device has is out_of_memory, not a crash") {
    const std::uint64_t too_much = device(0).info().total_memory + (1ull << 20);
    check_error([&] { (void)device(0).allocate(too_much); }, StatusCode::out_of_memory,
                {"CUDA_ERROR_OUT_OF_MEMORY", std::to_string(too_much) + " bytes of device memory on cuda:0"},
                CUDA_ERROR_OUT_OF_MEMORY);
    hal::Buffer buffer = device(0).allocate(64);  // the failure leaves the device usable
    CHECK(buffer.valid());
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "the primary context is made current on every calling thread") {
    // The last device: not the one current by default where there are two
    // (the fake driver's set-up), and still a device on a one-GPU machine.
    hal::Device gpu = device(static_cast<int>(report().device_count) - 1);
    std::vector<std::uint8_t> read_back;
    std::thread worker([&] {
      // A fresh thread has no current context; the backend must set it.
      hal::Buffer buffer = gpu.allocate(256);
      buffer.fill(0, 256, 0x5a);
      read_back = read_all(buffer);
    });
    worker.join();
    CHECK(read_back == std::vector<std::uint8_t>(256, 0x5a));
  }

}

TEST_SUITE("fake driver") {
  TEST_CASE("discovery and device info retain no primary context and load no kernels") {
    const FakeDriver fake;
    const int loads_before = fake.module_loads();
    const FakeDriverFixture hal;
    for (int index = 0; index < 2; ++index) {
      CAPTURE(index);
      (void)hal.device(index).info();
      (void)hal.device(index).free_memory();
      CHECK(fake.primary_context_retains(index) == 0);
    }
    CHECK(fake.module_loads() == loads_before);
    CHECK(fake.current_device() == -1);
    CHECK(contains(capability(hal.device(0).info(), "kernels").note, "first use") ==
          static_cast<bool>(HAL_TEST_CUDA_KERNELS_BUILT));
  }

  TEST_CASE("the kernels are loaded on a device's first attention call, once") {
    const FakeDriver fake;
    const int loads_before = fake.module_loads();
    const FakeDriverFixture hal;
    CHECK(fake.module_loads() == loads_before);
    hal::AttentionParams params;
    params.seq_q = 16;
    const hal::AttentionDecision first = hal::explain_attention(hal.device(0), params);
    const hal::AttentionDecision again = hal::explain_attention(hal.device(0), params);
    const int expected_loads = HAL_TEST_CUDA_KERNELS_BUILT ? 1 : 0;
    CHECK(fake.module_loads() == loads_before + expected_loads);
    // The sm_80 cubin loads on the fake A100 and its softmax check runs in
    // the emulator, so flash is chosen, and the second decision agrees.
    CHECK(first.found == static_cast<bool>(HAL_TEST_CUDA_KERNELS_BUILT));
    CHECK(again.found == first.found);
    if (first.found) CHECK(first.chosen == hal::AttentionImplementation::flash);
    CHECK(fake.primary_context_retains(1) == 0);  // device 1 was never used
  }

  // hal.torch's call shape on the fake: a framework's non-blocking stream (made with device 0's primary context
  // current, as torch keeps it), a small attention's params and the framework's tensors q k v o grad_o grad_q grad_k
  // grad_v lse (zeroed), a second set of outputs o grad_q grad_k grad_v lse (9 to 13), and the fake's counts of
  // device-wide and host waits.
  struct FrameworkCallFixture : FakeDriverFixture {
    const FakeDriver fake;
    CUstream native = nullptr;
    const hal::AttentionParams params{.heads_q = 2, .seq_q = 16, .head_dim_qk = 64, .return_lse = true};
    std::vector<hal::Buffer> memory;
    int (*const device_waits)() = fake.function<int()>("hal_fake_cuda_context_synchronizes");
    int (*const host_waits)() = fake.function<int()>("hal_fake_cuda_host_waits");

    FrameworkCallFixture() {
      (void)fake.make_primary_current(0);
      REQUIRE(fake.function<decltype(cuStreamCreate)>("cuStreamCreate")(&native, CU_STREAM_NON_BLOCKING) ==
              CUDA_SUCCESS);
      const std::uint64_t tensor_bytes = 16 * 2 * 64 * sizeof(float), lse_bytes = 2 * 16 * sizeof(float);
      for (int index = 0; index < 8; ++index) memory.push_back(device(0).allocate(tensor_bytes));
      memory.push_back(device(0).allocate(lse_bytes));
      for (int index = 0; index < 4; ++index) memory.push_back(device(0).allocate(tensor_bytes));
      memory.push_back(device(0).allocate(lse_bytes));
      for (const hal::Buffer& buffer : memory) buffer.fill(0, buffer.size(), 0);
    }
    ~FrameworkCallFixture() {
      memory.clear();
      CHECK(fake.function<decltype(cuStreamDestroy)>("cuStreamDestroy_v2")(native) == CUDA_SUCCESS);
      fake.release_primary(0);
    }
    hal::TensorRef at(int index) const { return hal::TensorRef::borrowed(memory[index].device_address()); }
    // q k v o lse imported as a framework imports its tensors, each release counted.
    std::vector<hal::Buffer> import_forward_tensors(std::atomic<int>& releases) const {
      std::vector<hal::Buffer> imported;
      for (const int index : {0, 1, 2, 3, 8}) {
        hal::ExternalMemory external;
        external.address = memory[index].device_address();
        external.size = memory[index].size();
        external.release = [&releases] { ++releases; };
        imported.push_back(device(0).import_memory(external));
      }
      return imported;
    }
    // q k v and grad_o: values in [-1, 1) that differ along every dimension.
    void write_inputs() const {
      for (const int index : {0, 1, 2, 4}) {
        std::vector<float> values(memory[index].size() / sizeof(float));
        for (std::size_t i = 0; i < values.size(); ++i)
          values[i] = static_cast<float>((i * 7919 + static_cast<std::size_t>(index) * 104729) % 2048) / 1024.0f - 1.0f;
        memory[index].write(0, values.data(), memory[index].size());
      }
    }
    // Forward, then backward, as hal.torch runs them: outputs o, lse, grad_q, grad_k, grad_v at those indices.
    void forward_and_backward(const hal::Stream& stream, int o, int lse, int grad_q, int grad_k, int grad_v) const {
      hal::attention_forward(stream, params, at(0), at(1), at(2), at(o), at(lse));
      hal::attention_backward(stream, params, at(0), at(1), at(2), at(o), at(4), at(lse), at(grad_q), at(grad_k),
                              at(grad_v));
    }
  };

  // What hal.torch does per call on a GPU: torch's current stream wrapped, its tensors passed by address. A
  // device-wide wait there would stall every stream of the framework (and hold Python's lock) on every call.
  TEST_CASE_FIXTURE(FrameworkCallFixture,
                    "hal.torch's call shape, a wrapped stream and borrowed addresses, waits for no whole device") {
    if (!HAL_TEST_CUDA_KERNELS_BUILT) return;  // no flash kernels to run
    const int before = device_waits();
    {
      const hal::Stream stream = device(0).wrap_native_stream({native, false});
      for (int call = 0; call < 3; ++call) forward_and_backward(stream, 3, 8, 5, 6, 7);
      REQUIRE(fake.function<decltype(cuStreamSynchronize)>("cuStreamSynchronize")(native) == CUDA_SUCCESS);
    }
    CHECK(device_waits() == before);
  }

  // The same call with the framework's tensors imported as Buffers: their release follows the forward on the
  // stream; neither the device nor the host is waited for until the caller synchronizes.
  TEST_CASE_FIXTURE(FrameworkCallFixture, "imported tensors of an attention call are released after it, with no wait") {
    if (!HAL_TEST_CUDA_KERNELS_BUILT) return;  // no flash kernels to run
    const int device_waits_before = device_waits(), host_waits_before = host_waits();
    std::atomic<int> releases{0};
    {
      const hal::Stream stream = device(0).wrap_native_stream({native, false});
      std::vector<hal::Buffer> imported = import_forward_tensors(releases);
      hal::attention_forward(stream, params, {imported[0]}, {imported[1]}, {imported[2]}, {imported[3]}, {imported[4]});
      imported.clear();
      CHECK(device_waits() == device_waits_before);
      CHECK(host_waits() == host_waits_before);
      stream.synchronize();  // the caller's own wait; hal then tells the owners of what passed
      CHECK(releases.load() == 5);
    }
    CHECK(device_waits() == device_waits_before);
  }

  // torch.cuda.graph around hal.torch's forward and backward: the framework captures its own stream, hal works
  // on it wrapped. This is the first attention call of the runtime, so hal loads and checks its kernels in the
  // middle of the capture. Nothing may wait for the device or the host, touch the legacy stream (off limits while
  // a blocking stream captures) or allocate outside stream order; the graph then replays what an uncaptured call
  // computes, launch after launch.
  TEST_CASE_FIXTURE(FrameworkCallFixture,
                    "hal's attention forward and backward captured on a wrapped stream replay "
                    "as the uncaptured call computes") {
    if (!HAL_TEST_CUDA_KERNELS_BUILT) return;  // no flash kernels to run
    CUstream captured = native;
    SUBCASE("a non-blocking stream, as torch's") {}
    SUBCASE("a blocking stream") {
      REQUIRE(fake.function<decltype(cuStreamCreate)>("cuStreamCreate")(&captured, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
    }
    write_inputs();
    const GraphCalls graphs(fake);
    auto synchronize = fake.function<decltype(cuStreamSynchronize)>("cuStreamSynchronize");
    const int device_waits_before = device_waits(), host_waits_before = host_waits();
    {
      const hal::Stream stream = device(0).wrap_native_stream({captured, false});
      const auto [ended, graph] = graphs.capture(captured, [&] { forward_and_backward(stream, 3, 8, 5, 6, 7); });
      REQUIRE(ended == CUDA_SUCCESS);
      CHECK(device_waits() == device_waits_before);
      CHECK(host_waits() == host_waits_before);
      for (const int output : {3, 5, 6, 7, 8})  // recorded, not run
        CHECK(read_all(memory[output]) == std::vector<std::uint8_t>(memory[output].size(), 0));
      graphs.replay(graph, captured, 2);
      REQUIRE(synchronize(captured) == CUDA_SUCCESS);
      forward_and_backward(stream, 9, 13, 10, 11, 12);
      REQUIRE(synchronize(captured) == CUDA_SUCCESS);
    }
    CHECK(read_all(memory[3]) != std::vector<std::uint8_t>(memory[3].size(), 0));
    for (const auto& [replayed, reference] : {std::pair{3, 9}, {8, 13}, {5, 10}, {6, 11}, {7, 12}})
      CHECK(read_all(memory[replayed]) == read_all(memory[reference]));
    if (captured != native)
      CHECK(fake.function<decltype(cuStreamDestroy)>("cuStreamDestroy_v2")(captured) == CUDA_SUCCESS);
  }

  // The framework's tensors imported as Buffers, used and released inside a capture: a use captured into a graph
  // runs when the graph is launched, which hal cannot see, so it records no event (querying a captured event
  // would break the capture); the memory is the graph owner's to keep, and its owner is told at the release.
  TEST_CASE_FIXTURE(FrameworkCallFixture,
                    "imported tensors used and released inside a capture leave it valid and are released at once") {
    if (!HAL_TEST_CUDA_KERNELS_BUILT) return;  // no flash kernels to run
    write_inputs();
    const GraphCalls graphs(fake);
    std::atomic<int> releases{0};
    const hal::Stream stream = device(0).wrap_native_stream({native, false});
    const auto [ended, graph] = graphs.capture(native, [&] {
      std::vector<hal::Buffer> imported = import_forward_tensors(releases);
      hal::attention_forward(stream, params, {imported[0]}, {imported[1]}, {imported[2]}, {imported[3]}, {imported[4]});
      imported.clear();
      CHECK(releases.load() == 5);
    });
    REQUIRE(ended == CUDA_SUCCESS);
    CHECK(read_all(memory[3]) == std::vector<std::uint8_t>(memory[3].size(), 0));  // recorded, not run
    graphs.replay(graph, native, 1);
    hal::attention_forward(stream, params, at(0), at(1), at(2), at(9), at(13));
    stream.synchronize();
    CHECK(read_all(memory[3]) == read_all(memory[9]));
    CHECK(read_all(memory[8]) == read_all(memory[13]));
  }

  // Without stream-ordered pools hal's scratch would be a cuMemAlloc, which a capture refuses (and is broken by).
  struct NoMemoryPools {
    ScopedEnvironment no_pools{{"HAL_FAKE_CUDA_MEMORY_POOLS", "0"}};
  };
  struct FrameworkCallWithoutPools : NoMemoryPools, FrameworkCallFixture {};

  TEST_CASE_FIXTURE(FrameworkCallWithoutPools,
                    "without memory pools, attention scratch is refused on a capturing "
                    "stream, saying why, and the capture goes on") {
    if (!HAL_TEST_CUDA_KERNELS_BUILT) return;  // no flash kernels to run
    write_inputs();
    const GraphCalls graphs(fake);
    const hal::Stream stream = device(0).wrap_native_stream({native, false});
    hal::attention_forward(stream, params, at(0), at(1), at(2), at(3), at(8));
    REQUIRE(fake.function<decltype(cuStreamSynchronize)>("cuStreamSynchronize")(native) == CUDA_SUCCESS);
    const auto [ended, graph] = graphs.capture(native, [&] {
      check_error(
          [&] {
            hal::attention_backward(stream, params, at(0), at(1), at(2), at(3), at(4), at(8), at(5), at(6), at(7));
          },
          StatusCode::unsupported, {"capturing a graph", "no stream-ordered memory pools", "workspace"});
    });
    CHECK(ended == CUDA_SUCCESS);
    if (graph != nullptr) CHECK(graphs.destroy_graph(graph) == CUDA_SUCCESS);
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "a caller's current context is the same after hal worked on another device") {
    const FakeDriver fake;
    std::thread framework([&] {
      const CUcontext own = fake.make_primary_current(0);
      work_on(device(1));
      CHECK(fake.current_device() == 0);
      CUcontext current = nullptr;
      fake.function<decltype(cuCtxGetCurrent)>("cuCtxGetCurrent")(&current);
      CHECK(current == own);
      work_on(device(0));  // the thread's own device: nothing to switch
      CHECK(fake.current_device() == 0);
      fake.release_primary(0);
    });
    framework.join();
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "a thread without a context has none after hal calls") {
    const FakeDriver fake;
    std::thread worker([&] {
      REQUIRE(fake.current_device() == -1);
      work_on(device(1));
      work_on(device(0));
      CHECK(fake.current_device() == -1);
    });
    worker.join();
    CHECK(fake.current_device() == -1);
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "the fake needs a current context, and hal sets it on any thread for any object") {
    const FakeDriver fake;
    std::thread without_context([&] {
      CUdeviceptr address = 0;
      CHECK(fake.function<decltype(cuMemAlloc)>("cuMemAlloc_v2")(&address, 256) == CUDA_ERROR_INVALID_CONTEXT);
      CUstream stream = nullptr;
      CHECK(fake.function<decltype(cuStreamCreate)>("cuStreamCreate")(&stream, 0) == CUDA_ERROR_INVALID_CONTEXT);
    });
    without_context.join();
    // Objects made on this thread, used from fresh threads that have no context.
    hal::Stream stream = device(1).create_stream();
    hal::Event event = device(1).create_event();
    hal::Buffer buffer = device(1).allocate(256);
    std::thread fresh([&] {
      stream.record(event);  // first calls on this thread: none of them may rely on an earlier one's context
      event.synchronize();
      stream.synchronize();
      stream.fill(buffer, 0, 256, 0x7e, 1);
      stream.wait(event);
      stream.synchronize();
      CHECK(read_all(buffer) == std::vector<std::uint8_t>(256, 0x7e));
    });
    fresh.join();
    std::thread destroyer([&] {
      buffer.free();
      event = hal::Event();
      stream = hal::Stream();
    });
    destroyer.join();
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "devices are enumerated with their identity and memory") {
    const hal::BackendReport& cuda = report();
    REQUIRE_MESSAGE(cuda.state == BackendState::loaded, cuda.reason);
    CHECK(cuda.device_count == 2);
    const hal::DeviceInfo& first = device(0).info();
    const hal::DeviceInfo& second = device(1).info();
    CHECK(first.type == hal::DeviceType::gpu);
    CHECK(first.name == "NVIDIA A100-SXM4-80GB");
    CHECK(second.name == "NVIDIA A100-SXM4-40GB");
    CHECK(first.uuid == "GPU-facec0da-0001-4000-8000-000000000000");
    CHECK(second.uuid == "GPU-facec0da-0001-4000-8000-000000000001");
    // The driver's "00000000:E1:00.0" comes out normalized.
    CHECK(first.pci_bus_id == "0000:e1:00.0");
    CHECK(second.pci_bus_id == "0000:e2:00.0");
    if (!sysfs_has(first.pci_bus_id)) {
      CHECK(first.numa_node == -1);
      CHECK(first.vendor == "unknown");
    }
    CHECK(first.total_memory == (1ull << 30));
    CHECK(second.total_memory == (512ull << 20));
    CHECK(first.free_memory <= first.total_memory);
    CHECK(first.compute_units == 108);
    CHECK(first.clock_mhz == 1410);
    CHECK(first.memory_clock_mhz == 1593);
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "version axes and capabilities say what is declared and why") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.version("driver") == "13.0");
    CHECK(info.version("cuda_headers").has_value());
    CHECK_FALSE(info.version("cudnn").has_value());
    CHECK_FALSE(info.version("nccl").has_value());

    const hal::Capability& compute = capability(info, "cuda.compute_capability");
    CHECK(compute.value_string() == "8.0");
    CHECK(contains(compute.note, "reported"));
    CHECK(device(0).supports("memory.managed"));
    CHECK(device(0).supports("memory.host_pinned"));
    CHECK(device(0).supports("p2p"));
    CHECK(contains(capability(info, "p2p").note, "cuda:1"));
    // Flash (and math where cuBLAS is found) is declared while the kernels
    // may load, on first use; the fake's fail then (gpu_attention_test.cpp).
    CHECK(device(0).supports("attention.flash") == static_cast<bool>(HAL_TEST_CUDA_KERNELS_BUILT));
    CHECK_FALSE(device(0).supports("attention.fused"));
    for (const char* key : {"attention.fused", "attention.flash", "attention.math"}) {
      CAPTURE(key);
      CHECK_FALSE(capability(info, key).note.empty());
    }
    // A missing optional library is a declared state with every path tried.
    CHECK_FALSE(device(0).supports("library.cudnn"));
    CHECK(contains(capability(info, "library.cudnn").note, "/nonexistent/libcudnn.so.9"));
    CHECK(contains(capability(info, "library.cudnn").note, "HAL_CUDNN"));
    CHECK_FALSE(device(0).supports("library.nccl"));
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "a kernel image that does not load is refused at first use, with the reason") {
    const hal::Capability& kernels = capability(device(0).info(), "kernels");
    hal::AttentionParams params;
    params.seq_q = 16;
    // CUDA_ERROR_NO_BINARY_FOR_GPU, as a device of an architecture the image lacks returns.
    const ScopedEnvironment no_binary{{"HAL_FAKE_CUDA_FAIL", "cuModuleLoadData=209"}};
    const hal::AttentionDecision decision = hal::explain_attention(device(0), params);
    CHECK_FALSE(decision.found);
    const std::string reasons = hal::testing::candidate_reasons(decision);
#if HAL_TEST_CUDA_KERNELS_BUILT
    // Declared from what could load; the load fails as on a device without
    // a matching architecture, and supports() says so before any launch.
    CHECK(device(0).supports("kernels"));
    CHECK(contains(kernels.note, "first use"));
    CHECK(contains(reasons, "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU"));
    CHECK(contains(reasons, "sm_80 and sm_90 code and compute_90 PTX"));
#else
    CHECK_FALSE(device(0).supports("kernels"));
    CHECK(contains(kernels.note, "built without nvcc"));
    CHECK_FALSE(device(0).supports("attention.flash"));
    CHECK_FALSE(device(0).supports("attention.math"));
#endif
  }

  TEST_CASE_FIXTURE(FakeDriverFixture, "copies between devices and free memory accounting") {
    // Free memory is read once hal holds the device's context (0 before: asking must not create it).
    CHECK(device(1).free_memory() == 0);
    (void)device(1).allocate(1);
    const std::uint64_t free_before = device(1).free_memory();
    CHECK(free_before == device(1).info().total_memory);
    hal::Buffer source = device(0).allocate(1 << 20);
    hal::Buffer target = device(1).allocate(1 << 20);
    CHECK(device(1).free_memory() <= free_before - (1 << 20));
    const auto bytes = counting_bytes(1 << 20, 3);
    source.write(0, bytes.data(), bytes.size());
    target.copy_from(0, source, 0, bytes.size());
    CHECK(read_all(target) == bytes);
    target.free();
    CHECK(device(1).free_memory() == free_before);
  }

#include "gpu_fake_error_cases.inc"

  TEST_CASE("a driver without cuGetProcAddress is resolved by its exported names") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()},
                                  {"HAL_BACKENDS", "cuda"},
                                  {"HAL_FAKE_CUDA_NO_PROC_ADDRESS", "1"},
                                  {"HAL_FAKE_CUDA_FAIL", std::nullopt}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    REQUIRE(runtime.find_backend("cuda")->state == BackendState::loaded);
    hal::Buffer buffer = runtime.device("cuda:0").allocate(16);
    buffer.fill(0, 16, 0x01020304, 4);
    CHECK(read_all(buffer)[5] == 0x03);
  }

  TEST_CASE("the config's [backend.cuda] driver option locates the driver") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", std::nullopt}, {"HAL_BACKENDS", "cuda"}};
    hal::RuntimeOptions options = default_options();
    options.config->backend_options["cuda"]["driver"] = std::filesystem::path(fake_driver_path()).parent_path().string();  // a directory works too
    const hal::Runtime runtime = hal::Runtime::create(options);
    const hal::BackendReport* report = runtime.find_backend("cuda");
    REQUIRE(report != nullptr);
    CHECK_MESSAGE(report->state == BackendState::loaded, report->reason);
    CHECK(report->device_count == 2);
  }

  TEST_CASE("an explicit driver path that does not exist is the only path tried") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", "/nonexistent/dir/libcuda.so.1"}, {"HAL_BACKENDS", "cuda"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("cuda");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->reason, "[HAL_CUDA_DRIVER] /nonexistent/dir/libcuda.so.1: not found"));
    CHECK(contains(report->reason, "nothing else was searched"));
    CHECK_FALSE(contains(report->reason, "[system]"));
  }

  TEST_CASE("cuDNN and NCCL versions are their own axes when the libraries are found") {
    const std::string toolkit = "/usr/local/cuda/lib64";
    if (!std::filesystem::exists(toolkit + "/libcudnn.so.9") || !std::filesystem::exists(toolkit + "/libnccl.so.2")) {
      MESSAGE("skipped: the toolkit at " << toolkit << " has no cuDNN 9 or NCCL 2");
      return;
    }
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()},
                                  {"HAL_BACKENDS", "cuda"},
                                  {"HAL_CUDNN", toolkit + "/libcudnn.so.9"},
                                  {"HAL_NCCL", toolkit + "/libnccl.so.2"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::Device device = runtime.device("cuda:0");
    CHECK(device.info().version("cudnn") == std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." +
                                                std::to_string(CUDNN_PATCHLEVEL));
    CHECK(device.info().version("nccl") == std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
                                               std::to_string(NCCL_PATCH));
    CHECK(device.supports("library.cudnn"));
    CHECK(contains(device.info().find_capability("library.nccl")->note, "libnccl.so.2"));
  }

}

TEST_SUITE("driver without uuid v2") {
  TEST_CASE("a driver without cuDeviceGetUuid_v2 identifies devices with the original") {
    // With cuGetProcAddress the driver answers with the version it has; by exported name the _v2 is missing.
    for (const char* no_proc_address : {"0", "1"}) {
      CAPTURE(no_proc_address);
      ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()},
                                    {"HAL_BACKENDS", "host,cuda"},
                                    {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"},
                                    {"HAL_NCCL", "/nonexistent/libnccl.so.2"},
                                    {"HAL_FAKE_CUDA_NO_PROC_ADDRESS", no_proc_address}};
      const hal::Runtime runtime = hal::Runtime::create(default_options());
      const hal::BackendReport* cuda = runtime.find_backend("cuda");
      REQUIRE(cuda != nullptr);
      REQUIRE_MESSAGE(cuda->state == BackendState::loaded, cuda->reason);
      const hal::Device device = runtime.device("cuda:0");
      CHECK(device.info().uuid == "GPU-facec0da-0001-4000-8000-000000000000");
    }
  }
}

TEST_SUITE("ppu identity") {
  TEST_CASE_FIXTURE(FakeDriverFixture, "a CUDA-compatible device reporting compute capability 8.0 is not taken for an A100") {
    const hal::DeviceInfo& info = device(0).info();
    CHECK(info.name == "PPU-ZW810E");
    CHECK(info.total_memory == (96ull << 30));
    const hal::Capability& compute = capability(info, "cuda.compute_capability");
    CHECK(compute.value_string() == "8.0");
    CHECK(contains(compute.note, "CUDA-compatible device"));
    // Not an NVIDIA PCI vendor, so the value is flagged as a compatibility value.
    CHECK(capability(info, "cuda.compute_capability.meaning").value_string() == "compatibility");
    // The vendor comes from PCI, never from the reported architecture.
    CHECK(info.vendor != "NVIDIA");
    // Kernel-based features are not claimed from the compute capability:
    // discovery leaves them to first use, where the image must load and pass
    // its softmax check; here the load fails and flash is refused for it.
    CHECK(contains(capability(info, "kernels").note, "first use") == static_cast<bool>(HAL_TEST_CUDA_KERNELS_BUILT));
    const ScopedEnvironment no_binary{{"HAL_FAKE_CUDA_FAIL", "cuModuleLoadData=209"}};
    hal::AttentionParams params;
    params.seq_q = 16;
    const hal::AttentionDecision decision = hal::explain_attention(device(0), params);
    for (const hal::AttentionCandidate& candidate : decision.candidates)
      if (candidate.implementation == hal::AttentionImplementation::flash) CHECK_FALSE(candidate.eligible);
    // The shipped quirk for a PPU in CUDA-compatible mode matches it by name.
    const hal::EffectiveCapability fused = hal::effective_capability(device(0), "attention.fused");
    CHECK(fused.value == "false");
    CHECK(std::any_of(fused.layers.begin(), fused.layers.end(), [](const hal::CapabilityLayer& layer) {
      return layer.layer == "quirk" && contains(layer.source, "ppu-in-cuda-compat-mode-no-fused-mha");
    }));
  }
}

TEST_SUITE("no device") {
  TEST_CASE("a driver that finds no device makes the backend unavailable, saying so") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()}, {"HAL_BACKENDS", "host,cuda"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("cuda");
    REQUIRE(report != nullptr);
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->reason, "found no device"));
    CHECK(contains(report->reason, "CUDA_ERROR_NO_DEVICE"));
    CHECK(runtime.find_backend("host")->state == BackendState::loaded);
  }
}

TEST_SUITE("no driver") {
  TEST_CASE("without a driver the plugin loads and reports unavailable with every path tried") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", std::nullopt}, {"HAL_BACKENDS", "host,cuda"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::BackendReport* report = runtime.find_backend("cuda");
    REQUIRE(report != nullptr);
    if (report->state == BackendState::loaded) {
      MESSAGE("this machine has a CUDA driver (" << report->device_count << " devices): nothing to check here");
      return;
    }
    CHECK(report->state == BackendState::unavailable);
    CHECK(contains(report->path, "libhal_backend_cuda.so"));
    CHECK(contains(report->reason, "the CUDA driver (libcuda.so.1) was not found"));
    CHECK(contains(report->reason, "HAL_CUDA_DRIVER"));
    CHECK(contains(report->reason, "[python site-packages]"));
    CHECK(contains(report->reason, "[system] libcuda.so.1: "));
    if (std::filesystem::exists("/usr/local/cuda/lib64"))
      CHECK(contains(report->reason, "[CUDA toolkit] "));
    // Everything else carries on.
    CHECK(runtime.find_backend("host")->state == BackendState::loaded);
    CHECK(runtime.device("host:0").info().type == hal::DeviceType::cpu);
  }
}

#ifdef HAL_FAKE_CUDNN_PATH
TEST_SUITE("cudnn quirks") {
  // The cuda backend on the fake driver and the fake cuDNN, which reports
  // `version` and refuses every graph with `reject` (unset: the fake's
  // defaults, a current release that takes the graphs).
  struct FakeCudnnRuntime {
    explicit FakeCudnnRuntime(std::optional<std::string> version, std::optional<std::string> reject = std::nullopt)
        : environment{{"HAL_CUDA_DRIVER", fake_driver_path()},
                      {"HAL_BACKENDS", "cuda"},
                      {"HAL_CUDNN", HAL_FAKE_CUDNN_PATH},
                      {"HAL_NVRTC", HAL_FAKE_NVRTC_PATH},
                      {"HAL_NCCL", "/nonexistent/libnccl.so.2"},
                      {"HAL_FAKE_CUDNN_VERSION", std::move(version)},
                      {"HAL_FAKE_CUDNN_REJECT", std::move(reject)}} {}
    ScopedEnvironment environment;
    hal::Runtime runtime = hal::Runtime::create(default_options());
    hal::Device device = runtime.device("cuda:0");
  };

  // data/quirks.toml withholds fused attention on cuDNN releases with known
  // SDPA bugs, matched by the cuDNN version the plugin reports per device.
  hal::EffectiveCapability fused_on_cudnn(const char* version) {
    const FakeCudnnRuntime fake(version);
    CHECK(fake.device.info().name == "NVIDIA H100 80GB HBM3");
    CHECK(fake.device.info().version("cudnn") == std::optional<std::string>(version));
    // NVRTC, which cuDNN compiles its SDPA engines with, is found and reported beside it.
    CHECK(fake.device.info().version("nvrtc") == std::optional<std::string>("13.0"));
    return hal::effective_capability(fake.device, "attention.fused");
  }

  bool decided_by_quirk(const hal::EffectiveCapability& capability, std::string_view id) {
    return capability.decided_by == "quirk" &&
           std::any_of(capability.layers.begin(), capability.layers.end(), [&](const hal::CapabilityLayer& layer) {
             return layer.layer == "quirk" && contains(layer.source, id) && contains(layer.source, "quirks.toml");
           });
  }

  TEST_CASE("a Hopper GPU with cuDNN 9.11 or 9.12 has fused attention off, citing the quirk") {
    const hal::EffectiveCapability fused = fused_on_cudnn("9.11.0");
    CHECK(fused.value == "false");
    CHECK(decided_by_quirk(fused, "cudnn-9.11-9.12-hopper-sdpa-backward"));
    CHECK(contains(fused.layers.back().reason, "fixed in cuDNN 9.13"));
    CHECK(decided_by_quirk(fused_on_cudnn("9.12.0"), "cudnn-9.11-9.12-hopper-sdpa-backward"));
  }

  TEST_CASE("cuDNN 9.10.0 and 9.10.1 have fused attention off on any device") {
    const hal::EffectiveCapability fused = fused_on_cudnn("9.10.1");
    CHECK(fused.value == "false");
    CHECK(decided_by_quirk(fused, "cudnn-9.10.0-9.10.1-sdpa-forward"));
  }

  TEST_CASE("with cuDNN loaded the plugin declares fused, and the explain carries cuDNN's refusal of a shape") {
    const FakeCudnnRuntime fake("9.19.0", "no engine supports this SDPA graph (fake cuDNN)");
    const hal::Device& device = fake.device;
    const hal::EffectiveCapability fused = hal::effective_capability(device, "attention.fused");
    CHECK(fused.decided_by == "declared");
#if !HAL_TEST_CUDNN_FRONTEND_BUILT
    // A build without the cuDNN frontend headers says so instead.
    CHECK(fused.value == "false");
    CHECK(contains(fused.layers.front().reason, "built without the cuDNN frontend headers"));
    return;
#endif
    CHECK(fused.value == "true");
    const hal::AttentionParams params{.heads_q = 4, .seq_q = 128, .dtype = hal::DType::bf16};
    const hal::AttentionDecision decision = hal::explain_attention(device, params);
    const auto candidate = std::find_if(decision.candidates.begin(), decision.candidates.end(), [](const auto& c) {
      return c.implementation == hal::AttentionImplementation::fused;
    });
    REQUIRE(candidate != decision.candidates.end());
    CHECK_FALSE(candidate->eligible);
    const std::string reasons = hal::testing::candidate_reasons(decision, hal::AttentionImplementation::fused);
    CHECK_MESSAGE(contains(reasons, "no engine supports this SDPA graph (fake cuDNN)"), reasons);
    CHECK_MESSAGE(contains(reasons, "9.19.0"), reasons);
  }

  // cuDNN needs every tensor 16-byte aligned; a view at another offset
  // into a framework's buffer must go to flash, with the reason given.
  TEST_CASE("a call whose tensors are not 16-byte aligned is not given to cuDNN, and says why") {
#if HAL_TEST_CUDNN_FRONTEND_BUILT
    const FakeCudnnRuntime fake(std::nullopt, "the graph reached the fake cuDNN");
    const hal::Device& device = fake.device;
    const hal::AttentionParams params{.seq_q = 16, .dtype = hal::DType::f16};
    const std::uint64_t tensor_bytes = 16 * 64 * 2;
    const hal::Buffer buffer = device.allocate(4 * tensor_bytes + 64);
    const hal::Stream stream = device.create_stream();
    auto fused_reasons = [&](std::uint64_t shift) {
      auto at = [&](int index) { return hal::TensorRef{buffer, index * tensor_bytes + shift}; };
      const hal::AttentionDecision decision = hal::attention_forward(stream, params, at(0), at(1), at(2), at(3));
      stream.synchronize();
      CHECK(decision.chosen == hal::AttentionImplementation::flash);
      return hal::testing::candidate_reasons(decision, hal::AttentionImplementation::fused);
    };
    const std::string aligned = fused_reasons(32);
    CHECK_MESSAGE(contains(aligned, "the graph reached the fake cuDNN"), aligned);
    const std::string unaligned = fused_reasons(2);  // f16 elements: a legal offset, 2-byte aligned
    CHECK_MESSAGE(contains(unaligned, "tensor addresses are only 2-byte aligned"), unaligned);
    CHECK_FALSE(contains(unaligned, "the graph reached the fake cuDNN"));
#endif
  }

  TEST_CASE("fixed cuDNN releases match no cuDNN quirk") {
    for (const char* version : {"9.10.2", "9.13.0", "9.19.0"}) {
      CAPTURE(version);
      const hal::EffectiveCapability fused = fused_on_cudnn(version);
      CHECK(std::none_of(fused.layers.begin(), fused.layers.end(),
                         [](const hal::CapabilityLayer& layer) { return layer.layer == "quirk"; }));
    }
  }
}
#endif

// Telemetry through the fake NVML (tests/fakes/fake_nvml), whose devices are
// listed in the reverse of the fake driver's order: hal must match them by
// PCI bus id. The fake reads its values on every call, so a test changes one
// with the environment between two snapshots.
TEST_SUITE("nvml telemetry") {
  struct NvmlFixture {
    ScopedEnvironment nvml{{"HAL_NVML", HAL_FAKE_NVML_PATH},
                           {"HAL_FAKE_NVML_PCI_BUS_IDS", "00000000:E2:00.0,00000000:E1:00.0"},
                           {"HAL_FAKE_NVML_TEMPERATURE", "72,41"}};
    FakeDriverFixture driver;
    hal::TelemetrySnapshot read(int index = 0) const { return hal::telemetry(driver.device(index)); }
  };

  std::string reason_of(const hal::Reading<double>& reading) { return reading.reason_text(); }

  TEST_CASE("NVML devices are matched to CUDA devices by PCI bus id, not by index") {
    const NvmlFixture fixture;
    const hal::TelemetrySnapshot first = fixture.read(0);  // PCI e1: NVML's index 1
    const hal::TelemetrySnapshot second = fixture.read(1);
    CHECK(first.source == "nvml 550.54.15");
    CHECK(first.temperature.core_celsius.value() == 41.0);
    CHECK(second.temperature.core_celsius.value() == 72.0);
    CHECK(first.temperature.slowdown_limit_celsius.value() == 90.0);
    CHECK(first.temperature.shutdown_limit_celsius.value() == 95.0);
    CHECK(first.temperature.memory_celsius.value() == 50.0);  // a field value (NVML_FI_DEV_MEMORY_TEMP)
    CHECK(first.temperature.hotspot_celsius.reason() == hal::Unavailable::not_supported);
    CHECK(first.power.draw_watts.value() == doctest::Approx(250.0));
    CHECK(first.power.limit_watts.value() == doctest::Approx(400.0));
    CHECK(first.power.energy_joules.value() == doctest::Approx(123456.789));
    CHECK(first.clocks.compute_mhz.value() == 1410);
    CHECK(first.clocks.compute_max_mhz.value() == 1980);
    CHECK(first.clocks.memory_max_mhz.value() == 1593);
    CHECK(first.utilization.compute_percent.value() == 30.0);
    CHECK(first.utilization.memory_percent.value() == 20.0);
    CHECK(first.utilization.steal_percent.reason() == hal::Unavailable::not_supported);
    CHECK(first.clock_events.reasons.value() == static_cast<std::uint64_t>(hal::ClockEventReason::idle));
    CHECK(first.ecc.enabled.value());
    CHECK(first.ecc.uncorrected_volatile.value() == 0);
    CHECK(first.retired_pages.double_bit.value() == 0);
    CHECK_FALSE(first.retired_pages.pending.value());
    CHECK(first.retired_pages.pending_pages.reason() == hal::Unavailable::not_supported);
    CHECK_FALSE(first.row_remapping.failed.value());
    CHECK(first.pcie.generation.value() == 4);
    CHECK(first.pcie.width_max.value() == 16);
    CHECK(first.pcie.replay_count.value() == 0);
    // No NVLink on this fake GPU: not supported, in NVML's words.
    CHECK(first.interconnect.links_total.reason() == hal::Unavailable::not_supported);
    CHECK(contains(first.interconnect.links_total.detail(), "nvmlDeviceGetNvLinkState: Not Supported"));
    CHECK(hal::health_problems(first).empty());
  }

  TEST_CASE("a field the GPU lacks is not supported, one that needs root says so, an error is a read failure") {
    const NvmlFixture fixture;
    ScopedEnvironment values{{"HAL_FAKE_NVML_POWER_MW", "unsupported"},
                             {"HAL_FAKE_NVML_ENERGY_MJ", "denied"},
                             {"HAL_FAKE_NVML_PCIE_REPLAY", "error"}};
    const hal::TelemetrySnapshot snapshot = fixture.read(0);
    CHECK(snapshot.power.draw_watts.reason() == hal::Unavailable::not_supported);
    CHECK(contains(reason_of(snapshot.power.draw_watts), "nvmlDeviceGetPowerUsage: Not Supported (3)"));
    CHECK(snapshot.power.energy_joules.reason() == hal::Unavailable::needs_root);
    CHECK(snapshot.pcie.replay_count.reason() == hal::Unavailable::read_failed);
    CHECK(contains(snapshot.pcie.replay_count.detail(), "Unknown Error (999)"));
    CHECK(snapshot.power.limit_watts.value() == doctest::Approx(400.0));  // the others still read
  }

  TEST_CASE("clock events map to hal's set, keep NVML's mask, and hardware slowdown is a critical problem") {
    const NvmlFixture fixture;
    // hardware slowdown 0x8, hardware thermal 0x40, power brake 0x80, display clock setting 0x100
    ScopedEnvironment values{{"HAL_FAKE_NVML_CLOCK_EVENTS", "0x1c8"}};
    const hal::TelemetrySnapshot snapshot = fixture.read(0);
    CHECK(snapshot.clock_events.vendor_mask.value() == 0x1c8);
    CHECK(hal::describe_clock_event_reasons(snapshot.clock_events.reasons.value()) ==
          "hardware_slowdown,hardware_thermal,power_brake,other");
    const auto problems = hal::health_problems(snapshot);
    REQUIRE_FALSE(problems.empty());
    CHECK(problems.front().severity == hal::Severity::critical);
  }

  TEST_CASE("in MIG mode utilization is not readable, and says so") {
    const NvmlFixture fixture;
    ScopedEnvironment values{{"HAL_FAKE_NVML_MIG", "0,1"}};  // NVML's index 1 is cuda:0
    const hal::TelemetrySnapshot snapshot = fixture.read(0);
    CHECK(snapshot.utilization.compute_percent.reason() == hal::Unavailable::mig_mode);
    CHECK(fixture.read(1).utilization.compute_percent.value() == 30.0);
  }

  TEST_CASE("NVLink: links counted until NVML says there are no more, errors summed over the active ones") {
    const NvmlFixture fixture;
    ScopedEnvironment values{
        {"HAL_FAKE_NVML_NVLINKS", "18"}, {"HAL_FAKE_NVML_NVLINKS_ACTIVE", "16"}, {"HAL_FAKE_NVML_NVLINK_ERRORS", "2"}};
    const hal::TelemetrySnapshot snapshot = fixture.read(0);
    CHECK(snapshot.interconnect.links_total.value() == 18);
    CHECK(snapshot.interconnect.links_active.value() == 16);
    CHECK(snapshot.interconnect.error_count.value() == 16 * 4 * 2);  // replay, recovery, CRC flit, CRC data
  }

  // NVML lists e2 first: its device 0 is cuda:1, its device 1 is cuda:0.
  TEST_CASE("device links: NVLink where NVML names the other device at an active link's end, else PCIe") {
    const NvmlFixture fixture;
    const hal::Device first = fixture.driver.device(0), second = fixture.driver.device(1);
    {
      ScopedEnvironment none{{"HAL_FAKE_NVML_NVLINKS", std::nullopt}, {"HAL_FAKE_NVML_NVLINK_PEER", std::nullopt}};
      const hal::DeviceLink link = hal::device_link(first, second);
      CHECK(link.kind == hal::DeviceLinkKind::pcie);
      CHECK(link.nvlinks == 0);
      REQUIRE(link.pcie_gbps.has_value());
      CHECK(*link.pcie_gbps == doctest::Approx(16.0 * 128 / 130 / 8 * 16));  // gen4 x16: 31.5 GB/s
      CHECK(link.pcie == "PCIe gen4 x16");
    }
    {
      // cuda:1's link is the narrower one: the pair's ceiling is its gen3 x8.
      ScopedEnvironment links{{"HAL_FAKE_NVML_NVLINKS", "4"}, {"HAL_FAKE_NVML_NVLINKS_ACTIVE", "4,3"},
                              {"HAL_FAKE_NVML_NVLINK_PEER", "1,0"}, {"HAL_FAKE_NVML_PCIE_GENERATION_MAX", "3,4"},
                              {"HAL_FAKE_NVML_PCIE_WIDTH_MAX", "8,16"}};
      const hal::DeviceLink there = hal::device_link(first, second), back = hal::device_link(second, first);
      CHECK(there.kind == hal::DeviceLinkKind::nvlink);
      CHECK(there.nvlinks == 3);
      CHECK(back.nvlinks == 4);
      CHECK(contains(there.detail, "3 active NVLinks from cuda:0 reach cuda:1"));
      CHECK(there.pcie == "PCIe gen3 x8");
      CHECK(*there.pcie_gbps == doctest::Approx(8.0 * 128 / 130 / 8 * 8));
    }
    {
      ScopedEnvironment unnamed{{"HAL_FAKE_NVML_NVLINKS", "2"}, {"HAL_FAKE_NVML_NVLINK_PEER", std::nullopt}};
      const hal::DeviceLink link = hal::device_link(first, second);
      CHECK(link.kind == hal::DeviceLinkKind::unknown);
      CHECK(contains(link.detail, "2 active NVLinks of cuda:0 reach devices its management library does not name"));
    }
    {
      ScopedEnvironment unreported{{"HAL_FAKE_NVML_PCIE_GENERATION_MAX", "unsupported"},
                                   {"HAL_FAKE_NVML_PCIE_GENERATION", "unsupported"}};
      const hal::DeviceLink link = hal::device_link(first, second);
      CHECK_FALSE(link.pcie_gbps.has_value());
      CHECK(contains(link.pcie, "PCIe link is not reported"));
    }
    check_error([&] { (void)hal::device_link(first, first); }, hal::StatusCode::invalid_argument, {"cuda:0 twice"});
    check_error([&] { (void)hal::device_link(first, fixture.driver.runtime.device("host:0")); },
                hal::StatusCode::invalid_argument, {"devices of two backends"});
  }

  TEST_CASE("device links are unknown, saying why, where NVML cannot be opened") {
    ScopedEnvironment missing{{"HAL_NVML", "/nonexistent/libnvidia-ml.so.1"}};
    const FakeDriverFixture driver;
    const hal::DeviceLink link = hal::device_link(driver.device(0), driver.device(1));
    CHECK(link.kind == hal::DeviceLinkKind::unknown);
    CHECK(contains(link.detail, "the links of cuda:0 are unknown"));
    CHECK(contains(link.detail, "/nonexistent/libnvidia-ml.so.1"));
  }

  TEST_CASE("health monitor: an XID from NVML's event API, then rising uncorrected ECC errors and a pending remap") {
    const NvmlFixture fixture;
    ScopedEnvironment quiet{{"HAL_FAKE_NVML_XID", std::nullopt}};
    hal::HealthMonitor monitor(fixture.driver.device(0), std::chrono::milliseconds(10));
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(30)).has_value());
    {
      ScopedEnvironment xid{{"HAL_FAKE_NVML_XID", "0:13,1:79"}};  // NVML's device 1 is cuda:0
      hal::testing::check_health_event(
          monitor.wait(std::chrono::seconds(5)),
          {.kind = hal::HealthEventKind::xid, .code = 79, .device_id = "cuda:0", .description = "XID 79"});
      CHECK_FALSE(monitor.wait(std::chrono::milliseconds(50)).has_value());  // device 1's XID 13 is not ours
    }
    ScopedEnvironment worse{{"HAL_FAKE_NVML_ECC_UNCORRECTED_VOLATILE", "0,3"}, {"HAL_FAKE_NVML_REMAP_PENDING", "0,1"}};
    std::vector<hal::HealthEventKind> kinds;
    for (int attempt = 0; attempt < 2; ++attempt)
      if (auto event = monitor.wait(std::chrono::seconds(5))) {
        kinds.push_back(event->kind);
        if (event->kind == hal::HealthEventKind::uncorrected_ecc) CHECK(event->code == 3);
      }
    CHECK(kinds == std::vector{hal::HealthEventKind::uncorrected_ecc, hal::HealthEventKind::memory_retirement});
  }

#ifdef HALINFO_PATH
  TEST_CASE("halinfo health and watch show the GPU's NVML readings, worst first") {
    const NvmlFixture fixture;  // its environment is the child's
    ScopedEnvironment values{{"HAL_FAKE_NVML_RETIRED_DOUBLE_BIT", "0,2"}, {"HAL_FAKE_NVML_ECC_UNCORRECTED_VOLATILE", "0,2"},
                             {"HAL_FAKE_NVML_CLOCK_EVENTS", "0x1,0x40"}};
    const hal::testing::CommandResult health =
        hal::testing::run_command(std::string(HALINFO_PATH) + " health --device cuda:0 2>&1");
    CHECK(health.exit_code == 1);  // a critical problem
    CHECK(contains(health.output, "cuda:0  2 uncorrected ECC errors since the driver loaded"));
    CHECK(contains(health.output, "from nvml 550.54.15"));
    CHECK(contains(health.output, "temperature.core_celsius"));
    CHECK(contains(health.output, "41.0 C"));
    const hal::testing::CommandResult watch =
        hal::testing::run_command(std::string(HALINFO_PATH) + " watch --device cuda:1 --count 1 --csv 2>&1");
    CHECK(watch.exit_code == 0);
    CHECK(contains(watch.output, ",cuda:1,72.0,"));
  }
#endif

  TEST_CASE("without NVML every field says the library is missing, naming where it looked") {
    ScopedEnvironment missing{{"HAL_NVML", "/nonexistent/libnvidia-ml.so.1"}};
    const FakeDriverFixture fixture;
    const hal::TelemetrySnapshot snapshot = hal::telemetry(fixture.device(0));
    CHECK(snapshot.temperature.core_celsius.reason() == hal::Unavailable::library_missing);
    CHECK(snapshot.ecc.uncorrected_aggregate.reason() == hal::Unavailable::library_missing);
    CHECK(contains(snapshot.temperature.core_celsius.detail(), "/nonexistent/libnvidia-ml.so.1"));
    CHECK(contains(snapshot.source, "NVML (libnvidia-ml.so.1) was not found"));
    hal::HealthMonitor monitor(fixture.device(0));  // no event stream: snapshots only, and no crash
    CHECK_FALSE(monitor.wait(std::chrono::milliseconds(20)).has_value());
  }

  TEST_CASE("NVML that fails to initialize, and a GPU NVML does not list, are read failures with the reason") {
    {
      ScopedEnvironment failing{{"HAL_NVML", HAL_FAKE_NVML_PATH}, {"HAL_FAKE_NVML_INIT", "fail"}};
      const FakeDriverFixture fixture;
      const hal::TelemetrySnapshot snapshot = hal::telemetry(fixture.device(0));
      CHECK(snapshot.power.draw_watts.reason() == hal::Unavailable::read_failed);
      CHECK(contains(snapshot.power.draw_watts.detail(), "nvmlInit failed: Driver Not Loaded (9)"));
    }
    ScopedEnvironment one{{"HAL_NVML", HAL_FAKE_NVML_PATH}, {"HAL_FAKE_NVML_PCI_BUS_IDS", "00000000:E2:00.0"}};
    const FakeDriverFixture fixture;
    const hal::TelemetrySnapshot snapshot = hal::telemetry(fixture.device(0));
    CHECK(snapshot.clocks.compute_mhz.reason() == hal::Unavailable::read_failed);
    CHECK(contains(snapshot.clocks.compute_mhz.detail(), "lists no device at PCI 0000:e1:00.0"));
    CHECK(contains(snapshot.clocks.compute_mhz.detail(), "it lists 0000:e2:00.0"));
    CHECK(hal::telemetry(fixture.device(1)).clocks.compute_mhz.value() == 1410);
  }
}

#ifdef HALCONFORM_PATH
// halconform as operators run it on a host with two GPUs (the fake driver's)
// and NCCL (the fake, which refuses two ranks on one GPU as NCCL does).
TEST_SUITE("halconform on cuda") {
  struct HalconformRun {
    hal::testing::CommandResult run;
    std::string json;  // the report's conformance.json
  };
  // halconform with `arguments` on the fakes, its report read and removed.
  HalconformRun run_halconform(const std::string& arguments) {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()}, {"HAL_BACKENDS", "cuda"},
                                  {"HAL_NCCL", HAL_FAKE_NCCL_PATH}, {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"}};
    const std::string reports = (std::filesystem::temp_directory_path() /
                                 ("hal-cuda-halconform-" + std::to_string(::getpid()))).string();
    HalconformRun result{hal::testing::run_command(std::string(HALCONFORM_PATH) + " " + arguments + " --report-dir " +
                                                   reports + " 2>&1"),
                         {}};
    std::ifstream report(reports + "/conformance.json");
    result.json.assign(std::istreambuf_iterator<char>(report), std::istreambuf_iterator<char>());
    std::filesystem::remove_all(reports);
    return result;
  }

  TEST_CASE("collectives run one rank per GPU, once, from the first GPU") {
    const hal::testing::CommandResult run = run_halconform("--filter numerics.collectives.all_reduce").run;
    CAPTURE(run.output);
    CHECK(run.exit_code == 0);
    CHECK(contains(run.output, "PASS     numerics.collectives.all_reduce on cuda:0"));
    CHECK(contains(run.output, "SKIPPED  numerics.collectives.all_reduce on cuda:1"));
    CHECK(contains(run.output, "the cuda collectives run once, one rank on each of its 2 devices, from cuda:0"));
  }

  // The memory test kernel over 90% of a small fake GPU's free memory, in
  // the emulator; stuck bits in the fake's memory are caught where they are.
  TEST_CASE("the memory test runs on the GPU and catches stuck bits at exactly their offsets") {
    ScopedEnvironment small{{"HAL_FAKE_CUDA_MEMORY", "4M"}, {"HAL_FAKE_CUDA_STUCK_BITS", std::nullopt}};
    const auto clean = run_halconform("--tier stress --filter stress.memory.memtest --device cuda:0");
    CAPTURE(clean.run.output);
    CHECK(clean.run.exit_code == 0);
    CHECK(contains(clean.run.output, "PASS     stress.memory.memtest on cuda:0"));

    ScopedEnvironment stuck{{"HAL_FAKE_CUDA_STUCK_BITS", "0x12345:3=1,0x80006:6=0"}};
    const auto [run, json] = run_halconform("--tier stress --filter stress.memory.memtest --device cuda:0");
    CAPTURE(run.output);
    CHECK(run.exit_code == 1);
    const nlohmann::json report = nlohmann::json::parse(json);
    REQUIRE(report["results"].size() == 1);
    const nlohmann::json& result = report["results"][0];
    CHECK(result["outcome"] == "FAIL");
    std::map<std::string, double> measured;
    for (const auto& m : result["evidence"]["measurements"]) measured[m["name"]] = m["value"];
    CHECK(measured["tested_bytes"] >= 0.9 * measured["free_bytes"]);
    const std::string message = result["evidence"]["message"];
    CAPTURE(message);
    CHECK(contains(message, "run by the device (the cuda backend's memory test)"));
    CHECK(hal::testing::memtest_failing_offsets(message) ==
          hal::testing::offsets_in_every_chunk(static_cast<std::uint64_t>(measured["chunk_bytes"]),
                                               static_cast<std::uint64_t>(measured["tested_bytes"]), {0x12345, 0x80006}));
    CHECK(contains(message, "bits 0x8 read 1 where 0 was written"));
    CHECK(contains(message, "bits 0x40 read 0 where 1 was written; failed walking ones bit 6"));
  }

  // The fake NCCL's transport (files) is far slower than any PCIe link: two
  // GPUs that NVML says are joined by NVLink measure no better than PCIe.
  TEST_CASE("the peer-to-peer matrix fails a pair joined by NVLink that measures no better than PCIe") {
    ScopedEnvironment nvml{{"HAL_NVML", HAL_FAKE_NVML_PATH},
                           {"HAL_FAKE_NVML_PCI_BUS_IDS", "00000000:E1:00.0,00000000:E2:00.0"},
                           {"HAL_FAKE_NVML_PCIE_GENERATION_MAX", "5"}};
    auto p2p_message = [](const std::string& json) {
      const nlohmann::json report = nlohmann::json::parse(json);
      for (const auto& result : report["results"])
        if (result["case"] == "performance.collectives.p2p_matrix" && result["device"] == "cuda:0")
          return result["evidence"]["message"].get<std::string>();
      return std::string();
    };
    {
      const auto [run, json] = run_halconform("--tier performance --filter performance.collectives.p2p_matrix");
      const std::string message = p2p_message(json);
      CAPTURE(message);
      CHECK(contains(message, "cuda:0 -> cuda:1: PCIe, PCIe gen5 x16 (63.0 GB/s)"));
      CHECK_FALSE(contains(message, "no faster than PCIe"));
    }
    ScopedEnvironment nvlink{{"HAL_FAKE_NVML_NVLINKS", "4"}, {"HAL_FAKE_NVML_NVLINK_PEER", "1,0"}};
    const auto [run, json] = run_halconform("--tier performance --filter performance.collectives.p2p_matrix");
    CAPTURE(run.output);
    CHECK(run.exit_code == 1);
    CHECK(contains(run.output, "FAIL     performance.collectives.p2p_matrix on cuda:0"));
    const std::string message = p2p_message(json);
    CAPTURE(message);
    CHECK(contains(message, "cuda:0 -> cuda:1: NVLink x4, PCIe gen5 x16 (63.0 GB/s)"));
    const auto failures = message.find("joined by NVLink, no faster than PCIe:");
    REQUIRE(failures != std::string::npos);
    for (const char* pair : {"cuda:0 -> cuda:1: ", "cuda:1 -> cuda:0: "}) {
      const auto at = message.find(pair, failures);
      REQUIRE(at != std::string::npos);
      const std::string line = message.substr(at, message.find('\n', at) - at);
      CHECK(contains(line, " GB/s over 4 NVLinks, no better than PCIe gen5 x16 (63.0 GB/s)"));
    }
    CHECK(contains(json, "\"p2p cuda:0 -> cuda:1 pcie ceiling\""));
  }

  TEST_CASE("the peer-to-peer matrix measures both directions between the two GPUs, every transfer checked") {
    const auto [run, json] = run_halconform("--tier performance --filter performance.collectives.p2p_matrix");
    CAPTURE(run.output);
    // The fake's transport is files: its rates say nothing, the transfers' contents do.
    CHECK_FALSE(contains(run.output, "received different bytes"));
    CHECK(contains(json, "\"p2p cuda:0 -> cuda:1\""));
    CHECK(contains(json, "\"p2p cuda:1 -> cuda:0\""));
    CHECK(contains(run.output, "SKIPPED  performance.collectives.p2p_matrix on cuda:1"));
  }
}
#endif

// The fake driver's execution model, each behaviour on its own, as the CUDA
// driver API documents it: the legacy default stream (NULL) is asynchronous
// to the host and ordered with blocking streams only; synchronous memsets and
// device copies return before their bytes land; copies to or from pageable
// host memory return only when done, Async or not.
TEST_SUITE("faithful fake driver") {
  struct DriverCalls {
    FakeDriver driver;
    decltype(cuInit)* init = driver.function<decltype(cuInit)>("cuInit");
    decltype(cuMemAlloc_v2)* allocate = driver.function<decltype(cuMemAlloc_v2)>("cuMemAlloc_v2");
    decltype(cuMemFree_v2)* free = driver.function<decltype(cuMemFree_v2)>("cuMemFree_v2");
    decltype(cuMemHostAlloc)* allocate_pinned = driver.function<decltype(cuMemHostAlloc)>("cuMemHostAlloc");
    decltype(cuMemFreeHost)* free_pinned = driver.function<decltype(cuMemFreeHost)>("cuMemFreeHost");
    decltype(cuMemsetD8_v2)* memset = driver.function<decltype(cuMemsetD8_v2)>("cuMemsetD8_v2");
    decltype(cuMemcpyDtoH_v2)* to_host = driver.function<decltype(cuMemcpyDtoH_v2)>("cuMemcpyDtoH_v2");
    decltype(cuMemcpyDtoHAsync_v2)* to_host_async =
        driver.function<decltype(cuMemcpyDtoHAsync_v2)>("cuMemcpyDtoHAsync_v2");
    decltype(cuStreamCreate)* create_stream = driver.function<decltype(cuStreamCreate)>("cuStreamCreate");
    decltype(cuStreamDestroy_v2)* destroy_stream = driver.function<decltype(cuStreamDestroy_v2)>("cuStreamDestroy_v2");
    decltype(cuStreamSynchronize)* synchronize = driver.function<decltype(cuStreamSynchronize)>("cuStreamSynchronize");
    decltype(cuLaunchHostFunc)* host_function = driver.function<decltype(cuLaunchHostFunc)>("cuLaunchHostFunc");
    CUcontext context = nullptr;
    DriverCalls() {
      REQUIRE(init(0) == CUDA_SUCCESS);
      context = driver.make_primary_current(0);
    }
    ~DriverCalls() { driver.release_primary(0); }
    CUstream stream(unsigned flags) {
      CUstream created = nullptr;
      REQUIRE(create_stream(&created, flags) == CUDA_SUCCESS);
      return created;
    }
  };

  TEST_CASE("the legacy default stream runs late, is waited for by DtoH, and is ordered with blocking streams only") {
    DriverCalls calls;
    ScopedEnvironment late{{"HAL_FAKE_CUDA_NULL_STREAM_DELAY_MS", "100"}};
    CUdeviceptr device = 0;
    REQUIRE(calls.allocate(&device, 64) == CUDA_SUCCESS);
    void* pinned = nullptr;
    REQUIRE(calls.allocate_pinned(&pinned, 64, 0) == CUDA_SUCCESS);
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(device));  // host memory here
    REQUIRE(calls.memset(device, 0x5A, 64) == CUDA_SUCCESS);
    CHECK(bytes[0] != 0x5A);  // returned before the bytes landed
    std::uint8_t host[64] = {};
    REQUIRE(calls.to_host(host, device, 64) == CUDA_SUCCESS);
    CHECK(host[63] == 0x5A);  // the synchronous DtoH waits for the legacy stream's work

    const CUstream non_blocking = calls.stream(CU_STREAM_NON_BLOCKING);
    REQUIRE(calls.memset(device, 0x11, 64) == CUDA_SUCCESS);
    REQUIRE(calls.to_host_async(pinned, device, 64, non_blocking) == CUDA_SUCCESS);
    REQUIRE(calls.synchronize(non_blocking) == CUDA_SUCCESS);
    CHECK(static_cast<std::uint8_t*>(pinned)[0] == 0x5A);  // not ordered after the late memset

    const CUstream blocking = calls.stream(CU_STREAM_DEFAULT);
    REQUIRE(calls.memset(device, 0x22, 64) == CUDA_SUCCESS);
    REQUIRE(calls.to_host_async(pinned, device, 64, blocking) == CUDA_SUCCESS);
    REQUIRE(calls.synchronize(blocking) == CUDA_SUCCESS);
    CHECK(static_cast<std::uint8_t*>(pinned)[0] == 0x22);  // ordered after it

    REQUIRE(calls.synchronize(CU_STREAM_LEGACY) == CUDA_SUCCESS);
    CHECK(calls.destroy_stream(non_blocking) == CUDA_SUCCESS);
    CHECK(calls.destroy_stream(blocking) == CUDA_SUCCESS);
    CHECK(calls.free_pinned(pinned) == CUDA_SUCCESS);
    CHECK(calls.free(device) == CUDA_SUCCESS);
  }

  TEST_CASE("host functions: CUDA calls from one fail; after an error cuLaunchHostFunc's is not called, "
            "cuStreamAddCallback's is, with the error") {
    DriverCalls calls;
    const CUstream stream = calls.stream(CU_STREAM_NON_BLOCKING);
    static CUresult from_callback;
    static std::atomic<int> launched, added;
    static CUresult added_status;
    from_callback = CUDA_SUCCESS;
    launched = added = 0;
    struct Probe {
      decltype(cuMemAlloc_v2)* allocate;
    } probe{calls.allocate};
    REQUIRE(calls.host_function(stream, [](void* data) {
      CUdeviceptr ignored = 0;
      from_callback = static_cast<Probe*>(data)->allocate(&ignored, 64);
    }, &probe) == CUDA_SUCCESS);
    REQUIRE(calls.synchronize(stream) == CUDA_SUCCESS);
    CHECK(from_callback == CUDA_ERROR_NOT_PERMITTED);

    auto add_callback = calls.driver.function<decltype(cuStreamAddCallback)>("cuStreamAddCallback");
    auto memset_async = calls.driver.function<decltype(cuMemsetD8Async)>("cuMemsetD8Async");
    CUdeviceptr device = 0;
    REQUIRE(calls.allocate(&device, 64) == CUDA_SUCCESS);
    hal::testing::StreamGate gate;
    REQUIRE(calls.host_function(stream, hal::testing::StreamGate::wait_on_latch, gate.latch_for_vendor()) ==
            CUDA_SUCCESS);
    {
      ScopedEnvironment fault{{"HAL_FAKE_CUDA_FAIL", "cuMemsetD8Async=700"}};  // an illegal address, when it runs
      REQUIRE(memset_async(device, 1, 64, stream) == CUDA_SUCCESS);
    }
    REQUIRE(calls.host_function(stream, [](void*) { ++launched; }, nullptr) == CUDA_SUCCESS);
    REQUIRE(add_callback(stream, [](CUstream, CUresult status, void*) {
      added_status = status;
      ++added;
    }, nullptr, 0) == CUDA_SUCCESS);
    gate.open();
    CHECK(calls.synchronize(stream) == CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(launched == 0);
    CHECK(added == 1);
    CHECK(added_status == CUDA_ERROR_ILLEGAL_ADDRESS);
  }

  // A fill that faults, then a hal host callback behind it: the callback runs, with the failure.
  void poison_and_call_back() {
    const FakeDriverFixture fixture;
    const hal::Device gpu = fixture.device(0);
    const hal::Stream stream = gpu.create_stream();
    hal::Buffer buffer = gpu.allocate(64);
    hal::testing::StreamGate gate;
    gate.block(stream);
    {
      ScopedEnvironment fault{{"HAL_FAKE_CUDA_FAIL", "cuMemsetD8Async=700"}};
      stream.fill(buffer, 0, 64, 0x11, 1);
    }
    std::atomic<int> calls{0};
    std::atomic<bool> ok{true};
    stream.enqueue_host_callback([&](const hal::Status& status) {
      ok = status.is_ok();
      ++calls;
    });
    gate.open();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (calls == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(calls == 1);  // a waiter on it would otherwise hang
    CHECK_FALSE(ok.load());
    CHECK_THROWS(stream.synchronize());
  }

  TEST_CASE("a hal host callback after a failed operation runs, with the failure as its status") {
    const FakeDriver fake;
    poison_and_call_back();
    // The fault poisoned device 0's context. hal lets go of it once the
    // runtime and what its callbacks captured are gone (partly off the
    // driver's callback thread, so a little later): then the next test gets a
    // fresh context, not this one's sticky error.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (fake.primary_context_retains(0) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(fake.primary_context_retains(0) == 0);
  }

  TEST_CASE("what a hal host callback captured is released off the driver's callback thread") {
    const FakeDriverFixture fixture;
    const hal::Device gpu = fixture.device(0);
    const hal::Stream stream = gpu.create_stream();  // the context exists from here: free memory is readable
    const std::uint64_t free_before = gpu.free_memory();
    {
      hal::Buffer captured = gpu.allocate(64ull << 20);
      CHECK(gpu.free_memory() < free_before);
      stream.enqueue_host_callback([buffer = std::move(captured)](const hal::Status&) { (void)buffer; });
      stream.synchronize();
    }
    // cuMemFree on the callback thread fails (CUDA calls are forbidden there), so the memory would stay in use.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (gpu.free_memory() < free_before && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(gpu.free_memory() == free_before);
  }

  TEST_CASE("a query from a thread in global capture mode invalidates a global-mode capture; a relaxed one does not") {
    DriverCalls calls;
    auto begin = calls.driver.function<decltype(cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
    auto end = calls.driver.function<decltype(cuStreamEndCapture)>("cuStreamEndCapture");
    auto exchange = calls.driver.function<decltype(cuThreadExchangeStreamCaptureMode)>("cuThreadExchangeStreamCaptureMode");
    auto query = calls.driver.function<decltype(cuStreamQuery)>("cuStreamQuery");
    const CUstream captured = calls.stream(CU_STREAM_NON_BLOCKING), other = calls.stream(CU_STREAM_NON_BLOCKING);
    auto query_from_another_thread = [&](bool relaxed) {
      std::thread([&] {
        calls.driver.function<decltype(cuCtxSetCurrent)>("cuCtxSetCurrent")(calls.context);
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        if (relaxed) exchange(&mode);
        CHECK(query(other) == (relaxed ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED));
      }).join();
    };
    auto destroy_graph = calls.driver.function<decltype(cuGraphDestroy)>("cuGraphDestroy");
    CUgraph graph = nullptr;
    REQUIRE(begin(captured, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    query_from_another_thread(true);
    CHECK(end(captured, &graph) == CUDA_SUCCESS);
    CHECK(destroy_graph(graph) == CUDA_SUCCESS);
    REQUIRE(begin(captured, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    query_from_another_thread(false);
    CHECK(end(captured, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(calls.destroy_stream(captured) == CUDA_SUCCESS);
    CHECK(calls.destroy_stream(other) == CUDA_SUCCESS);
  }

  TEST_CASE("stream capture records work instead of running it; each launch of the graph runs it") {
    DriverCalls calls;
    const GraphCalls graphs(calls.driver);
    auto memset_async = calls.driver.function<decltype(cuMemsetD8Async)>("cuMemsetD8Async");
    const CUstream stream = calls.stream(CU_STREAM_NON_BLOCKING);
    CUdeviceptr device = 0;
    REQUIRE(calls.allocate(&device, 64) == CUDA_SUCCESS);
    void* pinned = nullptr;
    REQUIRE(calls.allocate_pinned(&pinned, 64, 0) == CUDA_SUCCESS);
    static std::atomic<int> host_calls;
    host_calls = 0;
    REQUIRE(graphs.begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    REQUIRE(memset_async(device, 0x5A, 64, stream) == CUDA_SUCCESS);
    REQUIRE(calls.host_function(
                stream, [](void*) { ++host_calls; }, nullptr) == CUDA_SUCCESS);
    REQUIRE(calls.to_host_async(pinned, device, 64, stream) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    REQUIRE(graphs.end(stream, &graph) == CUDA_SUCCESS);
    REQUIRE(graph != nullptr);
    REQUIRE(calls.synchronize(stream) == CUDA_SUCCESS);
    CHECK(host_calls == 0);
    CHECK(static_cast<std::uint8_t*>(pinned)[0] != 0x5A);
    graphs.replay(graph, stream, 2);
    REQUIRE(calls.synchronize(stream) == CUDA_SUCCESS);
    CHECK(host_calls == 2);
    CHECK(static_cast<std::uint8_t*>(pinned)[63] == 0x5A);
    CHECK(calls.destroy_stream(stream) == CUDA_SUCCESS);
    CHECK(calls.free_pinned(pinned) == CUDA_SUCCESS);
    CHECK(calls.free(device) == CUDA_SUCCESS);
  }

  // Each call breaks the rules of stream capture: it fails with the driver's error, the capture is invalidated
  // and ends without a graph.
  TEST_CASE("what a capture cannot hold fails and invalidates it") {
    DriverCalls calls;
    const GraphCalls graphs(calls.driver);
    const FakeDriver& driver = calls.driver;
    auto add_callback = driver.function<decltype(cuStreamAddCallback)>("cuStreamAddCallback");
    auto memset_async = driver.function<decltype(cuMemsetD8Async)>("cuMemsetD8Async");
    auto alloc_async = driver.function<decltype(cuMemAllocAsync)>("cuMemAllocAsync");
    auto free_async = driver.function<decltype(cuMemFreeAsync)>("cuMemFreeAsync");
    auto create_event = driver.function<decltype(cuEventCreate)>("cuEventCreate");
    auto destroy_event = driver.function<decltype(cuEventDestroy_v2)>("cuEventDestroy_v2");
    auto record = driver.function<decltype(cuEventRecord)>("cuEventRecord");
    auto event_synchronize = driver.function<decltype(cuEventSynchronize)>("cuEventSynchronize");
    auto wait = driver.function<decltype(cuStreamWaitEvent)>("cuStreamWaitEvent");
    auto context_synchronize = driver.function<decltype(cuCtxSynchronize)>("cuCtxSynchronize");
    auto is_capturing = driver.function<decltype(cuStreamIsCapturing)>("cuStreamIsCapturing");
    const CUstream stream = calls.stream(CU_STREAM_NON_BLOCKING), other = calls.stream(CU_STREAM_NON_BLOCKING);
    const CUstream blocking = calls.stream(CU_STREAM_DEFAULT);
    CUdeviceptr device = 0;
    REQUIRE(calls.allocate(&device, 64) == CUDA_SUCCESS);
    CUevent event = nullptr;
    REQUIRE(create_event(&event, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
    std::uint8_t pageable[64];
    auto broken_by = [&](CUstream captured, CUresult expected, auto&& call) {
      REQUIRE(graphs.begin(captured, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
      CHECK(call() == expected);
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      CHECK(is_capturing(captured, &status) == CUDA_SUCCESS);
      CHECK(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
      CUgraph graph = nullptr;
      CHECK(graphs.end(captured, &graph) == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
      CHECK(graph == nullptr);
    };
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] { return calls.synchronize(stream); });
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] { return context_synchronize(); });
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] {  // a copy that would block the host
      return calls.to_host_async(pageable, device, 64, stream);
    });
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] {  // not stream-ordered
      CUdeviceptr more = 0;
      return calls.allocate(&more, 64);
    });
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] { return calls.free(device); });
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, [&] {
      return add_callback(
          stream, [](CUstream, CUresult, void*) {}, nullptr, 0);
    });
    broken_by(stream, CUDA_ERROR_CAPTURED_EVENT, [&] {
      REQUIRE(record(event, stream) == CUDA_SUCCESS);
      return event_synchronize(event);
    });
    broken_by(blocking, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, [&] { return calls.memset(device, 1, 64); });
    REQUIRE(record(event, other) == CUDA_SUCCESS);
    broken_by(stream, CUDA_ERROR_STREAM_CAPTURE_ISOLATION, [&] { return wait(stream, event, 0); });

    // A non-blocking stream's capture leaves the legacy stream usable; a stream forked from the capture by an
    // event must be joined back before it ends.
    REQUIRE(graphs.begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    CHECK(calls.memset(device, 1, 64) == CUDA_SUCCESS);
    REQUIRE(record(event, stream) == CUDA_SUCCESS);
    REQUIRE(wait(other, event, 0) == CUDA_SUCCESS);
    REQUIRE(memset_async(device, 2, 64, other) == CUDA_SUCCESS);
    CUgraph graph = nullptr;
    CHECK(graphs.end(stream, &graph) == CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    REQUIRE(graphs.begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
    REQUIRE(record(event, stream) == CUDA_SUCCESS);
    REQUIRE(wait(other, event, 0) == CUDA_SUCCESS);
    CUdeviceptr scratch = 0;  // the graph's own memory, at one address for every launch
    REQUIRE(alloc_async(&scratch, 64, other) == CUDA_SUCCESS);
    REQUIRE(memset_async(scratch, 3, 64, other) == CUDA_SUCCESS);
    REQUIRE(free_async(scratch, other) == CUDA_SUCCESS);
    REQUIRE(record(event, other) == CUDA_SUCCESS);
    REQUIRE(wait(stream, event, 0) == CUDA_SUCCESS);
    REQUIRE(graphs.end(stream, &graph) == CUDA_SUCCESS);
    graphs.replay(graph, stream, 2);
    CHECK(calls.synchronize(stream) == CUDA_SUCCESS);
    CHECK(destroy_event(event) == CUDA_SUCCESS);
    for (const CUstream created : {stream, other, blocking}) CHECK(calls.destroy_stream(created) == CUDA_SUCCESS);
    CHECK(calls.free(device) == CUDA_SUCCESS);
  }

  TEST_CASE("the NCCL watchdog's event queries leave a framework's global-mode graph capture valid") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()}, {"HAL_BACKENDS", "cuda"},
                                  {"HAL_NCCL", HAL_FAKE_NCCL_PATH}, {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::Device gpu = runtime.device("cuda:0");
    const hal::testing::ScratchDirectory store_directory("/tmp/hal-capture-store-XXXXXX");
    {
      hal::Communicator communicator =
          hal::Communicator::create(gpu, 0, 1, std::make_shared<hal::FileStore>(store_directory.path));
      const hal::Stream stream = gpu.create_stream();
      hal::Buffer buffer = gpu.allocate(1024);
      buffer.fill(0, 1024, 0);
      hal::testing::StreamGate gate;
      gate.block(stream);
      communicator.all_reduce(buffer, buffer, 256, hal::DType::f32, hal::ReduceOp::sum, stream);  // in flight
      DriverCalls calls;  // a framework on its own thread
      auto begin = calls.driver.function<decltype(cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
      auto end = calls.driver.function<decltype(cuStreamEndCapture)>("cuStreamEndCapture");
      const CUstream captured = calls.stream(CU_STREAM_NON_BLOCKING);
      REQUIRE(begin(captured, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
      std::this_thread::sleep_for(std::chrono::milliseconds(60));  // the watchdog polls every 5 ms
      CUgraph graph = nullptr;
      CHECK(end(captured, &graph) == CUDA_SUCCESS);
      CHECK(calls.driver.function<decltype(cuGraphDestroy)>("cuGraphDestroy")(graph) == CUDA_SUCCESS);
      gate.open();
      stream.synchronize();
      CHECK(calls.destroy_stream(captured) == CUDA_SUCCESS);
      communicator.destroy();
    }
  }

  // A captured collective runs when (and each time) the graph is launched: had the watchdog put it under its
  // deadline at enqueue, it would abort the communicator while the capture goes on, and its query of an event
  // recorded in the capture would break the capture.
  TEST_CASE("a collective captured into a graph is under no deadline until it runs, at each launch of the graph") {
    ScopedEnvironment environment{{"HAL_CUDA_DRIVER", fake_driver_path()},
                                  {"HAL_BACKENDS", "cuda"},
                                  {"HAL_NCCL", HAL_FAKE_NCCL_PATH},
                                  {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"}};
    const hal::Runtime runtime = hal::Runtime::create(default_options());
    const hal::Device gpu = runtime.device("cuda:0");
    const hal::testing::ScratchDirectory store_directory("/tmp/hal-captured-collective-XXXXXX");
    {
      hal::Communicator communicator =
          hal::Communicator::create(gpu, 0, 1, std::make_shared<hal::FileStore>(store_directory.path));
      std::vector<float> values(256);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) - 100.0f;
      hal::Buffer send = gpu.allocate(1024), recv = gpu.allocate(1024);
      send.write(0, values.data(), 1024);
      recv.fill(0, 1024, 0);
      DriverCalls calls;  // the framework, capturing its stream on this thread
      const GraphCalls graphs(calls.driver);
      const CUstream captured = calls.stream(CU_STREAM_NON_BLOCKING);
      {
        const hal::Stream stream = gpu.wrap_native_stream({captured, false});
        const auto [ended, graph] = graphs.capture(captured, [&] {
          communicator.all_reduce(send, recv, 256, hal::DType::f32, hal::ReduceOp::sum, stream,
                                  {.timeout = std::chrono::milliseconds(20)});
          std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the watchdog polls every 5 ms
          CHECK(communicator.async_error().is_ok());
        });
        REQUIRE(ended == CUDA_SUCCESS);
        CHECK(read_all(recv) == std::vector<std::uint8_t>(1024, 0));  // recorded, not run
        CUgraphExec executable = nullptr;
        REQUIRE(graphs.instantiate(&executable, graph, 0) == CUDA_SUCCESS);
        // Each launch runs the collective on what the buffer holds then.
        for (const float shift : {0.0f, 1000.0f}) {
          std::vector<float> sent = values;
          for (float& value : sent) value += shift;
          send.write(0, sent.data(), 1024);
          REQUIRE(graphs.launch(executable, captured) == CUDA_SUCCESS);
          stream.synchronize();
          std::vector<float> reduced(256);
          recv.read(0, reduced.data(), 1024);
          CHECK(reduced == sent);
          CHECK(communicator.async_error().is_ok());
        }
        CHECK(graphs.destroy_executable(executable) == CUDA_SUCCESS);
        CHECK(graphs.destroy_graph(graph) == CUDA_SUCCESS);
      }
      CHECK(calls.destroy_stream(captured) == CUDA_SUCCESS);
      communicator.destroy();
    }
  }

  TEST_CASE("an Async copy to pageable memory returns only when done; to pinned memory at once") {
    DriverCalls calls;
    CUdeviceptr device = 0;
    REQUIRE(calls.allocate(&device, 64) == CUDA_SUCCESS);
    void* pinned = nullptr;
    REQUIRE(calls.allocate_pinned(&pinned, 64, 0) == CUDA_SUCCESS);
    const CUstream stream = calls.stream(CU_STREAM_NON_BLOCKING);
    hal::testing::StreamGate gate;
    REQUIRE(calls.host_function(stream, hal::testing::StreamGate::wait_on_latch, gate.latch_for_vendor()) ==
            CUDA_SUCCESS);
    CHECK(calls.to_host_async(pinned, device, 64, stream) == CUDA_SUCCESS);  // returns behind the closed gate
    std::uint8_t pageable[64];
    std::atomic<bool> returned{false};
    std::thread copier([&] {
      calls.driver.function<decltype(cuCtxSetCurrent)>("cuCtxSetCurrent")(calls.context);
      CHECK(calls.to_host_async(pageable, device, 64, stream) == CUDA_SUCCESS);
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(returned.load());
    gate.open();
    copier.join();
    CHECK(returned.load());
    REQUIRE(calls.synchronize(stream) == CUDA_SUCCESS);
    CHECK(calls.destroy_stream(stream) == CUDA_SUCCESS);
    CHECK(calls.free_pinned(pinned) == CUDA_SUCCESS);
    CHECK(calls.free(device) == CUDA_SUCCESS);
  }
#if HAL_TEST_CUDA_KERNELS_BUILT
  TEST_CASE("hal's fatbin loads; its kernels are found by symbol and run in stream order, within the launch limits") {
    DriverCalls calls;
    const auto load = calls.driver.function<decltype(cuModuleLoadData)>("cuModuleLoadData");
    const auto unload = calls.driver.function<decltype(cuModuleUnload)>("cuModuleUnload");
    const auto get_function = calls.driver.function<decltype(cuModuleGetFunction)>("cuModuleGetFunction");
    const auto set_attribute = calls.driver.function<decltype(cuFuncSetAttribute)>("cuFuncSetAttribute");
    const auto launch = calls.driver.function<decltype(cuLaunchKernel)>("cuLaunchKernel");
    const auto to_device = calls.driver.function<decltype(cuMemcpyHtoD_v2)>("cuMemcpyHtoD_v2");
    std::ifstream file(HAL_TEST_CUDA_KERNEL_FATBIN, std::ios::binary);
    REQUIRE(file.good());
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::vector<std::uint64_t> image(bytes.size() / 8 + 1);  // the driver reads it 8-byte aligned
    std::memcpy(image.data(), bytes.data(), bytes.size());

    CUmodule module = nullptr;
    const std::uint64_t not_a_fatbin[4] = {};
    CHECK(load(&module, not_a_fatbin) == CUDA_ERROR_INVALID_IMAGE);
    REQUIRE(load(&module, image.data()) == CUDA_SUCCESS);
    CUfunction softmax = nullptr, missing = nullptr;
    CHECK(get_function(&missing, module, "hal_no_such_kernel") == CUDA_ERROR_NOT_FOUND);
    REQUIRE(get_function(&softmax, module, "hal_softmax_rows_f32") == CUDA_SUCCESS);

    constexpr int rows = 2, columns = 3;
    const float input[rows * columns] = {0.0f, 1.0f, 2.0f, 5.0f, 5.0f, 5.0f};
    CUdeviceptr in = 0, out = 0;
    REQUIRE(calls.allocate(&in, sizeof(input)) == CUDA_SUCCESS);
    REQUIRE(calls.allocate(&out, sizeof(input)) == CUDA_SUCCESS);
    REQUIRE(to_device(in, input, sizeof(input)) == CUDA_SUCCESS);
    int row_count = rows, column_count = columns;
    void* arguments[] = {&in, &out, &row_count, &column_count};
    const CUstream stream = calls.stream(CU_STREAM_NON_BLOCKING);
    auto run = [&](unsigned grid, unsigned block, unsigned shared) {
      return launch(softmax, grid, 1, 1, block, 1, 1, shared, stream, arguments, nullptr);
    };
    CHECK(run(0, 32, 0) == CUDA_ERROR_INVALID_VALUE);
    CHECK(run(rows, 1025, 0) == CUDA_ERROR_INVALID_VALUE);
    // Above 48 KiB of dynamic shared memory only once the function allows it, and never above the opt-in.
    CHECK(run(rows, 32, 64 * 1024) == CUDA_ERROR_INVALID_VALUE);
    CHECK(set_attribute(softmax, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 * 1024) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(set_attribute(softmax, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024) == CUDA_SUCCESS);
    REQUIRE(run(rows, 32, 64 * 1024) == CUDA_SUCCESS);
    row_count = 0;  // the arguments were copied at the launch
    REQUIRE(calls.synchronize(stream) == CUDA_SUCCESS);
    float output[rows * columns] = {};
    REQUIRE(calls.to_host(output, out, sizeof(output)) == CUDA_SUCCESS);
    const float e1 = std::exp(1.0f), e2 = std::exp(2.0f), sum = 1.0f + e1 + e2;
    CHECK(output[0] == doctest::Approx(1.0f / sum));
    CHECK(output[2] == doctest::Approx(e2 / sum));
    CHECK(output[4] == doctest::Approx(1.0f / 3.0f));

    CHECK(calls.destroy_stream(stream) == CUDA_SUCCESS);
    CHECK(calls.free(in) == CUDA_SUCCESS);
    CHECK(calls.free(out) == CUDA_SUCCESS);
    CHECK(unload(module) == CUDA_SUCCESS);
  }
#endif
}
