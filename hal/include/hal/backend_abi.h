/* hal backend ABI: the plugin boundary between libhal and each backend.
 *
 * Plain C on purpose: backends may be built by another compiler or C++
 * standard library than libhal. Rules that keep it stable:
 *   - every struct that crosses starts with `struct_size` (bytes, set by the
 *     side that fills it) so either side can tell which fields exist;
 *   - tables are append-only: a new field goes at the end, never in between;
 *   - optional groups are sub-tables; a NULL sub-table means "unsupported",
 *     never a stub that returns garbage;
 *   - no exception crosses; a call returns hal_status and the backend keeps a
 *     thread-local last error (message + native code) for get_last_error.
 *
 * A backend is a shared library exporting HAL_BACKEND_ENTRY_SYMBOL. libhal
 * passes the highest ABI version it understands; the backend returns a table
 * of a version it can serve at or below that, or NULL when it cannot.
 *
 * New entries take one argument struct that starts with its size, so a
 * later field is added without a new entry. The version changes only when
 * an entry's meaning or a table's layout does; libhal loads plugins of
 * HAL_BACKEND_ABI_MIN_VERSION up to HAL_BACKEND_ABI_VERSION and refuses
 * older ones with a message naming both versions.
 *   1 -> 2: attention has one forward and one backward entry, each taking a
 *           hal_attention_call_v1 (the implementation, params, tensor list
 *           and workspace); version 1's fixed-argument forward/backward and
 *           its appended list entry `run` are gone (hal_attention_v3).
 */
#ifndef HAL_BACKEND_ABI_H
#define HAL_BACKEND_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAL_BACKEND_ABI_VERSION 2u
/* The oldest plugin ABI libhal loads: version 1's attention table has another layout. */
#define HAL_BACKEND_ABI_MIN_VERSION 2u
#define HAL_BACKEND_ENTRY_SYMBOL "hal_backend_query"

#if defined(_WIN32)
#define HAL_BACKEND_EXPORT __declspec(dllexport)
#else
#define HAL_BACKEND_EXPORT __attribute__((visibility("default")))
#endif

typedef enum hal_status {
  HAL_OK = 0,
  HAL_ERROR_INVALID_ARGUMENT = 1, /* the caller passed a bad value */
  HAL_ERROR_UNSUPPORTED = 2,      /* valid request this backend/device cannot do */
  HAL_ERROR_NOT_PRESENT = 3,      /* a vendor library or device is missing */
  HAL_ERROR_OUT_OF_MEMORY = 4,
  HAL_ERROR_TIMEOUT = 5,
  HAL_ERROR_DEVICE_LOST = 6,
  HAL_ERROR_ABORTED = 7,
  HAL_ERROR_INTERNAL = 8
} hal_status;

typedef struct hal_error_info_v1 {
  size_t struct_size;
  hal_status status;
  int64_t native_code;   /* vendor error code (CUresult, hipError_t, errno...), 0 if none */
  const char* message;   /* thread-local, valid until the next call on this thread */
} hal_error_info_v1;

/* Opaque handles owned by the backend. */
typedef struct hal_backend_context hal_backend_context;
typedef struct hal_buffer hal_buffer;
typedef struct hal_stream hal_stream;
typedef struct hal_event hal_event;

typedef enum hal_log_level {
  HAL_LOG_DEBUG = 0,
  HAL_LOG_INFO = 1,
  HAL_LOG_WARNING = 2,
  HAL_LOG_ERROR = 3
} hal_log_level;

typedef struct hal_key_value_v1 {
  const char* key;
  const char* value;
} hal_key_value_v1;

typedef struct hal_backend_init_v1 {
  size_t struct_size;
  uint32_t abi_version;                /* the version libhal negotiated */
  void (*log)(void* user_data, hal_log_level level, const char* message);
  void* log_user_data;
  /* The backend's settings: [backend.NAME] of the config file, and the HAL_*
   * variables that set them (HAL_CUDA_DRIVER is cuda's "driver"). libhal reads
   * the environment for every hal setting; a backend reads none itself. */
  const hal_key_value_v1* options;
  uint32_t option_count;
  /* Appended: where each option's value came from, parallel to options: the
   * variable's name ("HAL_CUDA_DRIVER") or "config". Present when
   * struct_size covers it (hal_backend_option_source). */
  const char* const* option_sources;
} hal_backend_init_v1;

/* What a libhal built before option_sources passes: the smallest struct_size
 * a backend accepts. */
#define HAL_BACKEND_INIT_V1_MIN_SIZE offsetof(hal_backend_init_v1, option_sources)

/* Where option `index` was set, for messages: "config" when libhal predates
 * option_sources. */
static inline const char* hal_backend_option_source(const hal_backend_init_v1* init, uint32_t index) {
  return init->struct_size >= offsetof(hal_backend_init_v1, option_sources) + sizeof(init->option_sources) &&
                 init->option_sources != NULL && init->option_sources[index] != NULL
             ? init->option_sources[index]
             : "config";
}

