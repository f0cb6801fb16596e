// Stuck memory cells for the fake GPU drivers (fake_cuda_driver,
// fake_hip_runtime): a variable such as HAL_FAKE_CUDA_STUCK_BITS names bits
// of every device allocation that always hold one value, whatever is
// written: "0x12345:3=1,0x80006:6=0" is bit 3 of the allocation's byte
// 0x12345 stuck at 1 and bit 6 of byte 0x80006 stuck at 0. The fakes force
// them after every operation that runs on a queue (copies, memsets, kernel
// launches), so whatever reads the cells next (a copy to the host, a
// kernel) sees the fault, as it would see a bad cell. Read on every call.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace hal_fakes {

struct StuckBit {
  std::size_t offset = 0;  // byte offset in an allocation
  unsigned char mask = 0;  // the bit
  bool value = false;      // what it holds
};

// The variable's stuck bits; entries that do not parse are ignored.
inline std::vector<StuckBit> stuck_bits(const char* variable) {
  std::vector<StuckBit> bits;
  const char* text = std::getenv(variable);
  if (text == nullptr) return bits;
  std::string entries(text);
  std::size_t start = 0;
  while (start < entries.size()) {
    std::size_t end = entries.find(',', start);
    if (end == std::string::npos) end = entries.size();
    const std::string entry = entries.substr(start, end - start);
    start = end + 1;
    const std::size_t colon = entry.find(':'), equals = entry.find('=');
    if (colon == std::string::npos || equals == std::string::npos || equals < colon) continue;
    const unsigned long bit = std::strtoul(entry.c_str() + colon + 1, nullptr, 10);
    if (bit > 7) continue;
    bits.push_back({static_cast<std::size_t>(std::strtoull(entry.c_str(), nullptr, 0)),
                    static_cast<unsigned char>(1u << bit), entry[equals + 1] == '1'});
  }
  return bits;
}

// Forces the stuck bits that fall inside [memory, memory + size).
inline void force_stuck_bits(const std::vector<StuckBit>& bits, void* memory, std::size_t size) {
  auto* bytes = static_cast<volatile unsigned char*>(memory);
  for (const StuckBit& bit : bits) {
    if (bit.offset >= size) continue;
    const unsigned char held = bytes[bit.offset];
    bytes[bit.offset] = static_cast<unsigned char>(bit.value ? held | bit.mask : held & ~bit.mask);
  }
}

}  // namespace hal_fakes
