// Helpers shared by the built-in cases: reference data and sizes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hal/conformance/case.hpp"
#include "hal/hal.hpp"

namespace hal::conformance::cases {

// Deterministic bytes, so a failure reproduces with the same data.
// splitmix64, eight bytes per step: fast enough for hundreds of MiB.
inline std::vector<std::uint8_t> reference_bytes(std::size_t size, std::uint32_t seed) {
  std::vector<std::uint8_t> bytes(size);
  std::uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (std::size_t i = 0; i < size; i += 8) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (std::size_t k = 0; k < 8 && i + k < size; ++k) bytes[i + k] = static_cast<std::uint8_t>(z >> (8 * k));
  }
  return bytes;
}

// The host reference of Buffer::fill: the pattern's low pattern_size bytes repeated.
inline std::vector<std::uint8_t> reference_fill(std::size_t size, std::uint32_t pattern, std::uint32_t pattern_size) {
  std::vector<std::uint8_t> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(pattern >> (8 * (i % pattern_size)));
  return bytes;
}

inline std::string byte_count(std::uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace hal::conformance::cases