typedef enum hal_device_type {
  HAL_DEVICE_TYPE_CPU = 0,
  HAL_DEVICE_TYPE_GPU = 1,
  HAL_DEVICE_TYPE_ACCELERATOR = 2
} hal_device_type;

typedef enum hal_capability_type {
  HAL_CAPABILITY_BOOL = 0,
  HAL_CAPABILITY_INT = 1,
  HAL_CAPABILITY_FLOAT = 2,
  HAL_CAPABILITY_STRING = 3
} hal_capability_type;

typedef struct hal_capability_v1 {
  const char* key;               /* e.g. "memory.managed", "attention.flash" */
  hal_capability_type type;
  int64_t int_value;             /* BOOL (0/1) and INT */
  double float_value;            /* FLOAT */
  const char* string_value;      /* STRING */
  const char* note;              /* why, where it came from; may be NULL */
} hal_capability_v1;

/* Strings and arrays are owned by the backend context and stay valid until
 * shutdown, except free_memory which is read fresh on every call. */
typedef struct hal_device_info_v1 {
  size_t struct_size;
  hal_device_type type;
  const char* name;
  const char* vendor;
  const char* uuid;               /* stable identifier; "" if the device has none */
  const char* pci_bus_id;         /* "0000:3b:00.0"; "" if not a PCI device */
  int32_t numa_node;              /* -1 when unknown */
  uint64_t total_memory;          /* bytes */
  uint64_t free_memory;           /* bytes, at the time of the call */
  uint32_t compute_units;         /* cores, SMs, CUs */
  uint32_t clock_mhz;             /* 0 when unknown */
  uint32_t memory_clock_mhz;      /* 0 when unknown */
  const hal_key_value_v1* version_axes; /* driver, runtime, each vendor library */
  uint32_t version_axis_count;
  const hal_capability_v1* capabilities;
  uint32_t capability_count;
  /* Added within v1, so written only where HAL_DEVICE_INFO_HAS(info,
   * supersedes): backend names, comma-separated ("cuda"), whose device at
   * the same PCI bus id (or, when either has none, the same UUID) is this
   * very device reached another way; libhal lists it once, as this one.
   * NULL or "" for none. */
  const char* supersedes;
} hal_device_info_v1;

/* What a caller built before supersedes passes: the smallest struct_size a
 * backend accepts. */
#define HAL_DEVICE_INFO_V1_MIN_SIZE offsetof(hal_device_info_v1, supersedes)
/* The caller's struct is large enough to hold this field. */
#define HAL_DEVICE_INFO_HAS(info, field) \
  ((info)->struct_size >= offsetof(hal_device_info_v1, field) + sizeof((info)->field))

typedef enum hal_memory_kind {
  HAL_MEMORY_DEVICE = 0,
  HAL_MEMORY_HOST_PINNED = 1,
  HAL_MEMORY_MANAGED = 2
} hal_memory_kind;

typedef enum hal_dtype {
  HAL_DTYPE_F32 = 0,
  HAL_DTYPE_F16 = 1,
  HAL_DTYPE_BF16 = 2,
  HAL_DTYPE_F64 = 3,
  HAL_DTYPE_I8 = 4,
  HAL_DTYPE_U8 = 5,
  HAL_DTYPE_I32 = 6,
  HAL_DTYPE_I64 = 7
} hal_dtype;

/* ---- attention (scaled dot-product attention) ---------------------------- */

typedef enum hal_attention_implementation {
  HAL_ATTENTION_FUSED = 0, /* vendor fused kernel (e.g. cuDNN fused MHA) */
  HAL_ATTENTION_FLASH = 1, /* tiled, online softmax, O(seq) extra memory */
  HAL_ATTENTION_MATH = 2   /* materialized scores: the reference */
} hal_attention_implementation;

typedef enum hal_mask_alignment {
  HAL_MASK_TOP_LEFT = 0,     /* query i sits at key i */
  HAL_MASK_BOTTOM_RIGHT = 1  /* last query sits at last key: offset seq_kv - seq_q */
} hal_mask_alignment;

/* Element strides of a 4-D tensor, named by axis whatever the memory order. */
typedef struct hal_tensor_strides_v1 {
  int64_t batch;
  int64_t head;
  int64_t seq;
  int64_t dim;
} hal_tensor_strides_v1;

/* Key j is visible to query i when, with d = j - (i + offset) and offset = 0
 * (top-left) or seq_kv - seq_q (bottom-right):
 *   causal -> d <= 0;  window_left >= 0 -> d >= -window_left;
 *   window_right >= 0 -> d <= window_right.
 * A query that sees no key gets O = 0 and LSE = -inf. LSE is f32,
 * contiguous [batch, heads_q, seq_q]. Gradient tensors use their own strides. */
