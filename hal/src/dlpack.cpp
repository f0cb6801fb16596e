// DLPack: tensors in and out of hal without a copy.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hal/interop.hpp"

namespace hal {
namespace {

using namespace dlpack;

std::string name_of(const DLDevice& device) {
  auto type = [&]() -> std::string {
    switch (device.device_type) {
      case kDLCPU: return "kDLCPU";
      case kDLCUDA: return "kDLCUDA";
      case kDLCUDAHost: return "kDLCUDAHost";
      case kDLCUDAManaged: return "kDLCUDAManaged";
      case kDLROCM: return "kDLROCM";
      case kDLROCMHost: return "kDLROCMHost";
      default: return "device type " + std::to_string(static_cast<int>(device.device_type));
    }
  };
  return "{" + type() + ", " + std::to_string(device.device_id) + "}";
}

// A DLPack device type: the type the backend reports for its device, and
// the kind of that device's memory it stands for. Read both ways: import
// and export.
struct DevicePlace {
  DLDeviceType dlpack;
  DLDeviceType backend;
  MemoryKind kind;
};
constexpr DevicePlace device_places[] = {
    {kDLCPU, kDLCPU, MemoryKind::device},           {kDLCUDA, kDLCUDA, MemoryKind::device},
    {kDLCUDAHost, kDLCUDA, MemoryKind::host_pinned}, {kDLCUDAManaged, kDLCUDA, MemoryKind::managed},
    {kDLROCM, kDLROCM, MemoryKind::device},          {kDLROCMHost, kDLROCM, MemoryKind::host_pinned},
};

const DevicePlace* place_of(DLDeviceType type) {
  for (const DevicePlace& place : device_places)
    if (place.dlpack == type) return &place;
  return nullptr;
}

// The DLPack type of `kind` memory on a device the backend reports as
// `backend` (host memory of every kind is kDLCPU).
DLDeviceType dlpack_type_of(DLDeviceType backend, MemoryKind kind) {
  for (const DevicePlace& place : device_places)
    if (place.backend == backend && place.kind == kind) return place.dlpack;
  return backend;
}

std::optional<NativeDevice> native_name(const Device& device) {
  try {
    return native_device(device);
  } catch (const Error&) {
    return std::nullopt;  // a backend without interop names no DLPack device
  }
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(StatusCode::invalid_argument, "from_dlpack: " + message);
}

// The DLTensor as a hal Tensor, importing its memory with `deleter` as the
// release. Throws without having called the deleter.
Tensor import_tensor(const Runtime& runtime, const DLTensor& source, std::function<void()> deleter, bool read_only) {
  Tensor tensor;
  tensor.dtype = from_dlpack(source.dtype);
  tensor.read_only = read_only;
  if (source.ndim < 0) invalid("ndim is " + std::to_string(source.ndim) + "; it must be 0 or more");
  if (source.ndim > 0 && source.shape == nullptr) invalid("shape is NULL for a tensor of " + std::to_string(source.ndim) + " dimensions");
  tensor.shape.assign(source.shape, source.shape + source.ndim);
  for (int axis = 0; axis < source.ndim; ++axis)
    if (tensor.shape[axis] < 0)
      invalid("shape[" + std::to_string(axis) + "] is " + std::to_string(tensor.shape[axis]) + "; extents are >= 0");
  if (source.strides != nullptr) {
    tensor.strides.assign(source.strides, source.strides + source.ndim);
    for (int axis = 0; axis < source.ndim; ++axis)
      if (tensor.strides[axis] < 0)
        invalid("strides[" + std::to_string(axis) + "] is " + std::to_string(tensor.strides[axis]) +
                "; hal takes tensors with non-negative strides (make it contiguous first)");
  }
  const std::uint64_t elements = tensor.element_count();
  const std::uint64_t span = tensor.span_bytes();  // throws when it overflows
  if (source.data == nullptr && elements != 0)
    invalid("the data pointer is NULL for a tensor of " + std::to_string(elements) + " elements");
  const Device device = find_device(runtime, source.device);  // throws for a type with no place
  std::uint64_t bytes = 0;
  if (elements != 0 && __builtin_add_overflow(source.byte_offset, span, &bytes))
    invalid("byte_offset " + std::to_string(source.byte_offset) + " plus the tensor's span overflows 64 bits");
  ExternalMemory memory;
  memory.address = source.data;
  memory.size = bytes;
  memory.kind = place_of(source.device.device_type)->kind;
  memory.release = std::move(deleter);
  tensor.buffer = device.import_memory(memory);
  tensor.byte_offset = elements != 0 ? source.byte_offset : 0;
  return tensor;
}

template <typename Managed>
Tensor import_managed(const Runtime& runtime, Managed* managed, bool read_only) {
  auto deleter = [managed] {
    if (managed->deleter != nullptr) managed->deleter(managed);
  };
  try {
    return import_tensor(runtime, managed->dl_tensor, deleter, read_only);
  } catch (...) {
    deleter();  // hal took ownership: nothing leaks when it refuses
    throw;
  }
}

// What an exported managed tensor owns: the Buffer and the arrays its DLTensor points at.
template <typename Managed>
struct Exported {
  Buffer buffer;
  std::vector<std::int64_t> shape, strides;
  Managed managed{};
  static void deleter(Managed* self) { delete static_cast<Exported*>(self->manager_ctx); }
};

template <typename Managed>
Managed* export_tensor(const Tensor& tensor) {
  if (!tensor.buffer.valid()) throw Error(StatusCode::invalid_argument, "to_dlpack: the tensor's buffer is empty or freed");
  const std::uint64_t span = tensor.span_bytes();
  if (span != 0 && (tensor.byte_offset > tensor.buffer.size() || span > tensor.buffer.size() - tensor.byte_offset))
    throw Error(StatusCode::invalid_argument, "to_dlpack: the tensor reaches " + std::to_string(tensor.byte_offset + span) +
                                                  " bytes into a buffer of " + std::to_string(tensor.buffer.size()));
  const Device device = tensor.buffer.device();
  const NativeDevice native = native_device(device);
  const MemoryKind kind = tensor.buffer.kind();
  const DLDevice dl_device{dlpack_type_of(native.type, kind), native.ordinal};
  void* data = kind == MemoryKind::host_pinned ? tensor.buffer.host_address() : tensor.buffer.device_address();

  auto exported = std::make_unique<Exported<Managed>>();
  exported->buffer = tensor.buffer;
  exported->shape = tensor.shape;
  exported->strides = tensor.effective_strides();
  DLTensor& out = exported->managed.dl_tensor;
  out.data = data;
  out.device = dl_device;
  out.ndim = static_cast<std::int32_t>(tensor.shape.size());
  out.dtype = to_dlpack(tensor.dtype);
  out.shape = exported->shape.data();
  out.strides = exported->strides.data();
  out.byte_offset = tensor.byte_offset;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = &Exported<Managed>::deleter;
  if constexpr (requires { exported->managed.version; }) {
    exported->managed.version = {major_version, minor_version};
    exported->managed.flags = tensor.read_only ? flag_read_only : 0;
  }
  return &exported.release()->managed;
}

}  // namespace

DLDataType to_dlpack(DType dtype) {
  const auto bits = static_cast<std::uint8_t>(8 * size_in_bytes(dtype));
  switch (dtype) {
    case DType::f32: case DType::f16: case DType::f64: return {kDLFloat, bits, 1};
    case DType::bf16: return {kDLBfloat, bits, 1};
    case DType::i8: case DType::i32: case DType::i64: return {kDLInt, bits, 1};
    case DType::u8: return {kDLUInt, bits, 1};
  }
  return {kDLOpaqueHandle, 0, 1};
}

DType from_dlpack(const DLDataType& dtype) {
  if (dtype.lanes != 1)
    throw Error(StatusCode::invalid_argument, "DLPack dtype with " + std::to_string(dtype.lanes) +
                                                  " lanes is not supported; hal takes scalar elements (lanes 1)");
  for (const DType candidate : all_dtypes) {
    const DLDataType known = to_dlpack(candidate);
    if (known.code == dtype.code && known.bits == dtype.bits) return candidate;
  }
  throw Error(StatusCode::invalid_argument,
              "DLPack dtype code " + std::to_string(dtype.code) + " with " + std::to_string(dtype.bits) +
                  " bits has no hal::DType; hal takes float 16/32/64, bfloat 16, int 8/32/64 and uint 8");
}

std::uint64_t Tensor::element_count() const {
  std::uint64_t count = 1;
  for (const std::int64_t extent : shape)
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(extent), &count))
      throw Error(StatusCode::invalid_argument, "the tensor's element count overflows 64 bits");
  return count;
}

