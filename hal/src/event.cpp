#include "hal/event.hpp"

#include <string>
#include <string_view>

#include "loaded_backend.hpp"

namespace hal {
namespace detail {

EventState::~EventState() { detail::Access::backend(device)->table->event_destroy(handle); }

}  // namespace detail

namespace {

const detail::EventState& usable_event(const std::shared_ptr<detail::EventState>& state, std::string_view operation) {
  if (!state)
    throw Error(StatusCode::invalid_argument,
                std::string(operation) + ": the event is empty (default-constructed or moved from)");
  return *state;
}

}  // namespace

Device Event::device() const { return usable_event(state_, "Event::device").device; }

bool Event::is_complete() const {
  const auto& event = usable_event(state_, "Event::is_complete");
  const hal_status code = detail::Access::backend(event.device)->table->event_query(event.handle);
  if (code == HAL_ERROR_TIMEOUT) return false;
  detail::Access::backend(event.device)->check(code, "querying an event of " + event.device.id());
  return true;
}

void Event::synchronize() const {
  const auto& event = usable_event(state_, "Event::synchronize");
  detail::Access::backend(event.device)->check(detail::Access::backend(event.device)->table->event_synchronize(event.handle),
                                "waiting for an event of " + event.device.id());
}

double Event::elapsed_milliseconds(const Event& start, const Event& end) {
  const auto& first = usable_event(start.state_, "Event::elapsed_milliseconds (start)");
  const auto& second = usable_event(end.state_, "Event::elapsed_milliseconds (end)");
  if (!(first.device == second.device))
    throw Error(StatusCode::invalid_argument, "Event::elapsed_milliseconds: start is on " + first.device.id() +
                                                  " and end on " + second.device.id() +
                                                  "; time events of one device");
  double milliseconds = 0;
  detail::Access::backend(first.device)->check(
      detail::Access::backend(first.device)->table->event_elapsed_milliseconds(first.handle, second.handle, &milliseconds),
      "measuring the time between two events of " + first.device.id());
  return milliseconds;
}

}  // namespace hal