typedef struct hal_attention_params_v1 {
  size_t struct_size;
  int64_t batch;
  int64_t heads_q;
  int64_t heads_kv;        /* divides heads_q (GQA/MQA when smaller) */
  int64_t seq_q;
  int64_t seq_kv;
  int64_t head_dim_qk;
  int64_t head_dim_v;
  hal_dtype dtype;         /* F32, F16 or BF16 for Q, K, V, O and their gradients */
  int32_t causal;
  hal_mask_alignment alignment;
  int64_t window_left;     /* -1: unbounded */
  int64_t window_right;    /* -1: unbounded */
  float softmax_scale;
  int32_t return_lse;
  hal_tensor_strides_v1 q_strides, k_strides, v_strides, o_strides;
  hal_tensor_strides_v1 grad_o_strides, grad_q_strides, grad_k_strides, grad_v_strides;
  /* Added within v1, so read it through hal_attention_address_alignment():
   * the largest power of two (at most 256) that every tensor's device address
   * of the call is a multiple of; 0 when the question is about the shape
   * alone (no tensors, as halinfo asks), which claims nothing. */
  uint32_t address_alignment;
  /* Added within v1, so read it through hal_attention_key_ranges(): non-zero
   * when the call carries per-query key ranges, an int32 tensor [batch,
   * seq_q, 2], contiguous, the same for every head: query i of batch row b
   * sees key j only if ranges[b][i][0] <= j < ranges[b][i][1], on top of the
   * band above (values outside [0, seq_kv] are clamped; begin >= end: no
   * key). It says key padding on either side, packed sequences (several
   * documents in one row) and any mask whose visible keys form one interval
   * per query. The tensor travels last in the call's tensor list (6 or
   * 10 tensors); only backends that declare "attention.key_ranges" get it. */
  int32_t key_ranges;
} hal_attention_params_v1;

/* What a caller built before address_alignment passes: the smallest
 * struct_size a backend accepts. */
#define HAL_ATTENTION_PARAMS_V1_MIN_SIZE offsetof(hal_attention_params_v1, address_alignment)

static inline uint32_t hal_attention_address_alignment(const hal_attention_params_v1* params) {
  return params->struct_size >= HAL_ATTENTION_PARAMS_V1_MIN_SIZE + sizeof(uint32_t)
             ? params->address_alignment
             : 0;
}

static inline int32_t hal_attention_key_ranges(const hal_attention_params_v1* params) {
  return params->struct_size >= offsetof(hal_attention_params_v1, key_ranges) + sizeof(int32_t) ? params->key_ranges
                                                                                                 : 0;
}

/* The tensors of one call in hal_attention_call_v1's list: forward's 5 or
 * backward's 9, then the key ranges when the params announce them. */
static inline uint32_t hal_attention_tensor_count(const hal_attention_params_v1* params, int32_t backward) {
  return (backward ? 9u : 5u) + (hal_attention_key_ranges(params) != 0 ? 1u : 0u);
}

/* A tensor's memory: bytes from the start of a buffer. With no buffer, offset
 * is the address itself of borrowed memory on the stream's device (a
 * framework's tensor; a device address on GPUs), which the caller keeps alive
 * until the stream's work on it is done; only backends that declare the
 * capability "attention.borrowed_addresses" get such references, and only in
 * attention calls. No buffer and offset 0: no tensor (an unused LSE). */
typedef struct hal_tensor_ref_v1 {
  hal_buffer* buffer;
  uint64_t offset;
} hal_tensor_ref_v1;

/* One attention call. tensors are forward's (q, k, v, o, lse) or
 * backward's (q, k, v, o, grad_o, lse, grad_q, grad_k, grad_v), then the
 * key ranges when hal_attention_key_ranges(params): 5, 9, 6 or 10, as
 * hal_attention_tensor_count says. libhal has checked the params and every
 * tensor against them and the device; the backend keeps only its own limits
 * (those supports() reports). workspace with a NULL buffer and offset 0: the
 * backend allocates its own scratch; otherwise it runs in the
 * workspace_bytes from there (a caller's scratch: framework allocators, CUDA
 * graph capture), and fewer than workspace_size() said is
 * HAL_ERROR_INVALID_ARGUMENT. */
typedef struct hal_attention_call_v1 {
  size_t struct_size;
  hal_attention_implementation implementation;
  const hal_attention_params_v1* params;
  const hal_tensor_ref_v1* tensors;
  uint32_t tensor_count;
  hal_tensor_ref_v1 workspace;
  uint64_t workspace_bytes;
} hal_attention_call_v1;

/* The attention table of ABI 2 (version 1's tables hal_attention_v1/v2 had
 * fixed-argument entries and a separate list entry). */
typedef struct hal_attention_v3 {
  size_t struct_size;
  /* Writes the reasons `implementation` cannot run `params` on `device`, one
   * per line, into reasons (NUL-terminated, truncated to capacity). An empty
   * string means eligible. libhal asks once per shape class and keeps the
   * answer. */
  hal_status (*supports)(hal_backend_context* context, uint32_t device,
                         hal_attention_implementation implementation,
                         const hal_attention_params_v1* params, int32_t backward,
                         char* reasons, size_t reasons_capacity);
  /* Extra device memory the implementation needs for one call. */
  hal_status (*workspace_size)(hal_backend_context* context, uint32_t device,
                               hal_attention_implementation implementation,
                               const hal_attention_params_v1* params, int32_t backward,
                               uint64_t* bytes);
  hal_status (*forward)(hal_stream* stream, const hal_attention_call_v1* call);
  hal_status (*backward)(hal_stream* stream, const hal_attention_call_v1* call);
} hal_attention_v3;

