// A test double of the HIP runtime: the subset of libamdhip64 the ROCm
// backend uses, on host memory and threads. See README.md for the
// environment that shapes it. Built with FAKE_HIP_ROCM5 it has ROCm 5's
// exports (hipGetDeviceProperties, no hipLaunchHostFunc).
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulated_kernels.hpp"
#include "stream_progress.hpp"
#include "stuck_bits.hpp"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Clock = std::chrono::steady_clock;

std::string environment(const char* name, const std::string& fallback = {}) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// The index-th entry of a comma-separated list; the last one for indices past its end.
std::string pick(const std::string& list, std::size_t index) {
  std::vector<std::string> items;
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ',')) items.push_back(item);
  if (items.empty()) return {};
  return items[std::min(index, items.size() - 1)];
}

std::uint64_t parse_size(const std::string& text) {
  char* end = nullptr;
  std::uint64_t value = std::strtoull(text.c_str(), &end, 10);
  switch (end != nullptr ? *end : '\0') {
    case 'K': value <<= 10; break;
    case 'M': value <<= 20; break;
    case 'G': value <<= 30; break;
    default: break;
  }
  return value;
}

struct FakeDevice {
  std::string name, arch, pci_bus_id;
  unsigned char uuid[16] = {};
  std::uint64_t total = 0, used = 0;
  bool managed = true;
};

enum class Kind { device, host, managed };
struct Allocation {
  int device;
  std::size_t size;
  Kind kind;
  bool registered = false;  // host memory page-locked by hipHostRegister, not allocated here
};

class FakeStream;

struct State {
  std::mutex mutex;
  std::vector<FakeDevice> devices;
  std::map<std::uintptr_t, Allocation> allocations;  // by start address
  std::set<FakeStream*> streams;                      // for hipDeviceSynchronize
  int registrations = 0, unregistrations = 0, device_synchronizes = 0;  // for the test hooks
};

State& state() {
  static State* instance = [] {
    auto* created = new State();  // never destroyed: stream threads may outlive static destructors
    const int count = std::atoi(environment("HAL_FAKE_HIP_DEVICES", "1").c_str());
    for (int i = 0; i < count; ++i) {
      const auto index = static_cast<std::size_t>(i);
      FakeDevice device;
      device.name = pick(environment("HAL_FAKE_HIP_NAME", "AMD Instinct MI210"), index);
      device.arch = pick(environment("HAL_FAKE_HIP_ARCH", "gfx90a:sramecc+:xnack-"), index);
      char bus[32];
      std::snprintf(bus, sizeof(bus), "0000:%02X:00.0", 0xc1 + i);
      device.pci_bus_id = pick(environment("HAL_FAKE_HIP_PCI_BUS_ID", bus), index);
      device.total = parse_size(pick(environment("HAL_FAKE_HIP_MEMORY", "64G"), index));
      device.managed = pick(environment("HAL_FAKE_HIP_MANAGED", "1"), index) != "0";
      const std::string uuid = pick(environment("HAL_FAKE_HIP_UUID", ""), index);
      for (int byte = 0; byte < 16; ++byte) {
        unsigned value = 0;
        if (uuid.size() == 32) std::sscanf(uuid.c_str() + 2 * byte, "%2x", &value);
        else value = byte == 0 ? 0xfa : byte == 15 ? static_cast<unsigned>(i) : 0;
        device.uuid[byte] = static_cast<unsigned char>(value);
      }
      created->devices.push_back(device);
    }
    return created;
  }();
  return *instance;
}

// Per thread, as in HIP: device 0 until the thread sets another.
thread_local int current_device = 0;
std::atomic<int> module_loads{0};  // hipModuleLoadData calls, for the test hook

// HAL_FAKE_HIP_FAIL=hipMalloc=2,hipMemsetD8Async=700: the named function returns that error.
hipError_t injected(const char* function) {
  std::stringstream list(environment("HAL_FAKE_HIP_FAIL"));
  std::string entry;
  while (std::getline(list, entry, ',')) {
    const auto equals = entry.find('=');
    if (equals != std::string::npos && entry.compare(0, equals, function) == 0)
      return static_cast<hipError_t>(std::atoi(entry.c_str() + equals + 1));
  }
  return hipSuccess;
}

bool valid_device(int device) { return device >= 0 && static_cast<std::size_t>(device) < state().devices.size(); }

// Whether [address, address + size) lies in one allocation.
bool inside_allocation(const void* address, std::size_t size) {
  std::lock_guard lock(state().mutex);
  const auto start = reinterpret_cast<std::uintptr_t>(address);
  auto found = state().allocations.upper_bound(start);
  if (found == state().allocations.begin()) return false;
  --found;
  return start + size <= found->first + found->second.size;
}

