// Helpers for tests of any backend through hal's public API: error checks,
// byte patterns, capabilities, and a gate that holds a stream.
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

namespace hal::testing {

inline bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// Checks that call throws hal::Error with the code, a message containing
// every fragment and, when given, the vendor's native code; failures name
// the line of the caller.
inline void check_error(const std::function<void()>& call, StatusCode expected_code,
                        std::initializer_list<std::string_view> fragments,
                        std::optional<long long> expected_native_code = std::nullopt,
                        std::source_location caller = std::source_location::current()) {
  INFO("expected from the call at line ", caller.line());
  try {
    call();
    FAIL_CHECK("no hal::Error was thrown");
  } catch (const hal::Error& error) {
    INFO("message: ", error.status().message());
    CHECK(error.code() == expected_code);
    if (expected_native_code) CHECK(error.status().native_code() == *expected_native_code);
    for (const std::string_view fragment : fragments) {
      INFO("missing fragment: ", std::string(fragment));
      CHECK(contains(error.status().message(), fragment));
    }
  } catch (const std::exception& other) {
    FAIL_CHECK("threw something other than hal::Error: " << other.what());
  }
}

// Options that keep the user's config file out of the tests.
inline RuntimeOptions options_without_config_file() {
  RuntimeOptions options;
  options.config = Config{};
  return options;
}

// Bytes start, start + 1, ... (wrapping), so that misplaced bytes show.
inline std::vector<std::uint8_t> counting_bytes(std::size_t count, std::uint8_t start = 0) {
  std::vector<std::uint8_t> bytes(count);
  for (std::size_t i = 0; i < count; ++i) bytes[i] = static_cast<std::uint8_t>(start + i);
  return bytes;
}

inline std::vector<std::uint8_t> read_all(const Buffer& buffer) {
  std::vector<std::uint8_t> bytes(buffer.size());
  buffer.read(0, bytes.data(), bytes.size());
  return bytes;
}

// Every candidate's reasons, one per line; only `implementation`'s when given.
inline std::string candidate_reasons(const AttentionDecision& decision,
                                     std::optional<AttentionImplementation> implementation = std::nullopt) {
  std::string reasons;
  for (const AttentionCandidate& candidate : decision.candidates)
    if (!implementation || candidate.implementation == *implementation)
      for (const std::string& reason : candidate.reasons) reasons += reason + "\n";
  return reasons;
}

// What a health event must be; a member left unset is not checked.
struct ExpectedHealthEvent {
  std::optional<HealthEventKind> kind{};
  std::optional<std::int64_t> code{};
  std::optional<std::string> device_id{};
  std::optional<std::string> description{};
};

// Checks that a monitor's wait gave an event, and that it is the one
// expected; failures name the line of the caller.
inline void check_health_event(const std::optional<HealthEvent>& event, const ExpectedHealthEvent& expected,
                               std::source_location caller = std::source_location::current()) {
  INFO("expected from the call at line ", caller.line());
  REQUIRE(event.has_value());
  if (expected.kind) CHECK(event->kind == *expected.kind);
  if (expected.code) CHECK(event->code == *expected.code);
  if (expected.device_id) CHECK(event->device_id == *expected.device_id);
  if (expected.description) CHECK(event->description == *expected.description);
}

inline const Capability& capability(const DeviceInfo& info, std::string_view key) {
  const Capability* found = info.find_capability(key);
  REQUIRE_MESSAGE(found != nullptr, "no capability " << key);
  return *found;
}

// A vendor's error: its name as messages print it, and its code.
struct VendorError {
  const char* name;
  long long code;
};

// A backend's fake vendor library as the shared GPU cases
// (gpu_fake_error_cases.inc) use it: how to make one of its functions fail,
// and the vendor's errors that follow.
struct FakeVendor {
  const char* backend;        // "cuda": its devices are cuda:0, cuda:1
  const char* fail_variable;  // "<function>=<code>" in it makes the fake's function return code
  // The functions behind Stream::fill, Buffer::read, Buffer::write and Device::allocate.
  const char* fill_async;
  const char* copy_to_host;
  const char* copy_to_device;
  const char* allocate;
  VendorError out_of_memory, illegal_address, launch_failure, not_supported, unknown;
};

// Holds a stream at a point of its queue until open(); opens on destruction
// so a failing test never leaves a stream stuck.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(StreamGate&&) = default;
  ~StreamGate() { open(); }
  void block(const Stream& stream) {
    stream.enqueue_host_callback([latch = latch_](const Status&) { latch->wait(); });
  }
  // For a vendor's host function on a native stream (cuLaunchHostFunc,
  // hipStreamAddCallback): pass wait_on_latch with latch_for_vendor().
  void* latch_for_vendor() { return latch_.get(); }
  static void wait_on_latch(void* latch) { static_cast<std::latch*>(latch)->wait(); }
  void open() {
    if (!opened_) latch_->count_down();
    opened_ = true;
  }

 private:
  std::shared_ptr<std::latch> latch_ = std::make_shared<std::latch>(1);
  bool opened_ = false;
};

}  // namespace hal::testing
