// Host memory: buffers are ordinary memory bound to the device's NUMA node.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "host_backend.hpp"

namespace hal::host {
namespace {

constexpr std::uint64_t default_alignment = 64;  // a cache line; enough for AVX-512 loads
constexpr int mpol_bind = 2;                      // MPOL_BIND from <numaif.h>

// Binds pages to one node; done by syscall so the backend needs no libnuma.
bool bind_to_node(void* data, std::uint64_t size, int numa_node) {
#ifdef SYS_mbind
  unsigned long mask[16] = {};
  if (numa_node < 0 || numa_node >= static_cast<int>(sizeof(mask) * 8)) return false;
  mask[numa_node / (8 * sizeof(unsigned long))] |= 1UL << (numa_node % (8 * sizeof(unsigned long)));
  return syscall(SYS_mbind, data, size, mpol_bind, mask, sizeof(mask) * 8, 0) == 0;
#else
  (void)data, (void)size, (void)numa_node;
  return false;
#endif
}

template <typename Pattern>
void fill_with(void* destination, std::uint64_t size, const void* pattern) {
  Pattern value;
  std::memcpy(&value, pattern, sizeof(value));
  auto* out = static_cast<Pattern*>(destination);
  const std::uint64_t count = size / sizeof(Pattern);
  for (std::uint64_t i = 0; i < count; ++i) out[i] = value;
}

}  // namespace

Allocation::~Allocation() {
  if (locked) munlock(data, size);
  if (owned) std::free(data);
  if (release != nullptr) release(release_user_data);
}

void fill_bytes(void* destination, std::uint64_t size, const void* pattern, std::uint32_t pattern_size) {
  std::uint8_t first_byte;
  std::memcpy(&first_byte, pattern, 1);
  bool uniform = true;  // a repeated byte, whatever the width: memset is fastest
  for (std::uint32_t i = 1; i < pattern_size; ++i) uniform &= static_cast<const std::uint8_t*>(pattern)[i] == first_byte;
  if (uniform) {
    std::memset(destination, first_byte, size);
  } else if (pattern_size == 2) {
    fill_with<std::uint16_t>(destination, size, pattern);
  } else {
    fill_with<std::uint32_t>(destination, size, pattern);
  }
}

hal_status allocate(const Context& context, std::uint32_t device, hal_memory_kind kind, std::uint64_t size,
                    std::uint64_t alignment, hal_buffer** out) {
  if (kind != HAL_MEMORY_DEVICE && kind != HAL_MEMORY_HOST_PINNED && kind != HAL_MEMORY_MANAGED)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                "memory kind " + std::to_string(kind) + " is not one of device, host_pinned, managed");
  const HostDevice& host_device = context.devices[device];
  const std::uint64_t page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  // Smaller powers of two (1, 2, 4) are valid requests that posix_memalign
  // rejects; the default alignment satisfies them.
  std::uint64_t effective_alignment = std::max(alignment, default_alignment);
  // mbind and mlock act on whole pages.
  if (context.multiple_numa_nodes || kind == HAL_MEMORY_HOST_PINNED)
    effective_alignment = std::max(effective_alignment, page);
  const std::uint64_t rounded = (size + effective_alignment - 1) / effective_alignment * effective_alignment;
  if (rounded < size)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "allocation size " + std::to_string(size) + " overflows when rounded");

  auto allocation = std::make_shared<Allocation>();
  allocation->size = rounded;
  allocation->kind = kind;
  if (const int error = posix_memalign(&allocation->data, effective_alignment, rounded); error != 0) {
    allocation->data = nullptr;
    return fail(error == ENOMEM ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INVALID_ARGUMENT,
                "cannot allocate " + std::to_string(size) + " bytes aligned to " +
                    std::to_string(effective_alignment) + ": " + std::strerror(error) +
                    "; free buffers or allocate less",
                error);
  }
  if (context.multiple_numa_nodes && !bind_to_node(allocation->data, rounded, host_device.numa_node))
    context.log_message(HAL_LOG_DEBUG, "could not bind memory to NUMA node " + std::to_string(host_device.numa_node) +
                                           ": " + std::strerror(errno));
  if (kind == HAL_MEMORY_HOST_PINNED) {
    if (mlock(allocation->data, rounded) != 0) {
      const int error = errno;
      return fail(HAL_ERROR_OUT_OF_MEMORY,
                  "cannot page-lock " + std::to_string(size) + " bytes: " + std::strerror(error) +
                      "; raise the locked-memory limit (ulimit -l) or use device memory",
                  error);
    }
    allocation->locked = true;
  }
  *out = new hal_buffer{std::move(allocation), device};
  return succeed();
}

}  // namespace hal::host
