// hal::DeviceMemoryTest on the host backend: every word kind, both orders,
// failure records and the report's capacity, region offsets, argument checks,
// and a plugin without the memory test sub-table.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core_test_support.hpp"
#include "hal/memory_test.hpp"
#include "scoped_environment.hpp"

namespace {

using hal::DeviceMemoryTest;
using hal::MemoryTestElement;
using hal::MemoryTestFailure;
using hal::MemoryTestWord;
using hal::StatusCode;
using hal_test::check_error;
using hal_test::HostDeviceFixture;

constexpr std::uint64_t test_bytes = 4096;

MemoryTestElement write_only(MemoryTestWord word, std::uint64_t value = 0) {
  MemoryTestElement element;
  element.write = word;
  element.write_value = value;
  return element;
}

MemoryTestElement check_only(MemoryTestWord word, std::uint64_t value = 0, bool descending = false) {
  MemoryTestElement element;
  element.check = word;
  element.check_value = value;
  element.descending = descending;
  return element;
}

std::uint64_t word_at(const hal::Buffer& buffer, std::uint64_t offset) {
  std::uint64_t word = 0;
  buffer.read(offset, &word, 8);
  return word;
}

void put_word(const hal::Buffer& buffer, std::uint64_t offset, std::uint64_t word) { buffer.write(offset, &word, 8); }

TEST_CASE_FIXTURE(HostDeviceFixture, "the host backend runs memory test elements of every word kind") {
  REQUIRE(DeviceMemoryTest::available(device));
  const DeviceMemoryTest test(device, 16);
  CHECK(test.capacity() == 16);
  CHECK(test.device() == device);
  const hal::Buffer buffer = device.allocate(test_bytes);
  const hal::Stream stream = device.create_stream();
  const std::uint64_t region = 0x10000;  // the buffer's first word is called 0x10000

  SUBCASE("constant") {
    test.run(stream, buffer, 0, test_bytes, write_only(MemoryTestWord::constant, 0x0123456789abcdefull), region);
    test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::constant, 0x0123456789abcdefull), region);
    CHECK(test.collect(stream).failing_words == 0);
    CHECK(word_at(buffer, 8 * 17) == 0x0123456789abcdefull);
  }
  SUBCASE("address and its complement") {
    test.run(stream, buffer, 0, test_bytes, write_only(MemoryTestWord::address), region);
    stream.synchronize();
    CHECK(word_at(buffer, 0) == region);
    CHECK(word_at(buffer, 8 * 9) == region + 8 * 9);
    MemoryTestElement flip;
    flip.check = MemoryTestWord::address;
    flip.write = MemoryTestWord::address_complement;
    test.run(stream, buffer, 0, test_bytes, flip, region);
    test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::address_complement), region);
    CHECK(test.collect(stream).failing_words == 0);
    CHECK(word_at(buffer, 8 * 9) == ~(region + 8 * 9));
  }
  SUBCASE("a check and a write in one element, descending") {
    test.run(stream, buffer, 0, test_bytes, write_only(MemoryTestWord::constant, 0), region);
    MemoryTestElement up;
    up.check = MemoryTestWord::constant;
    up.check_value = 0;
    up.write = MemoryTestWord::constant;
    up.write_value = ~0ull;
    up.descending = true;
    test.run(stream, buffer, 0, test_bytes, up, region);
    test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::constant, ~0ull), region);
    CHECK(test.collect(stream).failing_words == 0);
  }
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a word that reads wrong is reported by region offset, with what was expected and found") {
  const DeviceMemoryTest test(device, 16);
  const hal::Buffer buffer = device.allocate(test_bytes);
  const hal::Stream stream = device.create_stream();
  const std::uint64_t region = 0x200000;
  test.run(stream, buffer, 0, test_bytes, write_only(MemoryTestWord::address), region);
  stream.synchronize();
  put_word(buffer, 0x108, (region + 0x108) ^ 0x40);  // bit 6 of the word at 0x108 flipped
  put_word(buffer, 0x20, 7);
  test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::address), region);
  const hal::MemoryTestFindings findings = test.collect(stream);
  CHECK(findings.failing_words == 2);
  CHECK_FALSE(findings.truncated());
  const std::vector<MemoryTestFailure> expected = {{region + 0x20, region + 0x20, 7},
                                                   {region + 0x108, region + 0x108, (region + 0x108) ^ 0x40}};
  CHECK(findings.failures == expected);
  // collect cleared the report: the same memory checked again finds the same two, no more.
  test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::address), region);
  CHECK(test.collect(stream).failures == expected);
  CHECK(test.collect(stream).failing_words == 0);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "the report keeps the first failures up to its capacity and counts them all") {
  const DeviceMemoryTest test(device, 2);
  const hal::Buffer buffer = device.allocate(test_bytes);
  const hal::Stream stream = device.create_stream();
  test.run(stream, buffer, 0, test_bytes, write_only(MemoryTestWord::constant, 0));
  stream.synchronize();
  for (const std::uint64_t offset : {0x10ull, 0x80ull, 0x400ull, 0x800ull, 0xff8ull}) put_word(buffer, offset, offset);
  // The host backend walks the words in one thread, so "first" follows the element's order.
  test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::constant, 0));
  hal::MemoryTestFindings up = test.collect(stream);
  CHECK(up.failing_words == 5);
  CHECK(up.truncated());
  REQUIRE(up.failures.size() == 2);
  CHECK(up.failures[0].offset == 0x10);
  CHECK(up.failures[1].offset == 0x80);
  test.run(stream, buffer, 0, test_bytes, check_only(MemoryTestWord::constant, 0, true));
  hal::MemoryTestFindings down = test.collect(stream);
  CHECK(down.failing_words == 5);
  REQUIRE(down.failures.size() == 2);
  CHECK(down.failures[0].offset == 0x800);
  CHECK(down.failures[1].offset == 0xff8);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "a range inside a buffer is tested alone, under its region offset") {
  const DeviceMemoryTest test(device, 8);
  const hal::Buffer buffer = device.allocate(test_bytes);
  const hal::Stream stream = device.create_stream();
  buffer.fill(0, test_bytes, 0xAA);
  test.run(stream, buffer, 0x100, 0x40, write_only(MemoryTestWord::address), 0x1000);
  stream.synchronize();
  CHECK(word_at(buffer, 0xf8) == 0xAAAAAAAAAAAAAAAAull);
  CHECK(word_at(buffer, 0x100) == 0x1000);
  CHECK(word_at(buffer, 0x138) == 0x1038);
  CHECK(word_at(buffer, 0x140) == 0xAAAAAAAAAAAAAAAAull);
}

