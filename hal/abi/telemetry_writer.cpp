#include "telemetry_writer.hpp"

#include <deque>
#include <memory>

namespace hal::backend {
namespace {

// A deque: pointers handed out stay valid while more strings are added.
std::deque<std::string>& telemetry_texts() {
  thread_local std::deque<std::string> texts;
  return texts;
}

}  // namespace

void begin_telemetry_call() { telemetry_texts().clear(); }

const char* keep_telemetry_text(std::string text) { return telemetry_texts().emplace_back(std::move(text)).c_str(); }

}  // namespace hal::backend
