// Memory cases: allocation, copies and fills checked byte for byte against
// host reference data (api tier), at many sizes and offsets (numerics tier).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "case_support.hpp"

namespace hal::conformance::cases {
namespace {

void allocate_free(CaseContext& context) {
  for (const std::uint64_t size : {std::uint64_t{1}, std::uint64_t{4096}, std::uint64_t{1} << 20}) {
    Buffer buffer = context.device().allocate(size);
    context.require(buffer.valid() && buffer.size() >= size,
                    "allocating " + byte_count(size) + " gave a buffer of " + std::to_string(buffer.size()) + " bytes");
    buffer.free();
    context.require(!buffer.valid(), "a freed buffer still reports itself valid");
  }
  // A second free is the caller's error and must be reported, not crash.
  Buffer buffer = context.device().allocate(64);
  buffer.free();
  try {
    buffer.free();
  } catch (const Error& error) {
    context.require(error.code() == StatusCode::invalid_argument,
                    std::string("a double free was reported as ") + std::string(to_string(error.code())) +
                        ", expected invalid_argument");
    return;
  }
  context.fail("freeing a buffer twice was not reported as an error");
}

// Host -> device, device -> device at an odd offset, device -> host.
void copy_roundtrip_with(CaseContext& context, MemoryKind kind) {
  const std::size_t size = (std::size_t{1} << 20) + 3;
  const std::uint64_t offset = 17;
  const auto reference = reference_bytes(size, context.seed("copy_roundtrip"));
  Buffer source = context.device().allocate(size, kind);
  Buffer destination = context.device().allocate(size + offset, kind);
  source.write(0, reference.data(), size);
  destination.copy_from(offset, source, 0, size);
  std::vector<std::uint8_t> result(size);
  destination.read(offset, result.data(), size);
  context.require_equal_bytes(result.data(), reference.data(), size,
                              "host->device->device->host copy of " + byte_count(size) + " at offset 17");
  context.note("copied " + byte_count(size) + " through " + std::string(to_string(kind)) + " memory");
}

void copy_roundtrip(CaseContext& context) { copy_roundtrip_with(context, MemoryKind::device); }

void fill_patterns(CaseContext& context) {
  constexpr std::size_t size = 8192;
  struct FillCase {
    std::uint32_t pattern, pattern_size;
    std::uint64_t offset, length;
  };
  const FillCase fills[] = {{0xA5, 1, 3, 4001}, {0xBEEF, 2, 64, 2048}, {0xDEADBEEF, 4, 4, 8184}, {0x00, 1, 0, size}};
  Buffer buffer = context.device().allocate(size);
  for (const auto& fill : fills) {
    auto expected = reference_bytes(size, context.seed("fill_patterns"));
    buffer.write(0, expected.data(), size);
    buffer.fill(fill.offset, fill.length, fill.pattern, fill.pattern_size);
    const auto pattern_bytes = reference_fill(fill.length, fill.pattern, fill.pattern_size);
    std::copy(pattern_bytes.begin(), pattern_bytes.end(), expected.begin() + static_cast<std::ptrdiff_t>(fill.offset));
    std::vector<std::uint8_t> result(size);
    buffer.read(0, result.data(), size);
    // The whole buffer is compared: bytes outside the range must be untouched.
    context.require_equal_bytes(result.data(), expected.data(), size,
                                std::to_string(fill.pattern_size) + "-byte fill of " + std::to_string(fill.length) +
                                    " bytes at offset " + std::to_string(fill.offset));
  }
}

void host_pinned(CaseContext& context) {
  Buffer pinned = context.device().allocate(1 << 20, MemoryKind::host_pinned);
  void* address = pinned.host_address();
  context.require(address != nullptr, "host-pinned memory has no host address");
  const auto reference = reference_bytes(1 << 20, context.seed("host_pinned"));
  std::copy(reference.begin(), reference.end(), static_cast<std::uint8_t*>(address));
  Buffer device_buffer = context.device().allocate(1 << 20);
  device_buffer.copy_from(0, pinned, 0, 1 << 20);
  std::vector<std::uint8_t> result(1 << 20);
  device_buffer.read(0, result.data(), result.size());
  context.require_equal_bytes(result.data(), reference.data(), result.size(),
                              "bytes written through the pinned host address, copied to device memory");
}

void managed(CaseContext& context) {
  constexpr std::size_t size = 1 << 20;
  Buffer buffer = context.device().allocate(size, MemoryKind::managed);
  auto* host = static_cast<std::uint8_t*>(buffer.host_address());
  context.require(host != nullptr, "managed memory has no host address");
  const auto reference = reference_bytes(size, context.seed("managed"));
  std::copy(reference.begin(), reference.end(), host);
  // The device copies what the host wrote; the host reads what the device wrote.
  Buffer copy = context.device().allocate(size);
  copy.copy_from(0, buffer, 0, size);
  buffer.fill(0, size, 0x5A, 1);
  std::vector<std::uint8_t> result(size);
  copy.read(0, result.data(), size);
  context.require_equal_bytes(result.data(), reference.data(), size, "host writes to managed memory seen by the device");
  const auto filled = reference_fill(size, 0x5A, 1);
  context.require_equal_bytes(host, filled.data(), size, "a device fill of managed memory seen by the host");
}

void bounds_checked(CaseContext& context) {
  Buffer buffer = context.device().allocate(4096);
  std::vector<std::uint8_t> bytes(8192);
  auto expect_invalid = [&](auto&& operation, const std::string& what) {
    try {
      operation();
    } catch (const Error& error) {
      context.require(error.code() == StatusCode::invalid_argument,
                      what + " was reported as " + std::string(to_string(error.code())) + ", expected invalid_argument");
      return;
    }
    context.fail(what + " was accepted; it must be rejected as invalid_argument");
  };
  expect_invalid([&] { buffer.write(4000, bytes.data(), 100); }, "a write past the end");
  expect_invalid([&] { buffer.read(0, bytes.data(), 8192); }, "a read past the end");
  expect_invalid([&] { buffer.fill(1, 4, 0, 2); }, "a 2-byte fill at an odd offset");
  expect_invalid([&] { buffer.write(~std::uint64_t{0} - 8, bytes.data(), 16); }, "a write whose range overflows");
}

// Many sizes and offsets, including ones no power of two hits, with random data.
void copy_random_ranges(CaseContext& context) {
  const std::size_t capacity = context.quick() ? (1u << 20) : (16u << 20);
  const int rounds = context.quick() ? 24 : 64;
  std::mt19937_64 generator(context.seed("memory operations"));
  Buffer first = context.device().allocate(capacity);
  Buffer second = context.device().allocate(capacity);
  std::vector<std::uint8_t> mirror_first(capacity, 0), mirror_second(capacity, 0);
  first.fill(0, capacity, 0, 1);
  second.fill(0, capacity, 0, 1);
  for (int round = 0; round < rounds; ++round) {
    const std::size_t size = 1 + generator() % (capacity / 2);
    const std::size_t source_offset = generator() % (capacity - size + 1);
    const std::size_t destination_offset = generator() % (capacity - size + 1);
    const auto data = reference_bytes(size, context.seed("memory round " + std::to_string(round)));
    first.write(source_offset, data.data(), size);
    std::copy(data.begin(), data.end(), mirror_first.begin() + static_cast<std::ptrdiff_t>(source_offset));
    second.copy_from(destination_offset, first, source_offset, size);
    std::copy_n(mirror_first.begin() + static_cast<std::ptrdiff_t>(source_offset), size,
                mirror_second.begin() + static_cast<std::ptrdiff_t>(destination_offset));
  }
  std::vector<std::uint8_t> result(capacity);
  second.read(0, result.data(), capacity);
  context.require_equal_bytes(result.data(), mirror_second.data(), capacity,
                              std::to_string(rounds) + " random-range copies");
  first.read(0, result.data(), capacity);
  context.require_equal_bytes(result.data(), mirror_first.data(), capacity,
                              std::to_string(rounds) + " random-range writes");
  context.note(std::to_string(rounds) + " copies within " + byte_count(capacity) + " matched the host reference");
}

}  // namespace

void register_cases_memory(Registry& registry) {
  registry.add({"api.memory.allocate_free", Tier::api,
                "device buffers of 1 B to 1 MiB allocate and free; a double free is reported", "", false, 0,
                allocate_free});
  registry.add({"api.memory.copy_roundtrip", Tier::api,
                "host->device, device->device at an odd offset and device->host copies return the bytes written", "",
                false, 0, copy_roundtrip});
  registry.add({"api.memory.fill_patterns", Tier::api,
                "1-, 2- and 4-byte fills write exactly their range and nothing outside it", "", false, 0,
                fill_patterns});
  registry.add({"api.memory.host_pinned", Tier::api,
                "page-locked host memory is host-addressable and copies to device memory", "memory.host_pinned", true,
                0, host_pinned});
  registry.add({"api.memory.managed", Tier::api,
                "managed memory is coherent between host writes and device copies and fills", "memory.managed", true,
                0, managed});
  registry.add({"api.memory.bounds_checked", Tier::api,
                "out-of-range and misaligned transfers are rejected as invalid_argument", "", false, 0,
                bounds_checked});
  registry.add({"numerics.memory.copy_random_ranges", Tier::numerics,
                "random sizes and offsets of writes and device copies match a host mirror", "", false, 0,
                copy_random_ranges});
}

}  // namespace hal::conformance::cases
