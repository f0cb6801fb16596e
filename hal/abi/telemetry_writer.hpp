// Filling the ABI's telemetry snapshot: each field gets a value or a reason,
// and the strings behind detail and source live in a per-thread store until
// the next telemetry call on that thread, as backend_abi.h promises.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "hal/backend_abi.h"

namespace hal::backend {

// Starts a telemetry call on this thread: forgets the previous call's strings.
void begin_telemetry_call();
// Keeps text until the next begin_telemetry_call on this thread.
const char* keep_telemetry_text(std::string text);

inline void set_real(hal_telemetry_reading_v1& field, double value) {
  field = {};
  field.availability = HAL_TELEMETRY_AVAILABLE;
  field.real = value;
}
inline void set_integer(hal_telemetry_reading_v1& field, std::uint64_t value) {
  field = {};
  field.availability = HAL_TELEMETRY_AVAILABLE;
  field.integer = value;
}
inline void set_flag(hal_telemetry_reading_v1& field, bool value) { set_integer(field, value ? 1 : 0); }
inline void set_unavailable(hal_telemetry_reading_v1& field, hal_telemetry_availability why, std::string detail) {
  field = {};
  field.availability = why;
  field.detail = detail.empty() ? nullptr : keep_telemetry_text(std::move(detail));
}

}  // namespace hal::backend
