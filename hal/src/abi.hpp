// Internal: the bridge between the C++ API's enums and the plugin ABI's
// codes. The public headers never include backend_abi.h; the values agree
// by construction and these asserts keep them so.
#pragma once

#include "hal/attention.hpp"
#include "hal/backend_abi.h"
#include "hal/collectives.hpp"
#include "hal/device.hpp"
#include "hal/dtype.hpp"
#include "hal/status.hpp"
#include "hal/telemetry.hpp"

namespace hal::detail {

template <typename Cpp, typename C>
constexpr bool same_code(Cpp cpp, C c) {
  return static_cast<long long>(cpp) == static_cast<long long>(c);
}

static_assert(same_code(StatusCode::ok, HAL_OK) && same_code(StatusCode::invalid_argument, HAL_ERROR_INVALID_ARGUMENT) &&
              same_code(StatusCode::unsupported, HAL_ERROR_UNSUPPORTED) &&
              same_code(StatusCode::not_present, HAL_ERROR_NOT_PRESENT) &&
              same_code(StatusCode::out_of_memory, HAL_ERROR_OUT_OF_MEMORY) &&
              same_code(StatusCode::timeout, HAL_ERROR_TIMEOUT) &&
              same_code(StatusCode::device_lost, HAL_ERROR_DEVICE_LOST) &&
              same_code(StatusCode::aborted, HAL_ERROR_ABORTED) && same_code(StatusCode::internal, HAL_ERROR_INTERNAL));
static_assert(same_code(DType::f32, HAL_DTYPE_F32) && same_code(DType::f16, HAL_DTYPE_F16) &&
              same_code(DType::bf16, HAL_DTYPE_BF16) && same_code(DType::f64, HAL_DTYPE_F64) &&
              same_code(DType::i8, HAL_DTYPE_I8) && same_code(DType::u8, HAL_DTYPE_U8) &&
              same_code(DType::i32, HAL_DTYPE_I32) && same_code(DType::i64, HAL_DTYPE_I64));
static_assert(same_code(DeviceType::cpu, HAL_DEVICE_TYPE_CPU) && same_code(DeviceType::gpu, HAL_DEVICE_TYPE_GPU) &&
              same_code(DeviceType::accelerator, HAL_DEVICE_TYPE_ACCELERATOR));
static_assert(same_code(MemoryKind::device, HAL_MEMORY_DEVICE) &&
              same_code(MemoryKind::host_pinned, HAL_MEMORY_HOST_PINNED) &&
              same_code(MemoryKind::managed, HAL_MEMORY_MANAGED));
static_assert(same_code(AttentionImplementation::fused, HAL_ATTENTION_FUSED) &&
              same_code(AttentionImplementation::flash, HAL_ATTENTION_FLASH) &&
              same_code(AttentionImplementation::math, HAL_ATTENTION_MATH));
static_assert(same_code(MaskAlignment::top_left, HAL_MASK_TOP_LEFT) &&
              same_code(MaskAlignment::bottom_right, HAL_MASK_BOTTOM_RIGHT));
static_assert(same_code(ReduceOp::sum, HAL_REDUCE_SUM) && same_code(ReduceOp::prod, HAL_REDUCE_PROD) &&
              same_code(ReduceOp::min, HAL_REDUCE_MIN) && same_code(ReduceOp::max, HAL_REDUCE_MAX) &&
              same_code(ReduceOp::avg, HAL_REDUCE_AVG));

static_assert(same_code(Unavailable::not_reported, HAL_TELEMETRY_NOT_REPORTED) &&
              same_code(Unavailable::not_supported, HAL_TELEMETRY_NOT_SUPPORTED) &&
              same_code(Unavailable::needs_root, HAL_TELEMETRY_NEEDS_ROOT) &&
              same_code(Unavailable::library_missing, HAL_TELEMETRY_LIBRARY_MISSING) &&
              same_code(Unavailable::mig_mode, HAL_TELEMETRY_MIG_MODE) &&
              same_code(Unavailable::read_failed, HAL_TELEMETRY_READ_FAILED) &&
              same_code(Unavailable::needs_interval, HAL_TELEMETRY_NEEDS_INTERVAL));
static_assert(same_code(ClockEventReason::idle, HAL_CLOCK_EVENT_IDLE) &&
              same_code(ClockEventReason::power_cap, HAL_CLOCK_EVENT_POWER_CAP) &&
              same_code(ClockEventReason::hardware_slowdown, HAL_CLOCK_EVENT_HARDWARE_SLOWDOWN) &&
              same_code(ClockEventReason::software_thermal, HAL_CLOCK_EVENT_SOFTWARE_THERMAL) &&
              same_code(ClockEventReason::hardware_thermal, HAL_CLOCK_EVENT_HARDWARE_THERMAL) &&
              same_code(ClockEventReason::power_brake, HAL_CLOCK_EVENT_POWER_BRAKE) &&
              same_code(ClockEventReason::sync_boost, HAL_CLOCK_EVENT_SYNC_BOOST) &&
              same_code(ClockEventReason::other, HAL_CLOCK_EVENT_OTHER));
static_assert(same_code(HealthEventKind::xid, HAL_HEALTH_EVENT_XID) &&
              same_code(HealthEventKind::uncorrected_ecc, HAL_HEALTH_EVENT_UNCORRECTED_ECC) &&
              same_code(HealthEventKind::thermal, HAL_HEALTH_EVENT_THERMAL) &&
              same_code(HealthEventKind::power_brake, HAL_HEALTH_EVENT_POWER_BRAKE) &&
              same_code(HealthEventKind::memory_retirement, HAL_HEALTH_EVENT_MEMORY_RETIREMENT));

inline hal_status to_abi(StatusCode code) { return static_cast<hal_status>(code); }
inline hal_dtype to_abi(DType dtype) { return static_cast<hal_dtype>(dtype); }
inline hal_memory_kind to_abi(MemoryKind kind) { return static_cast<hal_memory_kind>(kind); }
inline hal_attention_implementation to_abi(AttentionImplementation implementation) {
  return static_cast<hal_attention_implementation>(implementation);
}
inline hal_mask_alignment to_abi(MaskAlignment alignment) { return static_cast<hal_mask_alignment>(alignment); }
inline hal_reduce_op to_abi(ReduceOp op) { return static_cast<hal_reduce_op>(op); }

inline StatusCode from_abi(hal_status status) { return static_cast<StatusCode>(status); }
inline DType from_abi(hal_dtype dtype) { return static_cast<DType>(dtype); }
inline DeviceType from_abi(hal_device_type type) { return static_cast<DeviceType>(type); }
inline MemoryKind from_abi(hal_memory_kind kind) { return static_cast<MemoryKind>(kind); }

// The ABI form of an attention problem: every default resolved, every stride
// explicit. Throws invalid_argument naming any bad value.
hal_attention_params_v1 to_abi(const AttentionParams& params);

}  // namespace hal::detail
