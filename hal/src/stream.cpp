#include "hal/stream.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "hal/event.hpp"
#include "hal/memory.hpp"
#include "abi.hpp"
#include "loaded_backend.hpp"

namespace hal {
namespace detail {
namespace {

// The stream whose host callback this thread is running, if any.
thread_local const hal_stream* stream_of_running_callback = nullptr;

// Runs releases on a thread of its own, in order: what a host callback
// captured must not be released on the thread that ran it, where the vendor
// forbids its API (CUDA's callback thread: cuMemFree there can deadlock),
// and a stream destroyed from its own callback would wait for itself. The
// state is never destroyed, so no release races static destruction at exit.
class DeferredReleases {
 public:
  static void later(std::function<void()> release) {
    static DeferredReleases* const releases = new DeferredReleases();
    releases->add(std::move(release));
  }

 private:
  void add(std::function<void()> release) {
    std::unique_lock lock(mutex_);
    if (!started_) {
      try {
        std::thread([this] { run(); }).detach();
        started_ = true;
      } catch (const std::system_error& error) {
        lock.unlock();
        // `release` goes here unrun: captures are freed on this thread, a stream is leaked (destroying it
        // here would wait for its own callback).
        log_message(HAL_LOG_ERROR, std::string("cannot start the thread that releases what host callbacks "
                                               "captured; they are freed where the callback ran and a stream "
                                               "released there is leaked: ") +
                                       error.what());
        return;
      }
    }
    pending_.push_back(std::move(release));
    ready_.notify_one();
  }
  [[noreturn]] void run() {
    for (;;) {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return !pending_.empty(); });
      std::function<void()> release = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      release();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> pending_;
  bool started_ = false;
};

}  // namespace

StreamState::~StreamState() {
  if (stream_of_running_callback != handle) {
    detail::Access::backend(device)->table->stream_destroy(handle);
    return;
  }
  // The last reference went away inside one of the stream's own callbacks.
  DeferredReleases::later(
      [owner = device, stream = handle] { detail::Access::backend(owner)->table->stream_destroy(stream); });
}

const StreamState& usable_stream(const std::shared_ptr<StreamState>& state, std::string_view operation) {
  if (!state)
    throw Error(StatusCode::invalid_argument,
                std::string(operation) + ": the stream is empty (default-constructed or moved from)");
  return *state;
}

const BufferState& buffer_on_stream_device(const StreamState& stream, const std::shared_ptr<BufferState>& buffer,
                                           std::string_view operation) {
  const auto& state = usable_state(buffer, operation);
  if (!(state.device == stream.device))
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the " + state.describe() +
                                                  " is not on the stream's device " + stream.device.id() +
                                                  "; use a stream of " + state.device.id());
  return state;
}

}  // namespace detail

using detail::buffer_on_stream_device;
using detail::usable_stream;

namespace {

void check_host_pointer(const void* pointer, std::uint64_t size, std::string_view operation) {
  if (pointer == nullptr && size != 0)
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": the host pointer is null");
}

// A copy between host memory and `buffer` (`direction`: "to" or "from" it):
// the checks of both directions, then enqueue(stream, buffer state), which
// returns the backend's status, unless there is nothing to copy.
template <class Enqueue>
void copy_with_host(const std::shared_ptr<detail::StreamState>& state, std::string_view operation, const Buffer& buffer,
                    std::uint64_t offset, const void* host, std::uint64_t size, std::string_view direction,
                    const Enqueue& enqueue) {
  const auto& stream = usable_stream(state, operation);
  const auto& buffer_state = buffer_on_stream_device(stream, detail::Access::state(buffer), operation);
  buffer_state.check_range(offset, size, operation);
  check_host_pointer(host, size, operation);
  if (size == 0) return;
  buffer_state.backend->check(enqueue(stream, buffer_state), [&] {
    return "enqueueing a copy of " + std::to_string(size) + " bytes " + std::string(direction) + " the " +
           buffer_state.describe();
  });
}

