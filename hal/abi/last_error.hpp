// The ABI's per-thread last error (status, native code, message): what
// get_last_error reports after a call returned something other than HAL_OK.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hal/backend_abi.h"

namespace hal::backend {

// Records the thread's last error and returns its status, so a failing path
// reads `return fail(HAL_ERROR_..., "what to do")`.
hal_status fail(hal_status status, std::string message, std::int64_t native_code = 0);
hal_status succeed();
void read_last_error(hal_error_info_v1* out);
// The thread's last error message, for a reason that cites it.
std::string last_error_message();

// What to do next after a vendor call failed, by the status it maps to;
// null where there is nothing to add.
struct VendorHints {
  const char* out_of_memory = nullptr;
  const char* device_lost = nullptr;
  const char* not_present = nullptr;
  const char* unsupported = nullptr;
};
// Records "<operation> failed: <described>; <hint for status>" with the
// vendor's own code and returns status.
hal_status fail_vendor_call(hal_status status, std::string_view operation, const std::string& described,
                            std::int64_t native_code, const VendorHints& hints);

}  // namespace hal::backend
