#include "hal/status.hpp"

namespace hal {

std::string_view to_string(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::unsupported: return "unsupported";
    case StatusCode::not_present: return "not_present";
    case StatusCode::out_of_memory: return "out_of_memory";
    case StatusCode::timeout: return "timeout";
    case StatusCode::device_lost: return "device_lost";
    case StatusCode::aborted: return "aborted";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  std::string text(hal::to_string(code_));
  if (!message_.empty()) text += ": " + message_;
  if (native_code_ != 0) text += " (native code " + std::to_string(native_code_) + ")";
  return text;
}

Error::Error(Status status) : std::runtime_error(status.to_string()), status_(std::move(status)) {}

void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw Error(status);
}

}  // namespace hal