/* ---- collectives ---------------------------------------------------------
 * A communicator joins `world_size` processes (one device each) that met
 * through a key-value store. libhal owns the store and hands the backend
 * this callback table, so any backend (Gloo on the host, an NCCL-compatible
 * library on GPUs exchanging its unique id) rendezvouses the same way. */

typedef enum hal_collective_kind {
  HAL_COLLECTIVE_ALL_REDUCE = 0,
  HAL_COLLECTIVE_BROADCAST = 1,
  HAL_COLLECTIVE_REDUCE = 2,
  HAL_COLLECTIVE_ALL_GATHER = 3,
  HAL_COLLECTIVE_REDUCE_SCATTER = 4,
  HAL_COLLECTIVE_ALL_TO_ALL = 5,
  HAL_COLLECTIVE_GATHER = 6,
  HAL_COLLECTIVE_SCATTER = 7,
  HAL_COLLECTIVE_SEND = 8,
  HAL_COLLECTIVE_RECV = 9,
  HAL_COLLECTIVE_BARRIER = 10
} hal_collective_kind;

typedef enum hal_reduce_op {
  HAL_REDUCE_SUM = 0,
  HAL_REDUCE_PROD = 1,
  HAL_REDUCE_MIN = 2,
  HAL_REDUCE_MAX = 3,
  HAL_REDUCE_AVG = 4
} hal_reduce_op;

/* Receives a value the store found; called at most once per get. */
typedef void (*hal_store_value_sink)(void* sink_user_data, const void* value, size_t size);

typedef struct hal_store_v1 {
  size_t struct_size;
  void* user_data;
  hal_status (*set)(void* user_data, const char* key, const void* value, size_t size);
  /* Waits up to timeout_ms for the key, then hands its value to sink.
   * HAL_ERROR_TIMEOUT when it did not appear in time. */
  hal_status (*get)(void* user_data, const char* key, int64_t timeout_ms, hal_store_value_sink sink,
                    void* sink_user_data);
} hal_store_v1;

typedef struct hal_communicator hal_communicator;

typedef struct hal_communicator_config_v1 {
  size_t struct_size;
  uint32_t device;
  int32_t rank;
  int32_t world_size;
  int64_t timeout_ms;                /* default for every operation, > 0 */
  /* Valid until communicator_destroy returns. */
  const hal_store_v1* store;
  const char* key_prefix;            /* unique per communicator; prefix every store key with it */
  const hal_key_value_v1* options;   /* backend options, e.g. "interface" */
  uint32_t option_count;
} hal_communicator_config_v1;

/* One operation. Counts are elements: per rank for ALL_GATHER, GATHER,
 * SCATTER (the block each rank contributes or gets), per peer for
 * ALL_TO_ALL, the received block for REDUCE_SCATTER, the whole buffer
 * otherwise. In-place is send == recv (same buffer and offset), and for
 * ALL_GATHER/GATHER send at recv + rank * count. libhal has checked the
 * ranges, root/peer, device and dtype before calling. */
typedef struct hal_collective_op_v1 {
  size_t struct_size;
  hal_collective_kind kind;
  hal_dtype dtype;
  hal_reduce_op reduce_op;
  int32_t root;                      /* root for rooted ops, peer for SEND/RECV, else -1 */
  uint64_t count;
  uint64_t sequence;                 /* numbered by libhal, for error messages */
  int64_t timeout_ms;                /* this operation's timeout, > 0 */
  hal_tensor_ref_v1 send;            /* buffer NULL when unused */
  hal_tensor_ref_v1 recv;
} hal_collective_op_v1;

typedef struct hal_collectives_v1 {
  size_t struct_size;
  hal_status (*communicator_create)(hal_backend_context* context, const hal_communicator_config_v1* config,
                                    hal_communicator** out);
  /* Aborts what is still running, then frees the communicator. */
  hal_status (*communicator_destroy)(hal_communicator* communicator);
  /* Safe from any thread, also while an operation blocks: pending and later
   * operations fail with HAL_ERROR_ABORTED promptly. */
  hal_status (*communicator_abort)(hal_communicator* communicator);
  /* HAL_OK, or the first error an enqueued operation hit (message in the
   * last error). */
  hal_status (*communicator_get_async_error)(hal_communicator* communicator);
  /* Enqueues op_count operations on stream as one group: every operation
   * of the group is posted before any is waited for (SEND/RECV pairs), and
   * errors surface on the stream and on the communicator. */
  hal_status (*enqueue)(hal_communicator* communicator, hal_stream* stream, const hal_collective_op_v1* operations,
                        uint32_t op_count);
} hal_collectives_v1;

/* Which engine runs a backend's communicators (the host backend has Gloo,
 * MPI and shared memory beside either). Strings stay valid until the next
 * call on the same thread. */
