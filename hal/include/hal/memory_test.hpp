// Device memory testing: elements of march tests run by the device itself
// over its own memory (a kernel on a GPU, a stream worker on the host
// backend), so testing most of a GPU's memory does not cross the bus.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "hal/device.hpp"

namespace hal {

namespace detail {
struct DeviceMemoryTestState;
}

class Buffer;
class Stream;

// What each 8-byte word must hold when read, or is set to.
enum class MemoryTestWord : std::uint32_t {
  none = 0,                // nothing checked / written
  constant = 1,            // the element's 64-bit value
  address = 2,             // the word's own region offset
  address_complement = 3,  // its bitwise complement
};
std::string_view to_string(MemoryTestWord word);

// One element of a march test: every 8-byte word of a range is read and
// checked against `check`, then set to `write`. A GPU has no single order
// over all its threads: each thread walks its own words up (or down, with
// `descending`), checking and writing each before the next.
struct MemoryTestElement {
  MemoryTestWord check = MemoryTestWord::none;
  std::uint64_t check_value = 0;  // the word a `constant` check expects
  MemoryTestWord write = MemoryTestWord::none;
  std::uint64_t write_value = 0;  // the word a `constant` write stores
  bool descending = false;
};

// A word that read wrong.
struct MemoryTestFailure {
  std::uint64_t offset = 0;  // region offset (see DeviceMemoryTest::run)
  std::uint64_t expected = 0;
  std::uint64_t found = 0;
  bool operator==(const MemoryTestFailure&) const = default;
};

// What the elements found between two collect() calls.
struct MemoryTestFindings {
  std::uint64_t failing_words = 0;          // every check that read wrong
  std::vector<MemoryTestFailure> failures;  // the first `capacity` of them, sorted by offset
  bool truncated() const { return failures.size() < failing_words; }
};

// Runs march elements on one device and gathers what they find in a report
// in the device's memory, read back only by collect(). Copies share the
// report.
class DeviceMemoryTest {
 public:
  static constexpr std::uint32_t max_capacity = 1u << 20;

  // Whether the device's backend can run memory test elements itself.
  static bool available(const Device& device);

  // Allocates a report holding up to `capacity` failures (1..max_capacity)
  // on the device. Throws unsupported when the backend's plugin offers no
  // memory test, invalid_argument for a capacity out of range.
  explicit DeviceMemoryTest(const Device& device, std::uint32_t capacity = 1024);

  Device device() const;
  std::uint32_t capacity() const;

  // Enqueues one element over bytes [offset, offset + size) of `buffer` (on
  // this device; offset and size multiples of 8, size > 0) on `stream` (of
  // this device). `region_offset` (a multiple of 8) is what the range's first
  // word is called in the tested region: address words hold it and failures
  // are reported by it, so ranges of several buffers form one region.
  void run(const Stream& stream, const Buffer& buffer, std::uint64_t offset, std::uint64_t size,
           const MemoryTestElement& element, std::uint64_t region_offset = 0) const;

  // Waits for `stream` (run every element on it, or synchronize the others
  // first), reads what the elements found since the last collect and clears
  // the report. Throws the stream's error when an element failed to run.
  MemoryTestFindings collect(const Stream& stream) const;

 private:
  std::shared_ptr<detail::DeviceMemoryTestState> state_;
};

}  // namespace hal
