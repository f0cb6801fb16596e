// Internal: reading hal's environment variables, one way everywhere.
#pragma once

#include <cstdlib>

namespace hal::detail {

// The variable's value, or nullptr when it is unset or empty (an empty
// variable means "not set" for every HAL_* variable).
inline const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

}  // namespace hal::detail
