// Streams, events and host callbacks on the driver API.
#include "cuda_backend.hpp"

namespace hal::cuda {
namespace {

struct HostCallback {
  hal_host_callback callback;
  void* user_data;
};

// cuLaunchHostFunc passes no status: errors of device work are sticky in
// CUDA and surface from the next synchronize, so the callback sees HAL_OK.
void CUDA_CB run_host_callback(void* data) {
  std::unique_ptr<HostCallback> callback(static_cast<HostCallback*>(data));
  callback->callback(callback->user_data, HAL_OK);
}

std::string stream_name(const hal_stream* stream) { return "a stream of " + stream->context->device_id(stream->device); }

}  // namespace

hal_status stream_create(hal_backend_context* backend, std::uint32_t device, hal_stream** out) {
  if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "stream_create needs a context and out");
  const Context& context = backend->cuda;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  auto stream = std::make_unique<hal_stream>();
  stream->context = &context;
  stream->device = device;
  // Non-blocking: hal streams must not serialize with the legacy default stream.
  if (hal_status status = context.check(context.api().cuStreamCreate(&stream->handle, CU_STREAM_NON_BLOCKING),
                                        "creating a stream on " + context.device_id(device));
      status != HAL_OK)
    return status;
  *out = stream.release();
  return succeed();
}

hal_status stream_destroy(hal_stream* stream) {
  if (stream == nullptr) return succeed();
  std::unique_ptr<hal_stream> owned(stream);
  const Context& context = *stream->context;
  forget_collectives_stream(stream);
  if (hal_status status = context.make_current(stream->device); status != HAL_OK) return status;
  // The driver finishes work already enqueued before it releases the stream.
  if (hal_status status = context.check(context.api().cuStreamDestroy(stream->handle), "destroying " + stream_name(stream));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status stream_synchronize(hal_stream* stream) {
  const Context& context = *stream->context;
  if (hal_status status = context.check(context.api().cuStreamSynchronize(stream->handle),
                                        "synchronizing " + stream_name(stream));
      status != HAL_OK)
    return status;
  return collectives_stream_status(stream);
}

hal_status stream_query(hal_stream* stream) {
  const Context& context = *stream->context;
  const CUresult result = context.api().cuStreamQuery(stream->handle);
  if (result == CUDA_ERROR_NOT_READY) return fail(HAL_ERROR_TIMEOUT, {}, result);  // pending work: not an error
  if (hal_status status = context.check(result, "querying " + stream_name(stream)); status != HAL_OK) return status;
  return collectives_stream_status(stream);
}

hal_status stream_wait_event(hal_stream* stream, hal_event* event) {
  const Context& context = *stream->context;
  // An event never recorded is complete for the driver too: nothing to wait for.
  if (hal_status status = context.check(context.api().cuStreamWaitEvent(stream->handle, event->handle, 0),
                                        "making " + stream_name(stream) + " wait for an event of " +
                                            context.device_id(event->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status stream_host_callback(hal_stream* stream, hal_host_callback callback, void* user_data) {
  if (callback == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the host callback is null");
  const Context& context = *stream->context;
  auto data = std::make_unique<HostCallback>(HostCallback{callback, user_data});
  if (hal_status status = context.check(context.api().cuLaunchHostFunc(stream->handle, run_host_callback, data.get()),
                                        "enqueueing a host callback on " + stream_name(stream));
      status != HAL_OK)
    return status;
  data.release();  // run_host_callback owns it now
  return succeed();
}

hal_status event_create(hal_backend_context* backend, std::uint32_t device, hal_event** out) {
  if (backend == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "event_create needs a context and out");
  const Context& context = backend->cuda;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  auto event = std::make_unique<hal_event>();
  event->context = &context;
  event->device = device;
  if (hal_status status = context.check(context.api().cuEventCreate(&event->handle, CU_EVENT_DEFAULT),
                                        "creating an event on " + context.device_id(device));
      status != HAL_OK)
    return status;
  *out = event.release();
  return succeed();
}

hal_status event_destroy(hal_event* event) {
  if (event == nullptr) return succeed();
  std::unique_ptr<hal_event> owned(event);
  const Context& context = *event->context;
  if (hal_status status = context.make_current(event->device); status != HAL_OK) return status;
  // A record still pending completes first; the driver defers the release.
  if (hal_status status = context.check(context.api().cuEventDestroy(event->handle), "destroying an event of " +
                                                                                      context.device_id(event->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status event_record(hal_event* event, hal_stream* stream) {
  const Context& context = *event->context;
  if (event->device != stream->device)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "an event of " + context.device_id(event->device) +
                                                " cannot be recorded on " + stream_name(stream) +
                                                "; create the event on the stream's device");
  if (hal_status status = context.check(context.api().cuEventRecord(event->handle, stream->handle),
                                        "recording an event on " + stream_name(stream));
      status != HAL_OK)
    return status;
  event->recorded = true;
  return succeed();
}

hal_status event_query(hal_event* event) {
  const Context& context = *event->context;
  const CUresult result = context.api().cuEventQuery(event->handle);
  if (result == CUDA_ERROR_NOT_READY) return fail(HAL_ERROR_TIMEOUT, {}, result);
  if (hal_status status = context.check(result, "querying an event of " + context.device_id(event->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status event_synchronize(hal_event* event) {
  const Context& context = *event->context;
  if (hal_status status = context.check(context.api().cuEventSynchronize(event->handle),
                                        "synchronizing an event of " + context.device_id(event->device));
      status != HAL_OK)
    return status;
  return succeed();
}

hal_status event_elapsed_milliseconds(hal_event* start, hal_event* end, double* milliseconds) {
  if (milliseconds == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "milliseconds output is null");
  for (const auto& [event, which] : {std::pair{start, "start"}, std::pair{end, "end"}}) {
    if (!event->recorded)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  std::string("the ") + which + " event was never recorded; record it on a stream first");
  }
  const Context& context = *start->context;
  float elapsed = 0.0f;
  const CUresult result = context.api().cuEventElapsedTime(&elapsed, start->handle, end->handle);
  if (result == CUDA_ERROR_NOT_READY)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "an event has not completed yet; synchronize it before timing", result);
  if (hal_status status = context.check(result, "timing two events"); status != HAL_OK) return status;
  *milliseconds = elapsed;
  return succeed();
}

}  // namespace hal::cuda
