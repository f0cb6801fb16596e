// Stress tier: a device memory test over most of the free memory. One list
// of march elements (walking ones, own address, March C-, moving inversions)
// runs on the device itself where the backend offers a memory test
// (hal::DeviceMemoryTest: a kernel on a GPU, so nothing crosses the bus but
// what failed), and otherwise through the backend's fills, uploads and
// read-backs. Each failing byte is reported with its offset in the tested
// region and the elements that caught it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "case_support.hpp"
#include "hal/memory_test.hpp"

namespace hal::conformance::cases {
namespace {

constexpr std::uint64_t piece_bytes = 4u << 20;       // the host path's staging size of one read or write
constexpr std::uint64_t device_granule = 64u << 10;   // the device path's chunk granularity
constexpr std::uint64_t max_chunk_bytes = 1u << 30;
constexpr std::size_t reported_addresses = 64;
constexpr std::uint32_t report_capacity = 1024;       // failing words recorded per element

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// The tested memory as one address space of chunks, each chunk_bytes long
// but the last, which may be shorter.
struct Region {
  std::vector<Buffer> chunks;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t start(std::size_t chunk) const { return chunk * chunk_bytes; }
  std::uint64_t bytes() const {
    std::uint64_t total = 0;
    for (const Buffer& chunk : chunks) total += chunk.size();
    return total;
  }
};

// One element, named by what its check verifies (the name a failure cites).
struct Step {
  std::string pattern;
  MemoryTestElement element;
};

std::uint64_t replicated(std::uint32_t pattern) { return pattern | (static_cast<std::uint64_t>(pattern) << 32); }

MemoryTestElement element(MemoryTestWord check, std::uint64_t check_value, MemoryTestWord write,
                          std::uint64_t write_value, bool descending = false) {
  return {check, check_value, write, write_value, descending};
}

std::vector<Step> march_steps(std::uint32_t random) {
  using enum MemoryTestWord;
  std::vector<Step> steps;
  // Walking ones: each bit lane of every byte alone, so a stuck or shorted
  // data line shows at its bit. Each pattern is checked as the next is written.
  for (int bit = 0; bit <= 8; ++bit) {
    const std::uint64_t previous = bit > 0 ? replicated(0x01010101u << (bit - 1)) : 0;
    const std::uint64_t next = bit < 8 ? replicated(0x01010101u << bit) : 0;
    steps.push_back({bit > 0 ? "walking ones bit " + std::to_string(bit - 1) : "walking ones",
                     element(bit > 0 ? constant : none, previous, bit < 8 ? constant : none, next)});
  }
  // Own address: each word holds its offset, then its complement, so an
  // address line fault (two offsets landing on one cell) shows.
  steps.push_back({"own address", element(none, 0, address, 0)});
  steps.push_back({"own address", element(address, 0, address_complement, 0)});
  steps.push_back({"own address complement", element(address_complement, 0, none, 0)});
  // March C-: up (r0,w1), up (r1,w0), down (r0,w1), down (r1,w0), then r0.
  const std::uint64_t zeros = 0, ones = ~std::uint64_t{0};
  steps.push_back({"march C-", element(none, 0, constant, zeros)});
  steps.push_back({"march C- up (r0,w1)", element(constant, zeros, constant, ones)});
  steps.push_back({"march C- up (r1,w0)", element(constant, ones, constant, zeros)});
  steps.push_back({"march C- down (r0,w1)", element(constant, zeros, constant, ones, true)});
  steps.push_back({"march C- down (r1,w0)", element(constant, ones, constant, zeros, true)});
  steps.push_back({"march C- (r0)", element(constant, zeros, none, 0)});
  // Moving inversions of a seeded random pattern, up then down.
  const std::string inversion = "moving inversion " + hex(random);
  const std::uint64_t pattern = replicated(random), complement = ~pattern;
  steps.push_back({inversion, element(none, 0, constant, pattern)});
  steps.push_back({inversion + " up", element(constant, pattern, constant, complement)});
  steps.push_back({inversion + " down", element(constant, complement, constant, pattern, true)});
  steps.push_back({inversion + " (r)", element(constant, pattern, none, 0)});
  return steps;
}

// What the elements found, by failing byte.
class Findings {
 public:
  // A word at a region offset that read `found` where `expected` was written.
  void word(const std::string& pattern, std::uint64_t offset, std::uint64_t expected, std::uint64_t found) {
    for (int byte = 0; byte < 8; ++byte) {
      const auto g = static_cast<std::uint8_t>(found >> (8 * byte)), e = static_cast<std::uint8_t>(expected >> (8 * byte));
      if (g == e) continue;
      const std::uint64_t at = offset + static_cast<std::uint64_t>(byte);
      auto entry = bytes_.find(at);
      if (entry == bytes_.end()) {
        if (bytes_.size() == reported_addresses) continue;
        entry = bytes_.emplace(at, Failure{}).first;
      }
      entry->second.stuck_high |= static_cast<std::uint8_t>(g & ~e);
      entry->second.stuck_low |= static_cast<std::uint8_t>(~g & e);
      if (entry->second.patterns.find(pattern) == std::string::npos)
        entry->second.patterns += (entry->second.patterns.empty() ? "" : ", ") + pattern;
    }
  }
  void count(std::uint64_t failing_words) { failing_words_ += failing_words; }
  std::uint64_t failing_words() const { return failing_words_; }

