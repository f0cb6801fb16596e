// Performance tier: copy and fill bandwidth over transfer sizes, held against
// the profile's per-device-model minimums ("bandwidth.<direction>.min_gbps").
// The judged figure is the mean of repeated runs at the largest size; every
// run's timing is checked for plausibility and the data it moved for
// correctness, so a backend whose timer or copies lie cannot pass.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

struct Endpoints {
  Stream stream;
  Buffer a, b;  // a: the device source (and fill target), b: the device-to-device destination
  std::uint8_t* host = nullptr;
  std::uint8_t last_fill = 0;
};

void enqueue(Direction direction, Endpoints& e, std::uint64_t size, int repetitions) {
  for (int i = 0; i < repetitions; ++i) {
    switch (direction) {
      case Direction::host_to_device: e.stream.copy_to_device(e.a, 0, e.host, size); break;
      case Direction::device_to_host: e.stream.copy_to_host(e.host, e.a, 0, size); break;
      case Direction::device_to_device: e.stream.copy(e.b, 0, e.a, 0, size); break;
      case Direction::fill:
        e.last_fill = static_cast<std::uint8_t>(e.last_fill + 1);
        e.stream.fill(e.a, 0, size, e.last_fill, 1);
        break;
    }
  }
}

// Bytes per second of `repetitions` transfers of `size`, the timing checked.
double measure_once(CaseContext& context, Direction direction, Endpoints& e, std::uint64_t size, int repetitions) {
  SpanTimer timer(context, e.stream);
  timer.start();
  enqueue(direction, e, size, repetitions);
  const double seconds = timer.stop(name_of(direction) + " of " + std::to_string(repetitions) + " x " + byte_count(size));
  return static_cast<double>(size) * repetitions / seconds;
}

// What the CPU moves through host memory at this size with all its threads,
// the best of `attempts`: memory the host backend calls device memory cannot
// go faster. Each thread times its own slice, so thread start-up (a large
// part of a cache-sized transfer) does not lower the reference.
double cpu_rate(Direction direction, std::uint64_t size, int attempts) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::uint8_t> source(size, 1), destination(size, 0);
  const std::uint64_t slice = (size + threads - 1) / threads;
  double best = 0;
  // The best of many: a run the scheduler interrupted (other work on a
  // loaded machine) must not lower the ceiling below what the cores can do.
  for (int attempt = 0; attempt < attempts; ++attempt) {
    std::vector<double> seconds(threads, 0.0);
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      const std::uint64_t begin = std::min<std::uint64_t>(size, t * slice), end = std::min(size, begin + slice);
      workers.emplace_back([&, t, begin, end] {
        const auto start = std::chrono::steady_clock::now();
        if (direction == Direction::fill) std::memset(destination.data() + begin, attempt, end - begin);
        else std::memcpy(destination.data() + begin, source.data() + begin, end - begin);
        seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
    }
    for (auto& worker : workers) worker.join();
    const double slowest = *std::max_element(seconds.begin(), seconds.end());
    if (slowest > 0) best = std::max(best, static_cast<double>(size) / slowest);
  }
  return best;
}

// The fastest the device can plausibly move these bytes, or nullopt when
// unknown: the profile's physical peak, and for a CPU device four times what
// its own cores manage (cpu_bytes_per_second, measured beside the judged
// runs; the margin covers caches, timer granularity and a loaded machine; a
// timer that is not real is off by far more).
std::optional<double> ceiling_gbps(CaseContext& context, Direction direction, std::optional<double> cpu_bytes_per_second,
                                   std::string& why) {
  std::optional<double> ceiling;
  const std::string key = "bandwidth." + name_of(direction) + ".max_gbps";
  if (const auto peak = context.threshold(key)) {
    ceiling = *peak;
    why = "the profile's physical peak " + key + " = " + with_precision(*peak, 2) + " GB/s";
  }
  if (cpu_bytes_per_second) {
    const double cpu = 4 * *cpu_bytes_per_second / 1e9;
    if (!ceiling || cpu < *ceiling) {
      ceiling = cpu;
      why = "four times this CPU's own " + std::string(direction == Direction::fill ? "memset" : "memcpy") + " rate (" +
            with_precision(cpu / 4, 2) + " GB/s with every core)";
    }
  }
  return ceiling;
}

