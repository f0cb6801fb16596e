/* A backend that wraps the host backend's table and breaks one thing, so the
 * conformance runner can be tested against each way a real backend fails.
 * Built once per FAKE_* mode (see tests/CMakeLists.txt):
 *   FAKE_CRASH     fill raises SIGSEGV              -> CRASH
 *   FAKE_HANG      stream_synchronize never returns -> TIMEOUT
 *   FAKE_OVERCLAIM declares memory.managed (as the host does) but refuses
 *                  managed allocations              -> FAIL, probe cache "absent"
 *   FAKE_BITFLIP   host->device copies flip one bit -> FAIL (wrong results)
 * and the faults a measuring case must not let through:
 *   FAKE_ZEROTIME  event timing always says 0 ms     -> ERROR (timer cannot be trusted)
 *   FAKE_NOSTREAMS declares no "streams" and drops host callbacks -> FAIL, not UNSUPPORTED
 *   FAKE_LAZY      attention forward and all_reduce return success and compute nothing -> FAIL
 *   FAKE_BADMEMORY reads of device memory see stuck bits at two known offsets
 *                  of every buffer (stuck_offsets below), and the plugin offers no
 *                  device memory test, so the memtest case reads back through
 *                  the host  -> memtest FAIL at exactly those
 * and the faults telemetry must catch (the host's readings, one field changed):
 *   FAKE_ECCRISE   one more uncorrected ECC error at every snapshot -> every case FAILs the health gate
 *   FAKE_THROTTLE  hardware thermal slowdown from the third snapshot of a process on
 *                  -> the stress cases FAIL "clocks held down" */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal/backend_abi.h"

static const hal_backend_v1* host;
static hal_backend_v1 table;
static char uuids[16][64];
/* The fake's own error, reported once by get_last_error. */
static __thread const char* fake_error;

static void get_last_error(hal_error_info_v1* out) {
  if (fake_error != NULL && out != NULL) {
    out->status = HAL_ERROR_UNSUPPORTED;
    out->native_code = 0;
    out->message = fake_error;
    fake_error = NULL;
    return;
  }
  host->get_last_error(out);
}

static hal_status device_info(hal_backend_context* context, uint32_t device, hal_device_info_v1* info) {
  const hal_status status = host->device_info(context, device, info);
  if (status != HAL_OK) return status;
  /* Its own identity, so results and probe-cache entries never mix with the host's. */
  info->name = "Fake " FAKE_NAME " device";
  info->vendor = "hal tests";
  if (device < 16) {
    snprintf(uuids[device], sizeof(uuids[device]), "fake-%s-%u", FAKE_NAME, device);
    info->uuid = uuids[device];
  }
  return HAL_OK;
}

#if defined(FAKE_NOSTREAMS)
static hal_capability_v1 capabilities[256];

static hal_status device_info_without_streams(hal_backend_context* context, uint32_t device, hal_device_info_v1* info) {
  const hal_status status = device_info(context, device, info);
  if (status != HAL_OK) return status;
  uint32_t kept = 0;
  for (uint32_t i = 0; i < info->capability_count && kept < 256; ++i)
    if (strcmp(info->capabilities[i].key, "streams") != 0) capabilities[kept++] = info->capabilities[i];
  info->capabilities = capabilities;
  info->capability_count = kept;
  return HAL_OK;
}

static hal_status stream_host_callback(hal_stream* stream, hal_host_callback callback, void* user_data) {
  (void)stream, (void)callback, (void)user_data;
  return HAL_OK;
}
#endif

#if defined(FAKE_ZEROTIME)
static hal_status event_elapsed_milliseconds(hal_event* start, hal_event* end, double* milliseconds) {
  const hal_status status = host->event_elapsed_milliseconds(start, end, milliseconds);
  if (status == HAL_OK) *milliseconds = 0;
  return status;
}
#endif

#if defined(FAKE_LAZY)
static hal_attention_v3 attention;
/* Room for the host's collectives table, whatever version it is. */
static union {
  hal_collectives_v1 table;
  unsigned char bytes[512];
} collectives;

/* Forward "succeeds" without computing anything; backward runs. */
static hal_status attention_forward(hal_stream* stream, const hal_attention_call_v1* call) {
  (void)stream, (void)call;
  return HAL_OK;
}

/* Every all_reduce "succeeds" without touching recv; other operations run. */
static hal_status enqueue(hal_communicator* communicator, hal_stream* stream, const hal_collective_op_v1* operations,
                          uint32_t op_count) {
  for (uint32_t i = 0; i < op_count; ++i)
    if (operations[i].kind == HAL_COLLECTIVE_ALL_REDUCE) return HAL_OK;
  return host->collectives->enqueue(communicator, stream, operations, op_count);
}
#endif

#if defined(FAKE_BADMEMORY)
/* Bit 3 of byte 0x12345 reads as 1 and bit 6 of byte 0x80006 as 0. */
static const uint64_t stuck_offsets[] = {0x12345, 0x80006};
static const unsigned char stuck_bits[] = {0x08, 0x40};
static const unsigned char stuck_values[] = {0x08, 0x00};

static hal_status copy_device_to_host(hal_stream* stream, void* destination, hal_buffer* source, uint64_t source_offset,
                                      uint64_t size) {
  /* Synchronous after earlier work, so the fault lands in what the caller reads. */
  if (stream != NULL) host->stream_synchronize(stream);
  const hal_status status = host->copy_device_to_host(NULL, destination, source, source_offset, size);
  if (status != HAL_OK) return status;
  for (size_t i = 0; i < sizeof(stuck_offsets) / sizeof(stuck_offsets[0]); ++i) {
    const uint64_t at = stuck_offsets[i];
    if (at < source_offset || at >= source_offset + size) continue;
    unsigned char* byte = (unsigned char*)destination + (at - source_offset);
    *byte = (unsigned char)((*byte & ~stuck_bits[i]) | stuck_values[i]);
  }
  return HAL_OK;
}
#endif

