// The host backend's plugin table: the C entry points over the host types.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "attention/thread_pool.hpp"
#include "backend_options.hpp"
#include "collectives.hpp"
#include "host_backend.hpp"
#include "memory_test_element.hpp"
#include "mpi/mpi_library.hpp"
#include "telemetry_sources.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace hal::host {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

hal_status check_device(const hal_backend_context* context, std::uint32_t device) {
  if (context == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the backend context is null");
  if (device >= context->host.devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(device) + " is out of range; there are " +
                                                std::to_string(context->host.devices.size()) + " host devices");
  return HAL_OK;
}

// Runs now for a null stream, else enqueues; the operation keeps what it
// captured (allocations) alive until it ran. A template so the synchronous
// path costs no allocation.
template <typename Work>
hal_status run_or_enqueue(hal_stream* stream, Work&& work) {
  if (stream == nullptr) {
    work();
    return succeed();
  }
  stream->enqueue({[work = std::forward<Work>(work)](hal_status, std::string&) {
                     work();
                     return HAL_OK;
                   },
                   false});
  return succeed();
}

std::uint8_t* bytes(const hal_buffer* buffer, std::uint64_t offset) {
  return static_cast<std::uint8_t*>(buffer->allocation->data) + offset;
}

// ---- C entry points ------------------------------------------------------

void get_last_error(hal_error_info_v1* out) { backend::read_last_error(out); }

hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  if (init == nullptr || out == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "initialize needs init and out");
  if (init->struct_size < HAL_BACKEND_INIT_V1_MIN_SIZE)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "init struct_size " + std::to_string(init->struct_size) +
                                                " is smaller than the v1 struct; rebuild libhal");
  try {
    auto context = std::make_unique<hal_backend_context>();
    context->host.log = init->log;
    context->host.log_user_data = init->log_user_data;
    const backend::BackendOptions options = backend::read_backend_options(
        *init, "host", {"isa", "threads", "telemetry_root", "shm_bytes", "mpi_library"},
        "isa (scalar, avx2 or avx512), threads (a whole number), telemetry_root (a directory), shm_bytes (a size) "
        "and mpi_library (a path to libmpi.so)");
    for (const std::string& warning : configure_host_kernels({options.value("isa"), options.origin("isa")},
                                                             {options.value("threads"), options.origin("threads")}))
      context->host.log_message(HAL_LOG_WARNING, warning);
    context->telemetry_root = options.value("telemetry_root").empty() ? "/" : options.value("telemetry_root");
    context->shm_bytes = {options.value("shm_bytes"), options.source("shm_bytes")};
    shims::mpi::use_library_file(options.value("mpi_library"));
    context->host.devices = discover_devices();
    context->host.multiple_numa_nodes = context->host.devices.size() > 1;
    *out = context.release();
    return succeed();
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_INTERNAL, std::string("host device discovery failed: ") + error.what());
  }
}

void shutdown(hal_backend_context* context) { delete context; }

hal_status device_count(hal_backend_context* context, std::uint32_t* count) {
  if (context == nullptr || count == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "device_count needs out");
  *count = static_cast<std::uint32_t>(context->host.devices.size());
  return succeed();
}

hal_status device_info(hal_backend_context* context, std::uint32_t device, hal_device_info_v1* info) {
  if (const hal_status status = check_device(context, device); status != HAL_OK) return status;
  if (info == nullptr || info->struct_size < HAL_DEVICE_INFO_V1_MIN_SIZE)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device_info needs a v1 hal_device_info_v1 with struct_size set");
  fill_device_info(context->host.devices[device], context->host.multiple_numa_nodes, *info);
  return succeed();
}

hal_status buffer_allocate(hal_backend_context* context, std::uint32_t device, hal_memory_kind kind,
                           std::uint64_t size, std::uint64_t alignment, hal_buffer** out) {
  if (const hal_status status = check_device(context, device); status != HAL_OK) return status;
  if (out == nullptr || size == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, "buffer_allocate needs size > 0 and out");
  try {
    return allocate(context->host, device, kind, size, alignment, out);
  } catch (const std::bad_alloc&) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, "out of host memory while allocating " + std::to_string(size) + " bytes");
  }
}

hal_status buffer_free(hal_buffer* buffer) {
  delete buffer;  // in-flight work holds its own reference to the allocation
  return succeed();
}

