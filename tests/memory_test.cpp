// Buffer semantics on the host backend: allocation, transfers, fills,
// range checks and the freed/empty states.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core_test_support.hpp"

namespace {

using hal::MemoryKind;
using hal::StatusCode;
using hal_test::check_error;
using hal_test::counting_bytes;
using hal_test::HostDeviceFixture;
using hal_test::read_all;

constexpr std::array all_memory_kinds = {MemoryKind::device, MemoryKind::host_pinned, MemoryKind::managed};
constexpr std::uint64_t two_mebibytes = 2ULL << 20;

// What fill() must produce: the low pattern_size bytes of pattern, repeated.
void fill_reference(std::vector<std::uint8_t>& bytes, std::uint64_t offset, std::uint64_t size, std::uint32_t pattern,
                    std::uint32_t pattern_size) {
  for (std::uint64_t i = 0; i < size; ++i)
    bytes[offset + i] = static_cast<std::uint8_t>(pattern >> (8 * (i % pattern_size)));
}

hal::Buffer counting_buffer(const hal::Device& device, std::uint64_t size) {
  hal::Buffer buffer = device.allocate(size);
  const auto bytes = counting_bytes(size);
  buffer.write(0, bytes.data(), size);
  return buffer;
}

TEST_CASE_FIXTURE(HostDeviceFixture, "allocations of every kind honour the requested alignment") {
  for (const MemoryKind kind : all_memory_kinds) {
    for (const std::uint64_t alignment : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{8}, std::uint64_t{64},
                                          std::uint64_t{4096}, two_mebibytes}) {
      CAPTURE(hal::to_string(kind));
      CAPTURE(alignment);
      const hal::Buffer buffer = device.allocate(100, kind, alignment);
      const auto address = reinterpret_cast<std::uintptr_t>(buffer.device_address());
      CHECK(address % (alignment == 0 ? 64 : alignment) == 0);
      CHECK(buffer.valid());
      CHECK(buffer.size() == 100);
      CHECK(buffer.kind() == kind);
      CHECK(buffer.device() == device);
    }
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "allocation arguments are validated") {
  check_error([&] { device.allocate(0); }, StatusCode::invalid_argument, {"size", "is 0", "host:0"});
  for (const std::uint64_t alignment : {std::uint64_t{3}, std::uint64_t{48}, std::uint64_t{4097}}) {
    CAPTURE(alignment);
    check_error([&] { device.allocate(64, MemoryKind::device, alignment); }, StatusCode::invalid_argument,
                {"alignment " + std::to_string(alignment), "power of two"});
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "an impossible allocation is out_of_memory, not a crash") {
  constexpr std::uint64_t huge = 1ULL << 62;
  for (const MemoryKind kind : all_memory_kinds) {
    CAPTURE(hal::to_string(kind));
    check_error([&] { device.allocate(huge, kind); }, StatusCode::out_of_memory, {std::to_string(huge)});
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "write and read round-trip at offsets") {
  hal::Buffer buffer = device.allocate(64);
  buffer.fill(0, 64, 0);
  const auto payload = counting_bytes(20, 100);
  buffer.write(10, payload.data(), payload.size());

  std::vector<std::uint8_t> expected(64, 0);
  std::copy(payload.begin(), payload.end(), expected.begin() + 10);
  CHECK(read_all(buffer) == expected);

  std::array<std::uint8_t, 5> middle{};
  buffer.read(13, middle.data(), middle.size());
  CHECK(middle == std::array<std::uint8_t, 5>{103, 104, 105, 106, 107});

  // Zero-byte transfers at the very end are in range and change nothing.
  buffer.write(64, nullptr, 0);
  buffer.read(64, nullptr, 0);
  CHECK(read_all(buffer) == expected);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "copy_from copies between buffers and within one buffer like memmove") {
  SUBCASE("between two buffers") {
    const hal::Buffer source = counting_buffer(device, 64);
    hal::Buffer destination = device.allocate(64);
    destination.fill(0, 64, 0xEE);
    destination.copy_from(8, source, 40, 16);

    std::vector<std::uint8_t> expected(64, 0xEE);
    const auto source_bytes = counting_bytes(64);
    std::copy_n(source_bytes.begin() + 40, 16, expected.begin() + 8);
    CHECK(read_all(destination) == expected);
  }
  SUBCASE("overlapping, forwards and backwards") {
    for (const auto& [destination_offset, source_offset] : {std::pair{4, 0}, std::pair{0, 4}}) {
      CAPTURE(destination_offset);
      CAPTURE(source_offset);
      hal::Buffer buffer = counting_buffer(device, 32);
      buffer.copy_from(destination_offset, buffer, source_offset, 20);

      auto expected = counting_bytes(32);
      std::memmove(expected.data() + destination_offset, expected.data() + source_offset, 20);
      CHECK(read_all(buffer) == expected);
    }
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "fill writes 1, 2 and 4 byte patterns at offsets") {
  struct FillCase {
    std::uint64_t offset, size;
    std::uint32_t pattern, pattern_size;
  };
  // 0xABAB and 0x77777777 repeat one byte; the others do not.
  for (const FillCase& fill : {FillCase{3, 17, 0x5A, 1}, FillCase{2, 12, 0xBEEF, 2}, FillCase{6, 8, 0xABAB, 2},
                               FillCase{4, 20, 0x12345678, 4}, FillCase{8, 16, 0x77777777, 4}}) {
    CAPTURE(fill.offset);
    CAPTURE(fill.pattern_size);
    hal::Buffer buffer = counting_buffer(device, 40);
    buffer.fill(fill.offset, fill.size, fill.pattern, fill.pattern_size);

    auto expected = counting_bytes(40);
    fill_reference(expected, fill.offset, fill.size, fill.pattern, fill.pattern_size);
    CHECK(read_all(buffer) == expected);
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "fill rejects bad pattern sizes and misaligned ranges") {
  const hal::Buffer buffer = counting_buffer(device, 64);
  check_error([&] { buffer.fill(0, 12, 0, 3); }, StatusCode::invalid_argument, {"pattern_size 3", "1, 2 or 4"});
  check_error([&] { buffer.fill(0, 8, 0, 0); }, StatusCode::invalid_argument, {"pattern_size 0"});
  check_error([&] { buffer.fill(1, 8, 0, 2); }, StatusCode::invalid_argument, {"offset 1", "pattern_size 2"});
  check_error([&] { buffer.fill(4, 6, 0, 4); }, StatusCode::invalid_argument, {"size 6", "pattern_size 4"});
  CHECK(read_all(buffer) == counting_bytes(64));
}

TEST_CASE_FIXTURE(HostDeviceFixture, "ranges outside the buffer are rejected and named") {
  const hal::Buffer buffer = counting_buffer(device, 64);
  const hal::Buffer other = counting_buffer(device, 64);
  std::vector<std::uint8_t> host(64);
  constexpr std::uint64_t near_max = std::numeric_limits<std::uint64_t>::max() - 1;
  const std::string near_max_text = std::to_string(near_max);

  check_error([&] { buffer.read(60, host.data(), 8); }, StatusCode::invalid_argument,
              {"Buffer::read", "[60, 60 + 8)", "at most 64"});
  check_error([&] { buffer.read(65, host.data(), 0); }, StatusCode::invalid_argument, {"[65, 65 + 0)"});
  check_error([&] { buffer.write(near_max, host.data(), 4); }, StatusCode::invalid_argument,
              {"Buffer::write", "[" + near_max_text + ", " + near_max_text + " + 4)"});
  check_error([&] { buffer.fill(near_max - 2, 4, 0, 4); }, StatusCode::invalid_argument,
              {"Buffer::fill", std::to_string(near_max - 2)});
  check_error([&] { buffer.copy_from(0, other, near_max, 4); }, StatusCode::invalid_argument,
              {"(source)", near_max_text});
  check_error([&] { buffer.copy_from(32, other, 0, 33); }, StatusCode::invalid_argument,
              {"(destination)", "[32, 32 + 33)"});
  CHECK(read_all(buffer) == counting_bytes(64));
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a freed buffer cannot be used again") {
  hal::Buffer buffer = device.allocate(64);
  const hal::Buffer other = device.allocate(64);
  buffer.free();
  CHECK_FALSE(buffer.valid());

  std::array<std::uint8_t, 4> host{};
  check_error([&] { buffer.read(0, host.data(), 4); }, StatusCode::invalid_argument, {"Buffer::read", "freed"});
  check_error([&] { buffer.write(0, host.data(), 4); }, StatusCode::invalid_argument, {"Buffer::write", "freed"});
  check_error([&] { (void)buffer.size(); }, StatusCode::invalid_argument, {"Buffer::size", "freed"});
  check_error([&] { (void)buffer.host_address(); }, StatusCode::invalid_argument, {"freed"});
  check_error([&] { buffer.fill(0, 4, 0); }, StatusCode::invalid_argument, {"freed"});
  check_error([&] { other.copy_from(0, buffer, 0, 4); }, StatusCode::invalid_argument, {"freed"});
  check_error([&] { buffer.free(); }, StatusCode::invalid_argument, {"Buffer::free", "freed"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "copies of a buffer share one allocation") {
  hal::Buffer original = counting_buffer(device, 16);
  hal::Buffer copy = original;
  CHECK(copy.host_address() == original.host_address());

  const std::uint8_t marker = 0xC3;
  copy.write(5, &marker, 1);
  std::uint8_t seen = 0;
  original.read(5, &seen, 1);
  CHECK(seen == marker);

  copy.free();
  CHECK_FALSE(original.valid());
  check_error([&] { original.read(0, &seen, 1); }, StatusCode::invalid_argument, {"freed"});
  check_error([&] { original.free(); }, StatusCode::invalid_argument, {"freed"});
}

TEST_CASE("a default-constructed buffer is empty and unusable") {
  hal::Buffer empty;
  std::uint8_t byte = 0;
  CHECK_FALSE(empty.valid());
  check_error([&] { (void)empty.size(); }, StatusCode::invalid_argument, {"Buffer::size", "empty"});
  check_error([&] { empty.read(0, &byte, 1); }, StatusCode::invalid_argument, {"Buffer::read", "empty"});
  check_error([&] { empty.write(0, &byte, 1); }, StatusCode::invalid_argument, {"Buffer::write", "empty"});
  check_error([&] { (void)empty.device(); }, StatusCode::invalid_argument, {"empty"});
  check_error([&] { empty.free(); }, StatusCode::invalid_argument, {"Buffer::free", "empty"});
}

TEST_CASE_FIXTURE(HostDeviceFixture, "host_address maps every kind of host memory") {
  for (const MemoryKind kind : all_memory_kinds) {
    CAPTURE(hal::to_string(kind));
    hal::Buffer buffer = device.allocate(32, kind);
    auto* mapped = static_cast<std::uint8_t*>(buffer.host_address());
    REQUIRE(mapped != nullptr);
    const auto bytes = counting_bytes(32, 7);
    std::memcpy(mapped, bytes.data(), bytes.size());
    CHECK(read_all(buffer) == bytes);

    buffer.fill(0, 32, 0x99);
    CHECK(mapped[0] == 0x99);
    CHECK(mapped[31] == 0x99);
  }
}

}  // namespace
