// Performance tier: copy and fill bandwidth over transfer sizes, held against
// the profile's per-device-model minimums ("bandwidth.<direction>.min_gbps").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "case_support.hpp"

namespace hal::conformance::cases {
namespace {

enum class Direction { host_to_device, device_to_host, device_to_device, fill };

std::string name_of(Direction direction) {
  switch (direction) {
    case Direction::host_to_device: return "host_to_device";
    case Direction::device_to_host: return "device_to_host";
    case Direction::device_to_device: return "device_to_device";
    case Direction::fill: return "fill";
  }
  return "unknown";
}

std::string format_gbps(double value) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << value << " GB/s";
  return text.str();
}

// Bytes per second of `repetitions` transfers of `size` on one stream, timed
// by events when the device claims event timing, else by the host clock.
double measure_once(CaseContext& context, Direction direction, std::uint64_t size, int repetitions, Stream& stream,
                    Buffer& device_a, Buffer& device_b, std::uint8_t* host) {
  const bool event_timing = context.device().supports("events.timing");
  Event start, end;
  if (event_timing) {
    start = context.device().create_event();
    end = context.device().create_event();
    stream.record(start);
  }
  const auto wall_start = std::chrono::steady_clock::now();
  for (int i = 0; i < repetitions; ++i) {
    switch (direction) {
      case Direction::host_to_device: stream.copy_to_device(device_a, 0, host, size); break;
      case Direction::device_to_host: stream.copy_to_host(host, device_a, 0, size); break;
      case Direction::device_to_device: stream.copy(device_b, 0, device_a, 0, size); break;
      case Direction::fill: stream.fill(device_a, 0, size, static_cast<std::uint32_t>(i), 1); break;
    }
  }
  if (event_timing) stream.record(end);
  stream.synchronize();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (event_timing) seconds = Event::elapsed_milliseconds(start, end) / 1000.0;
  if (seconds <= 0) seconds = 1e-9;  // below the timer's resolution: report a finite upper bound
  return static_cast<double>(size) * repetitions / seconds;
}

void bandwidth(CaseContext& context, Direction direction) {
  const std::uint64_t largest = context.quick() ? (16u << 20) : (256u << 20);
  const std::uint64_t bytes_per_point = context.quick() ? (64u << 20) : (1024u << 20);
  Stream stream = context.device().create_stream();
  Buffer device_a = context.device().allocate(largest);
  Buffer device_b = context.device().allocate(largest);
  device_a.fill(0, largest, 0x11, 1);
  // Pinned host memory when the device has it: that is what fast transfers use.
  Buffer pinned;
  std::vector<std::uint8_t> pageable;
  std::uint8_t* host = nullptr;
  if (direction == Direction::host_to_device || direction == Direction::device_to_host) {
    if (context.device().supports("memory.host_pinned")) {
      pinned = context.device().allocate(largest, MemoryKind::host_pinned);
      host = static_cast<std::uint8_t*>(pinned.host_address());
    } else {
      pageable.resize(largest);
      host = pageable.data();
    }
    std::memset(host, 0x22, largest);
  }
  Series curve{name_of(direction), "bytes", "GB/s", {}};
  double peak = 0;
  for (std::uint64_t size = 4096; size <= largest; size *= 4) {
    const int repetitions = static_cast<int>(std::clamp<std::uint64_t>(bytes_per_point / size, 2, 2000));
    measure_once(context, direction, size, 1, stream, device_a, device_b, host);  // warm-up: first-touch, caches
    const double gbps = measure_once(context, direction, size, repetitions, stream, device_a, device_b, host) / 1e9;
    curve.points.emplace_back(static_cast<double>(size), gbps);
    if (size >= (1u << 20)) peak = std::max(peak, gbps);
  }
  context.add_series(curve);
  const std::string threshold_key = "bandwidth." + name_of(direction) + ".min_gbps";
  const auto minimum = context.threshold(threshold_key);
  context.measure({"peak_bandwidth", peak, "GB/s", minimum, {}, minimum ? ">=" : ""});
  if (!minimum) {
    context.note("peak " + format_gbps(peak) + " (transfers of 1 MiB and more); the profile sets no " +
                 threshold_key + " for this device model");
    return;
  }
  if (peak < *minimum)
    context.fail("peak " + name_of(direction) + " bandwidth " + format_gbps(peak) + " is below the profile minimum " +
                 format_gbps(*minimum) + " for this device model");
  context.note("peak " + format_gbps(peak) + " >= minimum " + format_gbps(*minimum));
}

}  // namespace

void register_cases_bandwidth(Registry& registry) {
  for (const Direction direction :
       {Direction::host_to_device, Direction::device_to_host, Direction::device_to_device, Direction::fill}) {
    const std::string name = name_of(direction);
    registry.add({"performance.memory.bandwidth_" + name, Tier::performance,
                  name + " bandwidth from 4 KiB to the largest transfer, peak against the profile minimum", "", false,
                  0, [direction](CaseContext& context) { bandwidth(context, direction); }});
  }
}

}  // namespace hal::conformance::cases
