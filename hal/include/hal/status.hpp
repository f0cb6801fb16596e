// Status codes and the exception type of the hal C++ API.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "hal/backend_abi.h"

namespace hal {

enum class StatusCode {
  ok = HAL_OK,
  invalid_argument = HAL_ERROR_INVALID_ARGUMENT,
  unsupported = HAL_ERROR_UNSUPPORTED,
  not_present = HAL_ERROR_NOT_PRESENT,
  out_of_memory = HAL_ERROR_OUT_OF_MEMORY,
  timeout = HAL_ERROR_TIMEOUT,
  device_lost = HAL_ERROR_DEVICE_LOST,
  aborted = HAL_ERROR_ABORTED,
  internal = HAL_ERROR_INTERNAL,
};

// "invalid_argument", "unsupported", ...
std::string_view to_string(StatusCode code);

// A code plus a message that says what went wrong and what to do next.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, long long native_code = 0)
      : code_(code), message_(std::move(message)), native_code_(native_code) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::ok; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The vendor's own error code (CUresult, errno, ...) when there is one.
  long long native_code() const { return native_code_; }
  // "invalid_argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
  long long native_code_ = 0;
};

// Every failing call of the C++ API throws hal::Error.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status);
  Error(StatusCode code, std::string message) : Error(Status(code, std::move(message))) {}
  const Status& status() const { return status_; }
  StatusCode code() const { return status_.code(); }

 private:
  Status status_;
};

// Throws hal::Error unless status is ok.
void throw_if_error(const Status& status);

}  // namespace hal
