// What a stress.memory.memtest result says, for the tests that inject
// stuck bits (halconform on a fake backend, on the fake GPU drivers): its
// failing byte offsets, and where a fault at fixed offsets of every chunk
// must show in the tested region.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

namespace hal::testing {

// The failing byte offsets a memtest result's message lists.
inline std::vector<std::uint64_t> memtest_failing_offsets(const std::string& message) {
  std::vector<std::uint64_t> offsets;
  const std::string label = "failing byte offsets: ";
  const auto start = message.find(label);
  if (start == std::string::npos) return offsets;
  const auto first = start + label.size();
  std::stringstream list(message.substr(first, message.find('\n', start) - first));
  for (std::string item; std::getline(list, item, ',');) offsets.push_back(std::stoull(item, nullptr, 16));
  return offsets;
}

// The region offsets of `in_chunk` in every chunk of a region of
// `tested_bytes` in chunks of `chunk_bytes` (the last one may be shorter),
// ascending: where a fault at those offsets of every allocation must show.
inline std::vector<std::uint64_t> offsets_in_every_chunk(std::uint64_t chunk_bytes, std::uint64_t tested_bytes,
                                                         std::initializer_list<std::uint64_t> in_chunk) {
  std::vector<std::uint64_t> offsets;
  for (std::uint64_t base = 0; base < tested_bytes; base += chunk_bytes)
    for (const std::uint64_t offset : in_chunk)
      if (offset < chunk_bytes && base + offset < tested_bytes) offsets.push_back(base + offset);
  return offsets;
}

}  // namespace hal::testing