std::vector<std::int64_t> Tensor::effective_strides() const {
  if (!strides.empty()) return strides;
  std::vector<std::int64_t> compact(shape.size());
  std::int64_t stride = 1;
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    compact[axis] = stride;
    stride *= shape[axis] > 0 ? shape[axis] : 1;
  }
  return compact;
}

std::uint64_t Tensor::span_bytes() const {
  if (!strides.empty() && strides.size() != shape.size())
    throw Error(StatusCode::invalid_argument, "the tensor has " + std::to_string(shape.size()) + " axes but " +
                                                  std::to_string(strides.size()) + " strides");
  if (element_count() == 0) return 0;
  const std::vector<std::int64_t> in_effect = effective_strides();
  std::uint64_t last = 0;  // element index of the farthest element
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    std::uint64_t reach = 0;
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(shape[axis] - 1), static_cast<std::uint64_t>(in_effect[axis]),
                               &reach) ||
        __builtin_add_overflow(last, reach, &last))
      throw Error(StatusCode::invalid_argument, "the tensor's strides reach past 64-bit byte offsets");
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, static_cast<std::uint64_t>(size_in_bytes(dtype)), &bytes))
    throw Error(StatusCode::invalid_argument, "the tensor's strides reach past 64-bit byte offsets");
  return bytes;
}

