// Streams, events and host callbacks on the HIP runtime.
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

struct HostCallback {
  hal_host_callback callback;
  void* user_data;
};

// hipLaunchHostFunc passes no status: errors of device work are sticky in
// HIP and surface from the next synchronize, so the callback sees HAL_OK.
void run_host_callback(void* data) {
  std::unique_ptr<HostCallback> callback(static_cast<HostCallback*>(data));
  callback->callback(callback->user_data, HAL_OK);
}

// ROCm 5 lacks hipLaunchHostFunc; hipStreamAddCallback passes the stream's status.
void run_stream_callback(hipStream_t, hipError_t error, void* data) {
  std::unique_ptr<HostCallback> callback(static_cast<HostCallback*>(data));
  callback->callback(callback->user_data, status_of(error));
}

std::string stream_name(const hal_stream* stream) { return "a stream of rocm:" + std::to_string(stream->device); }
std::string event_name(const hal_event* event) { return "an event of rocm:" + std::to_string(event->device); }

// The runtime's status for work that may still be pending: HAL_ERROR_TIMEOUT
// without a message while it is, as the ABI asks.
hal_status pending_or(const Context& context, hipError_t error, const std::string& operation) {
  if (error == hipErrorNotReady) return fail(HAL_ERROR_TIMEOUT, {}, error);
  if (hal_status status = context.check(error, operation); status != HAL_OK) return status;
  return succeed();
}

// Makes the object's device current for create and destroy, which HIP ties to it.
template <typename Create>
hal_status on_device(hal_backend_context* backend, std::uint32_t device, Create&& create) {
  if (backend == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  const Context& context = backend->rocm;
  if (hal_status status = context.check_device(device); status != HAL_OK) return status;
  if (hal_status status = context.make_current(device); status != HAL_OK) return status;
  return create(context);
}

}  // namespace

hal_status stream_create(hal_backend_context* backend, std::uint32_t device, hal_stream** out) {
  if (out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "stream_create needs out");
  return on_device(backend, device, [&](const Context& context) {
    auto stream = std::make_unique<hal_stream>();
    stream->context = &context;
    stream->device = device;
    // Non-blocking: hal streams must not serialize with the null stream.
    if (hal_status status = context.check(context.api().hipStreamCreateWithFlags(&stream->handle, hipStreamNonBlocking),
                                          "creating a stream on rocm:" + std::to_string(device));
        status != HAL_OK)
      return status;
    *out = stream.release();
    return succeed();
  });
}

hal_status stream_destroy(hal_stream* stream) {
  if (stream == nullptr) return succeed();
  std::unique_ptr<hal_stream> owned(stream);
  const Context& context = *stream->context;
  forget_collectives_stream(stream);
  if (hal_status status = context.make_current(stream->device); status != HAL_OK) return status;
  // The runtime finishes work already enqueued before it releases the stream.
  return pending_or(context, context.api().hipStreamDestroy(stream->handle), "destroying " + stream_name(stream));
}

hal_status stream_synchronize(hal_stream* stream) {
  const Context& context = *stream->context;
  if (hal_status status = pending_or(context, context.api().hipStreamSynchronize(stream->handle),
                                     "synchronizing " + stream_name(stream));
      status != HAL_OK)
    return status;
  return collectives_stream_status(stream);
}

hal_status stream_query(hal_stream* stream) {
  const Context& context = *stream->context;
  if (hal_status status = pending_or(context, context.api().hipStreamQuery(stream->handle), "querying " + stream_name(stream));
      status != HAL_OK)
    return status;
  return collectives_stream_status(stream);
}

hal_status stream_wait_event(hal_stream* stream, hal_event* event) {
  const Context& context = *stream->context;
  // An event never recorded is complete for the runtime too: nothing to wait for.
  return pending_or(context, context.api().hipStreamWaitEvent(stream->handle, event->handle, 0),
                    "making " + stream_name(stream) + " wait for " + event_name(event));
}

hal_status stream_host_callback(hal_stream* stream, hal_host_callback callback, void* user_data) {
  if (callback == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the host callback is null");
  const Context& context = *stream->context;
  auto data = std::make_unique<HostCallback>(HostCallback{callback, user_data});
  const auto& api = context.api();
  const hipError_t error = api.hipLaunchHostFunc != nullptr
                               ? api.hipLaunchHostFunc(stream->handle, run_host_callback, data.get())
                               : api.hipStreamAddCallback(stream->handle, run_stream_callback, data.get(), 0);
  if (hal_status status = context.check(error, "enqueueing a host callback on " + stream_name(stream)); status != HAL_OK)
    return status;
  data.release();  // run_host_callback owns it now
  return succeed();
}

hal_status event_create(hal_backend_context* backend, std::uint32_t device, hal_event** out) {
  if (out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "event_create needs out");
  return on_device(backend, device, [&](const Context& context) {
    auto event = std::make_unique<hal_event>();
    event->context = &context;
    event->device = device;
    if (hal_status status = context.check(context.api().hipEventCreateWithFlags(&event->handle, hipEventDefault),
                                          "creating an event on rocm:" + std::to_string(device));
        status != HAL_OK)
      return status;
    *out = event.release();
    return succeed();
  });
}

hal_status event_destroy(hal_event* event) {
  if (event == nullptr) return succeed();
  std::unique_ptr<hal_event> owned(event);
  const Context& context = *event->context;
  if (hal_status status = context.make_current(event->device); status != HAL_OK) return status;
  // A record still pending completes first; the runtime defers the release.
  return pending_or(context, context.api().hipEventDestroy(event->handle), "destroying " + event_name(event));
}

hal_status event_record(hal_event* event, hal_stream* stream) {
  const Context& context = *event->context;
  if (event->device != stream->device)
    return fail(HAL_ERROR_INVALID_ARGUMENT, event_name(event) + " cannot be recorded on " + stream_name(stream) +
                                                "; create the event on the stream's device");
  if (hal_status status = context.check(context.api().hipEventRecord(event->handle, stream->handle),
                                        "recording an event on " + stream_name(stream));
      status != HAL_OK)
    return status;
  event->recorded = true;
  return succeed();
}

hal_status event_query(hal_event* event) {
  const Context& context = *event->context;
  return pending_or(context, context.api().hipEventQuery(event->handle), "querying " + event_name(event));
}

hal_status event_synchronize(hal_event* event) {
  const Context& context = *event->context;
  return pending_or(context, context.api().hipEventSynchronize(event->handle), "synchronizing " + event_name(event));
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
  const hipError_t error = context.api().hipEventElapsedTime(&elapsed, start->handle, end->handle);
  if (error == hipErrorNotReady)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "an event has not completed yet; synchronize it before timing", error);
  if (hal_status status = context.check(error, "timing two events of rocm:" + std::to_string(start->device));
      status != HAL_OK)
    return status;
  *milliseconds = elapsed;
  return succeed();
}

}  // namespace hal::rocm
