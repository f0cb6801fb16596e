// Where the host's shared-memory collectives engine keeps its segments and
// how it names them; the engine and halrun (which removes what a killed job
// left) both use this.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "environment.hpp"

namespace hal::abi {

// HAL_SHM_DIR, else /dev/shm.
inline std::string shm_directory() {
  const char* directory = environment("HAL_SHM_DIR");
  return directory != nullptr ? directory : "/dev/shm";
}

// "hal-shm-<16 hex digits>-", how every segment name of the job whose store
// token (HAL_STORE_TOKEN) is `token` starts; random digits follow. The hex is
// a hash of the token: names in the directory are visible to every user, the
// token is not to be.
inline std::string shm_job_prefix(std::string_view token) {
  std::uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : token) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string prefix = "hal-shm-";
  for (int shift = 60; shift >= 0; shift -= 4) prefix += digits[(hash >> shift) & 15];
  return prefix + "-";
}

}  // namespace hal::abi
