// Stream and event cases: ordering within a stream, across streams through
// events, host callbacks, and event timing. Streams are not optional: these
// cases run on every device, whatever it declares.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "case_support.hpp"

namespace hal::conformance::cases {
namespace {

// Later work must see earlier work: a chain of fills, each a new value, with
// reads in between that must each see their own fill.
void in_order(CaseContext& context) {
  constexpr std::size_t size = 64 << 10;
  constexpr int steps = 16;
  Stream stream = context.device().create_stream();
  Buffer buffer = context.device().allocate(size);
  std::vector<std::vector<std::uint8_t>> snapshots(steps, std::vector<std::uint8_t>(size));
  for (int step = 0; step < steps; ++step) {
    stream.fill(buffer, 0, size, static_cast<std::uint32_t>(step + 1), 1);
    stream.copy_to_host(snapshots[step].data(), buffer, 0, size);
  }
  stream.synchronize();
  context.require(stream.is_idle(), "the stream is not idle after synchronize");
  for (int step = 0; step < steps; ++step) {
    const auto expected = reference_fill(size, static_cast<std::uint32_t>(step + 1), 1);
    context.require_equal_bytes(snapshots[step].data(), expected.data(), size,
                                "the read after fill " + std::to_string(step + 1) + " of " + std::to_string(steps));
  }
}

void host_callback(CaseContext& context) {
  constexpr std::size_t size = 256 << 10;
  Stream stream = context.device().create_stream();
  Buffer buffer = context.device().allocate(size);
  const auto reference = reference_bytes(size, context.seed("host_callback"));
  std::vector<std::uint8_t> landing(size, 0);
  std::vector<std::uint8_t> seen_by_callback;
  std::atomic<int> calls{0};
  std::atomic<bool> status_ok{false};
  stream.copy_to_device(buffer, 0, reference.data(), size);
  stream.copy_to_host(landing.data(), buffer, 0, size);
  stream.enqueue_host_callback([&](const Status& status) {
    seen_by_callback = landing;
    status_ok = status.is_ok();
    ++calls;
  });
  stream.synchronize();
  context.require(calls == 1, "the host callback ran " + std::to_string(calls.load()) + " times, expected once");
  context.require(status_ok, "the host callback was given an error status after successful work");
  context.require(seen_by_callback == landing,
                  "the host callback ran before the copies enqueued ahead of it had completed");
  context.require_equal_bytes(landing.data(), reference.data(), size, "the bytes copied to and from the device");
}

// Stream B waits on an event recorded by stream A after a large fill.
void cross_stream_event(CaseContext& context) {
  const std::size_t size = context.quick() ? (8u << 20) : (64u << 20);
  Stream producer = context.device().create_stream();
  Stream consumer = context.device().create_stream();
  Event produced = context.device().create_event();
  Buffer source = context.device().allocate(size);
  Buffer destination = context.device().allocate(size);
  source.fill(0, size, 0, 1);
  destination.fill(0, size, 0, 1);
  producer.fill(source, 0, size, 0xC3, 1);
  producer.record(produced);
  consumer.wait(produced);
  consumer.copy(destination, 0, source, 0, size);
  std::vector<std::uint8_t> result(size);
  consumer.copy_to_host(result.data(), destination, 0, size);
  consumer.synchronize();
  producer.synchronize();
  const auto expected = reference_fill(size, 0xC3, 1);
  context.require_equal_bytes(result.data(), expected.data(), size,
                              "a copy on stream B ordered after a fill on stream A by an event");
}

void event_query_synchronize(CaseContext& context) {
  Stream stream = context.device().create_stream();
  Event event = context.device().create_event();
  context.require(event.is_complete(), "an event that was never recorded reports itself incomplete");
  Buffer buffer = context.device().allocate(4 << 20);
  stream.fill(buffer, 0, 4 << 20, 1, 1);
  stream.record(event);
  event.synchronize();
  context.require(event.is_complete(), "an event reports itself incomplete after synchronize returned");
  stream.synchronize();
}

void event_timing(CaseContext& context) {
  const std::size_t size = context.quick() ? (16u << 20) : (128u << 20);
  Stream stream = context.device().create_stream();
  Event start = context.device().create_event(), end = context.device().create_event();
  Buffer buffer = context.device().allocate(size);
  const auto wall_start = std::chrono::steady_clock::now();
  stream.record(start);
  for (int i = 0; i < 4; ++i) stream.fill(buffer, 0, size, static_cast<std::uint32_t>(i), 1);
  stream.record(end);
  stream.synchronize();
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
  const double elapsed = Event::elapsed_milliseconds(start, end);
  context.measure({"elapsed", elapsed, "ms", wall_ms, {}, "<=", ""});
  require_plausible_seconds(context, elapsed / 1000, "4 fills of " + byte_count(size) + " between two events");
  // Timed work cannot take longer than the wall clock around it (plus clock granularity).
  context.require(elapsed <= wall_ms + 1.0, "event timing says " + std::to_string(elapsed) +
                                                " ms for work the wall clock saw finish in " +
                                                std::to_string(wall_ms) + " ms");
  context.note("4 fills of " + byte_count(size) + ": " + std::to_string(elapsed) + " ms by events, " +
               std::to_string(wall_ms) + " ms wall");
}

}  // namespace

void register_cases_streams(Registry& registry) {
  registry.add({"api.stream.in_order", Tier::api, "work on one stream runs in the order it was enqueued", "",
                false, 0, in_order});
  registry.add({"api.stream.host_callback", Tier::api,
                "a host callback runs once, after the work enqueued before it, with an ok status", "", false, 0,
                host_callback});
  registry.add({"api.stream.cross_stream_event", Tier::api,
                "a stream waiting on another stream's event sees that stream's earlier work", "", false, 0,
                cross_stream_event});
  registry.add({"api.event.query_synchronize", Tier::api,
                "events report completion correctly before recording and after synchronize", "", false, 0,
                event_query_synchronize});
  registry.add({"api.event.timing", Tier::api,
                "elapsed time between two events is non-negative and within the wall-clock time", "events.timing",
                true, 0, event_timing});
}

}  // namespace hal::conformance::cases
