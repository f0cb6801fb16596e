#include "memory_plans.hpp"

#include <algorithm>

namespace hal::backend {

std::optional<AlignedAllocation> plan_aligned_allocation(std::uint64_t size, std::uint64_t alignment,
                                                         std::uint64_t natural) {
  const std::uint64_t extra = alignment > natural ? alignment - natural : 0;
  if (size > UINT64_MAX - extra) return std::nullopt;
  return AlignedAllocation{size + extra, alignment == 0 ? 1 : alignment};
}

std::uint64_t alignment_shift(std::uint64_t base, std::uint64_t alignment) {
  return (alignment - base % alignment) % alignment;
}

std::vector<MemsetPiece> plan_fill(std::uint64_t start, std::uint64_t size, const std::uint8_t* pattern,
                                   std::uint32_t pattern_size) {
  std::vector<MemsetPiece> pieces;
  if (pattern_size == 1) {
    pieces.push_back({start, pattern[0], 1, size});
    return pieces;
  }
  const std::uint64_t head = std::min<std::uint64_t>((pattern_size - start % pattern_size) % pattern_size, size);
  const std::uint64_t middle = (size - head) / pattern_size * pattern_size;
  for (std::uint64_t i = 0; i < head; ++i) pieces.push_back({start + i, pattern[i % pattern_size], 1, 1});
  if (middle > 0) {
    std::uint32_t value = 0;
    for (std::uint32_t byte = 0; byte < pattern_size; ++byte)
      value |= static_cast<std::uint32_t>(pattern[(head + byte) % pattern_size]) << (8 * byte);
    pieces.push_back({start + head, value, pattern_size, middle / pattern_size});
  }
  for (std::uint64_t i = head + middle; i < size; ++i) pieces.push_back({start + i, pattern[i % pattern_size], 1, 1});
  return pieces;
}

}  // namespace hal::backend