Device find_device(const Runtime& runtime, const DLDevice& device) {
  const DevicePlace* place = place_of(device.device_type);
  if (place == nullptr)
    throw Error(StatusCode::unsupported, "DLPack device " + name_of(device) +
                                             " is of a type hal has no backend for; hal takes kDLCPU, kDLCUDA, "
                                             "kDLCUDAHost, kDLCUDAManaged, kDLROCM and kDLROCMHost");
  std::string loaded;
  for (const Device& candidate : runtime.devices()) {
    const std::optional<NativeDevice> native = native_name(candidate);
    if (!native) continue;
    const DLDevice name{native->type, native->ordinal};
    loaded += (loaded.empty() ? "" : ", ") + candidate.id() + " " + name_of(name);
    if (native->type == place->backend && (place->backend == kDLCPU || native->ordinal == device.device_id))
      return candidate;
  }
  throw Error(StatusCode::not_present, "DLPack device " + name_of(device) + " is not a device hal has loaded (hal has " +
                                           (loaded.empty() ? std::string("none with interop") : loaded) +
                                           "); check HAL_BACKENDS and that the backend for it is loaded (halinfo)");
}

Tensor from_dlpack(const Runtime& runtime, DLManagedTensorVersioned* tensor) {
  if (tensor == nullptr) invalid("the managed tensor is NULL");
  if (tensor->version.major != major_version) {
    // The layout past version and deleter is unknown; only the deleter may be used.
    const std::uint32_t major = tensor->version.major;
    if (tensor->deleter != nullptr) tensor->deleter(tensor);
    invalid("DLPack major version " + std::to_string(major) + " is not one hal understands (it takes " +
            std::to_string(major_version) + ".x); the tensor was released");
  }
  return import_managed(runtime, tensor, (tensor->flags & flag_read_only) != 0);
}

Tensor from_dlpack(const Runtime& runtime, DLManagedTensor* tensor) {
  if (tensor == nullptr) invalid("the managed tensor is NULL");
  return import_managed(runtime, tensor, false);
}

DLManagedTensorVersioned* to_dlpack(const Tensor& tensor) { return export_tensor<DLManagedTensorVersioned>(tensor); }
DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor) { return export_tensor<DLManagedTensor>(tensor); }

}  // namespace hal