// Passes a std::function through the C boundary; the trampoline owns it.
struct HostCallback {
  std::function<void(const Status&)> callback;
  std::shared_ptr<detail::LoadedBackend> backend;
  const hal_stream* stream = nullptr;
  static void trampoline(void* user_data, hal_status status) {
    std::unique_ptr<HostCallback> self(static_cast<HostCallback*>(user_data));
    const hal_stream* const enclosing_stream = detail::stream_of_running_callback;
    detail::stream_of_running_callback = self->stream;
    Status stream_status = status == HAL_OK
                               ? Status::ok()
                               : Status(detail::from_abi(status), "an earlier operation on the stream failed");
    try {
      self->callback(stream_status);
    } catch (const std::exception& error) {
      detail::log_message(HAL_LOG_ERROR, std::string("a stream host callback threw: ") + error.what());
    } catch (...) {
      detail::log_message(HAL_LOG_ERROR, "a stream host callback threw a non-standard exception");
    }
    // The captures (and the backend) are released elsewhere: the vendor's callback thread forbids its API.
    // Still under the marker, so a release that cannot be deferred never destroys the stream from here.
    detail::DeferredReleases::later([captured = std::shared_ptr<HostCallback>(self.release())]() mutable {
      captured.reset();
    });
    detail::stream_of_running_callback = enclosing_stream;
  }
};

}  // namespace

Device Stream::device() const { return usable_stream(state_, "Stream::device").device; }

void Stream::copy_to_device(const Buffer& destination, std::uint64_t destination_offset, const void* source,
                            std::uint64_t size) const {
  copy_with_host(state_, "Stream::copy_to_device", destination, destination_offset, source, size, "to",
                 [&](const detail::StreamState& stream, const detail::BufferState& buffer) {
                   return buffer.backend->table->copy_host_to_device(stream.handle, buffer.handle,
                                                                     buffer.base + destination_offset, source, size);
                 });
}

void Stream::copy_to_host(void* destination, const Buffer& source, std::uint64_t source_offset,
                          std::uint64_t size) const {
  copy_with_host(state_, "Stream::copy_to_host", source, source_offset, destination, size, "from",
                 [&](const detail::StreamState& stream, const detail::BufferState& buffer) {
                   return buffer.backend->table->copy_device_to_host(stream.handle, destination, buffer.handle,
                                                                     buffer.base + source_offset, size);
                 });
}

void Stream::copy(const Buffer& destination, std::uint64_t destination_offset, const Buffer& source,
                  std::uint64_t source_offset, std::uint64_t size) const {
  constexpr std::string_view operation = "Stream::copy";
  const auto& stream = usable_stream(state_, operation);
  const auto& destination_state = detail::usable_state(detail::Access::state(destination), operation);
  const auto& source_state = detail::usable_state(detail::Access::state(source), operation);
  // Peer copies are allowed: one side on the stream's device is enough.
  if (!(destination_state.device == stream.device) && !(source_state.device == stream.device))
    throw Error(StatusCode::invalid_argument, std::string(operation) + ": neither the source (" +
                                                  source_state.device.id() + ") nor the destination (" +
                                                  destination_state.device.id() + ") is on the stream's device " +
                                                  stream.device.id());
  if (destination_state.backend != source_state.backend)
    throw Error(StatusCode::unsupported, std::string(operation) + ": the source is on " + source_state.device.id() +
                                             " and the destination on " + destination_state.device.id() +
                                             "; copies between backends go through host memory");
  destination_state.check_range(destination_offset, size, "Stream::copy (destination)");
  source_state.check_range(source_offset, size, "Stream::copy (source)");
  if (size == 0) return;
  detail::Access::backend(stream.device)->check(
      detail::Access::backend(stream.device)->table->copy_device_to_device(stream.handle, destination_state.handle, destination_state.base + destination_offset,
                                                            source_state.handle, source_state.base + source_offset, size),
      [&] {
        return "enqueueing a copy of " + std::to_string(size) + " bytes from the " + source_state.describe() +
               " to the " + destination_state.describe();
      });
}

