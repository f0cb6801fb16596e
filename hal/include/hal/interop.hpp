// Interop: memory and streams that a framework (or any other code) owns,
// used by hal without a copy, and tensors exchanged through DLPack.
// docs/interop.md explains ownership, lifetime and stream rules.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hal/device.hpp"
#include "hal/dlpack.hpp"
#include "hal/dtype.hpp"
#include "hal/memory.hpp"
#include "hal/runtime.hpp"
#include "hal/stream.hpp"

namespace hal {

// Memory hal did not allocate: a framework's caching allocator, a vendor
// call, malloc. Device::import_memory wraps it into a Buffer.
struct ExternalMemory {
  void* address = nullptr;  // null only with size 0
  std::uint64_t size = 0;   // bytes
  // What the memory is: device memory of the device it is imported into,
  // host_pinned (host memory the device can reach) or managed. GPU backends
  // ask the driver (cuPointerGetAttributes, hipPointerGetAttributes) and
  // refuse memory of another device or of another kind, saying what it is.
  MemoryKind kind = MemoryKind::device;
  // Runs exactly once when hal lets go of the memory: on Buffer::free() or
  // when the last copy and view of the Buffer go away (also after the Runtime
  // is gone), and only once hal's work on the memory is done. GPU backends
  // record an event after the work each stream queued on it and never wait
  // for the whole device: the release runs at the free when that work has
  // passed, else at the backend's next free, import or stream synchronize
  // that finds it passed, or when the Runtime is destroyed. Empty: the Buffer
  // is a view that hal never frees; keep the memory alive while hal uses it.
  // Not called when import_memory throws: the memory stays the caller's.
  std::function<void()> release;
  // host_pinned only: page-lock ordinary host memory for the device
  // (cuMemHostRegister, hipHostRegister; mlock on the host backend) and undo
  // it before release.
  bool register_host_memory = false;
};

// A stream another library created (torch.cuda.current_stream().cuda_stream,
// a cudaStream_t, a hipStream_t). Device::wrap_native_stream makes it a
// hal::Stream, so hal's work runs in that stream's order.
//
// The rule that a failed operation makes hal skip its later work until
// synchronize() covers hal's own work only: work other code enqueues on the
// native stream is never skipped, and hal learns of a failure of that work
// only as the driver reports it (a sticky device error).
struct NativeStream {
  void* handle = nullptr;  // nullptr: the legacy default stream (CUDA's and HIP's stream 0)
  // true: hal destroys the native stream when the last copy of the Stream
  // goes away. false: hal never destroys it and synchronizes it only when
  // asked (Stream::synchronize).
  bool owned = false;
};

// How frameworks and DLPack name a device: the device type and the vendor's
// own ordinal (what PyTorch calls cuda:N), which is not hal's index when hal
// drops a device another plugin also lists. A PPU in CUDA-compatible mode is
// kDLCUDA: to a framework it is a CUDA device.
struct NativeDevice {
  dlpack::DLDeviceType type = dlpack::kDLCPU;  // kDLCPU, kDLCUDA or kDLROCM
  std::int32_t ordinal = 0;
};
NativeDevice native_device(const Device& device);
// The loaded device a DLPack device names: kDLCPU is the host, kDLCUDA /
// kDLCUDAHost / kDLCUDAManaged the CUDA (or PPU) device of that ordinal,
// kDLROCM / kDLROCMHost the ROCm one. Throws not_present naming the device
// and what is loaded when hal has no such device.
Device find_device(const Runtime& runtime, const dlpack::DLDevice& device);

// A typed, strided view of a Buffer: what DLPack exchanges.
struct Tensor {
  Buffer buffer;                  // from the tensor's first byte (at byte_offset) to its last
  std::uint64_t byte_offset = 0;  // of element 0 from the start of buffer
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // elements, one per axis; empty: compact row-major
  bool read_only = false;             // the producer asked that it not be written

  std::uint64_t element_count() const;
  // The strides in effect: strides, or the compact row-major ones.
  std::vector<std::int64_t> effective_strides() const;
  // Bytes from element 0 to one past the last element the strides reach (0 when empty).
  std::uint64_t span_bytes() const;
};

// Takes ownership of the producer's tensor: its deleter is called exactly
// once, when hal lets go of the memory, or before from_dlpack throws. No
// copy: the Buffer is the producer's memory (imported, see ExternalMemory).
// Throws invalid_argument naming the bad field (a NULL data pointer with
// elements, a dtype hal has no DType for, vector lanes, negative shape or
// strides, a major version newer than 1), and not_present for a device hal
// has not loaded.
Tensor from_dlpack(const Runtime& runtime, dlpack::DLManagedTensorVersioned* tensor);
Tensor from_dlpack(const Runtime& runtime, dlpack::DLManagedTensor* tensor);  // the pre-1.0 form
// A managed tensor of DLPack 1.x that keeps tensor.buffer alive until the
// consumer calls its deleter (exactly once).
dlpack::DLManagedTensorVersioned* to_dlpack(const Tensor& tensor);
dlpack::DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor);
// DLPack's name of the dtype: {kDLFloat, 32, 1} for f32, {kDLBfloat, 16, 1} for bf16, ...
dlpack::DLDataType to_dlpack(DType dtype);
// Throws invalid_argument naming the code, bits and lanes when hal has no DType for it.
DType from_dlpack(const dlpack::DLDataType& dtype);

}  // namespace hal
