// Streams, events and host callbacks on the driver API: CudaVendor's stream
// calls, under backends/gpu/gpu_streams.hpp.
#include "gpu_streams.hpp"
#include "vendor.hpp"

#include <string_view>

namespace hal::cuda {
namespace {

void run_stream_callback(CUstream, CUresult error, void* data) {
  backend::HostCallback::run_with_status(data, status_of(error));
}

}  // namespace

hal_status CudaVendor::finish(const Context& context, CUresult result, std::string_view operation) {
  if (hal_status status = context.check(result, operation); status != HAL_OK) return status;
  return succeed();
}

// Non-blocking: hal streams must not serialize with the legacy default stream.
CUresult CudaVendor::create_stream(const Context& context, CUstream* stream) {
  return context.api().cuStreamCreate(stream, CU_STREAM_NON_BLOCKING);
}

CUresult CudaVendor::destroy_stream(const Context& context, CUstream stream) {
  return context.api().cuStreamDestroy(stream);
}

CUresult CudaVendor::synchronize_stream(const Context& context, CUstream stream) {
  return context.api().cuStreamSynchronize(stream);
}

CUresult CudaVendor::query_stream(const Context& context, CUstream stream) {
  return context.api().cuStreamQuery(stream);
}

// A capture that was invalidated still records nothing that runs. False
// where the driver cannot tell: one without cuStreamIsCapturing has no graphs.
bool CudaVendor::stream_capturing(const Context& context, CUstream stream) {
  const auto& api = context.api();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return api.cuStreamIsCapturing != nullptr && api.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult CudaVendor::wait_event(const Context& context, CUstream stream, CUevent event) {
  return context.api().cuStreamWaitEvent(stream, event, 0);
}

// cuStreamAddCallback calls back even after an error, with it as the status;
// cuLaunchHostFunc (the fallback for a driver without it) is not called at
// all once the context has an error.
CUresult CudaVendor::enqueue_host_callback(const Context& context, CUstream stream, backend::HostCallback* callback) {
  const auto& api = context.api();
  return api.cuStreamAddCallback != nullptr ? api.cuStreamAddCallback(stream, run_stream_callback, callback, 0)
                                            : api.cuLaunchHostFunc(stream, backend::HostCallback::run, callback);
}

CUresult CudaVendor::create_event(const Context& context, CUevent* event) {
  return context.api().cuEventCreate(event, CU_EVENT_DEFAULT);
}

CUresult CudaVendor::destroy_event(const Context& context, CUevent event) {
  return context.api().cuEventDestroy(event);
}

CUresult CudaVendor::record_event(const Context& context, CUevent event, CUstream stream) {
  return context.api().cuEventRecord(event, stream);
}

CUresult CudaVendor::query_event(const Context& context, CUevent event) { return context.api().cuEventQuery(event); }

CUresult CudaVendor::synchronize_event(const Context& context, CUevent event) {
  return context.api().cuEventSynchronize(event);
}

CUresult CudaVendor::elapsed_milliseconds(const Context& context, float* elapsed, CUevent start, CUevent end) {
  return context.api().cuEventElapsedTime(elapsed, start, end);
}

}  // namespace hal::cuda
