// Arithmetic of allocations and fills that every GPU API needs the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace hal::backend {

// Allocation for an alignment beyond what the vendor guarantees (natural):
// allocate `bytes` and start the buffer at the first aligned address.
struct AlignedAllocation {
  std::uint64_t bytes;
  std::uint64_t alignment;  // 1 when any address will do
};
// nullopt when size plus the slack overflows.
std::optional<AlignedAllocation> plan_aligned_allocation(std::uint64_t size, std::uint64_t alignment,
                                                         std::uint64_t natural);
// How far base must move to be aligned.
std::uint64_t alignment_shift(std::uint64_t base, std::uint64_t alignment);

// One 8-, 16- or 32-bit memset: `count` elements of `value` from `address`.
struct MemsetPiece {
  std::uint64_t address;
  std::uint32_t value;
  std::uint32_t element_size;
  std::uint64_t count;
};

// 16- and 32-bit memsets need an address aligned to the element; a fill may
// start anywhere. The aligned middle takes the pattern rotated to its start
// and the few bytes before and after it are set one by one.
std::vector<MemsetPiece> plan_fill(std::uint64_t start, std::uint64_t size, const std::uint8_t* pattern,
                                   std::uint32_t pattern_size);

}  // namespace hal::backend
