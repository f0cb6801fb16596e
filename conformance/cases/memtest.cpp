// Stress tier: a device memory test over most of the free memory. Patterns
// are written with device fills (constants) or uploads (address patterns) and
// read back through the backend, so every backend runs the same test and a
// fault anywhere between the cells and the host is caught. Each failing byte
// is reported with its offset in the tested region and the patterns it failed.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "case_support.hpp"

namespace hal::conformance::cases {
namespace {

constexpr std::uint64_t piece_bytes = 4u << 20;  // the host staging size of one read or write
constexpr std::size_t reported_addresses = 64;

std::string hex(std::uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// The tested memory as one address space of equal chunks.
struct Region {
  std::vector<Buffer> chunks;
  std::uint64_t chunk_bytes = 0;
  std::uint64_t bytes() const { return chunk_bytes * chunks.size(); }
};

// What every 8-byte word at a region offset must hold.
using Expected = std::function<std::uint64_t(std::uint64_t offset)>;

Expected constant(std::uint32_t pattern) {
  const std::uint64_t word = pattern | (static_cast<std::uint64_t>(pattern) << 32);
  return [word](std::uint64_t) { return word; };
}

class MemoryTest {
 public:
  MemoryTest(CaseContext& context, Region& region) : context_(context), region_(region), staging_(piece_bytes) {}

  // One march element over the region: each piece in order (descending when
  // asked) is read and checked against `read`, then written with `write`.
  void element(const std::string& pattern, bool descending, const Expected* read, std::optional<std::uint32_t> write_constant,
               const Expected* write_words = nullptr) {
    const std::uint64_t pieces_per_chunk = region_.chunk_bytes / piece_bytes;
    const std::uint64_t pieces = pieces_per_chunk * region_.chunks.size();
    for (std::uint64_t step = 0; step < pieces; ++step) {
      const std::uint64_t index = descending ? pieces - 1 - step : step;
      Buffer& chunk = region_.chunks[index / pieces_per_chunk];
      const std::uint64_t in_chunk = (index % pieces_per_chunk) * piece_bytes;
      const std::uint64_t base = index * piece_bytes;
      if (read != nullptr) {
        chunk.read(in_chunk, staging_.data(), piece_bytes);
        check(pattern, base, *read);
      }
      if (write_constant) {
        chunk.fill(in_chunk, piece_bytes, *write_constant, 4);
      } else if (write_words != nullptr) {
        for (std::uint64_t w = 0; w < piece_bytes / 8; ++w) {
          const std::uint64_t word = (*write_words)(base + 8 * w);
          std::memcpy(staging_.data() + 8 * w, &word, 8);
        }
        chunk.write(in_chunk, staging_.data(), piece_bytes);
      }
    }
    ++passes_;
  }

  void report(std::uint64_t free_bytes) {
    context_.measure({"tested_bytes", static_cast<double>(region_.bytes()), "bytes", {}, {}, "", ""});
    context_.measure({"chunk_bytes", static_cast<double>(region_.chunk_bytes), "bytes", {}, {}, "", ""});
    context_.measure({"passes", static_cast<double>(passes_), "", {}, {}, "", ""});
    context_.measure({"failing_words", static_cast<double>(failing_words_), "", 0.0, 0.0, "==", ""});
    const std::string tested = byte_count(region_.bytes()) + " in " + std::to_string(region_.chunks.size()) + " chunks of " +
                               byte_count(region_.chunk_bytes) + " (" +
                               with_precision(100.0 * static_cast<double>(region_.bytes()) / static_cast<double>(free_bytes), 1) +
                               "% of the free memory), " + std::to_string(passes_) + " passes";
    if (failing_words_ == 0) {
      context_.note("no failing bits: " + tested);
      return;
    }
    std::string offsets, details;
    for (const auto& [offset, failure] : failures_) {
      offsets += (offsets.empty() ? "" : ", ") + hex(offset);
      const std::uint64_t chunk = offset / region_.chunk_bytes, in_chunk = offset % region_.chunk_bytes;
      const auto* address = static_cast<const std::uint8_t*>(region_.chunks[chunk].device_address());
      details += "\n  " + hex(offset) + " (chunk " + std::to_string(chunk) + " + " + hex(in_chunk) +
                 (address != nullptr ? ", device address " + hex(reinterpret_cast<std::uintptr_t>(address + in_chunk)) : "") +
                 "): bits " + hex(failure.stuck_high) + " read 1 where 0 was written, bits " + hex(failure.stuck_low) +
                 " read 0 where 1 was written; failed " + failure.patterns;
    }
    context_.fail(std::to_string(failing_words_) + " failing 8-byte words over " + tested + "; failing byte offsets" +
                  (failures_.size() == reported_addresses ? " (the first " + std::to_string(reported_addresses) + ")" : "") +
                  ": " + offsets + details);
  }

 private:
  struct Failure {
    std::uint64_t stuck_high = 0, stuck_low = 0;  // bit masks
    std::string patterns;
  };

  void check(const std::string& pattern, std::uint64_t base, const Expected& expected) {
    for (std::uint64_t w = 0; w < piece_bytes / 8; ++w) {
      std::uint64_t got;
      std::memcpy(&got, staging_.data() + 8 * w, 8);
      const std::uint64_t want = expected(base + 8 * w);
      if (got == want) continue;
      ++failing_words_;
      for (int byte = 0; byte < 8; ++byte) {
        const auto g = static_cast<std::uint8_t>(got >> (8 * byte)), e = static_cast<std::uint8_t>(want >> (8 * byte));
        if (g == e) continue;
        const std::uint64_t offset = base + 8 * w + static_cast<std::uint64_t>(byte);
        auto found = failures_.find(offset);
        if (found == failures_.end()) {
          if (failures_.size() == reported_addresses) continue;
          found = failures_.emplace(offset, Failure{}).first;
        }
        found->second.stuck_high |= static_cast<std::uint8_t>(g & ~e);
        found->second.stuck_low |= static_cast<std::uint8_t>(~g & e);
        if (found->second.patterns.find(pattern) == std::string::npos)
          found->second.patterns += (found->second.patterns.empty() ? "" : ", ") + pattern;
      }
    }
  }

  CaseContext& context_;
  Region& region_;
  std::vector<std::uint8_t> staging_;
  std::map<std::uint64_t, Failure> failures_;
  std::uint64_t failing_words_ = 0;
  int passes_ = 0;
};

// Allocates chunks until the target is covered or the device refuses more.
Region allocate_region(CaseContext& context, std::uint64_t target) {
  Region region;
  region.chunk_bytes = std::clamp<std::uint64_t>(target / 4 / piece_bytes * piece_bytes, piece_bytes, 256 * piece_bytes);
  while (region.bytes() + region.chunk_bytes <= target) {
    try {
      region.chunks.push_back(context.device().allocate(region.chunk_bytes));
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
  const std::uint64_t free_bytes = context.device().free_memory();
  std::uint64_t target = static_cast<std::uint64_t>(settings.memtest_fraction * static_cast<double>(free_bytes));
  if (settings.memtest_max_bytes > 0) target = std::min(target, settings.memtest_max_bytes);
  if (target < piece_bytes)
    context.skip("only " + byte_count(target) + " of memory to test (free " + byte_count(free_bytes) + ")");
  Region region = allocate_region(context, target);
  MemoryTest test(context, region);

  // Walking ones: each bit lane of every byte alone, so a stuck or shorted
  // data line shows at its bit.
  for (int bit = 0; bit < 8; ++bit) {
    const std::uint32_t pattern = 0x01010101u << bit;
    const Expected expected = constant(pattern);
    test.element("walking ones bit " + std::to_string(bit), false, nullptr, pattern);
    test.element("walking ones bit " + std::to_string(bit), false, &expected, std::nullopt);
  }
  // Own address: each word holds its offset, then its complement, so an
  // address line fault (two offsets landing on one cell) shows.
  const Expected address = [](std::uint64_t offset) { return offset; };
  const Expected inverse = [](std::uint64_t offset) { return ~offset; };
  test.element("own address", false, nullptr, std::nullopt, &address);
  test.element("own address", false, &address, std::nullopt, &inverse);
  test.element("own address complement", false, &inverse, std::nullopt);
  // March C-: up (r0,w1), up (r1,w0), down (r0,w1), down (r1,w0), then r0.
  const Expected zeros = constant(0), ones = constant(0xFFFFFFFFu);
  test.element("march C-", false, nullptr, 0u);
  test.element("march C-", false, &zeros, 0xFFFFFFFFu);
  test.element("march C-", false, &ones, 0u);
  test.element("march C-", true, &zeros, 0xFFFFFFFFu);
  test.element("march C-", true, &ones, 0u);
  test.element("march C-", false, &zeros, std::nullopt);
  // Moving inversions of a seeded random pattern, up then down.
  const std::uint32_t random = context.seed("memtest moving inversion");
  const Expected pattern = constant(random), complement = constant(~random);
  test.element("moving inversion " + hex(random), false, nullptr, random);
  test.element("moving inversion " + hex(random), false, &pattern, ~random);
  test.element("moving inversion " + hex(random), true, &complement, random);
  test.element("moving inversion " + hex(random), false, &pattern, std::nullopt);
  if (static_cast<double>(region.bytes()) < 0.99 * static_cast<double>(target))
    context.warn("tested " + byte_count(region.bytes()) + " of the " + byte_count(target) + " asked for");
  test.report(free_bytes);
}

}  // namespace

void register_cases_memtest(Registry& registry) {
  Case test_case{"stress.memory.memtest", Tier::stress,
                 "walking ones, own address, march C- and moving inversions over memtest_fraction (0.9) of the free "
                 "memory, capped by the level; every failing byte reported with its offset and patterns",
                 "", false, 0, memtest};
  // 29 passes; a read and a write per pass at about 2 GB/s on a small host.
  test_case.estimate = [](const CaseSettings& settings) {
    const double bytes = settings.memtest_max_bytes > 0 ? static_cast<double>(settings.memtest_max_bytes) : 16e9;
    return 1 + 29 * 2 * bytes / 2e9;
  };
  registry.add(std::move(test_case));
}

}  // namespace hal::conformance::cases
