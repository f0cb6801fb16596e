// The GPU backends' collectives engine: hal_collectives_v1/v2 on an
// NCCL-compatible library (NCCL, ACCL-N, RCCL, ACCL-P/pccl through
// shims/nccl), written once for every vendor. It sees the backend through a
// GpuCollectivesPort (make a device current, a stream's native handle, the
// plugin's own memory and event entry points), which gpu_plugin.hpp's
// VendorCollectivesPort<V> implements over the backend's Vendor; the context
// owns one NcclCollectives, and the table points at nccl_collectives_table<>.
//
// Rendezvous: rank 0 publishes ncclGetUniqueId under the communicator's key
// prefix in hal's store; every rank marks its arrival there, so a missing
// rank is a timeout naming it; init is non-blocking where the library has
// ncclCommInitRankConfig. Operations are enqueued on the caller's stream, each
// followed by an event; a watchdog thread per communicator polls the events
// and ncclCommGetAsyncError, and aborts the communicator (ncclCommAbort) when
// an operation outlives its timeout or the library reports an error. Such an
// error is the communicator's first error and the error of every stream that
// had work of it in flight: the backend's stream_synchronize and stream_query
// ask stream_status() after the vendor's own call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "current_device.hpp"
#include "hal/backend_abi.h"
#include "nccl.hpp"

namespace hal::backend {

// What the engine needs from a backend. The memory and event calls go
// through the backend's own entry points (its GpuMemory and GpuStreams), so
// only the vendor-specific calls are left to implement
// (VendorCollectivesPort<V> in gpu_plugin.hpp).
class GpuCollectivesPort {
 public:
  GpuCollectivesPort(const hal_backend_v1& entry_points, hal_backend_context* backend)
      : entry_points_(entry_points), backend_(backend) {}
  virtual ~GpuCollectivesPort() = default;

  virtual std::uint32_t device_count() const = 0;
  virtual std::string device_name(std::uint32_t device) const = 0;  // "cuda:0"
  // Makes the device (its primary context) current on the calling thread
  // until the scope ends, then puts back what the thread had.
  virtual CurrentDevice current_device(std::uint32_t device) const = 0;
  virtual void* native_stream(const hal_stream* stream) const = 0;  // cudaStream_t / hipStream_t
  virtual std::uint32_t stream_device(const hal_stream* stream) const = 0;
  // Whether the stream is capturing a graph (its work runs when the graph is launched).
  virtual bool capturing(const hal_stream* stream) const = 0;
  // On the watchdog's thread: its event queries must not invalidate a graph
  // capture that another thread runs in global mode.
  virtual void relax_capture_mode() const = 0;
  // After work on the stream used the tensor: imported memory is released only once that work has passed.
  virtual hal_status note_use(hal_stream* stream, const hal_tensor_ref_v1& tensor) const = 0;

  // nullptr for an unused tensor (buffer NULL).
  void* device_address(const hal_tensor_ref_v1& tensor) const;
  hal_status allocate(std::uint32_t device, std::uint64_t bytes, hal_buffer** out) const;
  void release(hal_buffer* buffer) const;
  hal_status copy(hal_stream* stream, hal_buffer* destination, const hal_tensor_ref_v1& source,
                  std::uint64_t bytes) const;
  hal_status event_create(std::uint32_t device, hal_event** out) const;
  hal_status event_record(hal_event* event, hal_stream* stream) const;
  // HAL_OK when the work before it is done, HAL_ERROR_TIMEOUT while pending.
  hal_status event_query(hal_event* event) const;
  void event_destroy(hal_event* event) const;

 private:
  hal_backend_v1 entry_points_;
  hal_backend_context* backend_;
};

struct StreamErrors;

// One per backend context: the loaded library (or why there is none) and
// the errors collectives left on streams.
class NcclCollectives {
 public:
  // library: null when none loaded; load_status then says why (paths tried).
  NcclCollectives(std::unique_ptr<GpuCollectivesPort> port, const shims::Nccl* library, std::string load_status);
  ~NcclCollectives();
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  bool available() const { return library_ != nullptr; }
  // "nccl", "rccl", "accl-n" or "accl-p", by the library that was loaded.
  const std::string& engine() const { return engine_; }
  // The `collectives` capability's note: the library and version, or why none.
  std::string capability_note() const;

  hal_status create(const hal_communicator_config_v1& config, hal_communicator** out);
  hal_status choose_engine(const char* requested, const char* requested_by, hal_collectives_engine_v1* out);
  // HAL_OK, or the error a collective left on the stream (sticky, as a
  // device fault is), recorded as the backend's last error.
  hal_status stream_status(const hal_stream* stream) const;
  // The stream is gone: a new one at the same address starts clean.
  void forget_stream(const hal_stream* stream) const;

 private:
  std::unique_ptr<GpuCollectivesPort> port_;
  const shims::Nccl* library_;
  std::string load_status_;
  std::string engine_;
  std::shared_ptr<StreamErrors> stream_errors_;
};

// The entry points that take a communicator (no backend context needed).
hal_status nccl_communicator_destroy(hal_communicator* communicator);
hal_status nccl_communicator_abort(hal_communicator* communicator);
hal_status nccl_communicator_get_async_error(hal_communicator* communicator);
hal_status nccl_enqueue(hal_communicator* communicator, hal_stream* stream, const hal_collective_op_v1* operations,
                        std::uint32_t op_count);
const char* nccl_communicator_description(hal_communicator* communicator);
hal_status no_collectives_context();

// The sub-table of a backend whose context holds its NcclCollectives where
// EngineOf finds it.
template <NcclCollectives* (*EngineOf)(hal_backend_context*)>
constexpr hal_collectives_v2 nccl_collectives_table() {
  hal_collectives_v2 table{};
  table.v1.struct_size = sizeof(hal_collectives_v2);
  table.v1.communicator_create = [](hal_backend_context* backend, const hal_communicator_config_v1* config,
                                    hal_communicator** out) {
    NcclCollectives* engine = backend != nullptr ? EngineOf(backend) : nullptr;
    if (engine == nullptr || config == nullptr || out == nullptr) return no_collectives_context();
    return engine->create(*config, out);
  };
  table.v1.communicator_destroy = nccl_communicator_destroy;
  table.v1.communicator_abort = nccl_communicator_abort;
  table.v1.communicator_get_async_error = nccl_communicator_get_async_error;
  table.v1.enqueue = nccl_enqueue;
  table.choose_engine = [](hal_backend_context* backend, const char* requested, const char* requested_by,
                           hal_collectives_engine_v1* out) {
    NcclCollectives* engine = backend != nullptr ? EngineOf(backend) : nullptr;
    if (engine == nullptr) return no_collectives_context();
    return engine->choose_engine(requested, requested_by, out);
  };
  table.communicator_description = nccl_communicator_description;
  return table;
}

// The error a communicator left on the stream (stream synchronize/query report it).
template <typename Stream>
hal_status collectives_status_of(const Stream* stream) {
  const auto& collectives = stream->context->collectives;
  return collectives ? collectives->stream_status(stream) : HAL_OK;
}

// The stream is going away: the engine stops tracking it.
template <typename Stream>
void forget_collectives_of(const Stream* stream) {
  if (stream->context->collectives) stream->context->collectives->forget_stream(stream);
}

}  // namespace hal::backend