typedef struct hal_collectives_engine_v1 {
  size_t struct_size;
  const char* engine;   /* "gloo", "mpi", "shm"; "" when the request cannot be met */
  const char* reason;   /* why that engine, or why the request cannot be met */
  const char* engines;  /* every engine and whether it can run in this process */
} hal_collectives_engine_v1;

/* Appended to hal_collectives_v1: a backend whose collectives table has
 * v1.struct_size >= sizeof(hal_collectives_v2) offers these too, and
 * hal_backend_v1.collectives points at v1, its first member. libhal passes
 * the engine request to communicator_create as the options "engine" ("auto"
 * or an engine name) and "engine_source" (where the request came from). */
typedef struct hal_collectives_v2 {
  hal_collectives_v1 v1;
  hal_status (*choose_engine)(hal_backend_context* context, const char* requested, const char* requested_by,
                              hal_collectives_engine_v1* out);
  /* Which engine runs the communicator and why; valid until communicator_destroy. */
  const char* (*communicator_description)(hal_communicator* communicator);
} hal_collectives_v2;

typedef void (*hal_host_callback)(void* user_data, hal_status stream_status);

/* ---- interop: memory and streams other code owns ------------------------- */

/* DLPack's device type codes (DLDeviceType), as hal_native_device_v1 reports them. */
#define HAL_DLPACK_CPU 1
#define HAL_DLPACK_CUDA 2
#define HAL_DLPACK_ROCM 10

/* How frameworks name the device: DLPack's device type and the vendor's own
 * ordinal (what a framework calls cuda:N), which is not hal's index when
 * hal drops a device another plugin also lists. */
typedef struct hal_native_device_v1 {
  size_t struct_size;
  int32_t dlpack_device_type;   /* HAL_DLPACK_* */
  int32_t ordinal;
} hal_native_device_v1;

/* Page-lock imported host memory for the device (cuMemHostRegister,
 * hipHostRegister, mlock on the host) and undo it when the buffer is freed. */
#define HAL_EXTERNAL_MEMORY_REGISTER_HOST 1u

typedef struct hal_external_memory_v1 {
  size_t struct_size;
  void* address;            /* NULL only with size 0 */
  uint64_t size;            /* bytes */
  hal_memory_kind kind;     /* what the caller says it is */
  uint32_t flags;           /* HAL_EXTERNAL_MEMORY_* */
  /* Called exactly once, when the backend no longer uses the memory: after
   * buffer_free and after the work it enqueued on the memory is done (GPU
   * backends synchronize the device first, as their own frees do). Never
   * called when buffer_import fails. May be NULL. */
  void (*release)(void* user_data);
  void* release_user_data;
} hal_external_memory_v1;

typedef struct hal_interop_v1 {
  size_t struct_size;
  hal_status (*native_device)(hal_backend_context* context, uint32_t device, hal_native_device_v1* out);
  /* Wraps memory the backend did not allocate. buffer_free releases the
   * wrapper (and undoes a registration), never the memory. Where the vendor
   * can tell, checks that the range is memory of this device and of this
   * kind: HAL_ERROR_INVALID_ARGUMENT naming what it really is otherwise. */
  hal_status (*buffer_import)(hal_backend_context* context, uint32_t device, const hal_external_memory_v1* memory,
                              hal_buffer** out);
  /* Wraps a native stream (CUstream, hipStream_t; NULL is the legacy default
   * stream). With owned == 0, stream_destroy releases only the wrapper. NULL
   * where the backend has no native streams. */
  hal_status (*stream_wrap)(hal_backend_context* context, uint32_t device, void* native_stream, int32_t owned,
                            hal_stream** out);
  hal_status (*stream_native_handle)(hal_stream* stream, void** out);
  hal_status (*event_native_handle)(hal_event* event, void** out);
} hal_interop_v1;

/* ---- telemetry: device health readings ------------------------------------ */

/* Why a reading has no value. Zero is "not reported", so a field a backend
 * never touches can never read as a made-up zero. */
typedef enum hal_telemetry_availability {
  HAL_TELEMETRY_NOT_REPORTED = 0,    /* the backend does not report this field */
  HAL_TELEMETRY_AVAILABLE = 1,
  HAL_TELEMETRY_NOT_SUPPORTED = 2,   /* this device/SKU/driver/machine has no such reading */
  HAL_TELEMETRY_NEEDS_ROOT = 3,
  HAL_TELEMETRY_LIBRARY_MISSING = 4, /* the vendor management library could not be opened */
  HAL_TELEMETRY_MIG_MODE = 5,        /* not readable while the GPU is partitioned */
  HAL_TELEMETRY_READ_FAILED = 6,     /* the source exists; reading it failed */
  HAL_TELEMETRY_NEEDS_INTERVAL = 7   /* a rate: too little time since the previous reading */
} hal_telemetry_availability;

/* One field. Counts, MHz, masks and flags (0/1) use integer; temperatures
 * (Celsius), watts, joules and percents use real. detail: why there is no
 * value (a path, the vendor's error), or NULL; owned by the backend, valid
 * until the next telemetry call on the same thread. */