hipError_t allocate(void** out, std::size_t size, Kind kind, const char* function) {
  if (hipError_t error = injected(function); error != hipSuccess) return error;
  if (out == nullptr) return hipErrorInvalidValue;
  if (size == 0) {
    *out = nullptr;
    return hipSuccess;
  }
  State& fake = state();
  std::lock_guard lock(fake.mutex);
  FakeDevice& device = fake.devices[static_cast<std::size_t>(current_device)];
  if (kind != Kind::host && device.used + size > device.total) return hipErrorOutOfMemory;
  const std::size_t alignment = kind == Kind::host ? 4096 : 256;
  void* memory = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (memory == nullptr) return hipErrorOutOfMemory;
  if (kind != Kind::host) device.used += size;
  fake.allocations[reinterpret_cast<std::uintptr_t>(memory)] = {current_device, size, kind};
  *out = memory;
  return hipSuccess;
}

hipError_t release(void* pointer, bool host) {
  if (pointer == nullptr) return hipSuccess;
  State& fake = state();
  std::lock_guard lock(fake.mutex);
  const auto found = fake.allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (found == fake.allocations.end() || (found->second.kind == Kind::host) != host || found->second.registered)
    return hipErrorInvalidValue;
  if (found->second.kind != Kind::host) fake.devices[static_cast<std::size_t>(found->second.device)].used -= found->second.size;
  fake.allocations.erase(found);
  std::free(pointer);
  return hipSuccess;
}

// An in-order queue on its own thread, of one device. The first error of its
// work is sticky, as a device fault is. blocking: ordered with the device's
// null stream (created without hipStreamNonBlocking); null: that stream.
class FakeStream {
 public:
  FakeStream(int device, bool blocking, bool null = false)
      : device_(device), blocking_(blocking), null_(null), worker_([this] { run(); }) {}
  ~FakeStream() {
    (void)synchronize();  // the runtime finishes enqueued work before releasing a stream
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    worker_.join();
  }
  // Host work (callbacks) runs even after a fault, to be told of it.
  // Returns the work's ticket: progress()->wait_for(ticket) waits for it.
  std::uint64_t enqueue(std::function<hipError_t()> work, bool host_work = false) {
    std::uint64_t ticket;
    {
      std::lock_guard lock(mutex_);
      ticket = progress_->enqueue();
      queue_.push_back({std::move(work), host_work});
    }
    changed_.notify_all();
    return ticket;
  }
  hipError_t synchronize() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
    return error_;
  }
  bool idle() {
    std::lock_guard lock(mutex_);
    return queue_.empty() && !busy_;
  }
  hipError_t error() {
    std::lock_guard lock(mutex_);
    return error_;
  }
  int device() const { return device_; }
  bool blocking() const { return blocking_; }
  bool null() const { return null_; }
  const std::shared_ptr<hal_fakes::Progress>& progress() const { return progress_; }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Work work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      const bool skip = error_ != hipSuccess && !work.host;
      lock.unlock();
      const hipError_t result = skip ? hipSuccess : work.run();
      progress_->complete_one();
      lock.lock();
      if (error_ == hipSuccess) error_ = result;
      busy_ = false;
      changed_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Work {
    std::function<hipError_t()> run;
    bool host;
  };
  std::deque<Work> queue_;
  bool busy_ = false, stopping_ = false;
  hipError_t error_ = hipSuccess;
  const int device_;
  const bool blocking_, null_;
  const std::shared_ptr<hal_fakes::Progress> progress_ = std::make_shared<hal_fakes::Progress>();
  std::thread worker_;  // last: starts after the members above exist
};

struct FakeEvent {
  std::mutex mutex;
  std::condition_variable completed_changed;
  std::uint64_t recorded = 0, completed = 0;
  Clock::time_point when;
};

FakeStream* as_stream(hipStream_t stream) { return reinterpret_cast<FakeStream*>(stream); }
FakeEvent* as_event(hipEvent_t event) { return reinterpret_cast<FakeEvent*>(event); }

// A device's null stream: a real queue per device (created on first use,
// never destroyed, like the state).
FakeStream* null_stream(int device) {
  static std::map<int, FakeStream*> streams;  // guarded by state().mutex
  std::lock_guard lock(state().mutex);
  FakeStream*& stream = streams[device];
  if (stream == nullptr) {
    stream = new FakeStream(device, true, true);
    state().streams.insert(stream);
  }
  return stream;
}

