// Status codes and the exception type of the hal C++ API.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace hal {

// The values are the plugin ABI's hal_status codes (checked in the library).
enum class StatusCode : std::uint32_t {
  ok = 0,
  invalid_argument = 1,  // the caller passed a bad value
  unsupported = 2,       // a valid request this backend or device cannot do
  not_present = 3,       // a vendor library or device is missing
  out_of_memory = 4,
  timeout = 5,
  device_lost = 6,
  aborted = 7,
  internal = 8,
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