void* buffer_address(hal_buffer* buffer) { return buffer != nullptr ? buffer->allocation->data : nullptr; }

hal_status copy_host_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                               const void* source, std::uint64_t size) {
  return run_or_enqueue(stream, [allocation = destination->allocation, target = bytes(destination, destination_offset),
                                 source, size] { std::memcpy(target, source, size); });
}

hal_status copy_device_to_host(hal_stream* stream, void* destination, hal_buffer* source, std::uint64_t source_offset,
                               std::uint64_t size) {
  return run_or_enqueue(stream, [allocation = source->allocation, from = bytes(source, source_offset), destination,
                                 size] { std::memcpy(destination, from, size); });
}

hal_status copy_device_to_device(hal_stream* stream, hal_buffer* destination, std::uint64_t destination_offset,
                                 hal_buffer* source, std::uint64_t source_offset, std::uint64_t size) {
  return run_or_enqueue(stream, [keep_destination = destination->allocation, keep_source = source->allocation,
                                 target = bytes(destination, destination_offset), from = bytes(source, source_offset),
                                 size] { std::memmove(target, from, size); });
}

hal_status fill(hal_stream* stream, hal_buffer* destination, std::uint64_t offset, std::uint64_t size,
                const void* pattern, std::uint32_t pattern_size) {
  if (pattern == nullptr || (pattern_size != 1 && pattern_size != 2 && pattern_size != 4))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "fill pattern_size " + std::to_string(pattern_size) + " is not 1, 2 or 4");
  std::uint32_t value = 0;
  std::memcpy(&value, pattern, pattern_size);  // copied now: the caller's pattern may go away
  return run_or_enqueue(stream, [allocation = destination->allocation, target = bytes(destination, offset), size,
                                 value, pattern_size] { fill_bytes(target, size, &value, pattern_size); });
}

hal_status memory_test_element(hal_stream* stream, hal_tensor_ref_v1 tested, std::uint64_t size,
                               const hal_memory_test_element_v1* element, hal_tensor_ref_v1 report,
                               std::uint32_t capacity) {
  if (stream == nullptr) return backend::memory_test_needs_stream();
  if (tested.buffer == nullptr || report.buffer == nullptr || tested.buffer->device != stream->device ||
      report.buffer->device != stream->device)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "memory test: the tested range and the report must be buffers of host:" +
                                                std::to_string(stream->device) + ", the stream's device");
  void* target = bytes(tested.buffer, tested.offset);
  void* findings = bytes(report.buffer, report.offset);
  if (hal_status status = backend::check_memory_test_element(target, size, element, findings, capacity); status != HAL_OK)
    return status;
  return run_or_enqueue(stream, [keep_tested = tested.buffer->allocation, keep_report = report.buffer->allocation,
                                 target, size, element = *element, findings, capacity] {
    backend::run_host_memory_test_element(target, size, element, findings, capacity);
  });
}

const hal_memory_test_v1 memory_test_table = {sizeof(hal_memory_test_v1), memory_test_element};

hal_status stream_create(hal_backend_context* context, std::uint32_t device, hal_stream** out) {
  if (const hal_status status = check_device(context, device); status != HAL_OK) return status;
  try {
    *out = new hal_stream(context, device);
    return succeed();
  } catch (const std::system_error& error) {
    return fail(HAL_ERROR_OUT_OF_MEMORY, std::string("cannot start a stream worker thread: ") + error.what(),
                error.code().value());
  }
}

hal_status stream_destroy(hal_stream* stream) {
  delete stream;
  return succeed();
}

hal_status stream_synchronize(hal_stream* stream) { return stream->synchronize(); }

hal_status stream_query(hal_stream* stream) { return stream->idle() ? succeed() : HAL_ERROR_TIMEOUT; }

hal_status stream_wait_event(hal_stream* stream, hal_event* event) {
  std::uint64_t target;
  {
    std::lock_guard lock(event->core->mutex);
    target = event->core->records;  // the latest record at the time of the call
  }
  if (target == 0) return succeed();  // never recorded: nothing to wait for
  stream->enqueue({[core = event->core, target](hal_status, std::string&) {
                     std::unique_lock lock(core->mutex);
                     core->completed.wait(lock, [&] { return core->completions >= target; });
                     return HAL_OK;
                   },
                   false});
  return succeed();
}

