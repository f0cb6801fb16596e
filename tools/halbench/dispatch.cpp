// halbench dispatch: what it costs to get work onto a stream and to learn
// that it finished, measured with operations that do nothing.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <hal/attention.hpp>

#include "benchmarks.hpp"
#include "common.hpp"

namespace halbench {
namespace {

constexpr std::uint64_t default_iterations = 10000;
// Attention calls per measurement at most: the fake drivers emulate each
// kernel (about a millisecond), and the GPU check gives this command 10 s.
constexpr std::uint64_t max_attention_calls = 1000;
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

// One attention forward at the tiny shape python -m hal.bench attention
// measures the Python path at (1 batch, 1 head, 4 queries, head dim 64, f32):
// what a call costs above its kernel.
struct AttentionDispatch {
  std::uint64_t calls = 0;
  double call_us = 0;     // attention_forward + synchronize, stream idle: what a caller waits
  double enqueue_us = 0;  // attention_forward alone while the stream is held busy: checks, decision, enqueue
  double kernel_us = 0;   // the same calls run back to back, timed by events on the stream
  double lookup_ns = 0;   // attention_decision for the call's params: the cached decision
  std::string skipped;    // why there are no figures (no attention on this device)
  bool runs_inline = false;  // a CPU device: its small calls run in the caller, so call - kernel is the dispatch
};

AttentionDispatch measure_attention_dispatch(const hal::Device& device, const hal::Stream& stream,
                                             std::uint64_t calls) {
  const hal::AttentionParams params{.batch = 1, .heads_q = 1, .seq_q = 4, .head_dim_qk = 64,
                                    .layout = hal::AttentionLayout::bhsd, .return_lse = true};
  AttentionDispatch result;
  result.calls = calls;
  result.runs_inline = device.info().type == hal::DeviceType::cpu;
  const hal::AttentionDecision decision = hal::explain_attention(device, params);
  if (!decision.found) {
    result.skipped = "no attention implementation runs here:\n" + decision.to_string();
    return result;
  }
  const std::uint64_t tensor_bytes = 4 * 64 * sizeof(float);
  const hal::Buffer q = device.allocate(tensor_bytes), o = device.allocate(tensor_bytes),
                    lse = device.allocate(4 * sizeof(float));
  q.fill(0, tensor_bytes, 0);
  auto call = [&] { hal::attention_forward(stream, params, {q}, {q}, {q}, {o}, {lse}); };

  (void)hal::attention_decision(device, params);  // decided here; looked up below
  const Clock::time_point lookup_start = Clock::now();
  for (std::uint64_t i = 0; i < calls; ++i) keep_memory_effects(&hal::attention_decision(device, params));
  result.lookup_ns = seconds_between(lookup_start, Clock::now()) * 1e9 / static_cast<double>(calls);

  result.call_us = measure_latency("", "", calls, [&] {
                     call();
                     stream.synchronize();
                   }).mean_us;

  // The stream held by a host callback: every call is queued behind it, so
  // the loop times dispatch alone, and the events time the kernels alone.
  const hal::Event start = device.create_event(), end = device.create_event();
  std::atomic<bool> released{false};
  stream.enqueue_host_callback([&](const hal::Status&) {
    while (!released.load(std::memory_order_acquire)) std::this_thread::yield();
  });
  stream.record(start);
  const Clock::time_point enqueue_start = Clock::now();
  for (std::uint64_t i = 0; i < calls; ++i) call();
  result.enqueue_us = seconds_between(enqueue_start, Clock::now()) * 1e6 / static_cast<double>(calls);
  stream.record(end);
  released.store(true, std::memory_order_release);
  end.synchronize();
  result.kernel_us = hal::Event::elapsed_milliseconds(start, end) * 1e3 / static_cast<double>(calls);
  return result;
}

std::string format_microseconds(double value) { return format_fixed(value, value < 100 ? 2 : 1); }

// The goals beside the figures: a call costs at most 2 us above its kernel,
// and looking its decision up under 200 ns.
constexpr double attention_dispatch_goal_us = 2.0;
constexpr double decision_lookup_goal_ns = 200.0;

void print_attention(const AttentionDispatch& attention) {
  if (!attention.skipped.empty()) {
    std::printf("\n# attention dispatch: skipped, %s", attention.skipped.c_str());
    return;
  }
  std::printf("\n# attention forward at b=1 hq=1 sq=4 d=64 f32, %llu calls each, mean microseconds\n",
              static_cast<unsigned long long>(attention.calls));
  Table table({{"measurement", true}, {"us"}, {"goal"}});
  table.add_row({"call (attention_forward + synchronize)", format_microseconds(attention.call_us), "-"});
  table.add_row({"kernel (events around back-to-back calls)", format_microseconds(attention.kernel_us), "-"});
  auto goal = [](double value) {
    return "<= " + format_fixed(attention_dispatch_goal_us, 1) +
           (value <= attention_dispatch_goal_us ? " (met)" : " (missed)");
  };
  // A GPU's call returns once enqueued: the enqueue is its dispatch. The
  // host runs a small call inline: what the call costs above its kernel is.
  table.add_row({"dispatch (enqueue while the stream is busy)", format_microseconds(attention.enqueue_us),
                 goal(attention.enqueue_us)});
  const double above = attention.call_us - attention.kernel_us;
  table.add_row({"call above kernel (with the synchronize)", format_microseconds(above),
                 attention.runs_inline ? goal(above) : "- (a GPU: the enqueue is the dispatch)"});
  table.add_row({"decision lookup (attention_decision), ns", format_fixed(attention.lookup_ns, 0),
                 "< " + format_fixed(decision_lookup_goal_ns, 0) +
                     (attention.lookup_ns < decision_lookup_goal_ns ? " (met)" : " (missed)")});
  table.print(stdout);
}

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
             const AttentionDispatch& attention, std::uint64_t iterations, const hal::Runtime& runtime,
             const hal::Device& device) {
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
  if (attention.skipped.empty())
    results.push_back({{"name", "attention_forward_dispatch"},
                       {"description", "tiny attention forward (b=1 hq=1 sq=4 d=64 f32): call + synchronize, "
                                       "kernel by events, enqueue while the stream is busy; mean us"},
                       {"iterations", attention.calls},
                       {"call_us", attention.call_us},
                       {"kernel_us", attention.kernel_us},
                       {"enqueue_us", attention.enqueue_us},
                       {"call_above_kernel_us", attention.call_us - attention.kernel_us},
                       {"goal_call_above_kernel_us", attention_dispatch_goal_us},
                       {"decision_lookup_ns", attention.lookup_ns},
                       {"goal_decision_lookup_ns", decision_lookup_goal_ns}});
  else
    results.push_back({{"name", "attention_forward_dispatch"}, {"skipped", attention.skipped}});
  return make_document("dispatch", runtime, device, std::move(parameters), std::move(results));
}

constexpr std::string_view description =
    "Dispatch cost of a stream, measured with operations that do no work:\n"
    "  host_callback_latency            one empty host callback enqueued, then synchronize;\n"
    "                                   each round trip timed on its own (p50, p99)\n"
    "  event_record_synchronize_latency Stream::record of an event, then Event::synchronize\n"
    "  host_callback_throughput         N empty callbacks enqueued, then one synchronize; ops/s\n"
    "  attention forward dispatch       a tiny attention forward: the call with synchronize, its kernel\n"
    "                                   alone (events around calls queued back to back), the enqueue\n"
    "                                   alone (while the stream is busy), and the call above its\n"
    "                                   kernel beside the goal (<= 2 us), and the cached decision's\n"
    "                                   lookup (attention_decision; goal < 200 ns)\n"
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
  const AttentionDispatch attention =
      measure_attention_dispatch(device, stream, std::min(iterations, max_attention_calls));

  if (options.json) {
    print_json(to_json(latencies, throughput, attention, iterations, runtime, device));
  } else {
    print_table(latencies, throughput, device);
    print_attention(attention);
  }
  return exit_success;
}

}  // namespace halbench
