// Work hal left queued on a tensor's memory, and the DLPack stream rule.
//
// A call made with a stream (synchronize=False) returns before its work has
// run. Two things follow. Its tensors must stay alive until then, also those
// hal imported for the call alone (a numpy argument): each entry holds a copy
// of its tensor, dropped once the work is done, with the GIL held (dropping
// an import may run the exporter's deleter, which is Python code). And a
// consumer that takes a tensor through __dlpack__ must not see its memory
// before that work is done: the array API has the producer order the
// consumer's stream after its own work (or, for memory the host reads, wait
// for it). Each such call records an event after its work and notes the
// bytes its tensors span; __dlpack__ looks them up.
#include <nanobind/nanobind.h>

#include <cstdint>
#include <hal/event.hpp>
#include <hal/stream.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.hpp"

namespace nb = nanobind;

namespace hal::python {
namespace {

struct PendingEntry {
  Tensor tensor;  // kept alive until the work is done
  std::string device;
  std::uintptr_t begin;
  std::uintptr_t end;
  Event event;  // recorded after the call's work
};

// Guarded by its own mutex: calls note their work with the GIL released.
struct PendingWork {
  std::mutex mutex;
  std::vector<PendingEntry> entries;
};

PendingWork& pending_work() {
  static PendingWork* work = new PendingWork();  // never destroyed: events may outlive the interpreter's teardown
  return *work;
}

std::uintptr_t start_of(const Tensor& tensor) {
  return reinterpret_cast<std::uintptr_t>(tensor.buffer.device_address()) + tensor.byte_offset;
}

// The entries of finished work, moved out of the list (under its lock); the
// caller lets them go once the lock is let go, with the GIL held.
std::vector<PendingEntry> take_finished(std::vector<PendingEntry>& entries) {
  std::vector<PendingEntry> finished;
  std::vector<PendingEntry> unfinished;
  for (PendingEntry& entry : entries) (entry.event.is_complete() ? finished : unfinished).push_back(std::move(entry));
  entries = std::move(unfinished);
  return finished;
}

// The events of unfinished work on memory that overlaps the tensor's.
std::vector<Event> pending_events(const Tensor& tensor) {
  const std::string device = tensor.buffer.device().id();
  const std::uintptr_t begin = start_of(tensor);
  const std::uintptr_t end = begin + tensor.span_bytes();
  std::vector<PendingEntry> finished;  // declared before the lock: destroyed after it is let go
  std::vector<Event> overlapping;
  PendingWork& work = pending_work();
  std::lock_guard lock(work.mutex);
  finished = take_finished(work.entries);
  for (const PendingEntry& entry : work.entries)
    if (entry.device == device && entry.begin < end && begin < entry.end) overlapping.push_back(entry.event);
  return overlapping;
}

}  // namespace

void buffer_error(const std::string& message) {
  PyErr_SetString(PyExc_BufferError, message.c_str());
  throw nb::python_error();
}

void wait_for_pending_work(const Tensor& tensor) {
  const std::vector<Event> events = pending_events(tensor);
  nb::gil_scoped_release release;
  for (const Event& event : events) event.synchronize();
}

void note_pending_work(const Stream& stream, std::initializer_list<const Tensor*> tensors) {
  Event event = stream.device().create_event();
  stream.record(event);
  release_finished_work();
  PendingWork& work = pending_work();
  std::lock_guard lock(work.mutex);
  for (const Tensor* tensor : tensors) {
    if (tensor == nullptr || tensor->span_bytes() == 0) continue;
    const std::uintptr_t begin = start_of(*tensor);
    work.entries.push_back({*tensor, tensor->buffer.device().id(), begin, begin + tensor->span_bytes(), event});
  }
}

void release_finished_work() {
  std::vector<PendingEntry> finished;  // declared before the lock: destroyed after it is let go
  PendingWork& work = pending_work();
  std::lock_guard lock(work.mutex);
  finished = take_finished(work.entries);
}

void order_consumer_after_pending_work(const Tensor& tensor, int dlpack_device_type, const nb::object& stream) {
  // The stream argument as the DLPack protocol defines it: an int or None;
  // -1: the consumer orders itself.
  std::int64_t requested = 0;
  const bool given = !stream.is_none();
  if (given) {
    if (!nb::isinstance<nb::int_>(stream))
      buffer_error(std::string("hal.Tensor.__dlpack__: stream must be an int or None, not ") +
                   nb::str(stream.type()).c_str());
    requested = nb::cast<std::int64_t>(stream);
    if (requested == -1) return;
  }
  const bool cuda = dlpack_device_type == dlpack::kDLCUDA;
  const bool rocm = dlpack_device_type == dlpack::kDLROCM;
  if (!cuda && !rocm) {
    // Memory the host reads: there is no consumer stream; the data must be there on return.
    if (given)
      buffer_error("hal.Tensor.__dlpack__: stream=" + std::to_string(requested) +
                   " for a tensor the host reads (DLPack device " + std::to_string(dlpack_device_type) +
                   "); DLPack allows only None (or -1) there");
    wait_for_pending_work(tensor);
    return;
  }
  if (cuda && given && requested == 0)
    buffer_error(
        "hal.Tensor.__dlpack__: stream=0 is ambiguous for CUDA and DLPack disallows it; use 1 for the "
        "legacy default stream, 2 for the per-thread one, or the stream's handle");
  const std::vector<Event> events = pending_events(tensor);
  if (events.empty()) return;
  // None (and 1 on CUDA, 0 on ROCm) is the legacy default stream, which hal names with a null handle.
  const bool legacy = !given || (cuda && requested == 1) || (rocm && requested == 0);
  NativeStream native;
  native.handle = legacy ? nullptr : reinterpret_cast<void*>(static_cast<std::uintptr_t>(requested));
  const Stream consumer = tensor.buffer.device().wrap_native_stream(native);
  for (const Event& event : events) consumer.wait(event);
}

}  // namespace hal::python