hal_status stream_host_callback(hal_stream* stream, hal_host_callback callback, void* user_data) {
  if (callback == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the host callback is null");
  stream->enqueue_host_callback({[callback, user_data](hal_status stream_status, std::string&) {
                                   callback(user_data, stream_status);
                                   return HAL_OK;
                                 },
                                 true});
  return succeed();
}

hal_status event_create(hal_backend_context* context, std::uint32_t device, hal_event** out) {
  if (const hal_status status = check_device(context, device); status != HAL_OK) return status;
  *out = new hal_event{};
  (*out)->device = device;
  return succeed();
}

hal_status event_destroy(hal_event* event) {
  delete event;  // a pending record or wait keeps the core alive
  return succeed();
}

hal_status event_record(hal_event* event, hal_stream* stream) {
  std::uint64_t target;
  {
    std::lock_guard lock(event->core->mutex);
    target = ++event->core->records;
  }
  // Runs even after a failure so that nobody waiting on the event hangs.
  stream->enqueue({[core = event->core, target](hal_status, std::string&) {
                     const std::int64_t timestamp = now_ns();
                     {
                       std::lock_guard lock(core->mutex);
                       if (target >= core->completions) {
                         core->completions = target;
                         core->timestamp_ns = timestamp;
                       }
                     }
                     core->completed.notify_all();
                     return HAL_OK;
                   },
                   true});
  return succeed();
}

hal_status event_query(hal_event* event) {
  std::lock_guard lock(event->core->mutex);
  return event->core->completions >= event->core->records ? succeed() : HAL_ERROR_TIMEOUT;
}

hal_status event_synchronize(hal_event* event) {
  std::unique_lock lock(event->core->mutex);
  const std::uint64_t target = event->core->records;
  event->core->completed.wait(lock, [&] { return event->core->completions >= target; });
  return succeed();
}

hal_status event_elapsed_milliseconds(hal_event* start, hal_event* end, double* milliseconds) {
  if (milliseconds == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "milliseconds output is null");
  auto completed_timestamp = [](hal_event* event, const char* which, std::int64_t& timestamp) {
    std::lock_guard lock(event->core->mutex);
    if (event->core->records == 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  std::string("the ") + which + " event was never recorded; record it on a stream first");
    if (event->core->completions < event->core->records)
      return fail(HAL_ERROR_INVALID_ARGUMENT, std::string("the ") + which +
                                                  " event has not completed yet; synchronize it before timing");
    timestamp = event->core->timestamp_ns;
    return HAL_OK;
  };
  std::int64_t start_ns = 0, end_ns = 0;
  if (const hal_status status = completed_timestamp(start, "start", start_ns); status != HAL_OK) return status;
  if (const hal_status status = completed_timestamp(end, "end", end_ns); status != HAL_OK) return status;
  *milliseconds = static_cast<double>(end_ns - start_ns) / 1e6;
  return succeed();
}

hal_backend_v1 make_table() {
  hal_backend_v1 table{};
  table.struct_size = sizeof(hal_backend_v1);
  table.abi_version = HAL_BACKEND_ABI_VERSION;
  table.name = "host";
  table.version = HAL_VERSION_STRING;
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = device_count;
  table.device_info = device_info;
  table.buffer_allocate = buffer_allocate;
  table.buffer_free = buffer_free;
  table.buffer_host_address = buffer_address;
  table.buffer_device_address = buffer_address;
  table.copy_host_to_device = copy_host_to_device;
  table.copy_device_to_host = copy_device_to_host;
  table.copy_device_to_device = copy_device_to_device;
  table.fill = fill;
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
  table.attention = &attention_table;
  table.collectives = collectives();
  table.interop = &interop_table;
  table.telemetry = &telemetry_table;
  table.memory_test = &memory_test_table;
  return table;
}

const hal_backend_v1 host_table = make_table();

}  // namespace

}  // namespace hal::host

// Defined here, where HostTelemetry and TelemetryBaseline are complete.
hal_backend_context::hal_backend_context() = default;
hal_backend_context::~hal_backend_context() = default;

extern "C" HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(std::uint32_t host_max_abi_version) {
  return hal_backend_offer(&hal::host::host_table, host_max_abi_version);
}
