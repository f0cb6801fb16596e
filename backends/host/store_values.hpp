// The communicator's store (hal_store_v1, bytes handed to a sink) with
// std::string keys and values, as the host engines use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hal/backend_abi.h"

namespace hal::host {

inline hal_status store_set(const hal_store_v1& store, const std::string& key, const std::string& value) {
  return store.set(store.user_data, key.c_str(), value.data(), value.size());
}

// Waits up to timeout_ms for `key`, then puts its value in `value`;
// HAL_ERROR_TIMEOUT when the key did not appear in time.
inline hal_status store_get(const hal_store_v1& store, const std::string& key, std::int64_t timeout_ms,
                            std::string& value) {
  return store.get(
      store.user_data, key.c_str(), timeout_ms,
      [](void* sink, const void* data, std::size_t size) {
        static_cast<std::string*>(sink)->assign(static_cast<const char*>(data), size);
      },
      &value);
}

}  // namespace hal::host