void Stream::fill(const Buffer& destination, std::uint64_t offset, std::uint64_t size, std::uint32_t pattern,
                  std::uint32_t pattern_size) const {
  constexpr std::string_view operation = "Stream::fill";
  const auto& stream = usable_stream(state_, operation);
  const auto& buffer = buffer_on_stream_device(stream, detail::Access::state(destination), operation);
  buffer.check_range(offset, size, operation);
  detail::check_fill_arguments(offset, size, pattern_size, operation);
  if (size == 0) return;
  buffer.backend->check(
      buffer.backend->table->fill(stream.handle, buffer.handle, buffer.base + offset, size, &pattern, pattern_size),
      [&] { return "enqueueing a fill of " + std::to_string(size) + " bytes of the " + buffer.describe(); });
}

void Stream::record(const Event& event) const {
  const auto& stream = usable_stream(state_, "Stream::record");
  if (!detail::Access::state(event)) throw Error(StatusCode::invalid_argument, "Stream::record: the event is empty");
  if (!(detail::Access::state(event)->device == stream.device))
    throw Error(StatusCode::invalid_argument, "Stream::record: the event belongs to " + detail::Access::state(event)->device.id() +
                                                  ", the stream to " + stream.device.id() +
                                                  "; record it on a stream of its device");
  detail::Access::backend(stream.device)->check(detail::Access::backend(stream.device)->table->event_record(detail::Access::state(event)->handle, stream.handle),
                                 [&] { return "recording an event on a stream of " + stream.device.id(); });
}

void Stream::wait(const Event& event) const {
  const auto& stream = usable_stream(state_, "Stream::wait");
  if (!detail::Access::state(event)) throw Error(StatusCode::invalid_argument, "Stream::wait: the event is empty");
  if (detail::Access::backend(detail::Access::state(event)->device) != detail::Access::backend(stream.device))
    throw Error(StatusCode::unsupported, "Stream::wait: the event belongs to " + detail::Access::state(event)->device.id() +
                                             ", another backend than the stream's " + stream.device.id() +
                                             "; synchronize the event on the host instead");
  detail::Access::backend(stream.device)->check(
      detail::Access::backend(stream.device)->table->stream_wait_event(stream.handle, detail::Access::state(event)->handle),
      [&] { return "making a stream of " + stream.device.id() + " wait for an event"; });
}

void Stream::enqueue_host_callback(std::function<void(const Status&)> callback) const {
  const auto& stream = usable_stream(state_, "Stream::enqueue_host_callback");
  if (!callback) throw Error(StatusCode::invalid_argument, "Stream::enqueue_host_callback: the callback is empty");
  auto owned =
      std::make_unique<HostCallback>(HostCallback{std::move(callback), detail::Access::backend(stream.device), stream.handle});
  const hal_status code =
      detail::Access::backend(stream.device)->table->stream_host_callback(stream.handle, &HostCallback::trampoline, owned.get());
  detail::Access::backend(stream.device)->check(code,
                                 [&] { return "enqueueing a host callback on a stream of " + stream.device.id(); });
  owned.release();  // the trampoline owns it now
}

void Stream::synchronize() const {
  const auto& stream = usable_stream(state_, "Stream::synchronize");
  detail::Access::backend(stream.device)->check(detail::Access::backend(stream.device)->table->stream_synchronize(stream.handle),
                                 [&] { return "work on a stream of " + stream.device.id(); });
}

bool Stream::is_idle() const {
  const auto& stream = usable_stream(state_, "Stream::is_idle");
  const hal_status code = detail::Access::backend(stream.device)->table->stream_query(stream.handle);
  if (code == HAL_ERROR_TIMEOUT) return false;
  detail::Access::backend(stream.device)->check(code, [&] { return "querying a stream of " + stream.device.id(); });
  return true;
}

}  // namespace hal
