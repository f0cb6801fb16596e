#include "imported_memory.hpp"

#include <algorithm>
#include <cstdio>

namespace hal::backend {

std::string describe_pointer(std::uintptr_t address) {
  char text[2 + 16 + 1];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

std::string imported_memory_mismatch(const PointerFacts& facts, hal_memory_kind kind, int ordinal,
                                     std::uintptr_t address, std::uint64_t size,
                                     const std::function<std::string(int ordinal)>& device_name) {
  using Memory = PointerFacts::Memory;
  const std::string where = "the memory at " + describe_pointer(address);
  const std::string mine = device_name(ordinal);
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      if (facts.memory == Memory::unknown)
        return where + " is not memory the driver knows (ordinary host memory?), so it cannot be device memory of " +
               mine + "; import host memory as host_pinned with register_host_memory";
      if (facts.memory == Memory::host)
        return where + " is pinned host memory, not device memory of " + mine + "; import it as host_pinned";
      if (facts.memory == Memory::managed)
        return where + " is managed memory, not device memory of " + mine + "; import it as managed";
      break;
    case HAL_MEMORY_MANAGED:
      if (facts.memory != Memory::managed)
        return where + " is " +
               (facts.memory == Memory::device ? "device memory"
                : facts.memory == Memory::host ? "pinned host memory"
                                               : "not memory the driver knows") +
               ", not managed memory; import it as what it is";
      return {};  // managed memory belongs to every device
    case HAL_MEMORY_HOST_PINNED:
      if (facts.memory != Memory::host)
        return where + " is " +
               (facts.memory == Memory::device    ? "device memory of " + device_name(facts.ordinal)
                : facts.memory == Memory::managed ? std::string("managed memory")
                                                  : std::string("host memory the driver does not know (pageable)")) +
               ", not pinned host memory; " +
               (facts.memory == Memory::unknown ? "set register_host_memory to page-lock it"
                                                : "import it as what it is");
      return {};  // pinned host memory is reachable from every device
  }
  if (facts.ordinal != ordinal)
    return where + " is device memory of " + device_name(facts.ordinal) + ", not of " + mine +
           "; import it into the device it belongs to";
  if (facts.range_size != 0 && (address < facts.range_start || address - facts.range_start > facts.range_size ||
                                size > facts.range_size - (address - facts.range_start)))
    return where + " lies in an allocation of " + std::to_string(facts.range_size) + " bytes at " +
           describe_pointer(facts.range_start) + ", which ends before the " + std::to_string(size) +
           " bytes imported; import at most " +
           std::to_string(facts.range_size - std::min<std::uint64_t>(facts.range_size, address - facts.range_start)) +
           " bytes from there";
  return {};
}

}  // namespace hal::backend
