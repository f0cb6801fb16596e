// Reading environment variables, one way in every part of hal.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace hal::abi {

// The variable's value, or nullptr when it is unset or empty: an empty
// variable means "not set" everywhere in hal.
inline const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}

// The same as a string to keep: nullopt when unset or empty.
inline std::optional<std::string> environment_value(const char* name) {
  const char* value = environment(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

}  // namespace hal::abi
