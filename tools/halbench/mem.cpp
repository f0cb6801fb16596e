// halbench mem: copy and fill bandwidth of hal buffers and streams, each
// beside std::memcpy / std::memset on plain host memory of the same size.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "benchmarks.hpp"
#include "common.hpp"

namespace halbench {
namespace {

constexpr std::uint64_t kibibyte = 1024;
constexpr std::uint64_t mebibyte = 1024 * kibibyte;
constexpr std::uint64_t default_min_bytes = 4 * kibibyte;
constexpr std::uint64_t default_max_bytes = 256 * mebibyte;
constexpr std::uint64_t size_step_factor = 4;
constexpr std::uint64_t default_repeats = 5;
// Without --iters, each timed batch moves about this many bytes, so small
// sizes are not dominated by clock resolution and large ones stay quick.
constexpr std::uint64_t auto_batch_bytes = 32 * mebibyte;
constexpr std::uint64_t auto_max_iterations = 2048;
constexpr std::uint8_t fill_byte = 0x5a;

struct MemOptions {
  CommonOptions common;
  std::uint64_t min_bytes = default_min_bytes;
  std::uint64_t max_bytes = default_max_bytes;
  std::uint64_t repeats = default_repeats;
  std::vector<hal::MemoryKind> kinds{hal::MemoryKind::device};
};

hal::MemoryKind parse_memory_kind(std::string_view text) {
  for (const hal::MemoryKind kind : {hal::MemoryKind::device, hal::MemoryKind::host_pinned, hal::MemoryKind::managed})
    if (hal::to_string(kind) == text) return kind;
  throw UsageError("--kinds: '" + std::string(text) + "' is not a memory kind; expected device, host_pinned or managed");
}

std::uint64_t iterations_for(const MemOptions& options, std::uint64_t bytes) {
  if (options.common.iterations) return *options.common.iterations;
  return std::clamp<std::uint64_t>(auto_batch_bytes / bytes, 1, auto_max_iterations);
}

// ---- timing ----------------------------------------------------------------------

// How long one batch of iterations took; event_seconds only for stream-ordered batches.
struct BatchTime {
  double wall_seconds = 0;
  std::optional<double> event_seconds;
};
using Batch = std::function<BatchTime(std::uint64_t iterations)>;

// Runs operation back to back on the calling thread.
template <typename Operation>
Batch synchronous_batch(Operation operation) {
  return [operation](std::uint64_t iterations) {
    const Clock::time_point start = Clock::now();
    for (std::uint64_t i = 0; i < iterations; ++i) operation();
    return BatchTime{seconds_between(start, Clock::now()), std::nullopt};
  };
}

// Enqueues iterations operations between two event records, then waits once:
// the wall clock sees enqueue cost plus execution, the events only execution.
Batch stream_ordered_batch(const hal::Stream& stream, const hal::Event& start, const hal::Event& end,
                           std::function<void()> enqueue) {
  return [stream, start, end, enqueue = std::move(enqueue)](std::uint64_t iterations) {
    const Clock::time_point wall_start = Clock::now();
    stream.record(start);
    for (std::uint64_t i = 0; i < iterations; ++i) enqueue();
    stream.record(end);
    stream.synchronize();
    const double wall_seconds = seconds_between(wall_start, Clock::now());
    return BatchTime{wall_seconds, hal::Event::elapsed_milliseconds(start, end) / 1e3};
  };
}

// Median times of a hal batch and its baseline batch. They alternate, after
// one untimed warm-up batch each, so that both see the same machine state
// (caches, clock frequency, neighbours on a shared host) rather than one
// running in a quiet moment and the other in a busy one.
struct PairedTime {
  BatchTime hal;
  double baseline_seconds = 0;
};

PairedTime measure_against_baseline(const Batch& hal, const Batch& baseline, std::uint64_t iterations,
                                    std::uint64_t repeats) {
  baseline(iterations);
  hal(iterations);
  std::vector<double> baseline_seconds, wall_seconds, event_seconds;
  for (std::uint64_t r = 0; r < repeats; ++r) {
    baseline_seconds.push_back(baseline(iterations).wall_seconds);
    const BatchTime time = hal(iterations);
    wall_seconds.push_back(time.wall_seconds);
    if (time.event_seconds) event_seconds.push_back(*time.event_seconds);
  }
  PairedTime result{{median(wall_seconds), std::nullopt}, median(baseline_seconds)};
  if (!event_seconds.empty()) result.hal.event_seconds = median(event_seconds);
  return result;
}

double gigabytes_per_second(std::uint64_t bytes, std::uint64_t iterations, double seconds) {
  return static_cast<double>(bytes) * static_cast<double>(iterations) / seconds / 1e9;
}

// ---- one size and memory kind --------------------------------------------------------

struct Row {
  std::uint64_t bytes = 0;
  hal::MemoryKind kind = hal::MemoryKind::device;
  std::string op;      // h2d, d2h, d2d, fill
  std::string mode;    // sync (Buffer methods) or stream (Stream methods)
  std::string timer;   // wall or event
  std::string baseline_name;
  std::uint64_t iterations = 0;
  double hal_seconds = 0;  // median batch time
  double hal_gbps = 0;
  double baseline_gbps = 0;
};

struct Skipped {
  std::uint64_t bytes = 0;
  hal::MemoryKind kind = hal::MemoryKind::device;
  std::string reason;
};

// The memory one size needs. Every page is written here, so that first-touch
// page faults are not timed.
struct Workspace {
  std::vector<std::uint8_t> host_source, host_destination;
  hal::Buffer buffer_a, buffer_b;
};

// Copies a varied pattern host -> a -> b -> host and compares, so that a
// fast but wrong copy cannot pass as a result.
void verify_round_trip(const hal::Stream& stream, Workspace& space, std::uint64_t bytes) {
  std::vector<std::uint8_t> expected(bytes), actual(bytes);
  for (std::uint64_t i = 0; i < bytes; ++i) expected[i] = static_cast<std::uint8_t>(i * 31 + 7);
  space.buffer_a.write(0, expected.data(), bytes);
  space.buffer_b.copy_from(0, space.buffer_a, 0, bytes);
  stream.copy_to_host(actual.data(), space.buffer_b, 0, bytes);
  stream.synchronize();
  if (actual != expected)
    throw std::runtime_error("verification failed: " + std::to_string(bytes) + " bytes copied host -> " +
                             space.buffer_a.device().id() + " -> host did not come back unchanged");
}

void measure_size(const MemOptions& options, const hal::Device& device, hal::MemoryKind kind, std::uint64_t bytes,
                  const hal::Stream& stream, const hal::Event& start, const hal::Event& end, std::vector<Row>& rows) {
  Workspace space;
  space.buffer_a = device.allocate(bytes, kind);
  space.buffer_b = device.allocate(bytes, kind);
  space.buffer_a.fill(0, bytes, 1);
  space.buffer_b.fill(0, bytes, 2);
  space.host_source.assign(bytes, 3);
  space.host_destination.assign(bytes, 4);

  const hal::Buffer& a = space.buffer_a;
  const hal::Buffer& b = space.buffer_b;
  std::uint8_t* const host_source = space.host_source.data();
  std::uint8_t* const host_destination = space.host_destination.data();
  // The baselines use the same host memory as h2d and d2h.
  const Batch memcpy_baseline = synchronous_batch([=] { copy_host_memory(host_destination, host_source, bytes); });
  const Batch memset_baseline = synchronous_batch([=] {
    std::memset(host_destination, fill_byte, bytes);
    keep_memory_effects(host_destination);
  });

  struct Operation {
    std::string_view name;
    bool is_fill;
    std::function<void()> synchronous;
    std::function<void()> enqueue;
  };
  const Operation operations[] = {
      {"h2d", false, [=] { a.write(0, host_source, bytes); },
       [=] { stream.copy_to_device(a, 0, host_source, bytes); }},
      {"d2h", false, [=] { a.read(0, host_destination, bytes); },
       [=] { stream.copy_to_host(host_destination, a, 0, bytes); }},
      {"d2d", false, [=] { b.copy_from(0, a, 0, bytes); }, [=] { stream.copy(b, 0, a, 0, bytes); }},
      {"fill", true, [=] { a.fill(0, bytes, fill_byte); }, [=] { stream.fill(a, 0, bytes, fill_byte); }},
  };

  const std::uint64_t iterations = iterations_for(options, bytes);
  auto add_row = [&](const Operation& operation, std::string_view mode, std::string_view timer, double hal_seconds,
                     double baseline_seconds) {
    Row row;
    row.bytes = bytes;
    row.kind = kind;
    row.op = operation.name;
    row.mode = mode;
    row.timer = timer;
    row.baseline_name = operation.is_fill ? "memset" : "memcpy";
    row.iterations = iterations;
    row.hal_seconds = hal_seconds;
    row.hal_gbps = gigabytes_per_second(bytes, iterations, hal_seconds);
    row.baseline_gbps = gigabytes_per_second(bytes, iterations, baseline_seconds);
    rows.push_back(std::move(row));
  };
  for (const Operation& operation : operations) {
    const Batch& baseline = operation.is_fill ? memset_baseline : memcpy_baseline;
    const PairedTime synchronous = measure_against_baseline(synchronous_batch(operation.synchronous), baseline,
                                                            iterations, options.repeats);
    add_row(operation, "sync", "wall", synchronous.hal.wall_seconds, synchronous.baseline_seconds);
    const PairedTime ordered = measure_against_baseline(stream_ordered_batch(stream, start, end, operation.enqueue),
                                                        baseline, iterations, options.repeats);
    add_row(operation, "stream", "wall", ordered.hal.wall_seconds, ordered.baseline_seconds);
    add_row(operation, "stream", "event", *ordered.hal.event_seconds, ordered.baseline_seconds);
  }
  verify_round_trip(stream, space, bytes);
}

// ---- output ------------------------------------------------------------------------------

double ratio(const Row& row) { return row.hal_gbps / row.baseline_gbps; }

void print_table(const std::vector<Row>& rows, const std::vector<Skipped>& skipped, const MemOptions& options,
                 const hal::Device& device) {
  print_heading("mem", device);
  std::printf("# GB/s = 1e9 bytes/s, bytes counted once per copy (algbw); figure = median over timed batches\n");
  std::printf("# (repeats: %llu) after a warm-up batch, hal and baseline batches taken in turn\n",
              static_cast<unsigned long long>(options.repeats));
  Table table({{"bytes"},
               {"memory", true},
               {"op", true},
               {"mode", true},
               {"timer", true},
               {"iters"},
               {"hal GB/s"},
               {"baseline", true},
               {"baseline GB/s"},
               {"ratio"}});
  for (const Row& row : rows)
    table.add_row({std::to_string(row.bytes), std::string(hal::to_string(row.kind)), row.op, row.mode, row.timer,
                   std::to_string(row.iterations), format_fixed(row.hal_gbps, 2), row.baseline_name,
                   format_fixed(row.baseline_gbps, 2), format_fixed(ratio(row), 2)});
  table.print(stdout);
  for (const Skipped& skip : skipped)
    std::printf("# skipped %llu bytes of %s memory: %s\n", static_cast<unsigned long long>(skip.bytes),
                std::string(hal::to_string(skip.kind)).c_str(), skip.reason.c_str());
}

Json to_json(const std::vector<Row>& rows, const std::vector<Skipped>& skipped, const MemOptions& options,
             const hal::Runtime& runtime, const hal::Device& device) {
  Json kinds = Json::array();
  for (const hal::MemoryKind kind : options.kinds) kinds.push_back(hal::to_string(kind));
  Json parameters = {{"min_bytes", options.min_bytes},
                     {"max_bytes", options.max_bytes},
                     {"size_step_factor", size_step_factor},
                     {"iterations", options.common.iterations ? Json(*options.common.iterations) : Json("auto")},
                     {"repeats", options.repeats},
                     {"statistic", "median"},
                     {"kinds", kinds},
                     {"bandwidth", "algbw: bytes counted once per copy, GB/s = 1e9 bytes/s"}};
  Json results = Json::array();
  for (const Row& row : rows)
    results.push_back({{"bytes", row.bytes},
                       {"memory", hal::to_string(row.kind)},
                       {"op", row.op},
                       {"mode", row.mode},
                       {"timer", row.timer},
                       {"iterations", row.iterations},
                       {"hal_seconds", row.hal_seconds},
                       {"hal_gbps", row.hal_gbps},
                       {"baseline", row.baseline_name},
                       {"baseline_gbps", row.baseline_gbps},
                       {"ratio", ratio(row)}});
  Json document = make_document("mem", runtime, device, std::move(parameters), std::move(results));
  Json skipped_json = Json::array();
  for (const Skipped& skip : skipped)
    skipped_json.push_back({{"bytes", skip.bytes}, {"memory", hal::to_string(skip.kind)}, {"reason", skip.reason}});
  document["skipped"] = std::move(skipped_json);
  return document;
}

constexpr std::string_view description =
    "Copy and fill bandwidth of hal memory over a size sweep (min, min*4, ... up to max),\n"
    "each beside a plain baseline measured in the same run on host memory of the same size.\n"
    "\n"
    "ops:       h2d  Buffer::write / Stream::copy_to_device from a plain host vector\n"
    "           d2h  Buffer::read / Stream::copy_to_host into a plain host vector\n"
    "           d2d  Buffer::copy_from / Stream::copy between two buffers\n"
    "           fill Buffer::fill / Stream::fill with one byte value\n"
    "mode:      sync   the synchronous Buffer call, timed by the wall clock\n"
    "           stream N operations enqueued on one stream, then one synchronize;\n"
    "                  timed by the wall clock (enqueue + run) and by hal events (run)\n"
    "baseline:  std::memcpy (copies) or std::memset (fill) between two plain host vectors,\n"
    "           same size and iterations, timed in turn with each hal figure;\n"
    "           ratio = hal GB/s / baseline GB/s\n"
    "bandwidth: GB/s = 1e9 bytes per second, counting the bytes moved once per copy\n"
    "           (nccl-tests' algbw); a memcpy reads and writes, so memory traffic is twice that.\n"
    "timing:    every page is written before timing; each figure is the median of\n"
    "           --repeats batches of --iters operations, after one untimed warm-up batch;\n"
    "           hal and baseline batches alternate so both see the same machine state.\n"
    "check:     after each size a host -> buffer -> buffer -> host round trip is compared.\n";

}  // namespace

int run_mem(std::span<const std::string_view> arguments) {
  MemOptions options;
  OptionParser parser("halbench mem", std::string(description));
  add_common_options(parser, options.common,
                     "operations per timed batch (default: enough to move about 32 MiB,\n"
                     "at most " + std::to_string(auto_max_iterations) + ")");
  parser.add_value("--min-bytes", "N", "smallest size (default 4K; suffixes K, M, G are powers of 1024)",
                   [&](std::string_view text) { options.min_bytes = parse_byte_size("--min-bytes", text); });
  parser.add_value("--max-bytes", "N", "largest size (default 256M)",
                   [&](std::string_view text) { options.max_bytes = parse_byte_size("--max-bytes", text); });
  parser.add_value("--repeats", "N", "timed batches per figure; the median is reported (default 5)",
                   [&](std::string_view text) { options.repeats = parse_count("--repeats", text); });
  parser.add_value("--kinds", "LIST",
                   "memory kinds to allocate, comma-separated: device, host_pinned, managed\n"
                   "(default device; host_pinned is page-locked, so limited by ulimit -l)",
                   [&](std::string_view text) {
                     options.kinds.clear();
                     for (const std::string& item : split_list("--kinds", text)) {
                       const hal::MemoryKind kind = parse_memory_kind(item);
                       if (std::find(options.kinds.begin(), options.kinds.end(), kind) == options.kinds.end())
                         options.kinds.push_back(kind);
                     }
                   });
  if (!parser.parse(arguments)) return exit_success;
  if (options.min_bytes > options.max_bytes)
    throw UsageError("--min-bytes " + std::to_string(options.min_bytes) + " is larger than --max-bytes " +
                     std::to_string(options.max_bytes));

  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = select_device(runtime, options.common.device_id);
  const hal::Stream stream = device.create_stream();
  const hal::Event start = device.create_event();
  const hal::Event end = device.create_event();

  std::vector<Row> rows;
  std::vector<Skipped> skipped;
  for (const hal::MemoryKind kind : options.kinds) {
    for (std::uint64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= size_step_factor) {
      try {
        measure_size(options, device, kind, bytes, stream, start, end, rows);
      } catch (const hal::Error& error) {
        // Out of memory or an unsupported kind ends this kind's sweep, not the run.
        if (error.code() != hal::StatusCode::out_of_memory && error.code() != hal::StatusCode::unsupported) throw;
        skipped.push_back({bytes, kind, error.what()});
        std::fprintf(stderr, "halbench mem: skipping %s memory from %llu bytes on: %s\n",
                     std::string(hal::to_string(kind)).c_str(), static_cast<unsigned long long>(bytes), error.what());
        break;
      }
      if (bytes > options.max_bytes / size_step_factor) break;  // the next step would overflow or pass max
    }
  }

  if (options.common.json)
    print_json(to_json(rows, skipped, options, runtime, device));
  else
    print_table(rows, skipped, options, device);
  return exit_success;
}

}  // namespace halbench
