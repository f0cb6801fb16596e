// Stream: an in-order queue of work on one device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "hal/device.hpp"
#include "hal/status.hpp"

namespace hal {

namespace detail {
struct StreamState;
struct Access;
}

class Buffer;
class Event;

// Work runs in the order it was enqueued. Enqueueing is safe from several
// threads. A failed operation's error is reported by the next synchronize()
// (and passed to host callbacks); later work on the stream is skipped until
// then, so nothing runs on data a failed step should have produced.
class Stream {
 public:
  Stream() = default;

  Device device() const;

  // The host memory must stay valid until the copy completes.
  void copy_to_device(const Buffer& destination, std::uint64_t destination_offset, const void* source,
                      std::uint64_t size) const;
  void copy_to_host(void* destination, const Buffer& source, std::uint64_t source_offset,
                    std::uint64_t size) const;
  void copy(const Buffer& destination, std::uint64_t destination_offset, const Buffer& source,
            std::uint64_t source_offset, std::uint64_t size) const;
  void fill(const Buffer& destination, std::uint64_t offset, std::uint64_t size, std::uint32_t pattern,
            std::uint32_t pattern_size = 1) const;

  void record(const Event& event) const;
  // Later work on this stream waits for the event's latest record.
  void wait(const Event& event) const;
  // Runs on a backend thread once earlier work is done; gets the stream's
  // status. It must not synchronize this stream.
  void enqueue_host_callback(std::function<void(const Status&)> callback) const;

  // Blocks until all work is done; throws the first error of failed work.
  void synchronize() const;
  // True when all enqueued work is done.
  bool is_idle() const;
  // The vendor's stream (CUstream, hipStream_t) for other code to enqueue
  // work in this stream's order; hal keeps owning it. Throws unsupported on
  // the host backend, whose streams are hal's own threads.
  void* native_handle() const;

 private:
  friend struct detail::Access;
  explicit Stream(std::shared_ptr<detail::StreamState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::StreamState> state_;
};

}  // namespace hal
