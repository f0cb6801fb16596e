// Helpers of the core unit tests: the host device, and (from
// device_test_support.hpp) expected errors, byte patterns and a stream gate.
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

#include "device_test_support.hpp"
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

// The checks and helpers every backend's tests share.
using hal::testing::check_error;
using hal::testing::counting_bytes;
using hal::testing::read_all;
using hal::testing::StreamGate;

}  // namespace hal_test
