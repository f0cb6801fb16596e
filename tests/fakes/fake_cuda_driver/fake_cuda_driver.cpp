// A test double of libcuda.so.1 on host memory and threads (see README.md).
// A driver is process-wide by nature, so this one keeps global state.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulated_kernels.hpp"
#include "stream_progress.hpp"
#include "stuck_bits.hpp"

#undef cuEventElapsedTime
#undef cuDeviceGetUuid
#undef cuGetProcAddress

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct CUctx_st {
  int device = 0;
  int references = 0;
  CUresult sticky_error = CUDA_SUCCESS;  // a device fault poisons the context
};
struct CUfunc_st;
// A loaded image: the cubin chosen for the device (or, JIT-compiled from
// PTX, none to search), and the functions looked up in it.
struct CUmod_st {
  CUctx_st* context = nullptr;
  std::string cubin;
  bool from_ptx = false;
  std::deque<CUfunc_st> functions;  // a deque keeps their addresses
};
struct CUfunc_st {
  std::string name;
  CUmod_st* module = nullptr;
  int max_dynamic_shared_bytes = 48 * 1024;  // raised with cuFuncSetAttribute
};

// A memory pool: it keeps blocks freed to it reserved and hands them out
// again; at a synchronize it releases reserved blocks, smallest first, while
// it holds more than its release threshold (0 unless set, as the driver's).
struct CUmemPoolHandle_st {
  int device = 0;
  bool is_default = false;
  cuuint64_t release_threshold = 0;
  std::multimap<std::size_t, std::uintptr_t> reserved;  // freed blocks: size -> start
};

namespace {

// ---- configuration -------------------------------------------------------

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

// The value for device `index` of a comma-separated list: its own entry, or the last.
std::string per_device(const char* variable, std::size_t index) {
  const std::string text = environment(variable);
  if (text.empty()) return {};
  const auto parts = split(text, ',');
  return parts[std::min(index, parts.size() - 1)];
}

std::size_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  std::size_t scale = 1;
  if (end != nullptr) {
    switch (*end) {
      case 'K': case 'k': scale = 1ull << 10; break;
      case 'M': case 'm': scale = 1ull << 20; break;
      case 'G': case 'g': scale = 1ull << 30; break;
      default: break;
    }
  }
  return static_cast<std::size_t>(value * static_cast<double>(scale));
}

// A fault from HAL_FAKE_CUDA_FAIL for this function, read on every call.
CUresult injected_fault(const char* function) {
  for (const auto& entry : split(environment("HAL_FAKE_CUDA_FAIL"), ',')) {
    const auto equals = entry.find('=');
    if (equals != std::string::npos && entry.substr(0, equals) == function)
      return static_cast<CUresult>(std::atoi(entry.c_str() + equals + 1));
  }
  return CUDA_SUCCESS;
}

// ---- state ---------------------------------------------------------------

struct Device {
  std::string name;
  CUuuid uuid{};
  std::string pci_bus_id;
  int compute_major = 8, compute_minor = 0;
  std::size_t memory = 0;
  std::size_t used = 0;  // guarded by Driver::mutex
  int multiprocessors = 108, clock_khz = 1410000, memory_clock_khz = 1593000, bus_width = 5120;
  int l2_bytes = 40 << 20;
  bool managed = true;
  CUctx_st primary;
};

// Dynamic shared memory a block may opt in to (an A100's), as cuDeviceGetAttribute reports it.
constexpr int max_dynamic_shared_optin = 163 * 1024;

struct Allocation {
  std::size_t size = 0;
  int device = 0;
  enum class Kind { device, host, managed } kind = Kind::device;
  CUmemoryPool pool = nullptr;  // stream-ordered allocations: the pool that reserved it
  bool graph = false;           // reserved by a capture for its graph (GraphMemory)
};

struct Stream;
struct CaptureSequence;

struct Driver {
  std::mutex mutex;
  bool initialized = false;
  int version = 13000;
  std::vector<Device> devices;
  std::map<std::uintptr_t, Allocation> allocations;  // by start address
  std::set<Stream*> streams;
  int module_loads = 0;  // cuModuleLoadData calls, for the test hook
  int async_allocations = 0;  // stream-ordered allocations made, for the test hook
  int pool_reservations = 0;  // of those, the ones a pool had to reserve fresh memory for
  std::vector<std::unique_ptr<CUmemPoolHandle_st>> pools;  // each device's default pool, then cuMemPoolCreate's
  // Host memory page-locked with cuMemHostRegister: start -> {size, device}.
  std::map<std::uintptr_t, std::pair<std::size_t, int>> registered;
  int registrations = 0, unregistrations = 0, context_synchronizes = 0;  // for the test hooks
  int host_waits = 0;  // cuStreamSynchronize and cuEventSynchronize calls: the host blocked on the device
};

Driver& driver() {
  static Driver instance;
  return instance;
}

// One of the driver's counters for the test hooks, read under its lock.
int counter(int Driver::*member) {
  std::lock_guard lock(driver().mutex);
  return driver().*member;
}

// initial-exec: kept in the static TLS block, which a dlclose never frees
// (LeakSanitizer faults scanning a freed dynamic TLS block of a reloaded fake).
thread_local CUctx_st* current_context __attribute__((tls_model("initial-exec"))) = nullptr;

void fill_uuid(CUuuid& uuid, const std::string& hex, int index) {
  if (hex.size() == 32) {
    for (int i = 0; i < 16; ++i) uuid.bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    return;
  }
  const unsigned char pattern[16] = {0xfa, 0xce, 0xc0, 0xda, 0x00, 0x01, 0x40, 0x00,
                                     0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  std::memcpy(uuid.bytes, pattern, 16);
  uuid.bytes[15] = static_cast<char>(index);
}

void configure_devices(Driver& state) {
  const std::string count_text = environment("HAL_FAKE_CUDA_DEVICES");
  const int count = count_text.empty() ? 1 : std::atoi(count_text.c_str());
  const std::string identity = environment("HAL_FAKE_CUDA_IDENTITY");
  if (const std::string version = environment("HAL_FAKE_CUDA_DRIVER_VERSION"); !version.empty())
    state.version = std::atoi(version.c_str());
  for (int index = 0; index < count; ++index) {
    Device device;
    if (identity == "ppu") {
      device.name = "PPU-ZW810E";
      device.memory = 96ull << 30;
      device.multiprocessors = 128;
    } else if (identity == "h100") {
      device.name = "NVIDIA H100 80GB HBM3";
      device.compute_major = 9;
      device.memory = 80ull << 30;
      device.multiprocessors = 132;
    } else {
      device.name = "NVIDIA A100-SXM4-80GB";
      device.memory = 80ull << 30;
    }
    if (auto name = per_device("HAL_FAKE_CUDA_NAME", index); !name.empty()) device.name = name;
    if (auto capability = per_device("HAL_FAKE_CUDA_COMPUTE_CAPABILITY", index); !capability.empty())
      std::sscanf(capability.c_str(), "%d.%d", &device.compute_major, &device.compute_minor);
    if (auto memory = per_device("HAL_FAKE_CUDA_MEMORY", index); !memory.empty()) device.memory = parse_size(memory);
    if (auto managed = per_device("HAL_FAKE_CUDA_MANAGED", index); !managed.empty()) device.managed = managed != "0";
    fill_uuid(device.uuid, per_device("HAL_FAKE_CUDA_UUID", index), index);
    // The driver prints an 8-digit domain and upper-case hex; hal normalizes it.
    char bus_id[32];
    std::snprintf(bus_id, sizeof(bus_id), "00000000:%02X:00.0", 0xE1 + index);
    device.pci_bus_id = per_device("HAL_FAKE_CUDA_PCI_BUS_ID", index);
    if (device.pci_bus_id.empty()) device.pci_bus_id = bus_id;
    device.primary.device = index;
    state.devices.push_back(std::move(device));
  }
}

// ---- streams -------------------------------------------------------------

using Operation = std::function<CUresult()>;

using hal_fakes::Progress;

// An in-order queue run by one worker thread.
struct Stream {
  // blocking: ordered with the legacy default stream (not CU_STREAM_NON_BLOCKING).
  Stream(CUctx_st* owner, bool blocking_stream, bool legacy_stream = false)
      : context(owner), blocking(blocking_stream), legacy(legacy_stream), worker([this] { work(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    available.notify_all();
    worker.join();
  }
  // Returns the operation's ticket: progress->wait_for(ticket) waits for it.
  std::uint64_t enqueue(Operation operation) {
    std::uint64_t ticket;
    {
      std::lock_guard lock(mutex);
      ticket = progress->enqueue();
      queue.push_back(std::move(operation));
    }
    available.notify_all();
    return ticket;
  }
  std::uint64_t enqueued() const { return progress->enqueued_so_far(); }
  void wait_idle() {
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return queue.empty() && !running; });
  }
  bool is_idle() {
    std::lock_guard lock(mutex);
    return queue.empty() && !running;
  }

  CUctx_st* context;
  const bool blocking, legacy;
  CaptureSequence* capture = nullptr;  // the capture recording its work; guarded by driver().mutex
  const std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  std::mutex mutex;
  std::condition_variable available, idle;
  std::deque<Operation> queue;
  bool running = false, stopping = false;
  std::thread worker;  // last: starts after the members above exist

 private:
  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      available.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping with nothing left
      Operation operation = std::move(queue.front());
      queue.pop_front();
      running = true;
      lock.unlock();
      const CUresult result = operation();
      if (result != CUDA_SUCCESS) {
        std::lock_guard state_lock(driver().mutex);
        if (context->sticky_error == CUDA_SUCCESS) context->sticky_error = result;
      }
      progress->complete_one();
      lock.lock();
      running = false;
      if (queue.empty()) idle.notify_all();
    }
  }
};