// The destination after the timed runs must hold what was sent: 4 KiB at
// 16 places spread over the transfer.
void check_delivered(CaseContext& context, Direction direction, Endpoints& e, std::uint64_t size,
                     const std::vector<std::uint8_t>& host_bytes, const std::vector<std::uint8_t>& device_bytes) {
  constexpr std::uint64_t piece = 4096;
  std::vector<std::uint8_t> got(piece), want(piece);
  for (int i = 0; i < 16; ++i) {
    const std::uint64_t offset = (size - piece) / 15 * static_cast<std::uint64_t>(i);
    switch (direction) {
      case Direction::host_to_device:
        e.a.read(offset, got.data(), piece);
        std::memcpy(want.data(), host_bytes.data() + offset, piece);
        break;
      case Direction::device_to_host:
        std::memcpy(got.data(), e.host + offset, piece);
        std::memcpy(want.data(), device_bytes.data() + offset, piece);
        break;
      case Direction::device_to_device:
        e.b.read(offset, got.data(), piece);
        std::memcpy(want.data(), device_bytes.data() + offset, piece);
        break;
      case Direction::fill:
        e.a.read(offset, got.data(), piece);
        std::fill(want.begin(), want.end(), e.last_fill);
        break;
    }
    context.require_equal_bytes(got.data(), want.data(), piece,
                                "the bytes at offset " + std::to_string(offset) + " after the timed " +
                                    name_of(direction) + " transfers");
  }
}

void bandwidth(CaseContext& context, Direction direction) {
  const std::uint64_t largest = context.quick() ? (16u << 20) : (256u << 20);
  const std::uint64_t bytes_per_point = context.quick() ? (64u << 20) : (1024u << 20);
  const int judged_runs = context.quick() ? 3 : 5;
  const Device& device = context.device();
  Endpoints e{device.create_stream(), device.allocate(largest), device.allocate(largest)};
  const auto device_bytes = reference_bytes(largest, context.seed("bandwidth device"));
  e.a.write(0, device_bytes.data(), largest);
  // Pinned host memory when the device has it: that is what fast transfers use.
  Buffer pinned;
  std::vector<std::uint8_t> pageable, host_bytes;
  if (direction == Direction::host_to_device || direction == Direction::device_to_host) {
    if (device.supports("memory.host_pinned")) {
      pinned = device.allocate(largest, MemoryKind::host_pinned);
      e.host = static_cast<std::uint8_t*>(pinned.host_address());
    } else {
      pageable.resize(largest);
      e.host = pageable.data();
    }
    host_bytes = reference_bytes(largest, context.seed("bandwidth host"));
    std::memcpy(e.host, host_bytes.data(), largest);
  }

  Series curve{name_of(direction), "bytes", "GB/s", {}};
  for (std::uint64_t size = 4096; size <= largest; size *= 4) {
    const int repetitions = static_cast<int>(std::clamp<std::uint64_t>(bytes_per_point / size, 2, 2000));
    measure_once(context, direction, e, size, 1);  // warm-up: first-touch, caches
    curve.points.emplace_back(static_cast<double>(size), measure_once(context, direction, e, size, repetitions) / 1e9);
  }
  context.add_series(curve);

  // The judged figure: repeated runs where the curve has flattened out.
  const int repetitions = static_cast<int>(std::clamp<std::uint64_t>(bytes_per_point / largest, 2, 2000));
  std::vector<double> runs;
  // On a CPU device its own cores' rate is sampled after every judged run
  // (taking turns), and the best kept: other work on the machine slows both
  // alike instead of only the reference.
  std::optional<double> cpu_bytes_per_second;
  for (int run = 0; run < judged_runs; ++run) {
    runs.push_back(measure_once(context, direction, e, largest, repetitions) / 1e9);
    if (device.info().type == DeviceType::cpu)
      cpu_bytes_per_second = std::max(cpu_bytes_per_second.value_or(0.0), cpu_rate(direction, largest, 4));
  }
  const Spread spread = spread_of(runs);
  std::string why;
  if (const auto ceiling = ceiling_gbps(context, direction, cpu_bytes_per_second, why); ceiling && spread.max > *ceiling)
    context.error(name_of(direction) + " measured " + with_precision(spread.max, 2) + " GB/s for " +
                  byte_count(largest) + ", faster than " + why + ": the timer or the transfer is not real");
  check_delivered(context, direction, e, largest, host_bytes, device_bytes);
  judge_minimum(context, "bandwidth", spread, "GB/s", "bandwidth." + name_of(direction) + ".min_gbps",
                name_of(direction) + " bandwidth at " + byte_count(largest));
}

}  // namespace

void register_cases_bandwidth(Registry& registry) {
  for (const Direction direction :
       {Direction::host_to_device, Direction::device_to_host, Direction::device_to_device, Direction::fill}) {
    const std::string name = name_of(direction);
    Case test_case{"performance.memory.bandwidth_" + name, Tier::performance,
                   name + " bandwidth from 4 KiB to the largest transfer; the mean of repeated runs at the largest "
                          "against the profile minimum, every run's timing and data checked",
                   "", false, 0, [direction](CaseContext& context) { bandwidth(context, direction); }};
    test_case.estimate = [](const CaseSettings& settings) { return settings.quick ? 1.0 : 6.0; };
    registry.add(std::move(test_case));
  }
}

}  // namespace hal::conformance::cases