#if defined(FAKE_ECCRISE) || defined(FAKE_THROTTLE)
static hal_telemetry_v1 telemetry;
static unsigned snapshots;

static hal_status telemetry_snapshot(hal_backend_context* context, uint32_t device, hal_telemetry_snapshot_v1* out) {
  const hal_status status = host->telemetry->snapshot(context, device, out);
  if (status != HAL_OK) return status;
  const unsigned taken = __atomic_add_fetch(&snapshots, 1, __ATOMIC_RELAXED);
  const hal_telemetry_reading_v1 reading = {HAL_TELEMETRY_AVAILABLE, 0, 0, 0.0, NULL};
#if defined(FAKE_ECCRISE)
  out->ecc_uncorrected_volatile = reading;
  out->ecc_uncorrected_volatile.integer = taken;
#else
  out->clock_event_reasons = reading;
  out->clock_event_reasons.integer = taken >= 3 ? HAL_CLOCK_EVENT_HARDWARE_THERMAL : 0;
#endif
  return HAL_OK;
}
#endif

#if defined(FAKE_CRASH)
static hal_status fill(hal_stream* stream, hal_buffer* destination, uint64_t offset, uint64_t size,
                       const void* pattern, uint32_t pattern_size) {
  (void)stream, (void)destination, (void)offset, (void)size, (void)pattern, (void)pattern_size;
  raise(SIGSEGV);
  return HAL_ERROR_INTERNAL;
}
#endif

#if defined(FAKE_HANG)
static hal_status stream_synchronize(hal_stream* stream) {
  (void)stream;
  for (;;) pause();
  return HAL_OK;
}
#endif

#if defined(FAKE_OVERCLAIM)
static hal_status buffer_allocate(hal_backend_context* context, uint32_t device, hal_memory_kind kind, uint64_t size,
                                  uint64_t alignment, hal_buffer** out) {
  if (kind == HAL_MEMORY_MANAGED) {
    fake_error = "managed memory is not implemented by the fake_overclaim backend (it declares memory.managed anyway)";
    return HAL_ERROR_UNSUPPORTED;
  }
  return host->buffer_allocate(context, device, kind, size, alignment, out);
}
#endif

#if defined(FAKE_BITFLIP)
static hal_status copy_host_to_device(hal_stream* stream, hal_buffer* destination, uint64_t destination_offset,
                                      const void* source, uint64_t size) {
  /* Ordered after earlier work, then synchronous: the flipped copy is what lands. */
  if (stream != NULL) host->stream_synchronize(stream);
  unsigned char* corrupted = malloc(size);
  if (corrupted == NULL) return host->copy_host_to_device(NULL, destination, destination_offset, source, size);
  memcpy(corrupted, source, size);
  corrupted[size / 2] ^= 0x10;
  const hal_status status = host->copy_host_to_device(NULL, destination, destination_offset, corrupted, size);
  free(corrupted);
  return status;
}
#endif

HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(uint32_t host_max_abi_version) {
  if (host == NULL) {
    void* library = dlopen(HAL_HOST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return NULL;
    hal_backend_query_fn query = (hal_backend_query_fn)dlsym(library, HAL_BACKEND_ENTRY_SYMBOL);
    if (query == NULL) return NULL;
    host = query(host_max_abi_version);
    if (host == NULL) return NULL;
  }
  memcpy(&table, host, sizeof(table) < host->struct_size ? sizeof(table) : host->struct_size);
  table.struct_size = sizeof(table);
  table.name = FAKE_NAME;
  table.version = "0-fake";
  table.get_last_error = get_last_error;
  table.device_info = device_info;
#if defined(FAKE_CRASH)
  table.fill = fill;
#elif defined(FAKE_HANG)
  table.stream_synchronize = stream_synchronize;
#elif defined(FAKE_OVERCLAIM)
  table.buffer_allocate = buffer_allocate;
#elif defined(FAKE_BITFLIP)
  table.copy_host_to_device = copy_host_to_device;
#elif defined(FAKE_ZEROTIME)
  table.event_elapsed_milliseconds = event_elapsed_milliseconds;
#elif defined(FAKE_NOSTREAMS)
  table.device_info = device_info_without_streams;
  table.stream_host_callback = stream_host_callback;
#elif defined(FAKE_LAZY)
  if (host->attention != NULL) {
    const size_t size = host->attention->struct_size < sizeof(attention) ? host->attention->struct_size : sizeof(attention);
    memcpy(&attention, host->attention, size);
    attention.forward = attention_forward;
    table.attention = &attention;
  }
  if (host->collectives != NULL && host->collectives->struct_size <= sizeof(collectives.bytes)) {
    memcpy(collectives.bytes, host->collectives, host->collectives->struct_size);
    collectives.table.enqueue = enqueue;
    table.collectives = &collectives.table;
  }
#elif defined(FAKE_BADMEMORY)
  table.copy_device_to_host = copy_device_to_host;
  table.memory_test = NULL; /* the host's would test the cells, which the fault does not touch */
#elif defined(FAKE_ECCRISE) || defined(FAKE_THROTTLE)
  if (host->telemetry != NULL && host->telemetry->struct_size >= sizeof(telemetry)) {
    memcpy(&telemetry, host->telemetry, sizeof(telemetry));
    telemetry.snapshot = telemetry_snapshot;
    table.telemetry = &telemetry;
  }
#endif
  return &table;
}
