// The DLPack 1.x exchange ABI (dmlc/dlpack, the array-API standard's
// __dlpack__), defined by hal from the public specification so that no
// third-party header is needed. The layouts are the C ones, pinned below;
// the names live in hal::dlpack so they never clash with a dlpack.h that a
// program also includes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hal::dlpack {

// The version of the ABI hal produces; it understands every minor version of major 1.
inline constexpr std::uint32_t major_version = 1;
inline constexpr std::uint32_t minor_version = 1;

struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};

enum DLDeviceType : std::int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,  // page-locked host memory of the CUDA driver
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
};

struct DLDevice {
  DLDeviceType device_type;
  std::int32_t device_id;  // the vendor's ordinal: cuda:N is {kDLCUDA, N}
};

enum DLDataTypeCode : std::uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DLDataType {
  std::uint8_t code;   // a DLDataTypeCode
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // elements; NULL: compact row-major
  std::uint64_t byte_offset;
};

// The pre-1.0 form, still what many producers hand out ("dltensor" capsules).
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

inline constexpr std::uint64_t flag_read_only = 1u << 0;
inline constexpr std::uint64_t flag_is_copied = 1u << 1;
inline constexpr std::uint64_t flag_is_subbyte_type_padded = 1u << 2;

// The 1.x form ("dltensor_versioned" capsules).
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};

#if defined(__LP64__) || defined(_WIN64)
static_assert(sizeof(DLPackVersion) == 8);
static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4);
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, device) == 8 && offsetof(DLTensor, ndim) == 16 &&
              offsetof(DLTensor, dtype) == 20 && offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, strides) == 32 &&
              offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLManagedTensor) == 64 && offsetof(DLManagedTensor, manager_ctx) == 48 &&
              offsetof(DLManagedTensor, deleter) == 56);
static_assert(sizeof(DLManagedTensorVersioned) == 80 && offsetof(DLManagedTensorVersioned, manager_ctx) == 8 &&
              offsetof(DLManagedTensorVersioned, deleter) == 16 && offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);
#endif

}  // namespace hal::dlpack
