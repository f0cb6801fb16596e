// halbench dispatch: what it costs to get work onto a stream and to learn
// that it finished, measured with operations that do nothing.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmarks.hpp"
#include "common.hpp"

namespace halbench {
namespace {

constexpr std::uint64_t default_iterations = 10000;
constexpr std::uint64_t throughput_repeats = 5;
struct ThroughputResult {
  std::string name;
  std::string description;
  std::uint64_t iterations = 0;
  double ops_per_second = 0;  // median over throughput_repeats batches
};

ThroughputResult measure_callback_throughput(const hal::Stream& stream, std::uint64_t iterations) {
  auto batch = [&] {
    const Clock::time_point start = Clock::now();
    for (std::uint64_t i = 0; i < iterations; ++i) stream.enqueue_host_callback([](const hal::Status&) {});
    stream.synchronize();
    return seconds_between(start, Clock::now());
  };
  batch();  // warm-up
  std::vector<double> ops_per_second;
  for (std::uint64_t r = 0; r < throughput_repeats; ++r) ops_per_second.push_back(static_cast<double>(iterations) / batch());
  return {"host_callback_throughput",
          "enqueue N empty host callbacks, then one synchronize; median of " + std::to_string(throughput_repeats) +
              " batches",
          iterations, median(ops_per_second)};
}

std::string format_microseconds(double value) { return format_fixed(value, value < 100 ? 2 : 1); }

void print_table(const std::vector<LatencyResult>& latencies, const ThroughputResult& throughput,
                 const hal::Device& device) {
  print_heading("dispatch", device);
  std::printf("# latencies in microseconds by the wall clock; nearest-rank percentiles\n");
  Table table({{"measurement", true}, {"iters"}, {"p50 us"}, {"p99 us"}, {"min us"}, {"mean us"}, {"ops/s"}});
  for (const LatencyResult& latency : latencies)
    table.add_row({latency.name, std::to_string(latency.iterations), format_microseconds(latency.p50_us),
                   format_microseconds(latency.p99_us), format_microseconds(latency.min_us),
                   format_microseconds(latency.mean_us), format_fixed(1e6 / latency.mean_us, 0)});
  table.add_row({throughput.name, std::to_string(throughput.iterations), "-", "-", "-",
                 format_microseconds(1e6 / throughput.ops_per_second), format_fixed(throughput.ops_per_second, 0)});
  table.print(stdout);
}

Json to_json(const std::vector<LatencyResult>& latencies, const ThroughputResult& throughput,
             std::uint64_t iterations, const hal::Runtime& runtime, const hal::Device& device) {
  Json parameters = {{"iterations", iterations},
                     {"warm_up_round_trips", warm_up_round_trips},
                     {"throughput_repeats", throughput_repeats},
                     {"clock", "steady_clock (wall)"}};
  Json results = Json::array();
  for (const LatencyResult& latency : latencies) results.push_back(latency_json(latency));
  results.push_back({{"name", throughput.name},
                     {"description", throughput.description},
                     {"iterations", throughput.iterations},
                     {"ops_per_second", throughput.ops_per_second}});
  return make_document("dispatch", runtime, device, std::move(parameters), std::move(results));
}

constexpr std::string_view description =
    "Dispatch cost of a stream, measured with operations that do no work:\n"
    "  host_callback_latency            one empty host callback enqueued, then synchronize;\n"
    "                                   each round trip timed on its own (p50, p99)\n"
    "  event_record_synchronize_latency Stream::record of an event, then Event::synchronize\n"
    "  host_callback_throughput         N empty callbacks enqueued, then one synchronize; ops/s\n"
    "Latency rows also show ops/s = 1 / mean latency. Percentiles are nearest-rank.\n";

}  // namespace

int run_dispatch(std::span<const std::string_view> arguments) {
  CommonOptions options;
  if (!parse_common_options(arguments, "halbench dispatch", description, options,
                            "round trips per latency measurement and callbacks per throughput batch\n"
                            "(default " + std::to_string(default_iterations) + ")"))
    return exit_success;
  const std::uint64_t iterations = options.iterations.value_or(default_iterations);

  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = select_device(runtime, options.device_id);
  const hal::Stream stream = device.create_stream();
  const hal::Event event = device.create_event();

  std::vector<LatencyResult> latencies;
  latencies.push_back(measure_latency("host_callback_latency", "one empty host callback, then Stream::synchronize",
                                      iterations, [&] {
                                        stream.enqueue_host_callback([](const hal::Status&) {});
                                        stream.synchronize();
                                      }));
  latencies.push_back(measure_latency("event_record_synchronize_latency",
                                      "Stream::record(event), then Event::synchronize", iterations, [&] {
                                        stream.record(event);
                                        event.synchronize();
                                      }));
  const ThroughputResult throughput = measure_callback_throughput(stream, iterations);

  if (options.json)
    print_json(to_json(latencies, throughput, iterations, runtime, device));
  else
    print_table(latencies, throughput, device);
  return exit_success;
}

}  // namespace halbench