// Enqueues with the null stream's implicit ordering, as HIP's legacy default
// stream has it: null-stream work waits for the work already on the device's
// blocking streams, and a blocking stream's work for the work already on the
// null stream; hipStreamNonBlocking streams are ordered with neither.
// Null-stream work then waits HAL_FAKE_HIP_NULL_STREAM_DELAY_MS, so a call
// that returns before its bytes land is seen to.
std::uint64_t enqueue_ordered(FakeStream* stream, std::function<hipError_t()> work, bool host_work = false) {
  hal_fakes::WaitList before;
  if (stream->null()) {
    std::lock_guard lock(state().mutex);
    for (FakeStream* other : state().streams)
      if (other != stream && other->device() == stream->device() && other->blocking())
        before.emplace_back(other->progress(), other->progress()->enqueued_so_far());
  } else if (stream->blocking()) {
    const std::shared_ptr<hal_fakes::Progress>& null = null_stream(stream->device())->progress();
    before.emplace_back(null, null->enqueued_so_far());
  }
  const int delay_ms = stream->null() ? std::atoi(environment("HAL_FAKE_HIP_NULL_STREAM_DELAY_MS", "0").c_str()) : 0;
  if (before.empty() && delay_ms <= 0) return stream->enqueue(std::move(work), host_work);
  return stream->enqueue(hal_fakes::after(std::move(before), delay_ms, std::move(work)), host_work);
}

// When a call without a stream returns: once its work is done (hipMemcpy),
// or at once, before its bytes land (hipMemset*), as on hardware.
enum class NullStreamCall { waits, returns_early };

// Runs work on the stream; without one, on the null stream as `call` says.
// An injected fault fails a call without a stream at once.
hipError_t submit(hipStream_t stream, const char* function, std::function<hipError_t()> work,
                  NullStreamCall call = NullStreamCall::waits) {
  const hipError_t failure = injected(function);
  // HAL_FAKE_HIP_STUCK_BITS (tests/fakes/stuck_bits.hpp): once the work ran, every device allocation's stuck bits
  // hold their values again, whatever it wrote.
  auto checked = [failure, work = std::move(work), bits = hal_fakes::stuck_bits("HAL_FAKE_HIP_STUCK_BITS")] {
    const hipError_t result = failure != hipSuccess ? failure : work();
    if (!bits.empty()) {
      std::lock_guard lock(state().mutex);
      for (const auto& [start, allocation] : state().allocations)
        if (allocation.kind == Kind::device) hal_fakes::force_stuck_bits(bits, reinterpret_cast<void*>(start), allocation.size);
    }
    return result;
  };
  if (stream != nullptr) {
    enqueue_ordered(as_stream(stream), std::move(checked));
    return hipSuccess;
  }
  if (failure != hipSuccess) return failure;
  FakeStream* null = null_stream(current_device);
  if (call == NullStreamCall::waits) {
    // Runs in the null stream's order and returns its own result; a failure
    // of a synchronous call is the caller's, it does not poison the stream.
    auto result = std::make_shared<hipError_t>(hipSuccess);
    const std::uint64_t ticket = enqueue_ordered(
        null,
        [result, checked = std::move(checked)] {
          *result = checked();
          return hipSuccess;
        },
        true);
    null->progress()->wait_for(ticket);
    return *result;
  }
  enqueue_ordered(null, std::move(checked));
  return hipSuccess;
}

// What a memset checks before it is enqueued, so a bad one fails the call.
hipError_t memset_allowed(const void* destination, std::size_t bytes, std::size_t element) {
  if (reinterpret_cast<std::uintptr_t>(destination) % element != 0) return hipErrorInvalidValue;
  return inside_allocation(destination, bytes) ? hipSuccess : hipErrorInvalidValue;
}

template <typename Element>
hipError_t set_elements(void* destination, Element value, std::size_t count) {
  if (reinterpret_cast<std::uintptr_t>(destination) % sizeof(Element) != 0) return hipErrorInvalidValue;
  if (!inside_allocation(destination, count * sizeof(Element))) return hipErrorInvalidValue;
  auto* elements = static_cast<Element*>(destination);
  for (std::size_t i = 0; i < count; ++i) elements[i] = value;
  return hipSuccess;
}

hipError_t copy_bytes(void* destination, const void* source, std::size_t size, hipMemcpyKind kind) {
  const bool device_destination = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
  const bool device_source = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
  if ((device_destination && !inside_allocation(destination, size)) || (device_source && !inside_allocation(source, size)))
    return hipErrorInvalidValue;
  std::memmove(destination, source, size);
  return hipSuccess;
}

}  // namespace

FAKE_EXPORT hipError_t hipInit(unsigned int) { return state().devices.empty() ? hipErrorNoDevice : hipSuccess; }

FAKE_EXPORT hipError_t hipGetDeviceCount(int* count) {
  if (count == nullptr) return hipErrorInvalidValue;
  *count = static_cast<int>(state().devices.size());
  return *count == 0 ? hipErrorNoDevice : hipSuccess;
}

