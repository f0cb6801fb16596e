#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

#include "environment.hpp"
#include "loaded_backend.hpp"

namespace hal::detail {
namespace {

hal_log_level initial_level() {
  const char* text = abi::environment("HAL_LOG_LEVEL");
  if (text == nullptr) return HAL_LOG_WARNING;
  try {
    return parse_log_level(text, "HAL_LOG_LEVEL");
  } catch (const Error& error) {
    std::fprintf(stderr, "hal: warning: %s; using warning\n", error.what());
    return HAL_LOG_WARNING;
  }
}

// Process-wide on purpose: one stderr, one level.
std::atomic<int>& current_level() {
  static std::atomic<int> level{initial_level()};
  return level;
}

const char* level_name(hal_log_level level) {
  switch (level) {
    case HAL_LOG_DEBUG: return "debug";
    case HAL_LOG_INFO: return "info";
    case HAL_LOG_WARNING: return "warning";
    case HAL_LOG_ERROR: return "error";
  }
  return "log";
}

}  // namespace

hal_log_level parse_log_level(std::string_view text, std::string_view source) {
  if (text == "debug") return HAL_LOG_DEBUG;
  if (text == "info") return HAL_LOG_INFO;
  if (text == "warning") return HAL_LOG_WARNING;
  if (text == "error") return HAL_LOG_ERROR;
  throw Error(StatusCode::invalid_argument, std::string(source) + " is '" + std::string(text) +
                                                "'; use one of debug, info, warning, error");
}

void set_log_level(hal_log_level level) { current_level().store(level); }

void log_message(hal_log_level level, std::string_view message) {
  if (static_cast<int>(level) < current_level().load()) return;
  static std::mutex output_mutex;
  std::lock_guard lock(output_mutex);
  std::fprintf(stderr, "hal: %s: %.*s\n", level_name(level), static_cast<int>(message.size()), message.data());
}

}  // namespace hal::detail
