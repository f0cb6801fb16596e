// Helpers shared by the core unit tests: the host device, expected errors,
// and a gate that holds a stream's worker until the test lets it go.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <latch>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "hal/hal.hpp"

namespace hal_test {

// A fresh runtime per test case keeps the cases independent of each other.
struct HostDeviceFixture {
  hal::Runtime runtime = hal::Runtime::create();
  hal::Device device = runtime.device("host:0");

  // Another host device (another NUMA node), when the machine has one.
  std::optional<hal::Device> second_host_device() const {
    for (const auto& candidate : runtime.devices())
      if (candidate.backend_name() == "host" && !(candidate == device)) return candidate;
    return std::nullopt;
  }
};

// Checks that call throws hal::Error with the code, a message containing
// every fragment and, when given, the vendor's native code; failures name
// the line of the caller.
inline void check_error(const std::function<void()>& call, hal::StatusCode expected_code,
                        std::initializer_list<std::string_view> message_fragments,
                        std::optional<long long> expected_native_code = std::nullopt,
                        std::source_location caller = std::source_location::current()) {
  INFO("expected from the call at line ", caller.line());
  try {
    call();
    FAIL_CHECK("no hal::Error was thrown");
  } catch (const hal::Error& error) {
    const std::string message = error.status().message();
    INFO("message: ", message);
    CHECK(error.code() == expected_code);
    if (expected_native_code) CHECK(error.status().native_code() == *expected_native_code);
    for (const std::string_view fragment : message_fragments) {
      INFO("missing fragment: ", std::string(fragment));
      CHECK(message.find(fragment) != std::string::npos);
    }
  } catch (const std::exception& other) {
    FAIL_CHECK("threw something other than hal::Error: " << other.what());
  }
}

// Blocks a stream at a point of its queue until open() is called. Opening
// also happens on destruction, so a failing test never leaves a stream stuck.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() { open(); }

  void block(const hal::Stream& stream) {
    stream.enqueue_host_callback([latch = latch_](const hal::Status&) { latch->wait(); });
  }
  void open() {
    if (!opened_) latch_->count_down();
    opened_ = true;
  }

 private:
  std::shared_ptr<std::latch> latch_ = std::make_shared<std::latch>(1);
  bool opened_ = false;
};

// Bytes start, start + 1, ... (wrapping), so that misplaced bytes show.
inline std::vector<std::uint8_t> counting_bytes(std::size_t count, std::uint8_t start = 0) {
  std::vector<std::uint8_t> bytes(count);
  for (std::size_t i = 0; i < count; ++i) bytes[i] = static_cast<std::uint8_t>(start + i);
  return bytes;
}

inline std::vector<std::uint8_t> read_all(const hal::Buffer& buffer) {
  std::vector<std::uint8_t> bytes(buffer.size());
  buffer.read(0, bytes.data(), bytes.size());
  return bytes;
}

}  // namespace hal_test
