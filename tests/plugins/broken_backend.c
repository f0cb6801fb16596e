/* A backend plugin that is broken in one chosen way, to test that the loader
 * reports each fault precisely and carries on. Built once per BROKEN_* mode.
 * Written in C to show the boundary needs nothing from C++. */
#include <stddef.h>
#include <string.h>

#include "hal/backend_abi.h"

static const char* last_message = "";

static void get_last_error(hal_error_info_v1* out) {
  out->status = HAL_ERROR_INTERNAL;
  out->native_code = 42;
  out->message = last_message;
}

static hal_status initialize(const hal_backend_init_v1* init, hal_backend_context** out) {
  (void)init;
  (void)out;
#if defined(BROKEN_VENDOR_MISSING)
  last_message = "libfakevendor.so.1 not found; tried /opt/fake/lib/libfakevendor.so.1: No such file or directory";
  return HAL_ERROR_NOT_PRESENT;
#else
  last_message = "simulated driver failure during initialization";
  return HAL_ERROR_INTERNAL;
#endif
}

static void shutdown(hal_backend_context* context) { (void)context; }
static hal_status device_count(hal_backend_context* context, uint32_t* count) {
  (void)context;
  *count = 0;
  return HAL_OK;
}

static hal_backend_v1 table;

#if !defined(BROKEN_NO_ENTRY)
HAL_BACKEND_EXPORT const hal_backend_v1* hal_backend_query(uint32_t host_max_abi_version) {
  (void)host_max_abi_version;
#if defined(BROKEN_NULL_TABLE)
  return NULL;
#else
  /* Only the functions the loader reaches before initialize fails are real;
   * the table is otherwise complete so only the chosen fault shows. */
  static const int placeholder = 0;
  memset(&table, 0, sizeof(table));
  table.struct_size = sizeof(table);
  table.abi_version = HAL_BACKEND_ABI_VERSION;
  table.name = BROKEN_NAME;
  table.version = "0";
  /* Every required slot gets a non-null address first. */
  for (size_t offset = offsetof(hal_backend_v1, get_last_error); offset < offsetof(hal_backend_v1, attention);
       offset += sizeof(void*)) {
    const void* address = &placeholder;
    memcpy((char*)&table + offset, &address, sizeof(address));
  }
  table.get_last_error = get_last_error;
  table.initialize = initialize;
  table.shutdown = shutdown;
  table.device_count = device_count;
  table.attention = NULL;
  table.collectives = NULL;
#if defined(BROKEN_WRONG_ABI)
  table.abi_version = 99;
#elif defined(BROKEN_OLD_ABI)
  table.abi_version = 1; /* built before attention took one call struct */
#elif defined(BROKEN_SMALL_STRUCT)
  table.struct_size = 16;
#elif defined(BROKEN_MISSING_FUNCTION)
  table.device_info = NULL;
#endif
  return &table;
#endif
}
#else
HAL_BACKEND_EXPORT int not_a_hal_backend(void) { return 0; }
#endif