#ifdef FAKE_HIP_ROCM5
constexpr int fake_version = 50221153;
#else
constexpr int fake_version = 60241134;
#endif
FAKE_EXPORT hipError_t hipDriverGetVersion(int* version) {
  if (version == nullptr) return hipErrorInvalidValue;
  *version = fake_version;
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipRuntimeGetVersion(int* version) { return hipDriverGetVersion(version); }

FAKE_EXPORT const char* hipGetErrorName(hipError_t error) {
  switch (error) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorIllegalAddress: return "hipErrorIllegalAddress";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    case hipErrorNotFound: return "hipErrorNotFound";
    default: return "hipErrorUnknown";
  }
}

FAKE_EXPORT const char* hipGetErrorString(hipError_t error) {
  switch (error) {
    case hipSuccess: return "no error";
    case hipErrorOutOfMemory: return "out of memory";
    case hipErrorNoDevice: return "no ROCm-capable device is detected";
    case hipErrorNoBinaryForGpu: return "no kernel image is available for execution on the device";
    case hipErrorIllegalAddress: return "an illegal memory access was encountered";
    case hipErrorLaunchFailure: return "unspecified launch failure";
    case hipErrorNotSupported: return "operation not supported";
    case hipErrorNotFound: return "named symbol not found";
    default: return "unknown error";
  }
}

