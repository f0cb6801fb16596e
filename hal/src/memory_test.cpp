// Device memory testing over each backend's optional memory test sub-table.
#include "hal/memory_test.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "hal/memory.hpp"
#include "hal/stream.hpp"
#include "loaded_backend.hpp"

namespace hal {

namespace detail {

static_assert(static_cast<std::uint32_t>(MemoryTestWord::none) == HAL_MEMORY_TEST_NONE &&
              static_cast<std::uint32_t>(MemoryTestWord::constant) == HAL_MEMORY_TEST_CONSTANT &&
              static_cast<std::uint32_t>(MemoryTestWord::address) == HAL_MEMORY_TEST_ADDRESS &&
              static_cast<std::uint32_t>(MemoryTestWord::address_complement) == HAL_MEMORY_TEST_ADDRESS_COMPLEMENT);

struct DeviceMemoryTestState {
  Device device;
  const hal_memory_test_v1* table = nullptr;
  Buffer report;  // the header, then `capacity` failure records
  std::uint32_t capacity = 0;
};

}  // namespace detail

namespace {

constexpr std::uint64_t header_bytes = sizeof(hal_memory_test_report_v1);
constexpr std::uint64_t record_bytes = sizeof(hal_memory_test_failure_v1);

const detail::DeviceMemoryTestState& usable(const std::shared_ptr<detail::DeviceMemoryTestState>& state,
                                            std::string_view operation) {
  if (!state)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the memory test is empty (moved from)");
  return *state;
}

// The stream's state; it must be on the test's device.
const detail::StreamState& stream_of(const detail::DeviceMemoryTestState& test, const Stream& stream,
                                     std::string_view operation, const std::string& advice) {
  const auto& state = detail::usable_stream(detail::Access::state(stream), operation);
  if (!(state.device == test.device))
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the stream is on " + state.device.id() +
                                                  " and the memory test on " + test.device.id() + "; " + advice);
  return state;
}

void check_word(MemoryTestWord word, std::string_view role, std::string_view operation) {
  if (static_cast<std::uint32_t>(word) > static_cast<std::uint32_t>(MemoryTestWord::address_complement))
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the element's " + std::string(role) +
                                                  " word kind " + std::to_string(static_cast<std::uint32_t>(word)) +
                                                  " is not none, constant, address or address_complement");
}

void check_multiple_of_word(std::uint64_t value, std::string_view name, std::string_view operation) {
  if (value % 8 != 0)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": " + std::string(name) + " " +
                                                  std::to_string(value) + " is not a multiple of the 8-byte word");
}

}  // namespace

std::string_view to_string(MemoryTestWord word) {
  switch (word) {
    case MemoryTestWord::none: return "none";
    case MemoryTestWord::constant: return "constant";
    case MemoryTestWord::address: return "address";
    case MemoryTestWord::address_complement: return "address_complement";
  }
  return "unknown";
}

bool DeviceMemoryTest::available(const Device& device) {
  return detail::Access::backend(device)->memory_test() != nullptr;
}

DeviceMemoryTest::DeviceMemoryTest(const Device& device, std::uint32_t capacity) {
  constexpr std::string_view operation = "DeviceMemoryTest";
  const hal_memory_test_v1* table = detail::Access::backend(device)->memory_test();
  if (table == nullptr)
    throw Error(StatusCode::unsupported, std::string(operation) + ": the " + device.backend_name() +
                                             " backend's plugin offers no device memory test (its table has no "
                                             "memory_test entry); test " + device.id() +
                                             "'s memory through Buffer::write and Buffer::read instead, or update "
                                             "the plugin");
  if (capacity == 0 || capacity > max_capacity)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": capacity " + std::to_string(capacity) +
                                                  " is out of range; the report holds 1 to " +
                                                  std::to_string(max_capacity) + " failures");
  auto state = std::make_shared<detail::DeviceMemoryTestState>(detail::DeviceMemoryTestState{device, table, {}, capacity});
  state->report = device.allocate(header_bytes + record_bytes * capacity);
  state->report.fill(0, header_bytes, 0);
  state_ = std::move(state);
}

Device DeviceMemoryTest::device() const { return usable(state_, "DeviceMemoryTest::device").device; }
std::uint32_t DeviceMemoryTest::capacity() const { return usable(state_, "DeviceMemoryTest::capacity").capacity; }

void DeviceMemoryTest::run(const Stream& stream, const Buffer& buffer, std::uint64_t offset, std::uint64_t size,
                           const MemoryTestElement& element, std::uint64_t region_offset) const {
  constexpr std::string_view operation = "DeviceMemoryTest::run";
  const auto& test = usable(state_, operation);
  const auto& stream_state = stream_of(test, stream, operation, "use a stream of " + test.device.id());
  const auto& tested = detail::buffer_on_stream_device(stream_state, detail::Access::state(buffer), operation);
  tested.check_range(offset, size, operation);
  if (size == 0)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": size 0 tests nothing; give at least one 8-byte word");
  check_multiple_of_word(offset, "offset", operation);
  check_multiple_of_word(size, "size", operation);
  check_multiple_of_word(region_offset, "region_offset", operation);
  if (region_offset > std::numeric_limits<std::uint64_t>::max() - size)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": region_offset " + std::to_string(region_offset) +
                                                  " + size " + std::to_string(size) + " passes 2^64");
  check_word(element.check, "check", operation);
  check_word(element.write, "write", operation);
  if (element.check == MemoryTestWord::none && element.write == MemoryTestWord::none)
    throw Error(StatusCode::invalid_argument,
                std::string(operation) + ": the element neither checks nor writes (both word kinds are none)");

  hal_memory_test_element_v1 abi{};
  abi.struct_size = sizeof(abi);
  abi.check = static_cast<std::uint32_t>(element.check);
  abi.write = static_cast<std::uint32_t>(element.write);
  abi.check_word = element.check_value;
  abi.write_word = element.write_value;
  abi.region_offset = region_offset;
  abi.descending = element.descending ? 1 : 0;
  const auto& report = *detail::Access::state(test.report);
  tested.backend->check(test.table->run_element(stream_state.handle, tested.ref(offset), size, &abi, report.ref(0),
                                                test.capacity),
                        [&] {
                          return "enqueueing a memory test element (check " + std::string(to_string(element.check)) +
                                 ", write " + std::string(to_string(element.write)) + ") over " + std::to_string(size) +
                                 " bytes of the " + tested.describe();
                        });
}

MemoryTestFindings DeviceMemoryTest::collect(const Stream& stream) const {
  constexpr std::string_view operation = "DeviceMemoryTest::collect";
  const auto& test = usable(state_, operation);
  (void)stream_of(test, stream, operation, "collect with the stream its elements ran on");
  stream.synchronize();
  hal_memory_test_report_v1 header{};
  test.report.read(0, &header, header_bytes);
  MemoryTestFindings findings;
  findings.failing_words = header.failing_words;
  const std::uint64_t recorded = std::min<std::uint64_t>(header.failing_words, test.capacity);
  if (recorded > 0) {
    std::vector<hal_memory_test_failure_v1> records(recorded);
    test.report.read(header_bytes, records.data(), recorded * record_bytes);
    findings.failures.reserve(recorded);
    for (const auto& record : records) findings.failures.push_back({record.offset, record.expected, record.found});
    std::sort(findings.failures.begin(), findings.failures.end(),
              [](const MemoryTestFailure& a, const MemoryTestFailure& b) { return a.offset < b.offset; });
  }
  if (header.failing_words > 0) test.report.fill(0, header_bytes, 0);
  return findings;
}

}  // namespace hal
