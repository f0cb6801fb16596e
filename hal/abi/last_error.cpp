#include "last_error.hpp"

#include <utility>

namespace hal::backend {
namespace {

struct LastError {
  hal_status status = HAL_OK;
  std::int64_t native_code = 0;
  std::string message;
};
// The ABI's per-thread last error; the only state outside a backend's context.
thread_local LastError last_error;

}  // namespace

hal_status fail(hal_status status, std::string message, std::int64_t native_code) {
  last_error.status = status;
  last_error.native_code = native_code;
  last_error.message = std::move(message);
  return status;
}

hal_status succeed() {
  last_error.status = HAL_OK;
  last_error.native_code = 0;
  last_error.message.clear();
  return HAL_OK;
}

void read_last_error(hal_error_info_v1* out) {
  if (out == nullptr) return;
  out->status = last_error.status;
  out->native_code = last_error.native_code;
  out->message = last_error.message.c_str();
}

std::string last_error_message() {
  hal_error_info_v1 info{};
  info.struct_size = sizeof(info);
  read_last_error(&info);
  return info.message != nullptr ? info.message : "unknown error";
}

hal_status fail_vendor_call(hal_status status, std::string_view operation, const std::string& described,
                            std::int64_t native_code, const VendorHints& hints) {
  std::string message = std::string(operation) + " failed: " + described;
  const char* hint = status == HAL_ERROR_OUT_OF_MEMORY ? hints.out_of_memory
                     : status == HAL_ERROR_DEVICE_LOST ? hints.device_lost
                     : status == HAL_ERROR_NOT_PRESENT ? hints.not_present
                     : status == HAL_ERROR_UNSUPPORTED ? hints.unsupported
                                                       : nullptr;
  if (hint != nullptr) message += std::string("; ") + hint;
  return fail(status, std::move(message), native_code);
}

}  // namespace hal::backend