FAKE_EXPORT hipError_t hipSetDevice(int device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  current_device = device;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipGetDevice(int* device) {
  if (device == nullptr) return hipErrorInvalidValue;
  *device = current_device;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceGetName(char* name, int length, hipDevice_t device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (name == nullptr || length <= 0) return hipErrorInvalidValue;
  std::snprintf(name, static_cast<std::size_t>(length), "%s", state().devices[static_cast<std::size_t>(device)].name.c_str());
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (bus_id == nullptr || length <= 0) return hipErrorInvalidValue;
  std::snprintf(bus_id, static_cast<std::size_t>(length), "%s",
                state().devices[static_cast<std::size_t>(device)].pci_bus_id.c_str());
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceTotalMem(std::size_t* bytes, hipDevice_t device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (bytes == nullptr) return hipErrorInvalidValue;
  *bytes = state().devices[static_cast<std::size_t>(device)].total;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceGetUuid(hipUUID* uuid, hipDevice_t device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (uuid == nullptr) return hipErrorInvalidValue;
  std::memcpy(uuid->bytes, state().devices[static_cast<std::size_t>(device)].uuid, 16);
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int device) {
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (value == nullptr) return hipErrorInvalidValue;
  const FakeDevice& fake = state().devices[static_cast<std::size_t>(device)];
  switch (attribute) {
    case hipDeviceAttributeMultiprocessorCount: *value = 104; break;
    case hipDeviceAttributeClockRate: *value = 1700000; break;
    case hipDeviceAttributeMemoryClockRate: *value = 1600000; break;
    case hipDeviceAttributeManagedMemory: *value = fake.managed ? 1 : 0; break;
    // Concurrent access to managed memory needs xnack on.
    case hipDeviceAttributeConcurrentManagedAccess: *value = fake.arch.find("xnack+") != std::string::npos; break;
    case hipDeviceAttributeCanMapHostMemory: *value = 1; break;
    case hipDeviceAttributeWarpSize: *value = fake.arch.rfind("gfx1", 0) == 0 ? 32 : 64; break;
    case hipDeviceAttributeL2CacheSize: *value = 8 << 20; break;
    case hipDeviceAttributeMemoryBusWidth: *value = 4096; break;
    case hipDeviceAttributeMaxSharedMemoryPerBlock: *value = 64 * 1024; break;
    default: return hipErrorInvalidValue;
  }
  return hipSuccess;
}

// ROCm 6 exports the ROCm 5 layout under this name; ROCm 5 under the plain one.
#ifdef FAKE_HIP_ROCM5
FAKE_EXPORT hipError_t hipGetDeviceProperties(hipDeviceProp_t* properties, int device) {
#else
FAKE_EXPORT hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t* properties, int device) {
#endif
  if (!valid_device(device)) return hipErrorInvalidDevice;
  if (properties == nullptr) return hipErrorInvalidValue;
  const FakeDevice& fake = state().devices[static_cast<std::size_t>(device)];
  std::memset(properties, 0, sizeof(*properties));
  std::snprintf(properties->name, sizeof(properties->name), "%s", fake.name.c_str());
  std::snprintf(properties->gcnArchName, sizeof(properties->gcnArchName), "%s", fake.arch.c_str());
  properties->totalGlobalMem = fake.total;
  properties->multiProcessorCount = 104;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (!valid_device(device) || !valid_device(peer)) return hipErrorInvalidDevice;
  if (can_access == nullptr) return hipErrorInvalidValue;
  *can_access = device != peer;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipMemGetInfo(std::size_t* free, std::size_t* total) {
  if (free == nullptr || total == nullptr) return hipErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  const FakeDevice& device = state().devices[static_cast<std::size_t>(current_device)];
  *free = device.total - device.used;
  *total = device.total;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipMalloc(void** pointer, std::size_t size) { return allocate(pointer, size, Kind::device, "hipMalloc"); }
FAKE_EXPORT hipError_t hipMallocManaged(void** pointer, std::size_t size, unsigned int) {
  if (!state().devices[static_cast<std::size_t>(current_device)].managed) return hipErrorNotSupported;
  return allocate(pointer, size, Kind::managed, "hipMallocManaged");
}
FAKE_EXPORT hipError_t hipHostMalloc(void** pointer, std::size_t size, unsigned int) {
  return allocate(pointer, size, Kind::host, "hipHostMalloc");
}
FAKE_EXPORT hipError_t hipFree(void* pointer) { return release(pointer, false); }
FAKE_EXPORT hipError_t hipHostFree(void* pointer) { return release(pointer, true); }
FAKE_EXPORT hipError_t hipHostGetDevicePointer(void** device_pointer, void* host_pointer, unsigned int) {
  if (device_pointer == nullptr || !inside_allocation(host_pointer, 1)) return hipErrorInvalidValue;
  *device_pointer = host_pointer;  // one address space, as with large BAR / unified addressing
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipMemcpy(void* destination, const void* source, std::size_t size, hipMemcpyKind kind) {
  return submit(nullptr, "hipMemcpy", [=] { return copy_bytes(destination, source, size, kind); });
}
FAKE_EXPORT hipError_t hipMemcpyAsync(void* destination, const void* source, std::size_t size, hipMemcpyKind kind,
                                      hipStream_t stream) {
  return submit(stream, "hipMemcpyAsync", [=] { return copy_bytes(destination, source, size, kind); });
}

FAKE_EXPORT hipError_t hipMemsetD8(hipDeviceptr_t destination, unsigned char value, std::size_t count) {
  if (hipError_t error = memset_allowed(destination, count * sizeof(value), sizeof(value)); error != hipSuccess)
    return error;
  return submit(nullptr, "hipMemsetD8", [=] { return set_elements(destination, value, count); },
                NullStreamCall::returns_early);
}
FAKE_EXPORT hipError_t hipMemsetD16(hipDeviceptr_t destination, unsigned short value, std::size_t count) {
  if (hipError_t error = memset_allowed(destination, count * sizeof(value), sizeof(value)); error != hipSuccess)
    return error;
  return submit(nullptr, "hipMemsetD16", [=] { return set_elements(destination, value, count); },
                NullStreamCall::returns_early);
}
FAKE_EXPORT hipError_t hipMemsetD32(hipDeviceptr_t destination, int value, std::size_t count) {
  if (hipError_t error = memset_allowed(destination, count * sizeof(value), sizeof(value)); error != hipSuccess)
    return error;
  return submit(nullptr, "hipMemsetD32", [=] { return set_elements(destination, value, count); },
                NullStreamCall::returns_early);
}
FAKE_EXPORT hipError_t hipMemsetD8Async(hipDeviceptr_t destination, unsigned char value, std::size_t count,
                                        hipStream_t stream) {
  return submit(stream, "hipMemsetD8Async", [=] { return set_elements(destination, value, count); });
}
FAKE_EXPORT hipError_t hipMemsetD16Async(hipDeviceptr_t destination, unsigned short value, std::size_t count,
                                         hipStream_t stream) {
  return submit(stream, "hipMemsetD16Async", [=] { return set_elements(destination, value, count); });
}
FAKE_EXPORT hipError_t hipMemsetD32Async(hipDeviceptr_t destination, int value, std::size_t count, hipStream_t stream) {
  return submit(stream, "hipMemsetD32Async", [=] { return set_elements(destination, value, count); });
}

FAKE_EXPORT hipError_t hipStreamCreateWithFlags(hipStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~static_cast<unsigned>(hipStreamNonBlocking)) != 0) return hipErrorInvalidValue;
  if (hipError_t error = injected("hipStreamCreateWithFlags"); error != hipSuccess) return error;
  auto* created = new FakeStream(current_device, (flags & hipStreamNonBlocking) == 0);
  {
    std::lock_guard lock(state().mutex);
    state().streams.insert(created);
  }
  *stream = reinterpret_cast<hipStream_t>(created);
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipStreamDestroy(hipStream_t stream) {
  if (stream == nullptr) return hipErrorInvalidHandle;
  {
    std::lock_guard lock(state().mutex);
    state().streams.erase(as_stream(stream));
  }
  delete as_stream(stream);
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipStreamSynchronize(hipStream_t stream) {
  return (stream == nullptr ? null_stream(current_device) : as_stream(stream))->synchronize();
}
FAKE_EXPORT hipError_t hipStreamQuery(hipStream_t stream) {
  if (stream == nullptr) stream = reinterpret_cast<hipStream_t>(null_stream(current_device));
  if (!as_stream(stream)->idle()) return hipErrorNotReady;
  return as_stream(stream)->error();
}

FAKE_EXPORT hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void* user_data,
                                            unsigned int flags) {
  if (callback == nullptr || flags != 0) return hipErrorInvalidValue;
  if (stream == nullptr) return hipErrorInvalidHandle;
  FakeStream* fake = as_stream(stream);
  enqueue_ordered(
      fake,
      [=] {
        callback(stream, fake->error(), user_data);
        return hipSuccess;
      },
      true);
  return hipSuccess;
}

#ifndef FAKE_HIP_ROCM5
FAKE_EXPORT hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t function, void* user_data) {
  if (function == nullptr) return hipErrorInvalidValue;
  if (stream == nullptr) return hipErrorInvalidHandle;
  enqueue_ordered(
      as_stream(stream),
      [=] {
        function(user_data);
        return hipSuccess;
      },
      true);
  return hipSuccess;
}
#endif

FAKE_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int) {
  if (event == nullptr) return hipErrorInvalidValue;
  *event = reinterpret_cast<hipEvent_t>(new FakeEvent());
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipEventDestroy(hipEvent_t event) {
  if (event == nullptr) return hipErrorInvalidHandle;
  FakeEvent* fake = as_event(event);
  {  // a record still pending completes first
    std::unique_lock lock(fake->mutex);
    fake->completed_changed.wait(lock, [&] { return fake->completed >= fake->recorded; });
  }
  delete fake;
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  if (event == nullptr || stream == nullptr) return hipErrorInvalidHandle;
  FakeEvent* fake = as_event(event);
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(fake->mutex);
    generation = ++fake->recorded;
  }
  enqueue_ordered(as_stream(stream), [fake, generation] {
    {
      std::lock_guard lock(fake->mutex);
      fake->completed = generation;
      fake->when = Clock::now();
    }
    fake->completed_changed.notify_all();
    return hipSuccess;
  });
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipEventQuery(hipEvent_t event) {
  if (event == nullptr) return hipErrorInvalidHandle;
  std::lock_guard lock(as_event(event)->mutex);
  return as_event(event)->completed >= as_event(event)->recorded ? hipSuccess : hipErrorNotReady;
}
FAKE_EXPORT hipError_t hipEventSynchronize(hipEvent_t event) {
  if (event == nullptr) return hipErrorInvalidHandle;
  FakeEvent* fake = as_event(event);
  std::unique_lock lock(fake->mutex);
  fake->completed_changed.wait(lock, [&] { return fake->completed >= fake->recorded; });
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipEventElapsedTime(float* milliseconds, hipEvent_t start, hipEvent_t stop) {
  if (milliseconds == nullptr || start == nullptr || stop == nullptr) return hipErrorInvalidHandle;
  Clock::time_point times[2];
  for (int i = 0; i < 2; ++i) {
    FakeEvent* fake = as_event(i == 0 ? start : stop);
    std::lock_guard lock(fake->mutex);
    if (fake->recorded == 0) return hipErrorInvalidHandle;
    if (fake->completed < fake->recorded) return hipErrorNotReady;
    times[i] = fake->when;
  }
  *milliseconds = std::chrono::duration<float, std::milli>(times[1] - times[0]).count();
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int) {
  if (stream == nullptr || event == nullptr) return hipErrorInvalidHandle;
  FakeEvent* fake = as_event(event);
  std::uint64_t target = 0;
  {
    std::lock_guard lock(fake->mutex);
    target = fake->recorded;
  }
  enqueue_ordered(as_stream(stream), [fake, target] {
    std::unique_lock lock(fake->mutex);
    fake->completed_changed.wait(lock, [&] { return fake->completed >= target; });
    return hipSuccess;
  });
  return hipSuccess;
}

// ---- code objects and launches --------------------------------------------
// By default loading fails as on a device without a matching code object.
// With HAL_FAKE_HIP_CODE_OBJECTS=1 a clang offload bundle (what hipcc
// --genco writes) loads as the runtime loads it: the entry for the current
// device's architecture (gfx90a for gfx90a:sramecc+:xnack-), else
// hipErrorNoBinaryForGpu; hipModuleGetFunction finds only kernels whose
// symbol is in that entry (hipErrorNotFound otherwise) and the SIMT
// emulator has a kernel of that name (tests/simt/emulated_kernels.cpp).
// Launches are checked, recorded for the tests, and run in stream order in
// the emulator with the launch's grid, block and dynamic LDS; a kernel fault
// fails the stream's work with hipErrorLaunchFailure.

struct FakeFunction {
  std::string name;
};
struct FakeModule {
  int device = 0;
  std::string code;                   // the architecture's entry of the bundle
  std::deque<FakeFunction> functions;  // owned by the module, as the runtime's are; a deque keeps their addresses
};
struct Launch {
  std::string kernel;
  unsigned grid[3], block[3], shared_bytes;
};
std::mutex launches_mutex;
std::vector<Launch> launches;

// The bundle entry of an architecture ("gfx90a"), or nullopt when none.
std::optional<std::string> bundle_entry(const void* image, const std::string& arch) {
  constexpr char magic[] = "__CLANG_OFFLOAD_BUNDLE__";
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (std::memcmp(bytes, magic, sizeof(magic) - 1) != 0) return std::nullopt;
  auto read64 = [&](std::size_t at) {
    std::uint64_t value;
    std::memcpy(&value, bytes + at, sizeof(value));
    return value;
  };
  std::size_t at = sizeof(magic) - 1;
  const std::uint64_t entries = read64(at);
  at += 8;
  for (std::uint64_t i = 0; i < entries && i < 64; ++i) {
    const std::uint64_t offset = read64(at), size = read64(at + 8), triple_size = read64(at + 16);
    const std::string triple(reinterpret_cast<const char*>(bytes + at + 24), triple_size);
    at += 24 + triple_size;
    const std::size_t dash = triple.rfind('-');
    if (dash != std::string::npos && triple.substr(dash + 1) == arch)
      return std::string(reinterpret_cast<const char*>(bytes + offset), size);
  }
  return std::nullopt;
}

bool code_objects_load() { return environment("HAL_FAKE_HIP_CODE_OBJECTS") == "1"; }

FAKE_EXPORT hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  ++module_loads;
  if (module == nullptr || image == nullptr) return hipErrorInvalidValue;
  if (!code_objects_load()) return hipErrorNoBinaryForGpu;
  const std::string arch = state().devices[static_cast<std::size_t>(current_device)].arch;
  auto code = bundle_entry(image, arch.substr(0, arch.find(':')));
  if (!code) return hipErrorNoBinaryForGpu;
  *module = reinterpret_cast<hipModule_t>(new FakeModule{current_device, std::move(*code), {}});
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipModuleUnload(hipModule_t module) {
  if (module == nullptr || !code_objects_load()) return hipErrorInvalidHandle;
  delete reinterpret_cast<FakeModule*>(module);  // and its functions: their handles are invalid from now on
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipModuleGetFunction(hipFunction_t* function, hipModule_t module, const char* name) {
  if (function == nullptr || module == nullptr || name == nullptr) return hipErrorInvalidValue;
  if (!code_objects_load()) return hipErrorInvalidHandle;
  auto* loaded = reinterpret_cast<FakeModule*>(module);
  if (!hal_simt::image_kernel_runs(loaded->code, name, "fake_hip_runtime")) return hipErrorNotFound;
  std::lock_guard lock(state().mutex);
  *function = reinterpret_cast<hipFunction_t>(&loaded->functions.emplace_back(FakeFunction{name}));
  return hipSuccess;
}
FAKE_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t function, unsigned int grid_x, unsigned int grid_y,
                                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                                             unsigned int block_z, unsigned int shared_bytes, hipStream_t stream,
                                             void** parameters, void** extra) {
  if (function == nullptr || !code_objects_load()) return hipErrorInvalidHandle;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x * block_y * block_z == 0 ||
      block_x * block_y * block_z > 1024 || (parameters == nullptr && extra == nullptr))
    return hipErrorInvalidValue;
  if (shared_bytes > 64 * 1024) return hipErrorInvalidValue;  // the LDS of one workgroup
  if (parameters == nullptr) return hipErrorNotSupported;  // `extra` packing is not emulated
  const auto* called = reinterpret_cast<FakeFunction*>(function);
  {
    std::lock_guard lock(launches_mutex);
    launches.push_back({called->name, {grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes});
  }
  hal_simt::BoundLaunch launch = hal_simt::bind_kernel(
      called->name, parameters, {{grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes});
  return submit(
      stream, "hipModuleLaunchKernel",
      [launch = std::move(launch), name = called->name] {
        const std::string fault = launch();
        if (fault.empty()) return hipSuccess;
        std::fprintf(stderr, "fake_hip_runtime: kernel %s failed: %s\n", name.c_str(), fault.c_str());
        return hipErrorLaunchFailure;
      },
      NullStreamCall::returns_early);
}

// ---- test hooks (tests reach them with dlsym on the loaded fake) -------------

// hipModuleLoadData calls so far, failed ones included.
FAKE_EXPORT int hal_fake_hip_module_loads() { return module_loads.load(); }

// The kernel names launched so far (HAL_FAKE_HIP_CODE_OBJECTS=1), comma-separated
// in launch order, into buffer; returns the launch count.
FAKE_EXPORT int hal_fake_hip_launched_kernels(char* buffer, int capacity) {
  std::lock_guard lock(launches_mutex);
  std::string names;
  for (const Launch& launch : launches) names += (names.empty() ? "" : ",") + launch.kernel;
  if (buffer != nullptr && capacity > 0) std::snprintf(buffer, static_cast<std::size_t>(capacity), "%s", names.c_str());
  return static_cast<int>(launches.size());
}

// ---- pointer attributes, host registration, device synchronize ------------

// hipMemoryType as the flavour's ROCm numbers it: ROCm 6 renumbered it.
#ifdef FAKE_HIP_ROCM5
constexpr int memory_type_host = 0, memory_type_device = 1, memory_type_managed = 1;
#else
constexpr int memory_type_host = 1, memory_type_device = 2, memory_type_managed = 3;
#endif

FAKE_EXPORT hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* pointer) {
  if (attributes == nullptr) return hipErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto found = state().allocations.upper_bound(address);
  const bool known = found != state().allocations.begin() && address < std::prev(found)->first + std::prev(found)->second.size;
  *attributes = {};
  if (!known) {
#ifdef FAKE_HIP_ROCM5
    return hipErrorInvalidValue;  // ROCm 5: memory it does not know is an error
#else
    return hipSuccess;  // ROCm 6: "unregistered" (0)
#endif
  }
  const Allocation& allocation = std::prev(found)->second;
  const int type = allocation.kind == Kind::host      ? memory_type_host
                   : allocation.kind == Kind::managed ? memory_type_managed
                                                      : memory_type_device;
  attributes->memoryType = static_cast<hipMemoryType>(type);
  attributes->device = allocation.device;
  attributes->devicePointer = const_cast<void*>(pointer);
  attributes->hostPointer = allocation.kind == Kind::device ? nullptr : const_cast<void*>(pointer);
  attributes->isManaged = allocation.kind == Kind::managed ? 1 : 0;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipMemGetAddressRange(hipDeviceptr_t* base, std::size_t* size, hipDeviceptr_t pointer) {
  std::lock_guard lock(state().mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto found = state().allocations.upper_bound(address);
  if (found == state().allocations.begin() || address >= std::prev(found)->first + std::prev(found)->second.size)
    return hipErrorNotFound;
  --found;
  if (base != nullptr) *base = reinterpret_cast<hipDeviceptr_t>(found->first);
  if (size != nullptr) *size = found->second.size;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipHostRegister(void* host, std::size_t size, unsigned int) {
  if (host == nullptr || size == 0) return hipErrorInvalidValue;
  std::lock_guard lock(state().mutex);
  const auto start = reinterpret_cast<std::uintptr_t>(host);
  auto after = state().allocations.lower_bound(start);
  if ((after != state().allocations.end() && after->first < start + size) ||
      (after != state().allocations.begin() && std::prev(after)->first + std::prev(after)->second.size > start))
    return hipErrorHostMemoryAlreadyRegistered;
  state().allocations[start] = {current_device, size, Kind::host, true};
  ++state().registrations;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipHostUnregister(void* host) {
  std::lock_guard lock(state().mutex);
  const auto found = state().allocations.find(reinterpret_cast<std::uintptr_t>(host));
  if (found == state().allocations.end() || !found->second.registered) return hipErrorHostMemoryNotRegistered;
  state().allocations.erase(found);
  ++state().unregistrations;
  return hipSuccess;
}

FAKE_EXPORT hipError_t hipDeviceSynchronize() {
  std::vector<FakeStream*> streams;
  {
    std::lock_guard lock(state().mutex);
    ++state().device_synchronizes;
    for (FakeStream* stream : state().streams)
      if (stream->device() == current_device) streams.push_back(stream);  // the current device's work
  }
  hipError_t first = hipSuccess;
  for (FakeStream* stream : streams)
    if (hipError_t error = stream->synchronize(); first == hipSuccess) first = error;
  return first;
}

namespace {

// One of the runtime's counters for the test hooks, read under its lock.
int counter(int State::*member) {
  std::lock_guard lock(state().mutex);
  return state().*member;
}

}  // namespace

FAKE_EXPORT int hal_fake_hip_host_registrations() { return counter(&State::registrations); }
FAKE_EXPORT int hal_fake_hip_host_unregistrations() { return counter(&State::unregistrations); }
FAKE_EXPORT int hal_fake_hip_device_synchronizes() { return counter(&State::device_synchronizes); }
