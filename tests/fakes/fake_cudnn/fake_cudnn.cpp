// A test double of cuDNN 9's graph API: handles and backend descriptors that
// record nothing but a variant pack's data pointers, and an operation graph that never finalizes, failing with
// CUDNN_STATUS_NOT_SUPPORTED and a message from cudnnGetLastErrorString as a
// cuDNN without a matching engine does. See README.md.
#include <dlfcn.h>
#include <cudnn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string last_error;

struct FakeHandle {
  cudaStream_t stream = nullptr;
};

struct FakeDescriptor {
  cudnnBackendDescriptorType_t type;
  std::vector<std::uintptr_t> data_pointers;  // a variant pack's, as set
};

const char* environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

// HAL_FAKE_CUDNN_VERSION: "9.11.0" (default 9.19.0), in cuDNN 9's encoding.
FAKE_EXPORT size_t cudnnGetVersion() {
  const std::string text = environment("HAL_FAKE_CUDNN_VERSION", "9.19.0");
  unsigned major = 0, minor = 0, patch = 0;
  if (std::sscanf(text.c_str(), "%u.%u.%u", &major, &minor, &patch) < 2) return 91900;
  return major * 10000 + minor * 100 + patch;
}

FAKE_EXPORT size_t cudnnGetCudartVersion() { return 13000; }

FAKE_EXPORT const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

// As cuDNN 9: the message of the last failed call on this thread, then cleared.
FAKE_EXPORT void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  std::strncpy(message, last_error.c_str(), max_size - 1);
  message[max_size - 1] = '\0';
  last_error.clear();
}

// Whether the calling thread has a CUDA context current, asked of the driver
// loaded in this process: cuDNN works on the current context.
bool context_current() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  using GetCurrent = int (*)(void**);
  auto get_current = reinterpret_cast<GetCurrent>(dlsym(driver, "cuCtxGetCurrent"));
  void* context = nullptr;
  const bool current = get_current != nullptr && get_current(&context) == 0 && context != nullptr;
  dlclose(driver);
  return current;
}

// HAL_FAKE_CUDNN_CREATE_FAIL=1: fails as on a device out of memory, for as long as it is set.
FAKE_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (std::string(environment("HAL_FAKE_CUDNN_CREATE_FAIL", "")) == "1") {
    last_error = "cudnnCreate: the fake cuDNN is out of device memory (HAL_FAKE_CUDNN_CREATE_FAIL)";
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  if (!context_current()) {
    last_error = "cudnnCreate: no CUDA context is current on this thread";
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
  *handle = reinterpret_cast<cudnnHandle_t>(new FakeHandle());
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete reinterpret_cast<FakeHandle*>(handle);
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  reinterpret_cast<FakeHandle*>(handle)->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = reinterpret_cast<FakeHandle*>(handle)->stream;
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                       cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *descriptor = reinterpret_cast<cudnnBackendDescriptor_t>(new FakeDescriptor{type, {}});
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  delete reinterpret_cast<FakeDescriptor*>(descriptor);
  return CUDNN_STATUS_SUCCESS;
}

// Records a variant pack's data pointers; every other attribute is taken and forgotten.
FAKE_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  auto* fake = reinterpret_cast<FakeDescriptor*>(descriptor);
  if (fake->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR && name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) {
    if (type != CUDNN_TYPE_VOID_PTR || count < 0 || (count > 0 && values == nullptr)) return CUDNN_STATUS_BAD_PARAM;
    const auto* pointers = static_cast<void* const*>(values);
    fake->data_pointers.clear();
    for (int64_t i = 0; i < count; ++i) fake->data_pointers.push_back(reinterpret_cast<std::uintptr_t>(pointers[i]));
  }
  return CUDNN_STATUS_SUCCESS;
}

FAKE_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t,
                                                   cudnnBackendAttributeType_t, int64_t, int64_t* count, void*) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (count != nullptr) *count = 0;
  return CUDNN_STATUS_SUCCESS;
}

// The operation graph is where a real cuDNN first says it has no engine for a graph.
// HAL_FAKE_CUDNN_REJECT: the message it gives (a default otherwise).
FAKE_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (reinterpret_cast<FakeDescriptor*>(descriptor)->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    return CUDNN_STATUS_SUCCESS;
  // Finding engines for a graph works on the device of the current context.
  if (!context_current()) {
    last_error = "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: no CUDA context is current on this thread";
    return CUDNN_STATUS_INTERNAL_ERROR;
  }
  last_error = environment("HAL_FAKE_CUDNN_REJECT",
                           "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: the fake cuDNN has no engine for any graph");
  return CUDNN_STATUS_NOT_SUPPORTED;
}

// As cuDNN: every tensor of the variant pack must be 16-byte aligned. Past
// that check the fake computes nothing, and says so.
FAKE_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                              cudnnBackendDescriptor_t variant_pack) {
  if (handle == nullptr || plan == nullptr || variant_pack == nullptr) return CUDNN_STATUS_BAD_PARAM;
  for (std::uintptr_t pointer : reinterpret_cast<FakeDescriptor*>(variant_pack)->data_pointers) {
    if (pointer % 16 != 0) {
      char message[160];
      std::snprintf(message, sizeof(message),
                    "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: data pointer 0x%llx is not 16-byte aligned",
                    static_cast<unsigned long long>(pointer));
      last_error = message;
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  last_error = "the fake cuDNN executes nothing";
  return CUDNN_STATUS_NOT_SUPPORTED;
}
