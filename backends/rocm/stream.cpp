// Streams, events and host callbacks on the HIP runtime: the vendor calls
// under backends/common/gpu_streams.hpp.
#include "gpu_streams.hpp"
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

// hipStreamAddCallback passes the stream's status, also after an error, so a
// callback always runs (and ROCm 5 has no hipLaunchHostFunc).
void run_stream_callback(hipStream_t, hipError_t error, void* data) {
  backend::HostCallback::run_with_status(data, status_of(error));
}

struct StreamOps {
  using Context = rocm::Context;
  using Result = hipError_t;
  static constexpr auto context_member = &hal_backend_context::rocm;

  static bool not_ready(hipError_t error) { return error == hipErrorNotReady; }
  // HIP may answer hipErrorNotReady to any call that waits on device work:
  // HAL_ERROR_TIMEOUT without a message then, as the ABI asks.
  static hal_status finish(const Context& context, hipError_t error, std::string_view operation) {
    if (not_ready(error)) return fail(HAL_ERROR_TIMEOUT, {}, error);
    if (hal_status status = context.check(error, operation); status != HAL_OK) return status;
    return succeed();
  }
  // Non-blocking: hal streams must not serialize with the null stream.
  static hipError_t create_stream(const Context& context, hipStream_t* stream) {
    return context.api().hipStreamCreateWithFlags(stream, hipStreamNonBlocking);
  }
  static hipError_t destroy_stream(const Context& context, hipStream_t stream) {
    return context.api().hipStreamDestroy(stream);
  }
  static hipError_t synchronize_stream(const Context& context, hipStream_t stream) {
    return context.api().hipStreamSynchronize(stream);
  }
  static hipError_t query_stream(const Context& context, hipStream_t stream) {
    return context.api().hipStreamQuery(stream);
  }
  static hipError_t wait_event(const Context& context, hipStream_t stream, hipEvent_t event) {
    return context.api().hipStreamWaitEvent(stream, event, 0);
  }
  static hipError_t enqueue_host_callback(const Context& context, hipStream_t stream,
                                          backend::HostCallback* callback) {
    return context.api().hipStreamAddCallback(stream, run_stream_callback, callback, 0);
  }
  static hipError_t create_event(const Context& context, hipEvent_t* event) {
    return context.api().hipEventCreateWithFlags(event, hipEventDefault);
  }
  static hipError_t destroy_event(const Context& context, hipEvent_t event) {
    return context.api().hipEventDestroy(event);
  }
  static hipError_t record_event(const Context& context, hipEvent_t event, hipStream_t stream) {
    return context.api().hipEventRecord(event, stream);
  }
  static hipError_t query_event(const Context& context, hipEvent_t event) { return context.api().hipEventQuery(event); }
  static hipError_t synchronize_event(const Context& context, hipEvent_t event) {
    return context.api().hipEventSynchronize(event);
  }
  static hipError_t elapsed_milliseconds(const Context& context, float* elapsed, hipEvent_t start, hipEvent_t end) {
    return context.api().hipEventElapsedTime(elapsed, start, end);
  }
  static hal_status collectives_status(const hal_stream* stream) { return collectives_stream_status(stream); }
  static void forget_collectives(const hal_stream* stream) { forget_collectives_stream(stream); }
  // HIP's null stream is the legacy default stream; hal's synchronous calls run on it too.
  static hipStream_t wrapped_null_stream() { return nullptr; }
};

}  // namespace

void fill_stream_entry_points(hal_backend_v1& table) { backend::GpuStreams<StreamOps>::fill(table); }
void fill_stream_interop(hal_interop_v1& table) {
  using Streams = backend::GpuStreams<StreamOps>;
  table.stream_wrap = Streams::stream_wrap;
  table.stream_native_handle = Streams::stream_native_handle;
  table.event_native_handle = Streams::event_native_handle;
}

}  // namespace hal::rocm
