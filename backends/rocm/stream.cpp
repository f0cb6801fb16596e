// Streams, events and host callbacks on the HIP runtime: RocmVendor's
// stream calls, under backends/gpu/gpu_streams.hpp.
#include "gpu_streams.hpp"
#include "vendor.hpp"

#include <string_view>

namespace hal::rocm {
namespace {

// hipStreamAddCallback passes the stream's status, also after an error, so a
// callback always runs (and ROCm 5 has no hipLaunchHostFunc).
void run_stream_callback(hipStream_t, hipError_t error, void* data) {
  backend::HostCallback::run_with_status(data, status_of(error));
}

}  // namespace

// HIP may answer hipErrorNotReady to any call that waits on device work:
// HAL_ERROR_TIMEOUT without a message then, as the ABI asks.
hal_status RocmVendor::finish(const Context& context, hipError_t error, std::string_view operation) {
  if (not_ready(error)) return fail(HAL_ERROR_TIMEOUT, {}, error);
  if (hal_status status = context.check(error, operation); status != HAL_OK) return status;
  return succeed();
}

// Non-blocking: hal streams must not serialize with the null stream.
hipError_t RocmVendor::create_stream(const Context& context, hipStream_t* stream) {
  return context.api().hipStreamCreateWithFlags(stream, hipStreamNonBlocking);
}

hipError_t RocmVendor::destroy_stream(const Context& context, hipStream_t stream) {
  return context.api().hipStreamDestroy(stream);
}

hipError_t RocmVendor::synchronize_stream(const Context& context, hipStream_t stream) {
  return context.api().hipStreamSynchronize(stream);
}

hipError_t RocmVendor::query_stream(const Context& context, hipStream_t stream) {
  return context.api().hipStreamQuery(stream);
}

// As CudaVendor's: false where the runtime cannot tell.
bool RocmVendor::stream_capturing(const Context& context, hipStream_t stream) {
  const auto& api = context.api();
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  return api.hipStreamIsCapturing != nullptr && api.hipStreamIsCapturing(stream, &status) == hipSuccess &&
         status != hipStreamCaptureStatusNone;
}

hipError_t RocmVendor::wait_event(const Context& context, hipStream_t stream, hipEvent_t event) {
  return context.api().hipStreamWaitEvent(stream, event, 0);
}

hipError_t RocmVendor::enqueue_host_callback(const Context& context, hipStream_t stream,
                                             backend::HostCallback* callback) {
  return context.api().hipStreamAddCallback(stream, run_stream_callback, callback, 0);
}

hipError_t RocmVendor::create_event(const Context& context, hipEvent_t* event) {
  return context.api().hipEventCreateWithFlags(event, hipEventDefault);
}

hipError_t RocmVendor::destroy_event(const Context& context, hipEvent_t event) {
  return context.api().hipEventDestroy(event);
}

hipError_t RocmVendor::record_event(const Context& context, hipEvent_t event, hipStream_t stream) {
  return context.api().hipEventRecord(event, stream);
}

hipError_t RocmVendor::query_event(const Context& context, hipEvent_t event) {
  return context.api().hipEventQuery(event);
}
hipError_t RocmVendor::synchronize_event(const Context& context, hipEvent_t event) {
  return context.api().hipEventSynchronize(event);
}

hipError_t RocmVendor::elapsed_milliseconds(const Context& context, float* elapsed, hipEvent_t start, hipEvent_t end) {
  return context.api().hipEventElapsedTime(elapsed, start, end);
}

}  // namespace hal::rocm