struct Event {
  std::mutex mutex;
  std::condition_variable completed;
  unsigned flags = 0;
  std::uint64_t records = 0, completions = 0;
  std::chrono::steady_clock::time_point timestamp;
  // Last recorded in a capture (guarded by driver().mutex): its id (0: not),
  // the stream, and how much work that stream had recorded then.
  std::uint64_t capture_id = 0;
  Stream* captured_on = nullptr;
  std::size_t captured_after = 0;
};

}  // namespace

struct CUstream_st : Stream {
  using Stream::Stream;
};

// The context's legacy default stream, a real stream here (created on first
// use, never destroyed); with create false, nullptr when it does not exist yet.
CUstream_st* legacy_stream_of(CUctx_st* context, bool create) {
  static std::map<CUctx_st*, CUstream_st*> legacy;  // guarded by driver().mutex
  std::lock_guard lock(driver().mutex);
  CUstream_st*& found = legacy[context];
  if (found == nullptr && create) {
    found = new CUstream_st(context, true, true);
    driver().streams.insert(found);
  }
  return found;
}

// NULL and CU_STREAM_LEGACY name the current context's legacy default
// stream; other handles are themselves.
CUstream resolve_stream(CUstream stream) {
  if (stream != nullptr && stream != CU_STREAM_LEGACY) return stream;
  CUctx_st* context = current_context;
  return context != nullptr ? legacy_stream_of(context, true) : nullptr;
}
struct CUevent_st : Event {};

// ---- stream capture: the state ----------------------------------------------
// A capture records the work enqueued on its streams instead of running it.
// Its graph keeps the work in the order it was enqueued: each stream's work
// in stream order, and work after an event wait after the work recorded
// before that event, so running the nodes in turn honours every dependency.

// Memory a capture's stream-ordered allocations reserved: the graph's (and
// its executables') for as long as one of them lives, as graph memory is.
struct GraphMemory {
  std::vector<std::uintptr_t> blocks;
  ~GraphMemory();
};

struct CUgraph_st {
  std::vector<std::function<CUresult()>> nodes;
  std::shared_ptr<GraphMemory> memory = std::make_shared<GraphMemory>();
};

// What cuGraphLaunch enqueues; launches of one executable run one after another.
struct CUgraphExec_st {
  std::vector<std::function<CUresult()>> nodes;
  std::shared_ptr<GraphMemory> memory;
  std::shared_ptr<Progress> last_launch_progress;  // the stream of the latest launch
  std::uint64_t last_launch_ticket = 0;
};