  void report(CaseContext& context, const Region& region, std::uint64_t free_bytes, std::size_t passes,
              const std::string& where) const {
    context.measure({"tested_bytes", static_cast<double>(region.bytes()), "bytes", {}, {}, "", ""});
    context.measure({"free_bytes", static_cast<double>(free_bytes), "bytes", {}, {}, "", ""});
    context.measure({"chunk_bytes", static_cast<double>(region.chunk_bytes), "bytes", {}, {}, "", ""});
    context.measure({"passes", static_cast<double>(passes), "", {}, {}, "", ""});
    context.measure({"failing_words", static_cast<double>(failing_words_), "", 0.0, 0.0, "==", ""});
    const std::string tested =
        byte_count(region.bytes()) + " in " + std::to_string(region.chunks.size()) + " chunks of " +
        byte_count(region.chunk_bytes) + " (" +
        with_precision(100.0 * static_cast<double>(region.bytes()) / static_cast<double>(free_bytes), 1) +
        "% of the free memory), " + std::to_string(passes) + " passes " + where;
    if (failing_words_ == 0) {
      context.note("no failing bits: " + tested);
      return;
    }
    std::string offsets, details;
    for (const auto& [offset, failure] : bytes_) {
      offsets += (offsets.empty() ? "" : ", ") + hex(offset);
      const std::uint64_t chunk = offset / region.chunk_bytes, in_chunk = offset % region.chunk_bytes;
      const auto* address = static_cast<const std::uint8_t*>(region.chunks[chunk].device_address());
      details += "\n  " + hex(offset) + " (chunk " + std::to_string(chunk) + " + " + hex(in_chunk) +
                 (address != nullptr ? ", device address " + hex(reinterpret_cast<std::uintptr_t>(address + in_chunk)) : "") +
                 "): bits " + hex(failure.stuck_high) + " read 1 where 0 was written, bits " + hex(failure.stuck_low) +
                 " read 0 where 1 was written; failed " + failure.patterns;
    }
    context.fail(std::to_string(failing_words_) + " failing 8-byte words over " + tested + "; failing byte offsets" +
                 (bytes_.size() == reported_addresses ? " (the first " + std::to_string(reported_addresses) + ")" : "") +
                 ": " + offsets + details);
  }

