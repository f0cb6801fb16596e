#include "last_error.hpp"

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

}  // namespace hal::backend
