// The stream and event entry points of a GPU plugin written once: argument
// checks, the order of calls around the vendor's, ownership of the handles
// and the wording of errors, over the backend's Vendor (gpu_vendor.hpp,
// GpuVendorStreams). Instantiated where hal_stream, hal_event and
// hal_backend_context are complete (gpu_plugin_table). A collective's
// asynchronous error is the error of every stream it ran on: synchronize and
// query report it after the vendor's own answer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "current_device.hpp"
#include "gpu_memory.hpp"
#include "gpu_vendor.hpp"
#include "hal/backend_abi.h"
#include "last_error.hpp"
#include "nccl_collectives.hpp"

namespace hal::backend {

// A host callback with its argument, owned by the vendor's queue until it runs.
struct HostCallback {
  hal_host_callback callback;
  void* user_data;

  // For launch-host-function calls, which pass no status: errors of device
  // work are sticky and surface from the next synchronize, so it sees HAL_OK.
  static void run(void* data) { run_with_status(data, HAL_OK); }
  static void run_with_status(void* data, hal_status status) {
    std::unique_ptr<HostCallback> owned(static_cast<HostCallback*>(data));
    owned->callback(owned->user_data, status);
  }
};

// Stream and Event are the plugin's hal_stream and hal_event, as parameters
// so that they need to be complete only where the template is instantiated.
template <typename V, typename Stream = hal_stream, typename Event = hal_event>
requires GpuVendorStreams<V>
struct GpuStreams {
  // The stream and event fields of the plugin's table.
  static constexpr void fill(hal_backend_v1& table) {
    table.stream_create = stream_create;
    table.stream_destroy = stream_destroy;
    table.stream_synchronize = stream_synchronize;
    table.stream_query = stream_query;
    table.stream_wait_event = stream_wait_event;
    table.stream_host_callback = stream_host_callback;
    table.event_create = event_create;
    table.event_destroy = event_destroy;
    table.event_record = event_record;
    table.event_query = event_query;
    table.event_synchronize = event_synchronize;
    table.event_elapsed_milliseconds = event_elapsed_milliseconds;
  }

  using Context = typename V::Context;
  using Result = typename V::Result;

  static std::string stream_name(const Stream* stream) {
    return "a stream of " + stream->context->device_id(stream->device);
  }
  static std::string event_name(const Event* event) {
    return "an event of " + event->context->device_id(event->device);
  }

  // Pending work is not an error: HAL_ERROR_TIMEOUT without a message, as the ABI asks.
  static hal_status pending_or_finish(const Context& context, Result result, std::string_view operation) {
    if (V::not_ready(result)) return fail(HAL_ERROR_TIMEOUT, {}, result);
    return V::finish(context, result, operation);
  }

  // Checks the arguments, makes the device current (creation is tied to
  // it) and creates Handle with create(context, handle*).
  template <typename Handle, typename Create>
  static hal_status create_on_device(hal_backend_context* backend, std::uint32_t device, Handle** out,
                                     const char* entry_point, const char* what, Create&& create) {
    if (backend == nullptr || out == nullptr)
      return fail(HAL_ERROR_INVALID_ARGUMENT, std::string(entry_point) + " needs a context and out");
    const Context& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    const CurrentDevice scope = context.current_device(device);
    if (!scope) return scope.status();
    auto object = std::make_unique<Handle>();
    object->context = &context;
    object->device = device;
    if (hal_status status = context.check(create(context, &object->handle),
                                          std::string("creating ") + what + " on " + context.device_id(device));
        status != HAL_OK)
      return status;
    *out = object.release();
    return succeed();
  }

  static hal_status stream_create(hal_backend_context* backend, std::uint32_t device, Stream** out) {
    return create_on_device(backend, device, out, "stream_create", "a stream", V::create_stream);
  }

  // Makes object's device current and destroys its handle with
  // destroy(context, handle); the caller still owns object and frees it.
  template <typename Handle, typename Destroy>
  static hal_status destroy_on_device(const Handle& object, Destroy&& destroy, const std::string& name) {
    const Context& context = *object.context;
    const CurrentDevice scope = context.current_device(object.device);
    if (!scope) return scope.status();
    return V::finish(context, destroy(context, object.handle), "destroying " + name);
  }

  static hal_status stream_destroy(Stream* stream) {
    if (stream == nullptr) return succeed();
    std::unique_ptr<Stream> owned(stream);
    forget_collectives_of(stream);
    if (!stream->owned) return succeed();  // its owner destroys it, and waits for it when it wants to
    // The vendor finishes work already enqueued before it releases the stream.
    return destroy_on_device(*stream, V::destroy_stream, stream_name(stream));
  }

  // The interop sub-table's stream and event entries.
  static void fill_interop(hal_interop_v1& table) {
    table.stream_wrap = stream_wrap;
    table.stream_native_handle = stream_native_handle;
    table.event_native_handle = event_native_handle;
  }