namespace {

struct CaptureSequence {
  std::uint64_t id = 0;  // unique in the process, as cuStreamGetCaptureInfo's
  Stream* origin = nullptr;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;  // that began it
  bool invalidated = false;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
  std::set<Stream*> streams;  // the origin and the streams forked from it by waiting on its events
  // Work recorded per stream, and the forked streams whose latest work the origin has not waited for.
  std::map<Stream*, std::size_t> recorded;
  std::set<Stream*> unjoined;
};

std::list<CaptureSequence>& captures() {  // guarded by driver().mutex
  static std::list<CaptureSequence> active;
  return active;
}

// The active capture with this id, or null once it ended.
CaptureSequence* capture_by_id(std::uint64_t id) {  // under driver().mutex
  for (CaptureSequence& capture : captures())
    if (capture.id == id) return &capture;
  return nullptr;
}

// A violation of the capture rules invalidates the capture: its streams go
// on recording nothing, and cuStreamEndCapture returns no graph.
CUresult refuse(CaptureSequence& capture, CUresult error) {  // under driver().mutex
  capture.invalidated = true;
  return error;
}

thread_local CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// The legacy stream cannot be used while a blocking stream of its context
// captures: its implicit synchronization would depend on the capture.
CUresult legacy_conflict(const Stream* stream) {  // under driver().mutex
  if (!stream->legacy) return CUDA_SUCCESS;
  CUresult result = CUDA_SUCCESS;
  for (CaptureSequence& capture : captures())
    for (const Stream* member : capture.streams)
      if (member->blocking && member->context == stream->context)
        result = refuse(capture, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  return result;
}

// "Potentially unsafe" calls (allocations and frees that are not stream
// ordered, stream and event queries): refused, invalidating the captures they
// conflict with, unless the calling thread relaxed its mode
// (cuThreadExchangeStreamCaptureMode). Its own capture begun in global or
// thread-local mode conflicts; in global mode so does another thread's
// global-mode capture.
CUresult unsafe_during_capture() {
  if (thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  std::lock_guard lock(driver().mutex);
  CUresult result = CUDA_SUCCESS;
  for (CaptureSequence& capture : captures()) {
    const bool own = capture.thread == std::this_thread::get_id();
    if ((own && capture.mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
        (!own && thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && capture.mode == CU_STREAM_CAPTURE_MODE_GLOBAL))
      result = refuse(capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  return result;
}

// Waiting for a capturing stream (synchronize, query) can never succeed: its
// work does not run until the graph is launched.
CUresult waits_for_capture(const Stream* stream) {  // under driver().mutex
  if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
  return stream->capture != nullptr ? refuse(*stream->capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) : CUDA_SUCCESS;
}

// Nor can waiting for an event last recorded in a capture that is still on.
CUresult waits_for_captured(const Event* event) {  // under driver().mutex
  CaptureSequence* capture = capture_by_id(event->capture_id);
  return capture != nullptr ? refuse(*capture, CUDA_ERROR_CAPTURED_EVENT) : CUDA_SUCCESS;
}

}  // namespace

namespace {

CUresult sticky_error(const CUctx_st* context) {
  std::lock_guard lock(driver().mutex);
  return context->sticky_error;
}

void trim_pools();  // memory pools, below: what a synchronize releases

// Set on a stream's worker while it runs a host function: CUDA calls made
// from one fail, as the driver forbids them there.
thread_local bool in_host_function = false;

// Calls on handles that carry their context (streams, events, modules)
// still need one current on the calling thread, as the real driver does.
CUresult need_any_context() {
  if (in_host_function) return CUDA_ERROR_NOT_PERMITTED;
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (current_context == nullptr || current_context->references == 0) return CUDA_ERROR_INVALID_CONTEXT;
  return CUDA_SUCCESS;
}

// The context of the calling thread, or why there is none.
CUresult need_context(CUctx_st*& context) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  context = current_context;
  return sticky_error(context);
}

bool valid_device(CUdevice device) {
  return driver().initialized && device >= 0 && static_cast<std::size_t>(device) < driver().devices.size();
}

// The allocation or registered host range holding address, if any: {start, size, device, kind}.
struct Range {
  std::uintptr_t start = 0;
  std::size_t size = 0;
  int device = 0;
  Allocation::Kind kind = Allocation::Kind::device;
};
std::optional<Range> range_holding(std::uintptr_t address) {  // with driver().mutex held
  const auto& allocations = driver().allocations;
  if (auto after = allocations.upper_bound(address); after != allocations.begin()) {
    const auto& [start, allocation] = *std::prev(after);
    if (address >= start && address < start + allocation.size) return Range{start, allocation.size, allocation.device, allocation.kind};
  }
  const auto& registered = driver().registered;
  if (auto after = registered.upper_bound(address); after != registered.begin()) {
    const auto& [start, entry] = *std::prev(after);
    if (address >= start && address < start + entry.first) return Range{start, entry.first, entry.second, Allocation::Kind::host};
  }
  return std::nullopt;
}

// True when [address, address + size) lies inside one allocation or registered range.
bool known_range(CUdeviceptr address, std::size_t size) {
  std::lock_guard lock(driver().mutex);
  const std::optional<Range> range = range_holding(static_cast<std::uintptr_t>(address));
  return range && address + size <= range->start + range->size;
}

void* pointer(CUdeviceptr address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }

CUresult allocate(std::size_t size, std::size_t alignment, Allocation::Kind kind, void** out) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  Device& device = driver().devices[context->device];
  {
    std::lock_guard lock(driver().mutex);
    if (kind != Allocation::Kind::host && size > device.memory - device.used) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* memory = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (memory == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lock(driver().mutex);
  if (kind != Allocation::Kind::host) device.used += size;
  driver().allocations[reinterpret_cast<std::uintptr_t>(memory)] = {size, context->device, kind};
  *out = memory;
  return CUDA_SUCCESS;
}

// Gives an allocation's memory back; with driver().mutex held.
void free_allocation(std::map<std::uintptr_t, Allocation>::iterator found) {
  if (found->second.kind != Allocation::Kind::host) driver().devices[found->second.device].used -= found->second.size;
  void* memory = reinterpret_cast<void*>(found->first);
  driver().allocations.erase(found);
  std::free(memory);
}

// cuMemFree synchronizes with the device's streams, as the real one does.
CUresult release(void* memory, bool host) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(driver().mutex);
    auto found = driver().allocations.find(reinterpret_cast<std::uintptr_t>(memory));
    if (found == driver().allocations.end() || (found->second.kind == Allocation::Kind::host) != host)
      return CUDA_ERROR_INVALID_VALUE;
    streams.assign(driver().streams.begin(), driver().streams.end());
  }
  for (Stream* stream : streams) stream->wait_idle();
  std::lock_guard lock(driver().mutex);
  free_allocation(driver().allocations.find(reinterpret_cast<std::uintptr_t>(memory)));
  return CUDA_SUCCESS;
}

CUresult check_copy(CUdeviceptr device_side, std::size_t size) {
  return known_range(device_side, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Enqueues with the legacy default stream's implicit synchronization:
// legacy work waits for the work already on the context's blocking streams,
// and a blocking stream's work for the work already on the legacy stream;
// CU_STREAM_NON_BLOCKING streams are ordered with neither. Legacy work waits
// HAL_FAKE_CUDA_NULL_STREAM_DELAY_MS first, so work that returns before its
// bytes land is seen to.
std::uint64_t enqueue_work(CUstream stream, Operation operation) {
  hal_fakes::WaitList before;
  if (stream->legacy) {
    std::lock_guard lock(driver().mutex);
    for (Stream* other : driver().streams)
      if (other != stream && other->context == stream->context && other->blocking)
        before.emplace_back(other->progress, other->enqueued());
  } else if (stream->blocking) {
    if (CUstream_st* legacy = legacy_stream_of(stream->context, false))
      before.emplace_back(legacy->progress, legacy->enqueued());
  }
  const int delay_ms = stream->legacy ? std::atoi(environment("HAL_FAKE_CUDA_NULL_STREAM_DELAY_MS").c_str()) : 0;
  if (before.empty() && delay_ms <= 0) return stream->enqueue(std::move(operation));
  return stream->enqueue(hal_fakes::after(std::move(before), delay_ms, std::move(operation)));
}

// When a call returns to its caller: at once, or once its work is done.
enum class HostWait { none, until_done };

// Enqueues the work on the stream, or records it into the stream's capture.
// Work that would block the host until done cannot be captured. ticket, when
// given, is the work's ticket on the stream (0 when recorded).
CUresult enqueue_or_record(CUstream stream, Operation operation, HostWait wait = HostWait::none,
                           std::uint64_t* ticket = nullptr) {
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
    if (CaptureSequence* capture = stream->capture) {
      if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      if (wait == HostWait::until_done) return refuse(*capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      capture->graph->nodes.push_back(std::move(operation));
      ++capture->recorded[stream];
      if (stream != capture->origin) capture->unjoined.insert(stream);
      if (ticket != nullptr) *ticket = 0;
      return CUDA_SUCCESS;
    }
  }
  const std::uint64_t enqueued = enqueue_work(stream, std::move(operation));
  if (ticket != nullptr) *ticket = enqueued;
  if (wait == HostWait::until_done) stream->progress->wait_for(enqueued);
  return CUDA_SUCCESS;
}

// Host memory the driver neither allocated nor registered: copies to or
// from it are synchronous, even the Async ones.
bool pageable(const void* host) {
  std::lock_guard lock(driver().mutex);
  const std::optional<Range> range = range_holding(reinterpret_cast<std::uintptr_t>(host));
  return !range || range->kind == Allocation::Kind::device;
}

// Enqueues on the stream (NULL: the legacy default stream, as the driver
// API's calls without a stream use it) and returns when `wait` says. An
// injected fault fails a call without a stream at once and, on a stream,
// makes the enqueued work fail when it runs, as device faults surface later.
CUresult submit(const char* function, CUstream stream, Operation operation, HostWait wait = HostWait::none) {
  const CUresult fault = injected_fault(function);
  // HAL_FAKE_CUDA_STUCK_BITS (tests/fakes/stuck_bits.hpp): once the work ran, every device allocation's stuck bits
  // hold their values again, whatever it wrote.
  if (std::vector<hal_fakes::StuckBit> bits = hal_fakes::stuck_bits("HAL_FAKE_CUDA_STUCK_BITS"); !bits.empty())
    operation = [operation = std::move(operation), bits = std::move(bits)] {
      const CUresult result = operation();
      std::lock_guard lock(driver().mutex);
      for (const auto& [start, allocation] : driver().allocations)
        if (allocation.kind == Allocation::Kind::device)
          hal_fakes::force_stuck_bits(bits, reinterpret_cast<void*>(start), allocation.size);
      return result;
    };
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  const bool without_stream = stream == nullptr;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult result = sticky_error(stream->context); result != CUDA_SUCCESS) return result;
  if (fault != CUDA_SUCCESS && without_stream) return fault;
  if (CUresult result = enqueue_or_record(
          stream, fault != CUDA_SUCCESS ? Operation([fault] { return fault; }) : std::move(operation), wait);
      result != CUDA_SUCCESS)
    return result;
  return wait == HostWait::none ? CUDA_SUCCESS : sticky_error(stream->context);
}

template <typename Element>
CUresult memset_elements(const char* function, CUdeviceptr address, Element value, std::size_t count,
                         CUstream stream) {
  if (address % sizeof(Element) != 0 || !known_range(address, count * sizeof(Element))) return CUDA_ERROR_INVALID_VALUE;
  return submit(function, stream, [=] {
    auto* target = static_cast<Element*>(pointer(address));
    std::fill(target, target + count, value);
    return CUDA_SUCCESS;
  });
}

const std::map<CUresult, std::pair<const char*, const char*>>& error_names() {
  static const std::map<CUresult, std::pair<const char*, const char*>> names = {
      {CUDA_SUCCESS, {"CUDA_SUCCESS", "no error"}},
      {CUDA_ERROR_INVALID_VALUE, {"CUDA_ERROR_INVALID_VALUE", "invalid argument"}},
      {CUDA_ERROR_OUT_OF_MEMORY, {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"}},
      {CUDA_ERROR_NOT_INITIALIZED, {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"}},
      {CUDA_ERROR_NO_DEVICE, {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"}},
      {CUDA_ERROR_INVALID_DEVICE, {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"}},
      {CUDA_ERROR_INVALID_CONTEXT, {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"}},
      {CUDA_ERROR_NO_BINARY_FOR_GPU,
       {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"}},
      {CUDA_ERROR_INVALID_HANDLE, {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"}},
      {CUDA_ERROR_NOT_FOUND, {"CUDA_ERROR_NOT_FOUND", "named symbol not found"}},
      {CUDA_ERROR_NOT_READY, {"CUDA_ERROR_NOT_READY", "device not ready"}},
      {CUDA_ERROR_ILLEGAL_ADDRESS, {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"}},
      {CUDA_ERROR_LAUNCH_FAILED, {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"}},
      {CUDA_ERROR_NOT_SUPPORTED, {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"}},
      {CUDA_ERROR_ILLEGAL_STATE,
       {"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"}},
      {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
       {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"}},
      {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
       {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"}},
      {CUDA_ERROR_STREAM_CAPTURE_MERGE,
       {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"}},
      {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
       {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"}},
      {CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
       {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"}},
      {CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
       {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"}},
      {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
       {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
        "operation would make the legacy stream depend on a capturing blocking stream"}},
      {CUDA_ERROR_CAPTURED_EVENT,
       {"CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"}},
      {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
       {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
        "attempt to terminate a thread-local capture sequence from another thread"}},
      {CUDA_ERROR_UNKNOWN, {"CUDA_ERROR_UNKNOWN", "unknown error"}},
  };
  return names;
}

}  // namespace

GraphMemory::~GraphMemory() {
  std::lock_guard lock(driver().mutex);
  for (std::uintptr_t start : blocks)
    if (auto found = driver().allocations.find(start); found != driver().allocations.end() && found->second.graph)
      free_allocation(found);
}

// ---- the exported driver API ----------------------------------------------

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  if (!driver().initialized) {
    configure_devices(driver());
    if (driver().devices.empty()) return CUDA_ERROR_NO_DEVICE;
    driver().initialized = true;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = driver().version;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = static_cast<int>(driver().devices.size());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || length <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<std::size_t>(length), "%s", driver().devices[device].name.c_str());
  return CUDA_SUCCESS;
}

// The original (CUDA 9.2) and its 11.4 _v2 share a prototype; the
// HAL_FAKE_CUDA_NO_UUID_V2 flavour lacks the _v2, as some SDKs' libcuda do.
FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *uuid = driver().devices[device].uuid;
  return CUDA_SUCCESS;
}
#if !HAL_FAKE_CUDA_NO_UUID_V2
FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice device) { return cuDeviceGetUuid(uuid, device); }
#endif

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = driver().devices[device].memory;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  const Device& info = driver().devices[device];
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = info.multiprocessors; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = info.clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = info.memory_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = info.compute_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = info.compute_minor; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = info.managed ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = info.managed ? 1 : 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = info.l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = info.bus_width; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = max_dynamic_shared_optin; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    // Read on every call: some devices (and CUDA-compatible SDKs) have no memory pools.
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = per_device("HAL_FAKE_CUDA_MEMORY_POOLS", static_cast<std::size_t>(device)) == "0" ? 0 : 1;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char* bus_id, int length, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus_id, static_cast<std::size_t>(length), "%s", driver().devices[device].pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice device, CUdevice peer) {
  if (!valid_device(device) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = device != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult fault = injected_fault("cuDevicePrimaryCtxRetain"); fault != CUDA_SUCCESS) return fault;
  std::lock_guard lock(driver().mutex);
  CUctx_st& primary = driver().devices[device].primary;
  if (primary.references++ == 0) primary.sticky_error = CUDA_SUCCESS;  // a fresh context
  *context = &primary;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(driver().mutex);
  CUctx_st& primary = driver().devices[device].primary;
  if (primary.references == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--primary.references > 0) return CUDA_SUCCESS;
  // The context is destroyed: its memory goes with it, as after a fault
  // that made cuMemFree fail.
  auto& allocations = driver().allocations;
  for (auto it = allocations.begin(); it != allocations.end();) {
    if (it->second.device != device) {
      ++it;
      continue;
    }
    std::free(reinterpret_cast<void*>(it->first));
    it = allocations.erase(it);
  }
  driver().devices[device].used = 0;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* context) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *context = current_context;
  return CUDA_SUCCESS;
}

// The current context's device; CUDA_ERROR_INVALID_CONTEXT without one, as the real driver.
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = context->device;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  current_context = context;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  std::lock_guard lock(driver().mutex);
  const Device& device = driver().devices[context->device];
  *free = device.memory - device.used;
  *total = device.memory;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* address, std::size_t size) {
  if (CUresult fault = injected_fault("cuMemAlloc"); fault != CUDA_SUCCESS) return fault;
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  void* memory = nullptr;
  const CUresult result = allocate(size, 256, Allocation::Kind::device, &memory);
  if (result == CUDA_SUCCESS) *address = reinterpret_cast<std::uintptr_t>(memory);
  return result;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* address, std::size_t size, unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (!driver().devices[context->device].managed) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  void* memory = nullptr;
  const CUresult result = allocate(size, 256, Allocation::Kind::managed, &memory);
  if (result == CUDA_SUCCESS) *address = reinterpret_cast<std::uintptr_t>(memory);
  return result;
}

FAKE_EXPORT CUresult cuMemHostAlloc(void** host, std::size_t size, unsigned int) {
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  return allocate(size, 4096, Allocation::Kind::host, host);
}

FAKE_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* address, void* host, unsigned int flags) {
  if (flags != 0 || !known_range(reinterpret_cast<std::uintptr_t>(host), 1)) return CUDA_ERROR_INVALID_VALUE;
  *address = reinterpret_cast<std::uintptr_t>(host);  // unified addressing
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr address) { return release(pointer(address), false); }
FAKE_EXPORT CUresult cuMemFreeHost(void* host) { return release(host, true); }

FAKE_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr target, const void* source, std::size_t size) {
  if (CUresult result = check_copy(target, size); result != CUDA_SUCCESS) return result;
  return submit("cuMemcpyHtoD", nullptr, [=] { std::memcpy(pointer(target), source, size); return CUDA_SUCCESS; },
                HostWait::until_done);
}
FAKE_EXPORT CUresult cuMemcpyDtoH_v2(void* target, CUdeviceptr source, std::size_t size) {
  if (CUresult result = check_copy(source, size); result != CUDA_SUCCESS) return result;
  return submit("cuMemcpyDtoH", nullptr, [=] { std::memcpy(target, pointer(source), size); return CUDA_SUCCESS; },
                HostWait::until_done);
}
FAKE_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr target, CUdeviceptr source, std::size_t size) {
  if (check_copy(target, size) != CUDA_SUCCESS || check_copy(source, size) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return submit("cuMemcpyDtoD", nullptr,
                [=] { std::memmove(pointer(target), pointer(source), size); return CUDA_SUCCESS; });
}
FAKE_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr target, const void* source, std::size_t size, CUstream stream) {
  if (CUresult result = check_copy(target, size); result != CUDA_SUCCESS) return result;
  return submit("cuMemcpyHtoDAsync", stream, [=] { std::memcpy(pointer(target), source, size); return CUDA_SUCCESS; },
                pageable(source) ? HostWait::until_done : HostWait::none);
}
FAKE_EXPORT CUresult cuMemcpyDtoHAsync_v2(void* target, CUdeviceptr source, std::size_t size, CUstream stream) {
  if (CUresult result = check_copy(source, size); result != CUDA_SUCCESS) return result;
  return submit("cuMemcpyDtoHAsync", stream, [=] { std::memcpy(target, pointer(source), size); return CUDA_SUCCESS; },
                pageable(target) ? HostWait::until_done : HostWait::none);
}
FAKE_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr target, CUdeviceptr source, std::size_t size, CUstream stream) {
  if (check_copy(target, size) != CUDA_SUCCESS || check_copy(source, size) != CUDA_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  return submit("cuMemcpyDtoDAsync", stream,
                [=] { std::memmove(pointer(target), pointer(source), size); return CUDA_SUCCESS; });
}

FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr address, unsigned char value, std::size_t count) {
  return memset_elements("cuMemsetD8", address, value, count, nullptr);
}
FAKE_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr address, unsigned short value, std::size_t count) {
  return memset_elements("cuMemsetD16", address, value, count, nullptr);
}
FAKE_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr address, unsigned int value, std::size_t count) {
  return memset_elements("cuMemsetD32", address, value, count, nullptr);
}
FAKE_EXPORT CUresult cuMemsetD8Async(CUdeviceptr address, unsigned char value, std::size_t count, CUstream stream) {
  return memset_elements("cuMemsetD8Async", address, value, count, stream);
}
FAKE_EXPORT CUresult cuMemsetD16Async(CUdeviceptr address, unsigned short value, std::size_t count, CUstream stream) {
  return memset_elements("cuMemsetD16Async", address, value, count, stream);
}
FAKE_EXPORT CUresult cuMemsetD32Async(CUdeviceptr address, unsigned int value, std::size_t count, CUstream stream) {
  return memset_elements("cuMemsetD32Async", address, value, count, stream);
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  auto* created = new CUstream_st(context, flags != CU_STREAM_NON_BLOCKING);
  std::lock_guard lock(driver().mutex);
  driver().streams.insert(created);
  *stream = created;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (driver().streams.count(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (stream->capture != nullptr) return refuse(*stream->capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    driver().streams.erase(stream);
  }
  delete stream;  // drains the queue, then joins the worker
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = waits_for_capture(stream); result != CUDA_SUCCESS) return result;
    ++driver().host_waits;
  }
  stream->wait_idle();
  trim_pools();
  return sticky_error(stream->context);
}

// ---- stream capture: the calls ------------------------------------------------

FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (stream == nullptr || stream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  static std::uint64_t next_id = 0;
  std::lock_guard lock(driver().mutex);
  if (stream->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  CaptureSequence& capture = captures().emplace_back();
  capture.id = ++next_id;
  capture.origin = stream;
  capture.mode = mode;
  capture.thread = std::this_thread::get_id();
  capture.streams.insert(stream);
  stream->capture = &capture;
  return CUDA_SUCCESS;
}

// Ends the capture begun on `stream`: its graph, or none when the capture was
// invalidated or a forked stream was never joined back.
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (stream == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::unique_ptr<CUgraph_st> discarded;  // freed after the lock is let go: its memory takes the lock
  std::lock_guard lock(driver().mutex);
  CaptureSequence* capture = stream->capture;
  if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (capture->origin != stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (capture->mode != CU_STREAM_CAPTURE_MODE_RELAXED && capture->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  const CUresult result = capture->invalidated         ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                          : !capture->unjoined.empty() ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED
                                                       : CUDA_SUCCESS;
  *graph = result == CUDA_SUCCESS ? capture->graph.release() : nullptr;
  discarded = std::move(capture->graph);
  for (Stream* member : capture->streams) member->capture = nullptr;
  captures().remove_if([&](const CaptureSequence& c) { return &c == capture; });
  return result;
}

FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, thread_capture_mode);
  return CUDA_SUCCESS;
}

// On the legacy stream while a blocking stream of its context captures:
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and the capture goes on.
FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                               CUgraph* graph, const CUgraphNode** dependencies,
                                               const CUgraphEdgeData** edge_data, std::size_t* dependency_count) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (status == nullptr || (edge_data != nullptr && dependencies == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(driver().mutex);
  if (stream->legacy)
    for (const CaptureSequence& capture : captures())
      for (const Stream* member : capture.streams)
        if (member->blocking && member->context == stream->context) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  const CaptureSequence* capture = stream->capture;
  *status = capture == nullptr     ? CU_STREAM_CAPTURE_STATUS_NONE
            : capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  const bool active = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id != nullptr && active) *id = capture->id;
  if (graph != nullptr && active) *graph = capture->graph.get();
  // Nodes are not handed out: the fake's graph is the work in order, with no node handles.
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edge_data != nullptr) *edge_data = nullptr;
  if (dependency_count != nullptr) *dependency_count = 0;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return cuStreamGetCaptureInfo_v3(stream, status, nullptr, nullptr, nullptr, nullptr, nullptr);
}

FAKE_EXPORT CUresult cuStreamQuery(CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = waits_for_capture(stream); result != CUDA_SUCCESS) return result;
  }
  if (CUresult result = sticky_error(stream->context); result != CUDA_SUCCESS) return result;
  return stream->is_idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// In a capture, a wait on an event recorded in it orders the stream's later
// work after that event's; a stream not capturing joins the capture by it (a
// fork), and the origin waiting on a fork's latest event joins the fork back.
// A capturing stream cannot wait on work outside its capture.
namespace {
CUresult wait_in_capture(Stream* stream, Event* event) {  // under driver().mutex
  CaptureSequence* recorded_in = capture_by_id(event->capture_id);
  CaptureSequence* capture = stream->capture;
  if (recorded_in == nullptr) {
    if (capture == nullptr) return CUDA_ERROR_NOT_FOUND;  // no capture involved: an ordinary wait
    std::lock_guard counts(event->mutex);
    return event->records == 0 ? CUDA_SUCCESS : refuse(*capture, CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  }
  if (capture != nullptr && capture != recorded_in) {
    refuse(*capture, CUDA_ERROR_STREAM_CAPTURE_MERGE);
    return refuse(*recorded_in, CUDA_ERROR_STREAM_CAPTURE_MERGE);
  }
  if (recorded_in->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (capture == nullptr) {
    if (stream->legacy) return refuse(*recorded_in, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    stream->capture = recorded_in;
    recorded_in->streams.insert(stream);
  }
  if (stream == recorded_in->origin && event->captured_after == recorded_in->recorded[event->captured_on])
    recorded_in->unjoined.erase(event->captured_on);
  return CUDA_SUCCESS;
}
}  // namespace

FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (stream == nullptr || event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
    if (CUresult result = wait_in_capture(stream, event); result != CUDA_ERROR_NOT_FOUND) return result;
  }
  std::uint64_t target;
  {
    std::lock_guard lock(event->mutex);
    target = event->records;
  }
  if (target == 0) return CUDA_SUCCESS;
  enqueue_work(stream, [event, target] {
    std::unique_lock lock(event->mutex);
    event->completed.wait(lock, [&] { return event->completions >= target; });
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

// Runs a host function as the driver does: with CUDA calls forbidden.
template <typename Call>
void run_host_function(Call&& call) {
  in_host_function = true;
  call();
  in_host_function = false;
}

// As the CUDA 13 header says, the function is not called once the context has
// an error (earlier work failed): its data is never seen again. In a capture
// it is a node of the graph, called at each launch.
FAKE_EXPORT CUresult cuLaunchHostFunc(CUstream stream, CUhostFn function, void* data) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (stream == nullptr || function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return enqueue_or_record(stream, [context = stream->context, function, data] {
    if (sticky_error(context) == CUDA_SUCCESS) run_host_function([&] { function(data); });
    return CUDA_SUCCESS;
  });
}

// The callback is called even after an error, with the error as its status.
// Not supported in a capture (the header says so; cuLaunchHostFunc is).
FAKE_EXPORT CUresult cuStreamAddCallback(CUstream stream, CUstreamCallback callback, void* data, unsigned int flags) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  stream = resolve_stream(stream);
  if (stream == nullptr || callback == nullptr) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
    if (stream->capture != nullptr) return refuse(*stream->capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  enqueue_work(stream, [stream, callback, data] {
    const CUresult status = sticky_error(stream->context);
    run_host_function([&] { callback(stream, status, data); });
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

// ---- graphs ------------------------------------------------------------------

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* executable, CUgraph graph, unsigned long long flags) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  constexpr unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (executable == nullptr || graph == nullptr || (flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  *executable = new CUgraphExec_st{graph->nodes, graph->memory, nullptr, 0};
  return CUDA_SUCCESS;
}

// Runs the graph's work in order on the stream (or records it, into a
// capture), after the work before it there and after the previous launch of
// the same executable.
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec executable, CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (executable == nullptr) return CUDA_ERROR_INVALID_VALUE;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult result = sticky_error(stream->context); result != CUDA_SUCCESS) return result;
  std::vector<Operation> work;
  if (const auto& previous = executable->last_launch_progress; previous && previous != stream->progress)
    work.push_back([previous, ticket = executable->last_launch_ticket] {
      previous->wait_for(ticket);
      return CUDA_SUCCESS;
    });
  for (const auto& node : executable->nodes)  // the memory lives as long as work that uses it
    work.push_back([node, memory = executable->memory] { return node(); });
  std::uint64_t ticket = 0;
  for (Operation& operation : work)
    if (CUresult result = enqueue_or_record(stream, std::move(operation), HostWait::none, &ticket);
        result != CUDA_SUCCESS)
      return result;
  if (ticket != 0) {
    executable->last_launch_progress = stream->progress;
    executable->last_launch_ticket = ticket;
  }
  return CUDA_SUCCESS;
}

// Launches still queued keep what they run.
FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec executable) {
  if (executable == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete executable;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  delete graph;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  auto* created = new CUevent_st();
  created->flags = flags;
  *event = created;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // Pending records and waits reference the event: let them finish first.
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(driver().mutex);
    streams.assign(driver().streams.begin(), driver().streams.end());
  }
  for (Stream* stream : streams) stream->wait_idle();
  delete event;
  return CUDA_SUCCESS;
}

// Records complete even on a poisoned context, so no waiter hangs; queries
// and synchronizes then return the context's error. In a capture a record
// only marks a point of it, for waits within the capture.
FAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (event == nullptr || stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
    if (CaptureSequence* capture = stream->capture) {
      if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      event->capture_id = capture->id;
      event->captured_on = stream;
      event->captured_after = capture->recorded[stream];
      return CUDA_SUCCESS;
    }
    event->capture_id = 0;
  }
  std::uint64_t target;
  {
    std::lock_guard lock(event->mutex);
    target = ++event->records;
  }
  enqueue_work(stream, [event, target] {
    {
      std::lock_guard lock(event->mutex);
      if (target > event->completions) {
        event->completions = target;
        event->timestamp = std::chrono::steady_clock::now();
      }
    }
    event->completed.notify_all();
    return CUDA_SUCCESS;
  });
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventQuery(CUevent event) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (CUresult result = unsafe_during_capture(); result != CUDA_SUCCESS) return result;
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = waits_for_captured(event); result != CUDA_SUCCESS) return result;
  }
  std::lock_guard lock(event->mutex);
  return event->completions >= event->records ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent event) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    if (CUresult result = waits_for_captured(event); result != CUDA_SUCCESS) return result;
    ++driver().host_waits;
  }
  std::unique_lock lock(event->mutex);
  const std::uint64_t target = event->records;
  event->completed.wait(lock, [&] { return event->completions >= target; });
  lock.unlock();
  trim_pools();
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventElapsedTime(float* milliseconds, CUevent start, CUevent end) {
  if (milliseconds == nullptr || start == nullptr || end == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  std::chrono::steady_clock::time_point times[2];
  CUevent events[2] = {start, end};
  for (int i = 0; i < 2; ++i) {
    std::lock_guard lock(events[i]->mutex);
    if (events[i]->records == 0) return CUDA_ERROR_INVALID_HANDLE;
    if (events[i]->completions < events[i]->records) return CUDA_ERROR_NOT_READY;
    times[i] = events[i]->timestamp;
  }
  *milliseconds = std::chrono::duration<float, std::milli>(times[1] - times[0]).count();
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuEventElapsedTime_v2(float* milliseconds, CUevent start, CUevent end) {
  return cuEventElapsedTime(milliseconds, start, end);
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  const auto found = error_names().find(error);
  if (found == error_names().end()) {
    *name = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *name = found->second.first;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  const auto found = error_names().find(error);
  if (found == error_names().end()) {
    *text = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *text = found->second.second;
  return CUDA_SUCCESS;
}

// ---- modules and kernels ---------------------------------------------------
// An image is a fatbin (what nvcc --fatbin writes and hal embeds): a header,
// then entries, each a cubin (ELF) or PTX for one architecture. Loading
// picks, as the driver does, a cubin of the device's major version no newer
// than the device, else PTX no newer than it to JIT, else fails with
// CUDA_ERROR_NO_BINARY_FOR_GPU. A function is found when its name is in the
// chosen cubin's string table (any name for PTX, whose text is compressed)
// and hal_simt has a kernel of that name; launches run it in the SIMT
// emulator in stream order, with the launch's grid, block and dynamic shared
// memory, which above 48 KiB needs cuFuncSetAttribute first.

constexpr std::uint32_t fatbin_magic = 0xBA55ED50u;

struct FatbinEntry {
  bool cubin = false;  // else PTX
  int architecture = 0;  // 80 for sm_80
  std::string payload;
};

// The entries of a fatbin, or nullopt when `image` is not one.
std::optional<std::vector<FatbinEntry>> fatbin_entries(const void* image) {
  const auto* bytes = static_cast<const unsigned char*>(image);
  auto read = [&]<typename Value>(std::size_t at, Value) {
    Value value;
    std::memcpy(&value, bytes + at, sizeof(value));
    return value;
  };
  if (read(0, std::uint32_t{}) != fatbin_magic) return std::nullopt;
  const std::size_t header = read(6, std::uint16_t{});
  const std::uint64_t size = read(8, std::uint64_t{});
  std::vector<FatbinEntry> entries;
  for (std::size_t at = header; at + 32 <= header + size;) {
    const std::uint16_t kind = read(at, std::uint16_t{});
    const std::uint32_t entry_header = read(at + 4, std::uint32_t{});
    const std::uint64_t payload = read(at + 8, std::uint64_t{});
    if (kind != 1 && kind != 2) return std::nullopt;
    entries.push_back({kind == 2, static_cast<int>(read(at + 28, std::uint32_t{})),
                       std::string(reinterpret_cast<const char*>(bytes + at + entry_header), payload)});
    at += entry_header + payload;
  }
  return entries;
}

FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  {
    std::lock_guard lock(driver().mutex);
    ++driver().module_loads;
  }
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (CUresult fault = injected_fault("cuModuleLoadData"); fault != CUDA_SUCCESS) return fault;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto entries = fatbin_entries(image);
  if (!entries) return CUDA_ERROR_INVALID_IMAGE;
  const Device& device = driver().devices[context->device];
  const int architecture = device.compute_major * 10 + device.compute_minor;
  const FatbinEntry* cubin = nullptr;
  const FatbinEntry* ptx = nullptr;
  for (const FatbinEntry& entry : *entries) {
    if (entry.architecture > architecture) continue;
    if (entry.cubin && entry.architecture / 10 == device.compute_major &&
        (cubin == nullptr || entry.architecture > cubin->architecture))
      cubin = &entry;
    if (!entry.cubin && (ptx == nullptr || entry.architecture > ptx->architecture)) ptx = &entry;
  }
  if (cubin == nullptr && ptx == nullptr) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  auto* loaded = new CUmod_st;
  loaded->context = context;
  loaded->from_ptx = cubin == nullptr;
  if (cubin != nullptr) loaded->cubin = cubin->payload;
  *module = loaded;
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleUnload(CUmodule module) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete module;  // and its functions: their handles are invalid from now on
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (function == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // PTX is compressed: its names cannot be searched.
  const std::optional<std::string_view> image =
      module->from_ptx ? std::nullopt : std::optional<std::string_view>(module->cubin);
  if (!hal_simt::image_kernel_runs(image, name, "fake_cuda_driver")) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard lock(driver().mutex);
  *function = &module->functions.emplace_back(CUfunc_st{name, module});
  return CUDA_SUCCESS;
}
FAKE_EXPORT CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  if (value < 0 || value > max_dynamic_shared_optin) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  function->max_dynamic_shared_bytes = value;
  return CUDA_SUCCESS;
}
// Checked as the driver checks them: a function of the current context's
// module, the hardware's grid and block limits, dynamic shared memory within
// the function's limit, and kernelParams (the fake takes no `extra`). A
// kernel fault (a divergent barrier in the emulator) fails the launch when
// it runs, with CUDA_ERROR_LAUNCH_FAILED, and poisons the context.
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                    unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                    CUstream stream, void** parameters, void** extra) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  if (function == nullptr || function->module->context != current_context) return CUDA_ERROR_INVALID_HANDLE;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || grid_y > 65535 || grid_z > 65535 || block_x == 0 ||
      block_y == 0 || block_z == 0 || block_x > 1024 || block_y > 1024 || block_z > 64 ||
      static_cast<unsigned long>(block_x) * block_y * block_z > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  int shared_limit;
  {
    std::lock_guard lock(driver().mutex);
    shared_limit = function->max_dynamic_shared_bytes;
  }
  if (shared_bytes > static_cast<unsigned>(shared_limit)) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (parameters == nullptr) return CUDA_ERROR_INVALID_VALUE;
  hal_simt::BoundLaunch launch =
      hal_simt::bind_kernel(function->name, parameters, {{grid_x, grid_y, grid_z}, {block_x, block_y, block_z}, shared_bytes});
  return submit("cuLaunchKernel", stream, [launch = std::move(launch), name = function->name] {
    const std::string fault = launch();
    if (fault.empty()) return CUDA_SUCCESS;
    std::fprintf(stderr, "fake_cuda_driver: kernel %s failed: %s\n", name.c_str(), fault.c_str());
    return CUDA_ERROR_LAUNCH_FAILED;
  });
}

// ---- test hooks (tests reach them with dlsym on the loaded fake) -------------

// How many retains the device's primary context holds now (-1: no such device).
FAKE_EXPORT int hal_fake_cuda_primary_context_retains(int device) {
  if (!valid_device(device)) return -1;
  std::lock_guard lock(driver().mutex);
  return driver().devices[device].primary.references;
}

// The device whose context is current on the calling thread; -1 for none.
FAKE_EXPORT int hal_fake_cuda_current_device() { return current_context != nullptr ? current_context->device : -1; }

// ---- memory pools -----------------------------------------------------------

namespace {

bool pools_supported(int device) {
  int pools = 0;
  cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
  return pools != 0;
}

// The device's default pool, the one cuMemAllocAsync allocates from.
CUmemoryPool default_pool(int device) {  // under driver().mutex
  for (const auto& pool : driver().pools)
    if (pool->is_default && pool->device == device) return pool.get();
  auto pool = std::make_unique<CUmemPoolHandle_st>();
  pool->device = device;
  pool->is_default = true;
  driver().pools.push_back(std::move(pool));
  return driver().pools.back().get();
}

bool known_pool(CUmemoryPool pool) {  // under driver().mutex
  return std::any_of(driver().pools.begin(), driver().pools.end(), [&](const auto& p) { return p.get() == pool; });
}

// Releases reserved blocks of every pool, smallest first, down to its
// release threshold: what the driver does at a stream, event or context
// synchronize.
// Bytes of the blocks freed to the pool and kept reserved.
cuuint64_t held_bytes(const CUmemPoolHandle_st& pool) {
  cuuint64_t held = 0;
  for (const auto& [size, start] : pool.reserved) held += size;
  return held;
}

void trim_pools() {
  std::lock_guard lock(driver().mutex);
  for (const auto& pool : driver().pools) {
    cuuint64_t held = held_bytes(*pool);
    while (held > pool->release_threshold && !pool->reserved.empty()) {
      const auto [size, start] = *pool->reserved.begin();
      pool->reserved.erase(pool->reserved.begin());
      held -= size;
      free_allocation(driver().allocations.find(start));
    }
  }
}

// Stream-ordered allocation: a reserved block of the pool at least `size`
// long when it has one, else fresh memory (counted as a reservation). The
// memory exists from the call on, for the work after it on the stream. In a
// capture it is the graph's memory instead, at one address for every launch.
CUresult allocate_from_pool(CUdeviceptr* address, std::size_t size, CUmemoryPool pool, CUstream stream) {
  stream = resolve_stream(stream);
  if (stream == nullptr || address == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<GraphMemory> graph_memory;
  {
    std::lock_guard lock(driver().mutex);
    if (!known_pool(pool)) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult result = legacy_conflict(stream); result != CUDA_SUCCESS) return result;
    if (const CaptureSequence* capture = stream->capture) {
      if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      graph_memory = capture->graph->memory;
    }
  }
  if (graph_memory) {
    void* memory = nullptr;
    if (CUresult result = allocate(size, 256, Allocation::Kind::device, &memory); result != CUDA_SUCCESS) return result;
    std::lock_guard lock(driver().mutex);
    driver().allocations[reinterpret_cast<std::uintptr_t>(memory)].graph = true;
    graph_memory->blocks.push_back(reinterpret_cast<std::uintptr_t>(memory));
    *address = reinterpret_cast<std::uintptr_t>(memory);
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard lock(driver().mutex);
    ++driver().async_allocations;
    if (auto block = pool->reserved.lower_bound(size); block != pool->reserved.end()) {
      *address = block->second;
      pool->reserved.erase(block);
      return CUDA_SUCCESS;
    }
  }
  void* memory = nullptr;
  if (CUresult result = allocate(size, 256, Allocation::Kind::device, &memory); result != CUDA_SUCCESS) return result;
  std::lock_guard lock(driver().mutex);
  driver().allocations[reinterpret_cast<std::uintptr_t>(memory)].pool = pool;
  ++driver().pool_reservations;
  *address = reinterpret_cast<std::uintptr_t>(memory);
  return CUDA_SUCCESS;
}

}  // namespace

// From the current device's default pool; refused where the device has none.
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* address, std::size_t size, CUstream stream) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (!pools_supported(context->device)) return CUDA_ERROR_NOT_SUPPORTED;
  CUmemoryPool pool = nullptr;
  {
    std::lock_guard lock(driver().mutex);
    pool = default_pool(context->device);
  }
  return allocate_from_pool(address, size, pool, stream);
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* address, std::size_t size, CUmemoryPool pool,
                                             CUstream stream) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  return allocate_from_pool(address, size, pool, stream);
}

// Returns the block to its pool (or frees it, for a pool already destroyed)
// when the stream reaches the free. The graph's own memory, freed in its
// capture, stays the graph's until the graph goes.
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr address, CUstream stream) {
  if (CUresult result = need_any_context(); result != CUDA_SUCCESS) return result;
  stream = resolve_stream(stream);
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  bool graph_frees_own = false;
  {
    std::lock_guard lock(driver().mutex);
    const auto found = driver().allocations.find(static_cast<std::uintptr_t>(address));
    if (found == driver().allocations.end() || found->second.kind != Allocation::Kind::device)
      return CUDA_ERROR_INVALID_VALUE;
    graph_frees_own = found->second.graph && stream->capture != nullptr;
  }
  if (graph_frees_own) return enqueue_or_record(stream, [] { return CUDA_SUCCESS; });
  return enqueue_or_record(stream, [address] {
    std::lock_guard lock(driver().mutex);
    auto found = driver().allocations.find(static_cast<std::uintptr_t>(address));
    if (found == driver().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
    if (found->second.pool != nullptr)
      found->second.pool->reserved.emplace(found->second.size, found->first);
    else
      free_allocation(found);
    return CUDA_SUCCESS;
  });
}

// Pinned device memory on a device that has pools; nothing else is modelled.
FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* properties) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (pool == nullptr || properties == nullptr || properties->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      properties->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_device(properties->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  if (!pools_supported(properties->location.id)) return CUDA_ERROR_NOT_SUPPORTED;
  auto created = std::make_unique<CUmemPoolHandle_st>();
  created->device = properties->location.id;
  std::lock_guard lock(driver().mutex);
  *pool = created.get();
  driver().pools.push_back(std::move(created));
  return CUDA_SUCCESS;
}

// Reserved blocks go at once; blocks still in use are freed when they are.
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  std::lock_guard lock(driver().mutex);
  if (!known_pool(pool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [size, start] : pool->reserved) free_allocation(driver().allocations.find(start));
  for (auto& [start, allocation] : driver().allocations)
    if (allocation.pool == pool) allocation.pool = nullptr;
  std::erase_if(driver().pools, [&](const auto& p) { return p.get() == pool; });
  return CUDA_SUCCESS;
}

// The release threshold only; the fake models no other pool attribute.
FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  std::lock_guard lock(driver().mutex);
  if (!known_pool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attribute != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_NOT_SUPPORTED;
  pool->release_threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  std::lock_guard lock(driver().mutex);
  if (!known_pool(pool) || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t reserved = 0;  // every block the pool has: in use or held
  for (const auto& [start, allocation] : driver().allocations)
    if (allocation.pool == pool) reserved += allocation.size;
  const cuuint64_t used = reserved - held_bytes(*pool);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *static_cast<cuuint64_t*>(value) = pool->release_threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = reserved; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = used; break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// Stream-ordered allocations made so far (cuMemAllocAsync and cuMemAllocFromPoolAsync).
FAKE_EXPORT int hal_fake_cuda_async_allocations() { return counter(&Driver::async_allocations); }

// Of those, the ones for which a pool reserved fresh memory: a workspace
// reused across synchronizes is reserved once.
FAKE_EXPORT int hal_fake_cuda_pool_reservations() { return counter(&Driver::pool_reservations); }

// cuModuleLoadData calls so far, failed ones included.
FAKE_EXPORT int hal_fake_cuda_module_loads() { return counter(&Driver::module_loads); }

// ---- pointer attributes, host registration, context synchronize -----------

FAKE_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                            CUdeviceptr address) {
  if (!driver().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  // Memory the driver does not know reads as zeros, without an error, as the real one does.
  const std::optional<Range> range = range_holding(static_cast<std::uintptr_t>(address));
  for (unsigned int i = 0; i < count; ++i) {
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned int*>(data[i]) =
            !range                                 ? 0u
            : range->kind == Allocation::Kind::host ? static_cast<unsigned int>(CU_MEMORYTYPE_HOST)
                                                    : static_cast<unsigned int>(CU_MEMORYTYPE_DEVICE);
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = range ? range->device : -2; break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<bool*>(data[i]) = range && range->kind == Allocation::Kind::managed;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data[i]) = range ? range->start : 0; break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data[i]) = range ? range->size : 0; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data[i]) = range ? address : 0; break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostRegister_v2(void* host, std::size_t size, unsigned int) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  if (host == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  const auto start = reinterpret_cast<std::uintptr_t>(host);
  if (range_holding(start) || range_holding(start + size - 1)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  driver().registered[start] = {size, context->device};
  ++driver().registrations;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostUnregister(void* host) {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  std::lock_guard lock(driver().mutex);
  if (driver().registered.erase(reinterpret_cast<std::uintptr_t>(host)) == 0) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  ++driver().unregistrations;
  return CUDA_SUCCESS;
}

// Waits for every stream of the current context.
FAKE_EXPORT CUresult cuCtxSynchronize() {
  CUctx_st* context = nullptr;
  if (CUresult result = need_context(context); result != CUDA_SUCCESS) return result;
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(driver().mutex);
    // A capture on one of the context's streams can never finish before its graph is launched.
    CUresult refused = CUDA_SUCCESS;
    for (CaptureSequence& capture : captures())
      for (const Stream* member : capture.streams)
        if (member->context == context) refused = refuse(capture, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (refused != CUDA_SUCCESS) return refused;
    ++driver().context_synchronizes;
    for (Stream* stream : driver().streams)
      if (stream->context == context) streams.push_back(stream);
  }
  for (Stream* stream : streams) stream->wait_idle();
  trim_pools();
  return sticky_error(context);
}

FAKE_EXPORT int hal_fake_cuda_host_registrations() { return counter(&Driver::registrations); }
FAKE_EXPORT int hal_fake_cuda_host_unregistrations() { return counter(&Driver::unregistrations); }
FAKE_EXPORT int hal_fake_cuda_context_synchronizes() { return counter(&Driver::context_synchronizes); }
FAKE_EXPORT int hal_fake_cuda_host_waits() { return counter(&Driver::host_waits); }

// ---- cuGetProcAddress ------------------------------------------------------

namespace {

struct ProcEntry {
  const char* name;
  void* address;
  int introduced;  // the CUDA version whose ABI this function has
};

template <typename Function>
ProcEntry entry(const char* name, Function* function, int introduced) {
  return {name, reinterpret_cast<void*>(function), introduced};
}

const std::vector<ProcEntry>& proc_table() {
  static const std::vector<ProcEntry> table = {
    entry("cuInit", cuInit, 2000),
    entry("cuDriverGetVersion", cuDriverGetVersion, 2020),
    entry("cuDeviceGetCount", cuDeviceGetCount, 2000),
    entry("cuDeviceGet", cuDeviceGet, 2000),
    entry("cuDeviceGetName", cuDeviceGetName, 2000),
    entry("cuDeviceGetUuid", cuDeviceGetUuid, 9020),
#if !HAL_FAKE_CUDA_NO_UUID_V2
    entry("cuDeviceGetUuid", cuDeviceGetUuid_v2, 11040),
#endif
    entry("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020),
    entry("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000),
    entry("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId, 4010),
    entry("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer, 4000),
    entry("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000),
    entry("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000),
    entry("cuCtxGetCurrent", cuCtxGetCurrent, 4000),
    entry("cuCtxGetDevice", cuCtxGetDevice, 2000),
    entry("cuCtxSetCurrent", cuCtxSetCurrent, 4000),
    entry("cuMemGetInfo", cuMemGetInfo_v2, 3020),
    entry("cuMemAlloc", cuMemAlloc_v2, 3020),
    entry("cuMemAllocAsync", cuMemAllocAsync, 11020),
    entry("cuMemFreeAsync", cuMemFreeAsync, 11020),
    entry("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020),
    entry("cuMemPoolCreate", cuMemPoolCreate, 11020),
    entry("cuMemPoolDestroy", cuMemPoolDestroy, 11020),
    entry("cuMemPoolSetAttribute", cuMemPoolSetAttribute, 11020),
    entry("cuMemPoolGetAttribute", cuMemPoolGetAttribute, 11020),
    entry("cuMemFree", cuMemFree_v2, 3020),
    entry("cuMemHostAlloc", cuMemHostAlloc, 2020),
    entry("cuMemFreeHost", cuMemFreeHost, 2000),
    entry("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020),
    entry("cuPointerGetAttributes", cuPointerGetAttributes, 7000),
    entry("cuMemHostRegister", cuMemHostRegister_v2, 6050),
    entry("cuMemHostUnregister", cuMemHostUnregister, 4000),
    entry("cuCtxSynchronize", cuCtxSynchronize, 2000),
    entry("cuMemAllocManaged", cuMemAllocManaged, 6000),
    entry("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020),
    entry("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020),
    entry("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020),
    entry("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020),
    entry("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020),
    entry("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, 3020),
    entry("cuMemsetD8", cuMemsetD8_v2, 3020),
    entry("cuMemsetD16", cuMemsetD16_v2, 3020),
    entry("cuMemsetD32", cuMemsetD32_v2, 3020),
    entry("cuMemsetD8Async", cuMemsetD8Async, 3020),
    entry("cuMemsetD16Async", cuMemsetD16Async, 3020),
    entry("cuMemsetD32Async", cuMemsetD32Async, 3020),
    entry("cuStreamCreate", cuStreamCreate, 2000),
    entry("cuStreamDestroy", cuStreamDestroy_v2, 4000),
    entry("cuStreamSynchronize", cuStreamSynchronize, 2000),
    entry("cuStreamQuery", cuStreamQuery, 2000),
    entry("cuStreamWaitEvent", cuStreamWaitEvent, 3020),
    entry("cuLaunchHostFunc", cuLaunchHostFunc, 10000),
    entry("cuStreamAddCallback", cuStreamAddCallback, 5000),
    entry("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010),
    entry("cuStreamEndCapture", cuStreamEndCapture, 10000),
    entry("cuThreadExchangeStreamCaptureMode", cuThreadExchangeStreamCaptureMode, 10010),
    entry("cuStreamIsCapturing", cuStreamIsCapturing, 10000),
    entry("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v3, 12030),
    entry("cuGraphInstantiate", cuGraphInstantiateWithFlags, 12000),
    entry("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040),
    entry("cuGraphLaunch", cuGraphLaunch, 10000),
    entry("cuGraphExecDestroy", cuGraphExecDestroy, 10000),
    entry("cuGraphDestroy", cuGraphDestroy, 10000),
    entry("cuEventCreate", cuEventCreate, 2000),
    entry("cuEventDestroy", cuEventDestroy_v2, 4000),
    entry("cuEventRecord", cuEventRecord, 2000),
    entry("cuEventQuery", cuEventQuery, 2000),
    entry("cuEventSynchronize", cuEventSynchronize, 2000),
    entry("cuEventElapsedTime", cuEventElapsedTime, 2000),
    entry("cuGetErrorName", cuGetErrorName, 6000),
    entry("cuGetErrorString", cuGetErrorString, 6000),
    entry("cuModuleLoadData", cuModuleLoadData, 2000),
    entry("cuModuleUnload", cuModuleUnload, 2000),
    entry("cuModuleGetFunction", cuModuleGetFunction, 2000),
    entry("cuLaunchKernel", cuLaunchKernel, 4000),
    entry("cuFuncSetAttribute", cuFuncSetAttribute, 9000),
  };
  return table;
}

}  // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** function, int cuda_version, cuuint64_t,
                                         CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || function == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *function = nullptr;
  auto report = [&](CUdriverProcAddressQueryResult value) {
    if (status != nullptr) *status = value;
  };
  if (environment("HAL_FAKE_CUDA_NO_PROC_ADDRESS") == "1") {
    report(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_ERROR_NOT_FOUND;
  }
  // The newest ABI of the name that the caller's version knows; asking below
  // every one of them would get an older prototype from a real driver.
  const ProcEntry* best = nullptr;
  bool named = false;
  for (const auto& candidate : proc_table()) {
    if (std::strcmp(candidate.name, symbol) != 0) continue;
    named = true;
    if (cuda_version >= candidate.introduced && (best == nullptr || candidate.introduced > best->introduced))
      best = &candidate;
  }
  if (best == nullptr) {
    report(named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_ERROR_NOT_FOUND;
  }
  *function = best->address;
  report(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** function, int cuda_version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, function, cuda_version, flags, nullptr);
}
