// The parts of the hal._hal extension, each binding one area of the C++ API.
#pragma once

#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <hal/dtype.hpp>
#include <hal/interop.hpp>
#include <hal/runtime.hpp>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

namespace hal::python {

// A tensor's shape as Python writes a tuple: "(2, 3)", "(4,)", "()".
std::string shape_text(const Tensor& tensor);

// hal::Store, Store::from_environment and hal::Communicator on hal.Tensor
// (python/src/collectives.cpp); hal/_collectives.py is the Python face.
void bind_collectives(nanobind::module_& m);

// hal.torch's one-pass reading of a boolean attention mask (python/src/masks.cpp).
void bind_masks(nanobind::module_& m);

// Raises Python's BufferError with the message (the DLPack protocol's error).
[[noreturn]] void buffer_error(const std::string& message);

// Work a call left queued on a stream (synchronize=False) on its tensors'
// memory, and the DLPack stream rule for it (python/src/pending_work.cpp).
// All with the GIL held. note_pending_work records an event on the stream
// after the call's work and keeps the tensors alive until it is done;
// release_finished_work lets go of the tensors of finished work;
// wait_for_pending_work waits on the host for work on the tensor's memory;
// order_consumer_after_pending_work applies __dlpack__'s `stream` argument
// (checked: an int or None, -1 for none; None only where the host reads the
// memory): the consumer's stream waits for that work, or the host does.
void note_pending_work(const Stream& stream, std::initializer_list<const Tensor*> tensors);
void release_finished_work();
void wait_for_pending_work(const Tensor& tensor);
void order_consumer_after_pending_work(const Tensor& tensor, int dlpack_device_type, const nanobind::object& stream);

}  // namespace hal::python