 private:
  struct Failure {
    std::uint64_t stuck_high = 0, stuck_low = 0;  // bit masks
    std::string patterns;
  };
  std::map<std::uint64_t, Failure> bytes_;
  std::uint64_t failing_words_ = 0;
};

std::uint64_t word_of(MemoryTestWord kind, std::uint64_t value, std::uint64_t offset) {
  if (kind == MemoryTestWord::constant) return value;
  if (kind == MemoryTestWord::address) return offset;
  return ~offset;
}

// The elements on the device: each over every chunk (in the element's
// direction) in one stream, then what it found, read back.
void run_on_device(CaseContext& context, const DeviceMemoryTest& test, const Stream& stream, const Region& region,
                   const std::vector<Step>& steps, Findings& findings) {
  for (const Step& step : steps) {
    for (std::size_t i = 0; i < region.chunks.size(); ++i) {
      const std::size_t chunk = step.element.descending ? region.chunks.size() - 1 - i : i;
      test.run(stream, region.chunks[chunk], 0, region.chunks[chunk].size(), step.element, region.start(chunk));
    }
    const MemoryTestFindings found = test.collect(stream);
    findings.count(found.failing_words);
    for (const MemoryTestFailure& failure : found.failures)
      findings.word(step.pattern, failure.offset, failure.expected, failure.found);
    if (found.truncated())
      context.note(step.pattern + ": " + std::to_string(found.failing_words) + " failing words, the first " +
                   std::to_string(found.failures.size()) + " of them recorded");
  }
}

// The same elements through the host: each piece (in the element's
// direction) read back and checked, then written with a device fill
// (constants) or an upload (address words).
void run_through_host(const Region& region, const std::vector<Step>& steps, Findings& findings) {
  std::vector<std::uint8_t> staging(piece_bytes);
  const std::uint64_t pieces_per_chunk = region.chunk_bytes / piece_bytes;
  const std::uint64_t pieces = region.bytes() / piece_bytes;
  for (const Step& step : steps) {
    const MemoryTestElement& element = step.element;
    for (std::uint64_t i = 0; i < pieces; ++i) {
      const std::uint64_t piece = element.descending ? pieces - 1 - i : i;
      const Buffer& chunk = region.chunks[piece / pieces_per_chunk];
      const std::uint64_t in_chunk = (piece % pieces_per_chunk) * piece_bytes, base = piece * piece_bytes;
      if (element.check != MemoryTestWord::none) {
        chunk.read(in_chunk, staging.data(), piece_bytes);
        for (std::uint64_t w = 0; w < piece_bytes / 8; ++w) {
          std::uint64_t found;
          std::memcpy(&found, staging.data() + 8 * w, 8);
          const std::uint64_t expected = word_of(element.check, element.check_value, base + 8 * w);
          if (found == expected) continue;
          findings.count(1);
          findings.word(step.pattern, base + 8 * w, expected, found);
        }
      }
      if (element.write == MemoryTestWord::constant &&
          element.write_value == replicated(static_cast<std::uint32_t>(element.write_value))) {
        chunk.fill(in_chunk, piece_bytes, static_cast<std::uint32_t>(element.write_value), 4);
      } else if (element.write != MemoryTestWord::none) {
        for (std::uint64_t w = 0; w < piece_bytes / 8; ++w) {
          const std::uint64_t word = word_of(element.write, element.write_value, base + 8 * w);
          std::memcpy(staging.data() + 8 * w, &word, 8);
        }
        chunk.write(in_chunk, staging.data(), piece_bytes);
      }
    }
  }
}

// Allocates chunks (multiples of `granule`) until `target` is covered or the
// device refuses more.
Region allocate_region(CaseContext& context, std::uint64_t target, std::uint64_t granule) {
  Region region;
  region.chunk_bytes = std::clamp<std::uint64_t>(target / 4 / granule * granule, granule, max_chunk_bytes);
  while (region.bytes() < target) {
    const std::uint64_t size = std::min(region.chunk_bytes, target - region.bytes());
    try {
      region.chunks.push_back(context.device().allocate(size));
    } catch (const Error& error) {
      context.note("allocation stopped after " + byte_count(region.bytes()) + ": " + error.what());
      break;
    }
  }
  if (region.chunks.empty()) context.fail("could not allocate even one chunk of " + byte_count(region.chunk_bytes));
  return region;
}

void memtest(CaseContext& context) {
  const CaseSettings& settings = context.settings();
  if (settings.memtest_fraction <= 0 || settings.memtest_fraction > 1)
    throw HarnessError("memtest_fraction " + std::to_string(settings.memtest_fraction) + " is not in (0, 1]");
  // The report (device path) or a stream first: the GPU backends read a
  // device's free memory only once hal uses the device (0 before).
  std::optional<DeviceMemoryTest> device_test;
  if (DeviceMemoryTest::available(context.device())) device_test.emplace(context.device(), report_capacity);
  const Stream stream = context.device().create_stream();
  const std::uint64_t free_bytes = context.device().free_memory();
  std::uint64_t asked = static_cast<std::uint64_t>(settings.memtest_fraction * static_cast<double>(free_bytes));
  if (settings.memtest_max_bytes > 0) asked = std::min(asked, settings.memtest_max_bytes);
  const std::vector<Step> steps = march_steps(context.seed("memtest moving inversion"));
  Findings findings;
  // On the device where the backend offers it, in chunks of any multiple of
  // the granule, the target rounded up so that the fraction is covered.
  if (device_test) {
    const DeviceMemoryTest& test = *device_test;
    const std::uint64_t target = std::min((asked + device_granule - 1) / device_granule * device_granule,
                                          free_bytes / device_granule * device_granule);
    if (target == 0)
      context.skip("only " + byte_count(asked) + " of memory to test (free " + byte_count(free_bytes) + ")");
    Region region = allocate_region(context, target, device_granule);
    try {
      run_on_device(context, test, stream, region, steps, findings);
      if (static_cast<double>(region.bytes()) < 0.99 * static_cast<double>(target))
        context.warn("tested " + byte_count(region.bytes()) + " of the " + byte_count(target) + " asked for");
      findings.report(context, region, free_bytes, steps.size(),
                      "run by the device (the " + context.device().backend_name() + " backend's memory test)");
      return;
    } catch (const Error& error) {
      if (error.code() != StatusCode::unsupported) throw;
      context.note(std::string("the device cannot run its backend's memory test, so the patterns cross the bus: ") +
                   error.what());
    }
  }
  // Through the host otherwise, in whole staging pieces.
  const std::uint64_t target = asked / piece_bytes * piece_bytes;
  if (target == 0)
    context.skip("only " + byte_count(asked) + " of memory to test (free " + byte_count(free_bytes) + ")");
  Region region = allocate_region(context, target, piece_bytes);
  run_through_host(region, steps, findings);
  if (static_cast<double>(region.bytes()) < 0.99 * static_cast<double>(target))
    context.warn("tested " + byte_count(region.bytes()) + " of the " + byte_count(target) + " asked for");
  findings.report(context, region, free_bytes, steps.size(), "through the host (fills, uploads and read-backs)");
}

}  // namespace

void register_cases_memtest(Registry& registry) {
  Case test_case{"stress.memory.memtest", Tier::stress,
                 "walking ones, own address, march C- and moving inversions over memtest_fraction (0.9) of the free "
                 "memory, capped by the level, run by the device where its backend can; every failing byte reported "
                 "with its offset and the elements that caught it",
                 "", false, 0, memtest};
  // 22 elements, 18 reads and 18 writes of the region; through the host at about 2 GB/s on a small machine.
  test_case.estimate = [](const CaseSettings& settings) {
    const double bytes = settings.memtest_max_bytes > 0 ? static_cast<double>(settings.memtest_max_bytes) : 16e9;
    return 1 + 36 * bytes / 2e9;
  };
  registry.add(std::move(test_case));
}

}  // namespace hal::conformance::cases