typedef struct hal_telemetry_reading_v1 {
  uint32_t availability;   /* hal_telemetry_availability */
  uint32_t reserved;
  uint64_t integer;
  double real;
  const char* detail;
} hal_telemetry_reading_v1;

/* Clock-event (throttle) reasons, one set for every vendor. */
#define HAL_CLOCK_EVENT_IDLE (1u << 0)
#define HAL_CLOCK_EVENT_POWER_CAP (1u << 1)
#define HAL_CLOCK_EVENT_HARDWARE_SLOWDOWN (1u << 2)
#define HAL_CLOCK_EVENT_SOFTWARE_THERMAL (1u << 3)
#define HAL_CLOCK_EVENT_HARDWARE_THERMAL (1u << 4)
#define HAL_CLOCK_EVENT_POWER_BRAKE (1u << 5)
#define HAL_CLOCK_EVENT_SYNC_BOOST (1u << 6)
#define HAL_CLOCK_EVENT_OTHER (1u << 7)

/* libhal zeroes the snapshot and sets struct_size; the backend fills the
 * fields it knows (leaving NOT_REPORTED elsewhere). Append-only. */
typedef struct hal_telemetry_snapshot_v1 {
  size_t struct_size;
  const char* source;   /* "nvml 12.550.54", "sysfs /"; owned like detail */
  hal_telemetry_reading_v1 core_temperature, hotspot_temperature, memory_temperature;
  hal_telemetry_reading_v1 slowdown_temperature, shutdown_temperature;
  hal_telemetry_reading_v1 power_draw, power_limit, energy;
  hal_telemetry_reading_v1 compute_clock, compute_clock_max, memory_clock, memory_clock_max;
  hal_telemetry_reading_v1 compute_utilization, memory_utilization, steal;
  hal_telemetry_reading_v1 clock_event_reasons, clock_event_vendor_mask; /* HAL_CLOCK_EVENT_*; vendor bits */
  hal_telemetry_reading_v1 ecc_enabled, ecc_corrected_volatile, ecc_uncorrected_volatile;
  hal_telemetry_reading_v1 ecc_corrected_aggregate, ecc_uncorrected_aggregate;
  hal_telemetry_reading_v1 retired_single_bit, retired_double_bit, retirement_pending, retirement_pending_pages;
  hal_telemetry_reading_v1 remap_corrected, remap_uncorrected, remap_pending, remap_failed;
  hal_telemetry_reading_v1 pcie_generation, pcie_generation_max, pcie_width, pcie_width_max, pcie_replay_count;
  hal_telemetry_reading_v1 links_active, links_total, link_errors;
} hal_telemetry_snapshot_v1;

typedef enum hal_health_event_kind {
  HAL_HEALTH_EVENT_XID = 0,               /* code: the event number */
  HAL_HEALTH_EVENT_UNCORRECTED_ECC = 1,   /* code: how many more errors */
  HAL_HEALTH_EVENT_THERMAL = 2,
  HAL_HEALTH_EVENT_POWER_BRAKE = 3,
  HAL_HEALTH_EVENT_MEMORY_RETIREMENT = 4
} hal_health_event_kind;

typedef struct hal_health_event_v1 {
  size_t struct_size;
  uint32_t kind;            /* hal_health_event_kind */
  uint32_t reserved;
  int64_t code;
  const char* description;  /* owned like a reading's detail */
} hal_health_event_v1;

/* A registration with the vendor's event API for one device. */
typedef struct hal_health_watch hal_health_watch;

typedef struct hal_telemetry_v1 {
  size_t struct_size;
  hal_status (*snapshot)(hal_backend_context* context, uint32_t device, hal_telemetry_snapshot_v1* out);
  /* The vendor's event stream; all three NULL where there is none (libhal
   * then finds events by comparing snapshots alone). */
  /* HAL_OK with *out NULL: this device has no event stream (its library is
   * missing or has no event API); snapshots alone are compared. */
  hal_status (*watch_create)(hal_backend_context* context, uint32_t device, hal_health_watch** out);
  /* HAL_OK with *out filled, or HAL_ERROR_TIMEOUT (no message) when no
   * event came within timeout_ms (0: do not wait). */
  hal_status (*watch_wait)(hal_health_watch* watch, int64_t timeout_ms, hal_health_event_v1* out);
  void (*watch_destroy)(hal_health_watch* watch);
} hal_telemetry_v1;

/* Device memory testing: one element of a march test (read and check every
 * 8-byte word of a range, then write it) run by the device itself, so a
 * test over most of a GPU's memory does not cross the bus. Each executing
 * thread visits its words in ascending or descending address order (a GPU
 * has no single order over all of them); a word is checked and written by
 * the same thread. What a word must hold, or is set to, is one of these: */
typedef enum hal_memory_test_word {
  HAL_MEMORY_TEST_NONE = 0,               /* nothing checked / written */
  HAL_MEMORY_TEST_CONSTANT = 1,           /* the element's 64-bit word */
  HAL_MEMORY_TEST_ADDRESS = 2,            /* the word's own region offset */
  HAL_MEMORY_TEST_ADDRESS_COMPLEMENT = 3  /* its bitwise complement */
} hal_memory_test_word;

