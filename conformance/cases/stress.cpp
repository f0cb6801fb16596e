// Stress tier (opt-in): a time-bounded soak of random copies and fills on two
// streams ordered by events, checked against a host mirror at the end of every
// round, with telemetry watched (health.hpp). The compute soak is with the
// attention cases (attention.cpp).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "case_support.hpp"
#include "hal/conformance/health.hpp"

namespace hal::conformance::cases {
namespace {

void memory_soak(CaseContext& context) {
  const std::size_t size = context.quick() ? (4u << 20) : (32u << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(context.settings().stress_seconds);
  Stream first = context.device().create_stream(), second = context.device().create_stream();
  Event handoff = context.device().create_event();
  Buffer a = context.device().allocate(size), b = context.device().allocate(size);
  std::mt19937_64 generator(context.seed("soak operations"));
  std::vector<std::uint8_t> mirror_a(size, 0), mirror_b(size, 0), result(size);
  a.fill(0, size, 0, 1);
  b.fill(0, size, 0, 1);
  long long rounds = 0, operations = 0;
  StressWatch watch(context, std::chrono::milliseconds(250));
  while (std::chrono::steady_clock::now() < deadline) {
    const auto data = reference_bytes(size, context.seed("soak round " + std::to_string(rounds)));
    for (int step = 0; step < 32; ++step, ++operations) {
      const std::size_t length = 1 + generator() % (size / 4);
      const std::size_t from = generator() % (size - length + 1), to = generator() % (size - length + 1);
      const std::uint32_t value = static_cast<std::uint32_t>(generator() & 0xFF);
      switch (generator() % 3) {
        case 0:
          first.copy_to_device(a, to, data.data() + from, length);
          std::copy_n(data.begin() + static_cast<std::ptrdiff_t>(from), length, mirror_a.begin() + static_cast<std::ptrdiff_t>(to));
          break;
        case 1:
          first.fill(a, to, length, value, 1);
          std::fill_n(mirror_a.begin() + static_cast<std::ptrdiff_t>(to), length, static_cast<std::uint8_t>(value));
          break;
        default:
          // Cross-stream: b reads a only after the work on `first` so far.
          first.record(handoff);
          second.wait(handoff);
          second.copy(b, to, a, from, length);
          std::copy_n(mirror_a.begin() + static_cast<std::ptrdiff_t>(from), length, mirror_b.begin() + static_cast<std::ptrdiff_t>(to));
          // `first` must not overwrite a before b's copy read it.
          second.record(handoff);
          first.wait(handoff);
          break;
      }
    }
    first.synchronize();
    second.synchronize();
    a.read(0, result.data(), size);
    context.require_equal_bytes(result.data(), mirror_a.data(), size, "buffer A after soak round " + std::to_string(rounds));
    b.read(0, result.data(), size);
    context.require_equal_bytes(result.data(), mirror_b.data(), size, "buffer B after soak round " + std::to_string(rounds));
    ++rounds;
    watch.poll();
  }
  context.measure({"rounds", static_cast<double>(rounds), "", {}, {}, "", ""});
  context.measure({"operations", static_cast<double>(operations), "", {}, {}, "", ""});
  context.require(rounds > 0, "no soak round completed within " + std::to_string(context.settings().stress_seconds) + " s");
  context.note(std::to_string(operations) + " operations in " + std::to_string(rounds) +
               " verified rounds over " + std::to_string(context.settings().stress_seconds) + " s");
  watch.finish();
}

}  // namespace

void register_cases_stress(Registry& registry) {
  registry.add({"stress.memory.soak", Tier::stress,
                "random copies and fills on two event-ordered streams for the profile's stress time, all verified",
                "", false, 0, memory_soak, [](const CaseSettings& settings) { return settings.stress_seconds + 1; }});
}

}  // namespace hal::conformance::cases
