// Interop on the host backend: imported memory (with and without a release
// callback), sub-buffer views, and hal's work on memory hal did not allocate.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core_test_support.hpp"
#include "hal/collectives.hpp"
#include "hal/conformance/attention_reference.hpp"

using hal::StatusCode;
using hal_test::check_error;
using hal_test::HostDeviceFixture;

namespace {

// malloc'd memory that counts how often its release ran.
struct ForeignMemory {
  explicit ForeignMemory(std::size_t bytes) : size(bytes), data(std::malloc(bytes)) { std::memset(data, 0, bytes); }
  ~ForeignMemory() {
    if (releases->load() == 0) std::free(data);
  }
  hal::ExternalMemory owned_by_hal(hal::MemoryKind kind = hal::MemoryKind::device) {
    hal::ExternalMemory memory;
    memory.address = data;
    memory.size = size;
    memory.kind = kind;
    memory.release = [counter = releases, pointer = data] {
      counter->fetch_add(1);
      std::free(pointer);
    };
    return memory;
  }
  std::size_t size;
  void* data;
  std::shared_ptr<std::atomic<int>> releases = std::make_shared<std::atomic<int>>(0);
};

}  // namespace

TEST_SUITE("interop") {

TEST_CASE_FIXTURE(HostDeviceFixture, "imported memory without a release is a view hal never frees") {
  std::vector<std::uint8_t> memory(256, 0);
  {
    hal::ExternalMemory external;
    external.address = memory.data();
    external.size = memory.size();
    hal::Buffer buffer = device.import_memory(external);
    CHECK(buffer.size() == 256);
    CHECK(buffer.kind() == hal::MemoryKind::device);
    CHECK(buffer.host_address() == memory.data());
    CHECK(buffer.device_address() == memory.data());
    const auto bytes = hal_test::counting_bytes(100, 7);
    buffer.write(10, bytes.data(), bytes.size());
    CHECK(std::memcmp(memory.data() + 10, bytes.data(), bytes.size()) == 0);
    memory[0] = 42;  // the caller's writes are hal's reads: the same memory
    std::uint8_t first = 0;
    buffer.read(0, &first, 1);
    CHECK(first == 42);
    buffer.fill(200, 56, 0xAB);
    CHECK(memory[255] == 0xAB);
  }
  memory[1] = 1;  // still the caller's: hal freed nothing (ASan would say otherwise)
}

TEST_CASE("the release callback runs exactly once, in every order of teardown") {
  SUBCASE("on free()") {
    hal::Runtime runtime = hal::Runtime::create();
    ForeignMemory foreign(64);
    hal::Buffer buffer = runtime.device("host:0").import_memory(foreign.owned_by_hal());
    hal::Buffer copy = buffer;
    buffer.free();
    CHECK(foreign.releases->load() == 1);
    check_error([&] { copy.size(); }, StatusCode::invalid_argument, {"was freed"});
    check_error([&] { buffer.free(); }, StatusCode::invalid_argument, {"was freed"});
    copy = {};
    CHECK(foreign.releases->load() == 1);
  }
  SUBCASE("when the last copy goes away") {
    hal::Runtime runtime = hal::Runtime::create();
    ForeignMemory foreign(64);
    auto buffer = std::make_unique<hal::Buffer>(runtime.device("host:0").import_memory(foreign.owned_by_hal()));
    hal::Buffer copy = *buffer;
    buffer.reset();
    CHECK(foreign.releases->load() == 0);
    copy = {};
    CHECK(foreign.releases->load() == 1);
  }
  SUBCASE("when the Runtime is destroyed first") {
    ForeignMemory foreign(64);
    hal::Buffer buffer;
    {
      hal::Runtime runtime = hal::Runtime::create();
      buffer = runtime.device("host:0").import_memory(foreign.owned_by_hal());
    }
    const std::uint32_t word = 0x01020304;
    buffer.write(0, &word, sizeof(word));  // the backend outlives the Runtime while a Buffer holds it
    CHECK(foreign.releases->load() == 0);
    buffer = {};
    CHECK(foreign.releases->load() == 1);
  }
  SUBCASE("only after hal's work on the memory is done") {
    hal::Runtime runtime = hal::Runtime::create();
    hal::Device device = runtime.device("host:0");
    ForeignMemory foreign(4096);
    hal::Stream stream = device.create_stream();
    hal_test::StreamGate gate;
    gate.block(stream);
    {
      hal::Buffer buffer = device.import_memory(foreign.owned_by_hal());
      stream.fill(buffer, 0, 4096, 0x5A);
    }  // the last copy is gone while the fill waits behind the gate
    CHECK(foreign.releases->load() == 0);
    gate.open();
    stream.synchronize();
    CHECK(foreign.releases->load() == 1);
  }
  SUBCASE("never when the import is refused") {
    hal::Runtime runtime = hal::Runtime::create();
    ForeignMemory foreign(64);
    hal::ExternalMemory bad = foreign.owned_by_hal();
    bad.register_host_memory = true;  // needs host_pinned
    check_error([&] { runtime.device("host:0").import_memory(bad); }, StatusCode::invalid_argument,
                {"register_host_memory needs kind host_pinned, not device"});
    CHECK(foreign.releases->load() == 0);
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "bad imports name the bad value") {
  hal::ExternalMemory null_memory;
  null_memory.size = 16;
  check_error([&] { device.import_memory(null_memory); }, StatusCode::invalid_argument,
              {"address is null but size is 16"});
  hal::ExternalMemory empty;  // null with size 0 is an empty buffer
  const hal::Buffer nothing = device.import_memory(empty);
  CHECK(nothing.size() == 0);
  check_error([&] { nothing.read(0, nullptr, 1); }, StatusCode::invalid_argument, {"outside the"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "host memory registered for the device is page-locked, then released once") {
  const long page = sysconf(_SC_PAGESIZE);
  void* data = std::aligned_alloc(static_cast<std::size_t>(page), static_cast<std::size_t>(page) * 4);
  REQUIRE(data != nullptr);
  auto releases = std::make_shared<std::atomic<int>>(0);
  hal::ExternalMemory memory;
  memory.address = data;
  memory.size = static_cast<std::uint64_t>(page) * 4;
  memory.kind = hal::MemoryKind::host_pinned;
  memory.register_host_memory = true;
  memory.release = [releases, data] {
    releases->fetch_add(1);
    std::free(data);
  };
  hal::Buffer buffer = device.import_memory(memory);
  CHECK(buffer.kind() == hal::MemoryKind::host_pinned);
  buffer.fill(0, buffer.size(), 0x11);
  CHECK(static_cast<std::uint8_t*>(data)[page * 4 - 1] == 0x11);
  buffer.free();
  CHECK(releases->load() == 1);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "the host has no native streams or events, and says so") {
  check_error([&] { device.wrap_native_stream({}); }, StatusCode::unsupported, {"host backend has no native streams"});
  check_error([&] { device.create_stream().native_handle(); }, StatusCode::unsupported, {"streams are hal's own"});
  check_error([&] { device.create_event().native_handle(); }, StatusCode::unsupported, {"no native event"});
  const hal::NativeDevice native = hal::native_device(device);
  CHECK(native.type == hal::dlpack::kDLCPU);
  CHECK(native.ordinal == 0);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a view is a byte range of a buffer that every operation takes") {
  hal::Buffer whole = device.allocate(1024);
  whole.fill(0, 1024, 0);
  hal::Buffer view = whole.view(100, 200);
  CHECK(view.size() == 200);
  CHECK(static_cast<char*>(view.host_address()) == static_cast<char*>(whole.host_address()) + 100);
  const auto bytes = hal_test::counting_bytes(200, 1);
  view.write(0, bytes.data(), bytes.size());
  std::vector<std::uint8_t> back(200);
  whole.read(100, back.data(), back.size());
  CHECK(back == bytes);

  hal::Buffer inner = view.view(50, 10);  // a view of a view looks into the same allocation
  CHECK(static_cast<char*>(inner.host_address()) == static_cast<char*>(whole.host_address()) + 150);
  hal::Stream stream = device.create_stream();
  stream.fill(inner, 0, 10, 0xEE);
  hal::Buffer other = device.allocate(10);
  stream.copy(other, 0, inner, 0, 10);
  stream.synchronize();
  CHECK(hal_test::read_all(other) == std::vector<std::uint8_t>(10, 0xEE));
  CHECK(static_cast<std::uint8_t*>(whole.host_address())[150] == 0xEE);

  check_error([&] { view.view(150, 51); }, StatusCode::invalid_argument, {"Buffer::view", "offset + size must be at most 200"});
  check_error([&] { inner.read(5, back.data(), 6); }, StatusCode::invalid_argument, {"view (bytes 150 to 160)"});
  inner.free();  // releases nothing
  CHECK(view.size() == 200);
  whole.free();
  check_error([&] { view.size(); }, StatusCode::invalid_argument, {"view of a buffer that was freed"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a view keeps its allocation alive") {
  ForeignMemory foreign(64);
  hal::Buffer view;
  {
    hal::Buffer buffer = device.import_memory(foreign.owned_by_hal());
    view = buffer.view(8, 8);
  }
  CHECK(foreign.releases->load() == 0);
  const std::uint64_t value = 0x1122334455667788ull;
  view.write(0, &value, sizeof(value));
  CHECK(std::memcmp(static_cast<char*>(foreign.data) + 8, &value, sizeof(value)) == 0);
  view = {};
  CHECK(foreign.releases->load() == 1);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "attention runs on imported memory, at byte offsets, against the reference") {
  const hal::AttentionParams params{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 9, .seq_kv = 13,
                                    .head_dim_qk = 16, .layout = hal::AttentionLayout::bhsd, .causal = true,
                                    .alignment = hal::MaskAlignment::bottom_right};
  const auto extents = hal::conformance::AttentionExtents::of(params);
  std::mt19937 generator(5);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto values = [&](std::size_t count) {
    std::vector<double> result(count);
    for (double& value : result) value = static_cast<float>(uniform(generator));
    return result;
  };
  const std::vector<double> q = values(extents.q), k = values(extents.k), v = values(extents.v);
  // One framework allocation holds all four tensors; hal sees it once.
  constexpr std::uint64_t header = 64;  // the tensors start at a byte offset
  const std::size_t floats = extents.q + extents.k + extents.v + extents.o;
  std::vector<float> arena(header / sizeof(float) + floats);
  float* cursor = arena.data() + header / sizeof(float);
  for (const auto* tensor : {&q, &k, &v})
    for (const double value : *tensor) *cursor++ = static_cast<float>(value);
  hal::ExternalMemory external;
  external.address = arena.data();
  external.size = arena.size() * sizeof(float);
  const hal::Buffer buffer = device.import_memory(external);
  const std::uint64_t q_at = header, k_at = q_at + extents.q * 4, v_at = k_at + extents.k * 4, o_at = v_at + extents.v * 4;
  const hal::Stream stream = device.create_stream();
  hal::attention_forward(stream, params, {buffer, q_at}, {buffer, k_at}, {buffer, v_at}, {buffer.view(o_at, extents.o * 4), 0});
  stream.synchronize();
  const auto expected = hal::conformance::attention_reference_forward(params, q, k, v);
  std::vector<double> actual(extents.o);
  for (std::size_t i = 0; i < extents.o; ++i) actual[i] = arena[o_at / 4 + i];
  const auto tolerance = hal::conformance::attention_tolerance(hal::DType::f32);
  const auto comparison = hal::conformance::compare_to_reference(actual, expected.o, tolerance);
  INFO(comparison.describe("O", tolerance));
  CHECK(comparison.ok());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "the workspace size is the chosen implementation's; the host takes none from the caller") {
  hal::AttentionParams params;
  params.heads_q = 2;
  params.seq_q = 64;
  params.head_dim_qk = 32;
  hal::AttentionOptions math_only;
  math_only.implementations = {hal::AttentionImplementation::math};
  const hal::AttentionDecision decision = hal::explain_attention(device, params, false, math_only);
  REQUIRE(decision.found);
  const std::uint64_t bytes = hal::attention_workspace_size(device, params, false, math_only);
  CHECK(bytes == decision.candidates.back().workspace_bytes);
  CHECK(bytes >= 64 * 64 * sizeof(float));  // the math path holds the scores

  const auto extents = hal::conformance::AttentionExtents::of(params);
  hal::Buffer tensors = device.allocate((extents.q + extents.k + extents.v + extents.o) * sizeof(float));
  math_only.workspace = {device.allocate(bytes), 0};
  const hal::Stream stream = device.create_stream();
  check_error([&] {
    hal::attention_forward(stream, params, {tensors, 0}, {tensors, extents.q * 4}, {tensors, (extents.q + extents.k) * 4},
                           {tensors, (extents.q + extents.k + extents.v) * 4}, {}, math_only);
  }, StatusCode::unsupported, {"host backend's attention takes no caller workspace"});
}

TEST_CASE("an all_reduce runs on imported memory of two ranks") {
  const std::string directory =
      (std::filesystem::temp_directory_path() / ("hal-interop-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(directory);
  constexpr std::size_t count = 1000;
  std::vector<std::vector<float>> memory(2, std::vector<float>(count));
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    try {
      hal::Runtime runtime = hal::Runtime::create();
      const hal::Device device = runtime.device("host:0");
      for (std::size_t i = 0; i < count; ++i) memory[rank][i] = static_cast<float>(rank + 1) * static_cast<float>(i);
      hal::ExternalMemory external;
      external.address = memory[rank].data();
      external.size = count * sizeof(float);
      const hal::Buffer buffer = device.import_memory(external);
      hal::CommunicatorOptions options;
      options.engine = "gloo";
      options.timeout = std::chrono::seconds(30);
      // A store per rank, as separate processes would have: a store numbers the communicators made on it.
      auto store = std::make_shared<hal::FileStore>(directory);
      hal::Communicator communicator = hal::Communicator::create(device, rank, 2, store, options);
      const hal::Stream stream = device.create_stream();
      communicator.all_reduce(buffer, buffer, count, hal::DType::f32, hal::ReduceOp::sum, stream);
      stream.synchronize();
      communicator.destroy();
    } catch (const std::exception& error) {
      errors[rank] = error.what();
    }
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  std::filesystem::remove_all(directory);
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  for (int rank = 0; rank < 2; ++rank)
    for (std::size_t i = 0; i < count; i += 97) CHECK(memory[rank][i] == doctest::Approx(3.0 * static_cast<double>(i)));
}

}  // TEST_SUITE("interop")