typedef struct hal_memory_test_element_v1 {
  size_t struct_size;
  uint32_t check;          /* hal_memory_test_word each word must hold when read */
  uint32_t write;          /* hal_memory_test_word written after the check */
  uint64_t check_word;     /* the CONSTANT values */
  uint64_t write_word;
  uint64_t region_offset;  /* the region offset of the range's first byte (ADDRESS words, failures) */
  uint32_t descending;     /* nonzero: each thread walks its words from the highest address down */
  uint32_t reserved;       /* 0 */
} hal_memory_test_element_v1;

/* A word that read wrong, by region offset. */
typedef struct hal_memory_test_failure_v1 {
  uint64_t offset;
  uint64_t expected;
  uint64_t found;
} hal_memory_test_failure_v1;

/* The report, in memory of the stream's device that the caller zeroes and
 * later reads back: this header, then room for `capacity` failures.
 * failing_words counts every word that read wrong; the first
 * min(failing_words, capacity) of them (in no set order) are recorded. */
typedef struct hal_memory_test_report_v1 {
  uint64_t failing_words;
} hal_memory_test_report_v1;

typedef struct hal_memory_test_v1 {
  size_t struct_size;
  /* Enqueues one element over `bytes` (a multiple of 8, > 0) of `tested`
   * (8-byte aligned) on the stream, adding what it finds to the report at
   * `report` (8-byte aligned, room for the header and `capacity` > 0
   * failures); both are in buffers of the stream's device. libhal has
   * checked the ranges against the buffers. */
  hal_status (*run_element)(hal_stream* stream, hal_tensor_ref_v1 tested, uint64_t bytes,
                            const hal_memory_test_element_v1* element, hal_tensor_ref_v1 report, uint32_t capacity);
} hal_memory_test_v1;

/* Point-to-point links between devices (NVLink), as the device's management
 * library reports them: one entry per link the device has. */
typedef enum hal_device_link_kind {
  HAL_DEVICE_LINK_NVLINK = 1
} hal_device_link_kind;

typedef struct hal_device_link_v1 {
  size_t struct_size;
  uint32_t kind;               /* hal_device_link_kind */
  uint32_t active;             /* nonzero: the link is up */
  char peer_pci_bus_id[32];    /* the device at its far end ("0000:e2:00.0"); "" when unknown */
} hal_device_link_v1;

typedef struct hal_topology_v1 {
  size_t struct_size;
  /* Fills up to `capacity` links of the device (each entry's struct_size set
   * by the caller) and sets *count to how many it has; HAL_ERROR_UNSUPPORTED
   * with the reason when they cannot be read (no management library). */
  hal_status (*device_links)(hal_backend_context* context, uint32_t device, hal_device_link_v1* out, uint32_t capacity,
                             uint32_t* count);
} hal_topology_v1;

/* Copies and fills take a stream; stream == NULL means a synchronous
 * operation that returns when the bytes are in place. Offsets and sizes have
 * already been checked by libhal against the buffer sizes. */
typedef struct hal_backend_v1 {
  size_t struct_size;
  uint32_t abi_version;
  const char* name;                /* "host", "cuda", ... */
  const char* version;             /* the backend's own version string */

  void (*get_last_error)(hal_error_info_v1* out);

  hal_status (*initialize)(const hal_backend_init_v1* init, hal_backend_context** out);
  void (*shutdown)(hal_backend_context* context);

  hal_status (*device_count)(hal_backend_context* context, uint32_t* count);
  hal_status (*device_info)(hal_backend_context* context, uint32_t device, hal_device_info_v1* info);

  hal_status (*buffer_allocate)(hal_backend_context* context, uint32_t device, hal_memory_kind kind,
                                uint64_t size, uint64_t alignment, hal_buffer** out);
  hal_status (*buffer_free)(hal_buffer* buffer);
  /* Address usable by the host, or NULL for device memory the host cannot map. */
  void* (*buffer_host_address)(hal_buffer* buffer);
  /* Address usable by kernels on the device. */
  void* (*buffer_device_address)(hal_buffer* buffer);

  hal_status (*copy_host_to_device)(hal_stream* stream, hal_buffer* destination, uint64_t destination_offset,
                                    const void* source, uint64_t size);
  hal_status (*copy_device_to_host)(hal_stream* stream, void* destination, hal_buffer* source,
                                    uint64_t source_offset, uint64_t size);
  hal_status (*copy_device_to_device)(hal_stream* stream, hal_buffer* destination, uint64_t destination_offset,
                                      hal_buffer* source, uint64_t source_offset, uint64_t size);
  /* pattern_size is 1, 2 or 4; size is a multiple of pattern_size. */
  hal_status (*fill)(hal_stream* stream, hal_buffer* destination, uint64_t offset, uint64_t size,
                     const void* pattern, uint32_t pattern_size);

  hal_status (*stream_create)(hal_backend_context* context, uint32_t device, hal_stream** out);
  hal_status (*stream_destroy)(hal_stream* stream);
  /* Returns the first error of any operation that failed on the stream. */
  hal_status (*stream_synchronize)(hal_stream* stream);
  /* HAL_OK when idle, HAL_ERROR_TIMEOUT (no message) while work is pending. */
  hal_status (*stream_query)(hal_stream* stream);
  hal_status (*stream_wait_event)(hal_stream* stream, hal_event* event);
  hal_status (*stream_host_callback)(hal_stream* stream, hal_host_callback callback, void* user_data);

  hal_status (*event_create)(hal_backend_context* context, uint32_t device, hal_event** out);
  hal_status (*event_destroy)(hal_event* event);
  hal_status (*event_record)(hal_event* event, hal_stream* stream);
  hal_status (*event_query)(hal_event* event);
  hal_status (*event_synchronize)(hal_event* event);
  hal_status (*event_elapsed_milliseconds)(hal_event* start, hal_event* end, double* milliseconds);

  /* Optional groups: NULL means the backend does not offer them. */
  const struct hal_attention_v3* attention;
  const struct hal_collectives_v1* collectives;
  /* Appended: a plugin whose struct_size ends before it offers no interop. */
  const struct hal_interop_v1* interop;
  /* Appended: a plugin whose struct_size ends before it offers no telemetry. */
  const struct hal_telemetry_v1* telemetry;
  /* Appended: a plugin whose struct_size ends before it offers no device memory test. */
  const struct hal_memory_test_v1* memory_test;
  /* Appended: a plugin whose struct_size ends before it reports no links between devices. */
  const struct hal_topology_v1* topology;
} hal_backend_v1;

