// Streams, events and host callbacks on the driver API: the vendor calls
// under backends/common/gpu_streams.hpp.
#include "cuda_backend.hpp"
#include "gpu_streams.hpp"

namespace hal::cuda {
namespace {

void run_stream_callback(CUstream, CUresult error, void* data) {
  backend::HostCallback::run_with_status(data, status_of(error));
}

struct StreamOps {
  using Context = cuda::Context;
  using Result = CUresult;
  static constexpr auto context_member = &hal_backend_context::cuda;

  static bool not_ready(CUresult result) { return result == CUDA_ERROR_NOT_READY; }
  static hal_status finish(const Context& context, CUresult result, std::string_view operation) {
    if (hal_status status = context.check(result, operation); status != HAL_OK) return status;
    return succeed();
  }
  // Non-blocking: hal streams must not serialize with the legacy default stream.
  static CUresult create_stream(const Context& context, CUstream* stream) {
    return context.api().cuStreamCreate(stream, CU_STREAM_NON_BLOCKING);
  }
  static CUresult destroy_stream(const Context& context, CUstream stream) {
    return context.api().cuStreamDestroy(stream);
  }
  static CUresult synchronize_stream(const Context& context, CUstream stream) {
    return context.api().cuStreamSynchronize(stream);
  }
  static CUresult query_stream(const Context& context, CUstream stream) { return context.api().cuStreamQuery(stream); }
  static CUresult wait_event(const Context& context, CUstream stream, CUevent event) {
    return context.api().cuStreamWaitEvent(stream, event, 0);
  }
  // cuStreamAddCallback calls back even after an error, with it as the
  // status; cuLaunchHostFunc (the fallback for a driver without it) is not
  // called at all once the context has an error.
  static CUresult enqueue_host_callback(const Context& context, CUstream stream, backend::HostCallback* callback) {
    const auto& api = context.api();
    return api.cuStreamAddCallback != nullptr ? api.cuStreamAddCallback(stream, run_stream_callback, callback, 0)
                                              : api.cuLaunchHostFunc(stream, backend::HostCallback::run, callback);
  }
  static CUresult create_event(const Context& context, CUevent* event) {
    return context.api().cuEventCreate(event, CU_EVENT_DEFAULT);
  }
  static CUresult destroy_event(const Context& context, CUevent event) { return context.api().cuEventDestroy(event); }
  static CUresult record_event(const Context& context, CUevent event, CUstream stream) {
    return context.api().cuEventRecord(event, stream);
  }
  static CUresult query_event(const Context& context, CUevent event) { return context.api().cuEventQuery(event); }
  static CUresult synchronize_event(const Context& context, CUevent event) {
    return context.api().cuEventSynchronize(event);
  }
  static CUresult elapsed_milliseconds(const Context& context, float* elapsed, CUevent start, CUevent end) {
    return context.api().cuEventElapsedTime(elapsed, start, end);
  }
  static hal_status collectives_status(const hal_stream* stream) { return collectives_stream_status(stream); }
  static void forget_collectives(const hal_stream* stream) { forget_collectives_stream(stream); }
  // The legacy default stream by name, so that work on it is not taken for synchronous calls.
  static CUstream wrapped_null_stream() { return CU_STREAM_LEGACY; }
};

}  // namespace

void fill_stream_entry_points(hal_backend_v1& table) { backend::GpuStreams<StreamOps>::fill(table); }
void fill_stream_interop(hal_interop_v1& table) {
  using Streams = backend::GpuStreams<StreamOps>;
  table.stream_wrap = Streams::stream_wrap;
  table.stream_native_handle = Streams::stream_native_handle;
  table.event_native_handle = Streams::event_native_handle;
}

}  // namespace hal::cuda