TEST_CASE_FIXTURE(HostDeviceFixture, "memory test arguments are checked, naming the value and what is allowed") {
  check_error([&] { DeviceMemoryTest(device, 0); }, StatusCode::invalid_argument, {"capacity 0", "1 to 1048576"});
  check_error([&] { DeviceMemoryTest(device, DeviceMemoryTest::max_capacity + 1); }, StatusCode::invalid_argument,
              {"capacity 1048577"});
  const DeviceMemoryTest test(device, 4);
  const hal::Buffer buffer = device.allocate(test_bytes);
  const hal::Stream stream = device.create_stream();
  const MemoryTestElement element = write_only(MemoryTestWord::constant, 1);
  check_error([&] { test.run(stream, buffer, 4, 64, element); }, StatusCode::invalid_argument,
              {"offset 4 is not a multiple of the 8-byte word"});
  check_error([&] { test.run(stream, buffer, 0, 12, element); }, StatusCode::invalid_argument,
              {"size 12 is not a multiple of the 8-byte word"});
  check_error([&] { test.run(stream, buffer, 0, 0, element); }, StatusCode::invalid_argument, {"size 0 tests nothing"});
  check_error([&] { test.run(stream, buffer, 4088, 16, element); }, StatusCode::invalid_argument,
              {"outside the buffer of 4096 bytes"});
  check_error([&] { test.run(stream, buffer, 0, 64, element, 3); }, StatusCode::invalid_argument,
              {"region_offset 3 is not a multiple"});
  check_error([&] { test.run(stream, buffer, 0, 64, element, ~std::uint64_t{7}); }, StatusCode::invalid_argument,
              {"passes 2^64"});
  MemoryTestElement bad_kind;
  bad_kind.write = static_cast<MemoryTestWord>(7);
  check_error([&] { test.run(stream, buffer, 0, 64, bad_kind); }, StatusCode::invalid_argument,
              {"write word kind 7", "none, constant, address or address_complement"});
  bad_kind = {};
  bad_kind.check = static_cast<MemoryTestWord>(4);
  bad_kind.write = MemoryTestWord::address;
  check_error([&] { test.run(stream, buffer, 0, 64, bad_kind); }, StatusCode::invalid_argument, {"check word kind 4"});
  check_error([&] { test.run(stream, buffer, 0, 64, MemoryTestElement{}); }, StatusCode::invalid_argument,
              {"neither checks nor writes"});
  check_error([&] { test.run(hal::Stream{}, buffer, 0, 64, element); }, StatusCode::invalid_argument,
              {"the stream is empty"});
  check_error([&] { test.run(stream, hal::Buffer{}, 0, 64, element); }, StatusCode::invalid_argument,
              {"the buffer is empty"});
  if (const auto other = second_host_device()) {
    check_error([&] { test.run(other->create_stream(), buffer, 0, 64, element); }, StatusCode::invalid_argument,
                {"the stream is on " + other->id(), "the memory test on host:0"});
    check_error([&] { test.run(stream, other->allocate(64), 0, 64, element); }, StatusCode::invalid_argument,
                {"is not on the stream's device host:0"});
  }
  // Nothing ran: the refused calls left the report empty.
  CHECK(test.collect(stream).failing_words == 0);
}

#ifdef HAL_FAKE_BADMEMORY_PLUGIN
TEST_CASE("a backend whose plugin has no memory test sub-table is unsupported, saying so") {
  hal::testing::ScopedEnvironment environment{{"HAL_BACKENDS_FORCE", HAL_FAKE_BADMEMORY_PLUGIN}, {"HAL_BACKENDS", std::nullopt}};
  const hal::Runtime runtime = hal::Runtime::create(hal::testing::options_without_config_file());
  const hal::Device device = runtime.device("fake_badmemory:0");
  CHECK_FALSE(DeviceMemoryTest::available(device));
  check_error([&] { DeviceMemoryTest test(device); }, StatusCode::unsupported,
              {"the fake_badmemory backend's plugin offers no device memory test", "Buffer::write and Buffer::read"});
}
#endif

}  // namespace