typedef const hal_backend_v1* (*hal_backend_query_fn)(uint32_t host_max_abi_version);

/* What a plugin's hal_backend_query returns: its table where libhal speaks
 * the table's ABI version, else NULL (libhal then says the plugin offers
 * nothing it can load). */
static inline const hal_backend_v1* hal_backend_offer(const hal_backend_v1* table, uint32_t host_max_abi_version) {
  return host_max_abi_version >= table->abi_version ? table : NULL;
}

/* Pinned sizes on LP64: a change here breaks every built plugin. Append new
 * fields in a new version instead of editing these structs. */
#if defined(__LP64__) || defined(_WIN64)
#ifdef __cplusplus
#define HAL_ABI_PIN_SIZE(type, bytes) static_assert(sizeof(type) == (bytes), #type " changed size: ABI break")
#else
#define HAL_ABI_PIN_SIZE(type, bytes) _Static_assert(sizeof(type) == (bytes), #type " changed size: ABI break")
#endif
HAL_ABI_PIN_SIZE(hal_error_info_v1, 32);
HAL_ABI_PIN_SIZE(hal_key_value_v1, 16);
HAL_ABI_PIN_SIZE(hal_backend_init_v1, 56);
HAL_ABI_PIN_SIZE(hal_capability_v1, 48);
HAL_ABI_PIN_SIZE(hal_device_info_v1, 128);
HAL_ABI_PIN_SIZE(hal_attention_params_v1, 368);
HAL_ABI_PIN_SIZE(hal_tensor_ref_v1, 16);
HAL_ABI_PIN_SIZE(hal_attention_call_v1, 64);
HAL_ABI_PIN_SIZE(hal_attention_v3, 40);
HAL_ABI_PIN_SIZE(hal_backend_v1, 280);
HAL_ABI_PIN_SIZE(hal_store_v1, 32);
HAL_ABI_PIN_SIZE(hal_communicator_config_v1, 64);
HAL_ABI_PIN_SIZE(hal_collective_op_v1, 80);
HAL_ABI_PIN_SIZE(hal_collectives_v1, 48);
HAL_ABI_PIN_SIZE(hal_collectives_engine_v1, 32);
HAL_ABI_PIN_SIZE(hal_collectives_v2, 64);
HAL_ABI_PIN_SIZE(hal_native_device_v1, 16);
HAL_ABI_PIN_SIZE(hal_external_memory_v1, 48);
HAL_ABI_PIN_SIZE(hal_interop_v1, 48);
HAL_ABI_PIN_SIZE(hal_telemetry_reading_v1, 32);
HAL_ABI_PIN_SIZE(hal_telemetry_snapshot_v1, 1232);
HAL_ABI_PIN_SIZE(hal_health_event_v1, 32);
HAL_ABI_PIN_SIZE(hal_telemetry_v1, 40);
HAL_ABI_PIN_SIZE(hal_memory_test_element_v1, 48);
HAL_ABI_PIN_SIZE(hal_memory_test_failure_v1, 24);
HAL_ABI_PIN_SIZE(hal_memory_test_report_v1, 8);
HAL_ABI_PIN_SIZE(hal_memory_test_v1, 16);
HAL_ABI_PIN_SIZE(hal_device_link_v1, 48);
HAL_ABI_PIN_SIZE(hal_topology_v1, 16);
#undef HAL_ABI_PIN_SIZE
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_BACKEND_ABI_H */
