// Stream and event semantics on the host backend: ordering, host callbacks,
// cross-stream waits, timing, and object lifetimes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core_test_support.hpp"

namespace {

using hal::StatusCode;
using hal_test::check_error;
using hal_test::counting_bytes;
using hal_test::HostDeviceFixture;
using hal_test::read_all;
using hal_test::StreamGate;
using namespace std::chrono_literals;

// Enqueues a callback that sleeps, standing in for slow device work.
void enqueue_sleep(const hal::Stream& stream, std::chrono::milliseconds duration) {
  stream.enqueue_host_callback([duration](const hal::Status&) { std::this_thread::sleep_for(duration); });
}

// What host callbacks saw, collected for checks on the test thread.
struct CallbackLog {
  std::mutex mutex;
  std::vector<std::string> entries;
  void add(std::string entry) {
    std::lock_guard lock(mutex);
    entries.push_back(std::move(entry));
  }
};

TEST_CASE_FIXTURE(HostDeviceFixture, "stream work runs in order: a chain of dependent copies and fills") {
  constexpr std::uint64_t block = 16, block_count = 64;
  const hal::Stream stream = device.create_stream();
  hal::Buffer buffer = device.allocate(block * block_count);
  buffer.fill(0, buffer.size(), 0);

  // Block i is a copy of block i - 1 whose first word is then overwritten,
  // so any reordering leaves zeros or a wrong word behind.
  const auto first_block = counting_bytes(block, 1);
  stream.copy_to_device(buffer, 0, first_block.data(), block);
  for (std::uint64_t i = 1; i < block_count; ++i) {
    stream.copy(buffer, i * block, buffer, (i - 1) * block, block);
    stream.fill(buffer, i * block, 4, static_cast<std::uint32_t>(0xA0000000 | i), 4);
  }
  std::vector<std::uint8_t> result(buffer.size());
  stream.copy_to_host(result.data(), buffer, 0, result.size());
  stream.synchronize();

  std::vector<std::uint8_t> expected;
  for (std::uint64_t i = 0; i < block_count; ++i) {
    auto block_bytes = first_block;
    if (i > 0) {
      const auto word = static_cast<std::uint32_t>(0xA0000000 | i);
      std::memcpy(block_bytes.data(), &word, sizeof(word));
    }
    expected.insert(expected.end(), block_bytes.begin(), block_bytes.end());
  }
  CHECK(result == expected);
  CHECK(read_all(buffer) == expected);
  CHECK(stream.is_idle());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "copy_to_host is asynchronous until synchronize") {
  const hal::Stream stream = device.create_stream();
  StreamGate gate;
  const hal::Buffer buffer = device.allocate(256);
  const auto bytes = counting_bytes(256, 9);
  buffer.write(0, bytes.data(), bytes.size());

  std::vector<std::uint8_t> result(256, 0);
  gate.block(stream);
  stream.copy_to_host(result.data(), buffer, 0, result.size());
  CHECK_FALSE(stream.is_idle());
  CHECK(result == std::vector<std::uint8_t>(256, 0));  // still held behind the gate

  gate.open();
  stream.synchronize();
  CHECK(result == bytes);
  CHECK(stream.is_idle());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "host callbacks run in order, after earlier work, with an ok status") {
  const hal::Stream stream = device.create_stream();
  const hal::Buffer buffer = device.allocate(64);
  const auto* mapped = static_cast<const std::uint8_t*>(buffer.host_address());
  CallbackLog log;

  for (std::uint32_t value = 1; value <= 20; ++value) {
    stream.fill(buffer, 0, buffer.size(), value);
    stream.enqueue_host_callback([&log, mapped, value](const hal::Status& status) {
      log.add(std::to_string(value) + " saw " + std::to_string(mapped[0]) + "," + std::to_string(mapped[63]) +
              (status.is_ok() ? " ok" : " " + status.to_string()));
    });
  }
  stream.synchronize();

  std::vector<std::string> expected;
  for (std::uint32_t value = 1; value <= 20; ++value)
    expected.push_back(std::to_string(value) + " saw " + std::to_string(value) + "," + std::to_string(value) + " ok");
  CHECK(log.entries == expected);
}

// synchronize() runs queued work on the calling thread; host callbacks stay
// on the stream's own thread, between the work around them.
TEST_CASE_FIXTURE(HostDeviceFixture, "synchronize keeps the order around host callbacks, which run on the stream's thread") {
  const hal::Stream stream = device.create_stream();
  const hal::Buffer buffer = device.allocate(64);
  const auto* mapped = static_cast<const std::uint8_t*>(buffer.host_address());
  std::mutex mutex;
  std::vector<std::uint32_t> values;
  std::vector<std::thread::id> threads;

  // Rounds after a pause and right after a synchronize: the stream's
  // thread is asleep, spinning, or busy when synchronize starts.
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    if (round == 2) std::this_thread::sleep_for(5ms);
    values.clear();
    for (std::uint32_t value = 1; value <= 50; ++value) {
      stream.fill(buffer, 0, buffer.size(), value);
      if (value % 3 == 0) stream.fill(buffer, 0, buffer.size(), value);  // runs of work between callbacks
      stream.enqueue_host_callback([&, value](const hal::Status& status) {
        std::lock_guard lock(mutex);
        values.push_back(status.is_ok() && mapped[0] == value && mapped[63] == value ? value : 0);
        threads.push_back(std::this_thread::get_id());
      });
    }
    stream.synchronize();
    std::vector<std::uint32_t> expected;
    for (std::uint32_t value = 1; value <= 50; ++value) expected.push_back(value);
    CHECK(values == expected);
  }
  REQUIRE(!threads.empty());
  for (const std::thread::id thread : threads) {
    CHECK(thread == threads.front());
    CHECK(thread != std::this_thread::get_id());
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "several threads synchronizing one stream return once all its work is done") {
  const hal::Stream stream = device.create_stream();
  const hal::Buffer buffer = device.allocate(64);
  const auto* mapped = static_cast<const std::uint8_t*>(buffer.host_address());
  std::atomic<int> callbacks{0};
  StreamGate gate;
  gate.block(stream);
  for (std::uint32_t value = 1; value <= 200; ++value) {
    stream.fill(buffer, 0, buffer.size(), value);
    if (value % 10 == 0) stream.enqueue_host_callback([&](const hal::Status&) { ++callbacks; });
  }
  std::vector<std::thread> synchronizers;
  std::atomic<int> returned{0};
  for (int i = 0; i < 3; ++i)
    synchronizers.emplace_back([&] {
      stream.synchronize();
      if (callbacks.load() == 20 && mapped[0] == 200) ++returned;
    });
  std::this_thread::sleep_for(5ms);
  gate.open();
  stream.synchronize();
  for (std::thread& thread : synchronizers) thread.join();
  CHECK(returned == 3);
  CHECK(callbacks == 20);
  CHECK(mapped[0] == 200);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a throwing host callback does not stop the stream") {
  const hal::Stream stream = device.create_stream();
  const hal::Buffer buffer = device.allocate(8);
  std::atomic<bool> later_callback_ran{false};

  stream.enqueue_host_callback([](const hal::Status&) { throw std::runtime_error("thrown on purpose by a test"); });
  stream.enqueue_host_callback([](const hal::Status&) { throw 42; });
  stream.fill(buffer, 0, 8, 0x3C);
  stream.enqueue_host_callback([&](const hal::Status& status) { later_callback_ran = status.is_ok(); });

  CHECK_NOTHROW(stream.synchronize());
  CHECK(later_callback_ran);
  CHECK(read_all(buffer) == std::vector<std::uint8_t>(8, 0x3C));
}

TEST_CASE_FIXTURE(HostDeviceFixture, "is_idle is false while a callback blocks and true once it finished") {
  const hal::Stream stream = device.create_stream();
  CHECK(stream.is_idle());
  StreamGate gate;
  gate.block(stream);
  CHECK_FALSE(stream.is_idle());
  std::this_thread::sleep_for(5ms);  // the worker is now inside the callback, not before it
  CHECK_FALSE(stream.is_idle());

  gate.open();
  stream.synchronize();
  CHECK(stream.is_idle());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "synchronizing a stream from its own host callback is an error, not a hang") {
  const hal::Stream stream = device.create_stream();
  std::optional<hal::Status> caught;
  stream.enqueue_host_callback([&caught, stream](const hal::Status&) {
    try {
      stream.synchronize();
    } catch (const hal::Error& error) {
      caught = error.status();
    }
  });
  stream.synchronize();

  REQUIRE(caught.has_value());
  CHECK(caught->code() == StatusCode::invalid_argument);
  CHECK(caught->message().find("synchronized its own stream") != std::string::npos);
  // The refused call is not a failure of the stream's work.
  CHECK_NOTHROW(stream.synchronize());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "stream operations validate their buffers") {
  const hal::Stream stream = device.create_stream();
  hal::Buffer buffer = device.allocate(64);
  std::vector<std::uint8_t> host(64);

  check_error([&] { stream.copy_to_host(host.data(), buffer, 60, 8); }, StatusCode::invalid_argument,
              {"Stream::copy_to_host", "[60, 60 + 8)"});
  check_error([&] { stream.fill(buffer, 2, 4, 0, 4); }, StatusCode::invalid_argument, {"offset 2"});
  check_error([&] { stream.copy_to_device(buffer, 0, nullptr, 4); }, StatusCode::invalid_argument, {"null"});
  check_error([&] { stream.enqueue_host_callback({}); }, StatusCode::invalid_argument, {"callback is empty"});
  check_error([&] { stream.copy(buffer, 0, hal::Buffer{}, 0, 4); }, StatusCode::invalid_argument, {"empty"});
  buffer.free();
  check_error([&] { stream.copy_to_device(buffer, 0, host.data(), 4); }, StatusCode::invalid_argument, {"freed"});
  check_error([] { hal::Stream{}.synchronize(); }, StatusCode::invalid_argument, {"Stream::synchronize", "empty"});

  if (const auto other_device = second_host_device()) {
    const hal::Buffer foreign = other_device->allocate(64);
    check_error([&] { stream.fill(foreign, 0, 64, 0); }, StatusCode::invalid_argument,
                {"not on the stream's device", device.id()});
  } else {
    MESSAGE("one host device only: the check of a buffer on another device is skipped");
  }
  CHECK_NOTHROW(stream.synchronize());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "four threads enqueueing onto one stream each get their own data") {
  constexpr std::uint64_t thread_count = 4, block = 32, blocks_per_thread = 50;
  constexpr std::uint64_t region = block * blocks_per_thread;
  const hal::Stream stream = device.create_stream();
  hal::Buffer buffer = device.allocate(region * thread_count);
  buffer.fill(0, buffer.size(), 0);

  std::vector<std::vector<std::uint8_t>> first_blocks;
  for (std::uint64_t thread = 0; thread < thread_count; ++thread)
    first_blocks.push_back(counting_bytes(block, static_cast<std::uint8_t>(1 + 50 * thread)));

  // Each thread copies its first block forward through its region; the
  // chain only comes out right if each thread's operations keep their order.
  std::vector<std::thread> threads;
  for (std::uint64_t thread = 0; thread < thread_count; ++thread) {
    threads.emplace_back([&, thread] {
      const std::uint64_t start = thread * region;
      stream.copy_to_device(buffer, start, first_blocks[thread].data(), block);
      for (std::uint64_t i = 1; i < blocks_per_thread; ++i)
        stream.copy(buffer, start + i * block, buffer, start + (i - 1) * block, block);
    });
  }
  for (auto& thread : threads) thread.join();
  stream.synchronize();

  const auto result = read_all(buffer);
  for (std::uint64_t thread = 0; thread < thread_count; ++thread) {
    CAPTURE(thread);
    std::vector<std::uint8_t> expected;
    for (std::uint64_t i = 0; i < blocks_per_thread; ++i)
      expected.insert(expected.end(), first_blocks[thread].begin(), first_blocks[thread].end());
    const std::vector<std::uint8_t> region_bytes(result.begin() + thread * region,
                                                 result.begin() + (thread + 1) * region);
    CHECK(region_bytes == expected);
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "freeing a buffer with stream work pending is safe") {
  const hal::Stream stream = device.create_stream();
  StreamGate gate;
  hal::Buffer buffer = device.allocate(4096);
  const auto source = counting_bytes(4096, 3);
  std::vector<std::uint8_t> copied_back(4096, 0);

  gate.block(stream);
  stream.copy_to_device(buffer, 0, source.data(), source.size());
  stream.fill(buffer, 0, 16, 0xF00DF00D, 4);
  stream.copy_to_host(copied_back.data(), buffer, 0, copied_back.size());
  buffer.free();
  CHECK_FALSE(buffer.valid());
  gate.open();
  stream.synchronize();

  // The pending work still saw the memory it was given.
  auto expected = source;
  for (std::size_t i = 0; i < 16; i += 4) {
    const std::uint32_t word = 0xF00DF00D;
    std::memcpy(expected.data() + i, &word, sizeof(word));
  }
  CHECK(copied_back == expected);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "destroying a stream finishes its pending work first") {
  const hal::Buffer buffer = device.allocate(128);
  const auto bytes = counting_bytes(128, 40);
  buffer.write(0, bytes.data(), bytes.size());
  std::vector<std::uint8_t> result(128, 0);
  {
    const hal::Stream stream = device.create_stream();
    enqueue_sleep(stream, 20ms);
    stream.copy_to_host(result.data(), buffer, 0, result.size());
  }
  CHECK(result == bytes);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a host callback may hold the last reference to its stream") {
  auto later_callback_ran = std::make_shared<std::promise<void>>();
  auto later_callback_done = later_callback_ran->get_future();
  StreamGate gate;
  {
    const hal::Stream stream = device.create_stream();
    gate.block(stream);
    // Once this scope ends, the copy captured here is the stream's last
    // reference; it goes away on the stream's own worker thread.
    stream.enqueue_host_callback([stream](const hal::Status&) {});
    stream.enqueue_host_callback([later_callback_ran](const hal::Status&) { later_callback_ran->set_value(); });
  }
  gate.open();
  CHECK(later_callback_done.wait_for(2s) == std::future_status::ready);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a recorded event completes with the work before it") {
  const hal::Stream stream = device.create_stream();
  const hal::Event event = device.create_event();
  CHECK(event.device() == device);
  CHECK(event.is_complete());  // never recorded

  StreamGate gate;
  const hal::Buffer buffer = device.allocate(32);
  buffer.fill(0, 32, 0);
  gate.block(stream);
  stream.fill(buffer, 0, 32, 0x6B);
  stream.record(event);
  CHECK_FALSE(event.is_complete());
  CHECK(read_all(buffer) == std::vector<std::uint8_t>(32, 0));

  gate.open();
  event.synchronize();
  CHECK(event.is_complete());
  CHECK(read_all(buffer) == std::vector<std::uint8_t>(32, 0x6B));
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a stream waiting on an event sees the other stream's earlier work") {
  const hal::Stream producer = device.create_stream();
  const hal::Stream consumer = device.create_stream();
  const hal::Event produced = device.create_event();
  const hal::Buffer buffer = device.allocate(4);
  buffer.fill(0, 4, 0);
  auto* mapped = static_cast<std::uint32_t*>(buffer.host_address());

  constexpr std::uint32_t produced_value = 0x600DCAFE;
  producer.enqueue_host_callback([mapped](const hal::Status&) {
    std::this_thread::sleep_for(20ms);
    std::atomic_ref(*mapped).store(produced_value);
  });
  producer.record(produced);
  consumer.wait(produced);
  std::uint32_t consumed = 0;
  consumer.copy_to_host(&consumed, buffer, 0, sizeof(consumed));
  consumer.synchronize();

  CHECK(consumed == produced_value);
  CHECK(produced.is_complete());
  producer.synchronize();
}

TEST_CASE_FIXTURE(HostDeviceFixture, "waiting on a never-recorded event is a no-op") {
  const hal::Stream stream = device.create_stream();
  const hal::Event never_recorded = device.create_event();
  const hal::Buffer buffer = device.allocate(16);
  stream.wait(never_recorded);
  stream.fill(buffer, 0, 16, 0x21);
  stream.synchronize();
  CHECK(read_all(buffer) == std::vector<std::uint8_t>(16, 0x21));
  CHECK(never_recorded.is_complete());
  CHECK_NOTHROW(never_recorded.synchronize());
}

TEST_CASE_FIXTURE(HostDeviceFixture, "elapsed time between two records spans the work between them") {
  const hal::Stream stream = device.create_stream();
  const hal::Event start = device.create_event();
  const hal::Event end = device.create_event();
  stream.record(start);
  enqueue_sleep(stream, 20ms);
  stream.record(end);
  stream.synchronize();

  const double milliseconds = hal::Event::elapsed_milliseconds(start, end);
  CHECK(milliseconds >= 15.0);
  CHECK(milliseconds < 2000.0);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "elapsed time needs two completed records") {
  const hal::Stream stream = device.create_stream();
  const hal::Event recorded = device.create_event();
  const hal::Event unrecorded = device.create_event();
  stream.record(recorded);
  stream.synchronize();

  check_error([&] { (void)hal::Event::elapsed_milliseconds(recorded, unrecorded); }, StatusCode::invalid_argument,
              {"end event was never recorded"});
  check_error([&] { (void)hal::Event::elapsed_milliseconds(unrecorded, recorded); }, StatusCode::invalid_argument,
              {"start event was never recorded"});

  StreamGate gate;
  const hal::Event pending = device.create_event();
  gate.block(stream);
  stream.record(pending);
  check_error([&] { (void)hal::Event::elapsed_milliseconds(recorded, pending); }, StatusCode::invalid_argument,
              {"not completed"});
  gate.open();
  stream.synchronize();
  CHECK(hal::Event::elapsed_milliseconds(recorded, pending) >= 0.0);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "events are checked against the stream's device") {
  const hal::Stream stream = device.create_stream();
  check_error([&] { stream.record(hal::Event{}); }, StatusCode::invalid_argument, {"Stream::record", "empty"});
  check_error([&] { stream.wait(hal::Event{}); }, StatusCode::invalid_argument, {"Stream::wait", "empty"});
  check_error([] { (void)hal::Event{}.is_complete(); }, StatusCode::invalid_argument, {"empty"});

  if (const auto other_device = second_host_device()) {
    const hal::Event foreign = other_device->create_event();
    check_error([&] { stream.record(foreign); }, StatusCode::invalid_argument,
                {"belongs to " + other_device->id(), device.id()});
    const hal::Event local = device.create_event();
    check_error([&] { (void)hal::Event::elapsed_milliseconds(local, foreign); }, StatusCode::invalid_argument,
                {"time events of one device"});
  } else {
    MESSAGE("one host device only: the checks of an event from another device are skipped");
  }
}

TEST_CASE("objects from a backend outlive the runtime that loaded it") {
  std::optional<hal::Device> device;
  hal::Buffer buffer;
  hal::Stream stream;
  hal::Event start, end;
  {
    const hal::Runtime runtime = hal::Runtime::create();
    device = runtime.device("host:0");
    buffer = device->allocate(64);
    stream = device->create_stream();
    start = device->create_event();
    end = device->create_event();
  }

  const auto bytes = counting_bytes(64, 11);
  buffer.write(0, bytes.data(), bytes.size());
  CHECK(read_all(buffer) == bytes);

  const hal::Buffer later = device->allocate(64, hal::MemoryKind::managed);
  stream.record(start);
  stream.copy(later, 0, buffer, 0, 64);
  stream.fill(buffer, 0, 64, 0);
  stream.record(end);
  stream.synchronize();
  CHECK(read_all(later) == bytes);
  CHECK(read_all(buffer) == std::vector<std::uint8_t>(64, 0));
  CHECK(hal::Event::elapsed_milliseconds(start, end) >= 0.0);
  CHECK(device->free_memory() > 0);
  CHECK(device->id() == "host:0");
}

}  // namespace