  // hal_interop_v1: a native stream as a hal_stream, and the native handles.
  static hal_status stream_wrap(hal_backend_context* backend, std::uint32_t device, void* native, std::int32_t owned,
                                Stream** out) {
    if (backend == nullptr || out == nullptr)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "stream_wrap needs a context and out");
    const Context& context = V::context(*backend);
    if (hal_status status = context.check_device(device); status != HAL_OK) return status;
    auto stream = std::make_unique<Stream>();
    stream->context = &context;
    stream->device = device;
    stream->handle = native != nullptr ? static_cast<decltype(stream->handle)>(native) : V::wrapped_null_stream();
    stream->owned = owned != 0;
    *out = stream.release();
    return succeed();
  }
  static hal_status stream_native_handle(Stream* stream, void** out) {
    if (stream == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "stream_native_handle needs out");
    *out = static_cast<void*>(stream->handle);
    return succeed();
  }
  static hal_status event_native_handle(Event* event, void** out) {
    if (event == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "event_native_handle needs out");
    *out = static_cast<void*>(event->handle);
    return succeed();
  }

  static hal_status stream_synchronize(Stream* stream) {
    const Context& context = *stream->context;
    const CurrentDevice scope = context.current_device(stream->device);
    if (!scope) return scope.status();
    if (hal_status status =
            V::finish(context, V::synchronize_stream(context, stream->handle), "synchronizing " + stream_name(stream));
        status != HAL_OK)
      return status;
    GpuMemory<V>::release_passed(context);  // imported memory freed while this stream still used it
    return collectives_status_of(stream);
  }

  static hal_status stream_query(Stream* stream) {
    const Context& context = *stream->context;
    const CurrentDevice scope = context.current_device(stream->device);
    if (!scope) return scope.status();
    if (hal_status status =
            pending_or_finish(context, V::query_stream(context, stream->handle), "querying " + stream_name(stream));
        status != HAL_OK)
      return status;
    return collectives_status_of(stream);
  }

  static hal_status stream_wait_event(Stream* stream, Event* event) {
    const Context& context = *stream->context;
    const CurrentDevice scope = context.current_device(stream->device);
    if (!scope) return scope.status();
    // An event never recorded is complete for the vendor too: nothing to wait for.
    return V::finish(context, V::wait_event(context, stream->handle, event->handle),
                     "making " + stream_name(stream) + " wait for " + event_name(event));
  }

  static hal_status stream_host_callback(Stream* stream, hal_host_callback callback, void* user_data) {
    if (callback == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the host callback is null");
    const Context& context = *stream->context;
    const CurrentDevice scope = context.current_device(stream->device);
    if (!scope) return scope.status();
    auto data = std::make_unique<HostCallback>(HostCallback{callback, user_data});
    if (hal_status status = context.check(V::enqueue_host_callback(context, stream->handle, data.get()),
                                          "enqueueing a host callback on " + stream_name(stream));
        status != HAL_OK)
      return status;
    data.release();  // the callback owns it now
    return succeed();
  }

  static hal_status event_create(hal_backend_context* backend, std::uint32_t device, Event** out) {
    return create_on_device(backend, device, out, "event_create", "an event", V::create_event);
  }

  static hal_status event_destroy(Event* event) {
    if (event == nullptr) return succeed();
    std::unique_ptr<Event> owned(event);
    // A record still pending completes first; the vendor defers the release.
    return destroy_on_device(*event, V::destroy_event, event_name(event));
  }

  static hal_status event_record(Event* event, Stream* stream) {
    const Context& context = *event->context;
    if (event->device != stream->device)
      return fail(HAL_ERROR_INVALID_ARGUMENT, event_name(event) + " cannot be recorded on " + stream_name(stream) +
                                                  "; create the event on the stream's device");
    const CurrentDevice scope = context.current_device(stream->device);
    if (!scope) return scope.status();
    if (hal_status status = context.check(V::record_event(context, event->handle, stream->handle),
                                          "recording an event on " + stream_name(stream));
        status != HAL_OK)
      return status;
    event->recorded = true;
    return succeed();
  }

  static hal_status event_query(Event* event) {
    const Context& context = *event->context;
    const CurrentDevice scope = context.current_device(event->device);
    if (!scope) return scope.status();
    return pending_or_finish(context, V::query_event(context, event->handle), "querying " + event_name(event));
  }

  static hal_status event_synchronize(Event* event) {
    const Context& context = *event->context;
    const CurrentDevice scope = context.current_device(event->device);
    if (!scope) return scope.status();
    return V::finish(context, V::synchronize_event(context, event->handle), "synchronizing " + event_name(event));
  }

  static hal_status event_elapsed_milliseconds(Event* start, Event* end, double* milliseconds) {
    if (milliseconds == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "milliseconds output is null");
    for (const auto& [event, which] : {std::pair{start, "start"}, std::pair{end, "end"}}) {
      if (!event->recorded)
        return fail(HAL_ERROR_INVALID_ARGUMENT,
                    std::string("the ") + which + " event was never recorded; record it on a stream first");
    }
    const Context& context = *start->context;
    float elapsed = 0.0f;
    const Result result = V::elapsed_milliseconds(context, &elapsed, start->handle, end->handle);
    if (V::not_ready(result))
      return fail(HAL_ERROR_INVALID_ARGUMENT, "an event has not completed yet; synchronize it before timing", result);
    if (hal_status status = context.check(result, "timing two events of " + context.device_id(start->device));
        status != HAL_OK)
      return status;
    *milliseconds = elapsed;
    return succeed();
  }
};

}  // namespace hal::backend
