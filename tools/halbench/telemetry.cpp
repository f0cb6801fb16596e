// halbench telemetry: what one telemetry snapshot costs (the host's must stay
// well under a millisecond, a GPU's within a few).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "benchmarks.hpp"
#include "common.hpp"

namespace halbench {
namespace {

constexpr std::uint64_t default_iterations = 1000;

constexpr std::string_view description =
    "Cost of hal::telemetry(device): one snapshot of every reading the backend has\n"
    "(host: sysfs and procfs reads; GPUs: the vendor management library), each timed\n"
    "on its own; p50 and p99 are nearest-rank.\n";

}  // namespace

int run_telemetry(std::span<const std::string_view> arguments) {
  CommonOptions options;
  if (!parse_common_options(arguments, "halbench telemetry", description, options,
                            "snapshots to time (default " + std::to_string(default_iterations) + ")"))
    return exit_success;
  const std::uint64_t iterations = options.iterations.value_or(default_iterations);

  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = select_device(runtime, options.device_id);
  std::string source;
  const LatencyResult latency =
      measure_latency("telemetry_snapshot_latency", "hal::telemetry(device)", iterations,
                      [&] { source = hal::telemetry(device).source; });

  if (options.json) {
    Json parameters = {{"iterations", iterations}, {"warm_up_round_trips", warm_up_round_trips},
                       {"clock", "steady_clock (wall)"}, {"source", source}};
    Json results = Json::array({latency_json(latency)});
    print_json(make_document("telemetry", runtime, device, std::move(parameters), std::move(results)));
    return exit_success;
  }
  print_heading("telemetry", device);
  std::printf("# one snapshot from %s, in microseconds by the wall clock\n", source.c_str());
  Table table({{"measurement", true}, {"iters"}, {"p50 us"}, {"p99 us"}, {"min us"}, {"mean us"}});
  table.add_row({latency.name, std::to_string(latency.iterations), format_fixed(latency.p50_us, 1),
                 format_fixed(latency.p99_us, 1), format_fixed(latency.min_us, 1), format_fixed(latency.mean_us, 1)});
  table.print(stdout);
  return exit_success;
}

}  // namespace halbench
