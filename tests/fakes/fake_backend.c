/* A backend that wraps the host backend's table and breaks one thing, so the
 * conformance runner can be tested against each way a real backend fails.
 * Built once per FAKE_* mode (see tests/CMakeLists.txt):
 *   FAKE_CRASH     fill raises SIGSEGV              -> CRASH
 *   FAKE_HANG      stream_synchronize never returns -> TIMEOUT
 *   FAKE_OVERCLAIM declares memory.managed (as the host does) but refuses
 *                  managed allocations              -> FAIL, probe cache "absent"
 *   FAKE_BITFLIP   host->device copies flip one bit -> FAIL (wrong results) */
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
#endif
  return &table;
}
