// A test double of an NCCL-compatible library: the subset of NCCL's API the
// hal GPU backends use, running the collectives for real between processes
// on host-addressable device memory (the fake CUDA driver's and the fake HIP
// runtime's). The unique id names a directory; ranks meet there and move
// data as files, one per message (written under a temporary name, then
// renamed, so a reader never sees half of one). Operations run on the
// caller's stream as host functions of the loaded fake driver, so they are
// ordered with the copies around them; on a stream capturing a graph the host
// function is recorded and the operation runs at each launch of the graph
// (its data is kept until the communicator is destroyed, as NCCL's persistent
// plans are kept with the graph).
//
// Build variants (compile definitions):
//   FAKE_NCCL_HIP     streams are HIP's (librccl.so.1, RCCL's ncclAllToAll)
//   FAKE_NCCL_LEGACY  an old NCCL (2.8): no ncclAlltoAll, ncclCommInitRankConfig,
//                     ncclGetLastError, ncclGather or ncclScatter
//
// Environment (read on each call): HAL_FAKE_NCCL_VERSION (ncclGetVersion's
// code), HAL_FAKE_NCCL_DIR (where ids are created), and the faults
// HAL_FAKE_NCCL_INIT_HANG_RANK=R, HAL_FAKE_NCCL_HANG=R:N and
// HAL_FAKE_NCCL_ASYNC_ERROR=R:N (operation N of rank R's communicator, from 0).
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---- NCCL's ABI (values from nccl.h) ------------------------------------------
// Declared here, not taken from shims/nccl.hpp: the fake plays the vendor, so
// a value the shim gets wrong shows up instead of agreeing with itself.
using Result = int;
constexpr Result success = 0, unhandled_device_error = 1, system_error = 2, internal_error = 3, invalid_argument = 4,
                 invalid_usage = 5, remote_error = 6, in_progress = 7;
enum DataType { i8 = 0, u8 = 1, i32 = 2, u32 = 3, i64 = 4, u64 = 5, f16 = 6, f32 = 7, f64 = 8, bf16 = 9 };
enum Reduction { sum = 0, prod = 1, max = 2, min = 3, avg = 4 };
struct UniqueId {
  char internal[128];
};
struct Config {  // the NCCL 2.14 prefix
  std::size_t size;
  unsigned int magic, version;
  int blocking;
};
constexpr unsigned int config_magic = 0xcafebeef;  // what NCCL_CONFIG_INITIALIZER sets
constexpr int version_with_bf16_and_avg = 21000;   // NCCL 2.10

#ifdef FAKE_NCCL_LEGACY
constexpr int default_version = 2804;
#else
constexpr int default_version = 22809;
#endif

int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}
int library_version() { return environment_int("HAL_FAKE_NCCL_VERSION", default_version); }
bool has_bf16_and_avg() { return library_version() >= version_with_bf16_and_avg; }

// "R:N" matches rank R's operation N.
bool fault_matches(const char* variable, int rank, std::uint64_t operation) {
  const char* value = std::getenv(variable);
  if (value == nullptr) return false;
  int fault_rank = -1;
  unsigned long long fault_operation = 0;
  return std::sscanf(value, "%d:%llu", &fault_rank, &fault_operation) == 2 && fault_rank == rank &&
         fault_operation == operation;
}

std::mutex last_error_mutex;
std::string last_error_text;
Result failure(Result result, const std::string& text) {
  std::lock_guard lock(last_error_mutex);
  last_error_text = "fake NCCL: " + text;
  return result;
}

std::size_t size_of(int type) {
  switch (type) {
    case i8: case u8: return 1;
    case f16: case bf16: return 2;
    case i32: case u32: case f32: return 4;
    case i64: case u64: case f64: return 8;
  }
  return 0;
}

// ---- element arithmetic: floats in double, integers wrapping in 64 bits -------

float float_from_bf16(std::uint16_t half) {
  const std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}
std::uint16_t bf16_from_float(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

bool is_float(int type) { return type == f16 || type == bf16 || type == f32 || type == f64; }
bool is_signed(int type) { return type == i8 || type == i32 || type == i64; }

double load_float(int type, const std::uint8_t* base, std::size_t i) {
  switch (type) {
    case f16: { _Float16 v; std::memcpy(&v, base + 2 * i, 2); return static_cast<double>(v); }
    case bf16: { std::uint16_t v; std::memcpy(&v, base + 2 * i, 2); return float_from_bf16(v); }
    case f32: { float v; std::memcpy(&v, base + 4 * i, 4); return v; }
    default: { double v; std::memcpy(&v, base + 8 * i, 8); return v; }
  }
}
void store_float(int type, std::uint8_t* base, std::size_t i, double value) {
  switch (type) {
    case f16: { const _Float16 v = static_cast<_Float16>(static_cast<float>(value)); std::memcpy(base + 2 * i, &v, 2); break; }
    case bf16: { const std::uint16_t v = bf16_from_float(static_cast<float>(value)); std::memcpy(base + 2 * i, &v, 2); break; }
    case f32: { const float v = static_cast<float>(value); std::memcpy(base + 4 * i, &v, 4); break; }
    default: std::memcpy(base + 8 * i, &value, 8);
  }
}
// Sign- or zero-extended to 64 bits.
std::int64_t load_integer(int type, const std::uint8_t* base, std::size_t i) {
  switch (type) {
    case i8: return static_cast<std::int8_t>(base[i]);
    case u8: return base[i];
    case i32: { std::int32_t v; std::memcpy(&v, base + 4 * i, 4); return v; }
    case u32: { std::uint32_t v; std::memcpy(&v, base + 4 * i, 4); return v; }
    default: { std::int64_t v; std::memcpy(&v, base + 8 * i, 8); return v; }
  }
}
void store_integer(int type, std::uint8_t* base, std::size_t i, std::int64_t value) {
  std::memcpy(base + size_of(type) * i, &value, size_of(type));  // little endian: the low bytes, so it wraps
}

// Reduces sources (one per rank, in rank order) element-wise into out.
void reduce(int type, int op, const std::vector<const std::uint8_t*>& sources, std::size_t count,
            std::uint8_t* out) {
  const auto ranks = static_cast<double>(sources.size());
  for (std::size_t i = 0; i < count; ++i) {
    if (is_float(type)) {
      double result = load_float(type, sources[0], i);
      for (std::size_t r = 1; r < sources.size(); ++r) {
        const double v = load_float(type, sources[r], i);
        result = op == prod ? result * v : op == max ? std::max(result, v) : op == min ? std::min(result, v) : result + v;
      }
      store_float(type, out, i, op == avg ? result / ranks : result);
    } else {
      std::uint64_t result = static_cast<std::uint64_t>(load_integer(type, sources[0], i));
      for (std::size_t r = 1; r < sources.size(); ++r) {
        const std::int64_t v = load_integer(type, sources[r], i);
        const auto u = static_cast<std::uint64_t>(v);
        const bool less = is_signed(type) ? v < static_cast<std::int64_t>(result) : u < result;
        result = op == prod ? result * u : op == max ? (less ? result : u) : op == min ? (less ? u : result) : result + u;
      }
      store_integer(type, out, i, static_cast<std::int64_t>(result));
      if (op == avg) {  // the wrapped sum, divided in the type's arithmetic
        const std::int64_t wrapped = load_integer(type, out, i);
        store_integer(type, out, i, is_signed(type) ? wrapped / static_cast<std::int64_t>(ranks)
                                                    : static_cast<std::int64_t>(static_cast<std::uint64_t>(wrapped) /
                                                                                sources.size()));
      }
    }
  }
}

// ---- communicators ---------------------------------------------------------------

struct CommState {
  std::filesystem::path directory;
  std::string device;  // the PCI bus id current when the rank was created ("": unknown)
  int ranks = 0, rank = 0;
  std::atomic<bool> aborted{false};
  std::atomic<bool> initialized{false};
  std::atomic<Result> async_error{success};
  std::thread init_thread;
  std::mutex mutex;                 // the sequence counters and `pending`
  std::condition_variable idle;
  std::vector<std::uint64_t> sent, received;  // messages per peer, for file names
  int pending = 0;                  // launches enqueued but not finished
  int active = 0;                   // launches running on a stream now
  std::uint64_t launches = 0;       // numbers the launches for the fault variables

  std::filesystem::path message(int source, int target, std::uint64_t sequence) const {
    return directory / ("m." + std::to_string(source) + "." + std::to_string(target) + "." + std::to_string(sequence));
  }
  void set_async_error(Result result, const std::string& text) {
    Result expected = success;
    if (async_error.compare_exchange_strong(expected, result)) failure(result, text);
  }
};

}  // namespace

struct Launch;

struct ncclComm {
  std::shared_ptr<CommState> state;
  // Operations captured into graphs: run at each launch of the graph.
  std::mutex captured_mutex;
  std::vector<std::unique_ptr<Launch>> captured;
};

namespace {

// Waits for a condition, polling, until it holds or the communicator is aborted.
template <typename Condition>
bool wait_for(const CommState& state, Condition&& condition) {
  auto pause = std::chrono::microseconds(20);
  while (!condition()) {
    if (state.aborted.load()) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return true;
}

bool file_exists(const std::filesystem::path& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0;
}

// The PCI bus id of the calling thread's current device, from the driver
// loaded in this process; "" when it cannot say.
std::string current_device_bus_id() {
  char bus_id[64] = {};
  int device = -1;
#ifdef FAKE_NCCL_HIP
  void* library = nullptr;
  for (const char* name : {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"})
    if ((library = ::dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) break;
  const char* current = "hipGetDevice";
  const char* bus = "hipDeviceGetPCIBusId";
#else
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  const char* current = "cuCtxGetDevice";
  const char* bus = "cuDeviceGetPCIBusId";
#endif
  if (library == nullptr) return {};
  auto get_device = reinterpret_cast<int (*)(int*)>(::dlsym(library, current));
  auto get_bus_id = reinterpret_cast<int (*)(char*, int, int)>(::dlsym(library, bus));
  const bool known = get_device != nullptr && get_bus_id != nullptr && get_device(&device) == 0 &&
                     get_bus_id(bus_id, sizeof(bus_id), device) == 0;
  ::dlclose(library);
  return known ? bus_id : "";
}

// Registers this rank (its pid and device) and waits for the others: the
// bootstrap. Two ranks on one device fail as NCCL fails them.
void join(CommState& state) {
  const char* hang = std::getenv("HAL_FAKE_NCCL_INIT_HANG_RANK");
  if (hang != nullptr && *hang != '\0' && std::atoi(hang) == state.rank) {
    wait_for(state, [] { return false; });  // never arrives; only an abort ends this
    return;
  }
  const auto rank_file = [&](int rank) { return state.directory / ("rank." + std::to_string(rank)); };
  const std::string& device = state.device;
  {
    // Written whole, then renamed: a peer never reads a half-written file.
    const std::filesystem::path partial = state.directory / ("partial." + std::to_string(state.rank));
    std::ofstream(partial) << ::getpid() << " " << device;
    std::filesystem::rename(partial, rank_file(state.rank));
  }
  const bool all = wait_for(state, [&] {
    for (int peer = 0; peer < state.ranks; ++peer)
      if (!file_exists(rank_file(peer))) return false;
    return true;
  });
  if (!all) return;
  for (int peer = 0; peer < state.ranks && !device.empty(); ++peer) {
    long pid = 0;
    std::string peer_device;
    std::ifstream(rank_file(peer)) >> pid >> peer_device;
    if (peer != state.rank && peer_device == device) {
      state.set_async_error(invalid_usage, "Duplicate GPU detected : rank " + std::to_string(state.rank) +
                                               " and rank " + std::to_string(peer) + " both on busId " + device);
      return;
    }
  }
  state.initialized = true;
}

// Each rank marks that it left; the last one removes the directory.
void leave(CommState& state) {
  std::error_code ignored;
  std::ofstream(state.directory / ("left." + std::to_string(state.rank))) << ::getpid();
  int left = 0;
  for (int peer = 0; peer < state.ranks; ++peer)
    left += file_exists(state.directory / ("left." + std::to_string(peer))) ? 1 : 0;
  if (left == state.ranks) std::filesystem::remove_all(state.directory, ignored);
}

// One NCCL call, with its device addresses (host-addressable here).
struct Task {
  enum Kind { all_reduce, broadcast, reduce_to_root, all_gather, reduce_scatter, all_to_all, gather, scatter, send, recv };
  Kind kind;
  const std::uint8_t* send_buffer;
  std::uint8_t* recv_buffer;
  std::size_t count;
  int type, op, root;
  std::size_t bytes() const { return count * size_of(type); }
};

void post(CommState& state, int target, const std::uint8_t* data, std::size_t bytes) {
  std::uint64_t sequence;
  {
    std::lock_guard lock(state.mutex);
    sequence = state.sent[static_cast<std::size_t>(target)]++;
  }
  const std::filesystem::path path = state.message(state.rank, target, sequence);
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  }
  std::filesystem::rename(temporary, path);
}

// Receives the next message from source into data; false when aborted.
bool take(CommState& state, int source, std::uint8_t* data, std::size_t bytes) {
  std::uint64_t sequence;
  {
    std::lock_guard lock(state.mutex);
    sequence = state.received[static_cast<std::size_t>(source)]++;
  }
  const std::filesystem::path path = state.message(source, state.rank, sequence);
  if (!wait_for(state, [&] { return file_exists(path); })) return false;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = static_cast<std::size_t>(in.tellg());
  if (size != bytes) {
    state.set_async_error(invalid_usage, "rank " + std::to_string(source) + " sent " + std::to_string(size) +
                                             " bytes where rank " + std::to_string(state.rank) + " expected " +
                                             std::to_string(bytes) + " (mismatched counts or types)");
    wait_for(state, [] { return false; });  // like a kernel waiting for data that never comes
    return false;
  }
  in.seekg(0);
  in.read(reinterpret_cast<char*>(data), static_cast<std::streamsize>(bytes));
  in.close();
  std::filesystem::remove(path);
  return true;
}

// Phase 1 of a task: every message it sends. Posting all of a group's sends
// before any receive is what makes grouped send/recv deadlock-free.
void post_messages(CommState& state, const Task& task) {
  const int n = state.ranks, me = state.rank;
  const std::size_t bytes = task.bytes();
  if (task.kind == Task::send) {  // to any rank, itself included, as NCCL allows in a group
    post(state, task.root, task.send_buffer, bytes);
    return;
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    switch (task.kind) {
      case Task::all_reduce: case Task::all_gather: post(state, peer, task.send_buffer, bytes); break;
      case Task::broadcast: if (me == task.root) post(state, peer, task.send_buffer, bytes); break;
      case Task::reduce_to_root: case Task::gather: if (peer == task.root) post(state, peer, task.send_buffer, bytes); break;
      case Task::reduce_scatter: case Task::all_to_all: post(state, peer, task.send_buffer + peer * bytes, bytes); break;
      case Task::scatter: if (me == task.root) post(state, peer, task.send_buffer + peer * bytes, bytes); break;
      case Task::send: case Task::recv: break;
    }
  }
}

// Receives one block from every peer (own block from `own`), in rank order.
bool collect(CommState& state, const std::uint8_t* own, std::size_t bytes, std::vector<std::vector<std::uint8_t>>& blocks) {
  blocks.assign(static_cast<std::size_t>(state.ranks), {});
  for (int peer = 0; peer < state.ranks; ++peer) {
    auto& block = blocks[static_cast<std::size_t>(peer)];
    block.resize(bytes);
    if (peer == state.rank) {
      if (bytes > 0) std::memcpy(block.data(), own, bytes);
    } else if (!take(state, peer, block.data(), bytes)) {
      return false;
    }
  }
  return true;
}

void reduce_blocks(const Task& task, const std::vector<std::vector<std::uint8_t>>& blocks, std::uint8_t* out) {
  std::vector<const std::uint8_t*> sources;
  for (const auto& block : blocks) sources.push_back(block.data());
  reduce(task.type, task.op, sources, task.count, out);
}

// Phase 2: every message it receives, and the result.
bool complete(CommState& state, const Task& task) {
  const int n = state.ranks, me = state.rank;
  const std::size_t bytes = task.bytes();
  std::vector<std::vector<std::uint8_t>> blocks;
  switch (task.kind) {
    case Task::all_reduce:
      if (!collect(state, task.send_buffer, bytes, blocks)) return false;
      reduce_blocks(task, blocks, task.recv_buffer);
      return true;
    case Task::reduce_to_root:
      if (me != task.root) return true;
      if (!collect(state, task.send_buffer, bytes, blocks)) return false;
      reduce_blocks(task, blocks, task.recv_buffer);
      return true;
    case Task::reduce_scatter:
      if (!collect(state, task.send_buffer + me * bytes, bytes, blocks)) return false;
      reduce_blocks(task, blocks, task.recv_buffer);
      return true;
    case Task::broadcast:
      if (me == task.root) {
        if (task.recv_buffer != task.send_buffer && bytes > 0) std::memmove(task.recv_buffer, task.send_buffer, bytes);
        return true;
      }
      return take(state, task.root, task.recv_buffer, bytes);
    case Task::all_gather: case Task::gather:
      if (task.kind == Task::gather && me != task.root) return true;
      for (int peer = 0; peer < n; ++peer) {
        std::uint8_t* target = task.recv_buffer + peer * bytes;
        if (peer == me) {
          if (target != task.send_buffer && bytes > 0) std::memmove(target, task.send_buffer, bytes);
        } else if (!take(state, peer, target, bytes)) {
          return false;
        }
      }
      return true;
    case Task::all_to_all:
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) {
          if (task.recv_buffer != task.send_buffer && bytes > 0)
            std::memmove(task.recv_buffer + me * bytes, task.send_buffer + me * bytes, bytes);
        } else if (!take(state, peer, task.recv_buffer + peer * bytes, bytes)) {
          return false;
        }
      }
      return true;
    case Task::scatter:
      if (me == task.root) {
        if (task.recv_buffer != task.send_buffer + me * bytes && bytes > 0)
          std::memmove(task.recv_buffer, task.send_buffer + me * bytes, bytes);
        return true;
      }
      return take(state, task.root, task.recv_buffer, bytes);
    case Task::recv:
      return take(state, task.root, task.recv_buffer, bytes);
    case Task::send:
      return true;
  }
  return true;
}

}  // namespace

// What one host function on the stream runs: a call, or a group of them.
struct Launch {
  std::shared_ptr<CommState> state;
  std::vector<Task> tasks;
  std::uint64_t number = 0;
  bool captured = false;  // recorded into a graph: run at each of its launches, owned by the communicator
};

namespace {

void finish(CommState& state, bool was_active) {
  std::lock_guard lock(state.mutex);
  --state.pending;
  if (was_active) --state.active;
  state.idle.notify_all();
}

void run_launch(void* data) {
  Launch* launch = static_cast<Launch*>(data);
  const std::unique_ptr<Launch> owned(launch->captured ? nullptr : launch);
  CommState& state = *launch->state;
  {
    std::lock_guard lock(state.mutex);
    ++state.active;
    if (launch->captured) ++state.pending;  // counted when the graph runs it, not when it was recorded
  }
  if (!state.aborted.load() && state.async_error.load() == success) {
    if (fault_matches("HAL_FAKE_NCCL_HANG", state.rank, launch->number)) {
      wait_for(state, [] { return false; });
    } else if (fault_matches("HAL_FAKE_NCCL_ASYNC_ERROR", state.rank, launch->number)) {
      state.set_async_error(remote_error, "injected remote error on rank " + std::to_string(state.rank) +
                                              " in operation " + std::to_string(launch->number) +
                                              " (HAL_FAKE_NCCL_ASYNC_ERROR)");
      wait_for(state, [] { return false; });  // a kernel whose peer is gone waits until the abort
    } else {
      for (const Task& task : launch->tasks) post_messages(state, task);
      for (const Task& task : launch->tasks)
        if (!complete(state, task)) break;
    }
  }
  finish(state, true);
}

// ---- the stream: a host function of the fake driver that is loaded ----------------

#ifdef FAKE_NCCL_HIP
using HostFunction = int (*)(void* stream, void (*function)(void*), void* data);
using StreamCallback = int (*)(void* stream, void (*callback)(void*, int, void*), void* data, unsigned int flags);
void run_stream_callback(void*, int, void* data) { run_launch(data); }
#else
using HostFunction = int (*)(void* stream, void (*function)(void*), void* data);
#endif

// Whether the stream is capturing a graph (the fake HIP runtime has no capture).
bool stream_capturing(void* stream) {
#ifdef FAKE_NCCL_HIP
  (void)stream;
  return false;
#else
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  auto is_capturing = reinterpret_cast<int (*)(void*, int*)>(::dlsym(driver, "cuStreamIsCapturing"));
  ::dlclose(driver);
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  return is_capturing != nullptr && is_capturing(stream, &status) == 0 && status != 0;
#endif
}

Result launch_on_stream(ncclComm* comm, void* stream, std::unique_ptr<Launch> launch) {
  // Once enqueued, an uncaptured launch may run and be freed on the stream's
  // thread at any moment: nothing of it is read after the enqueue.
  const bool captured = launch->captured;
#ifdef FAKE_NCCL_HIP
  void* runtime = nullptr;
  for (const char* name : {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"})
    if ((runtime = ::dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) break;
  if (runtime == nullptr) return failure(unhandled_device_error, "no HIP runtime is loaded in this process");
  auto host_function = reinterpret_cast<HostFunction>(::dlsym(runtime, "hipLaunchHostFunc"));
  auto stream_callback = reinterpret_cast<StreamCallback>(::dlsym(runtime, "hipStreamAddCallback"));
  ::dlclose(runtime);
  const int error = host_function != nullptr ? host_function(stream, run_launch, launch.get())
                                             : stream_callback(stream, run_stream_callback, launch.get(), 0);
#else
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return failure(unhandled_device_error, "libcuda.so.1 is not loaded in this process");
  auto host_function = reinterpret_cast<HostFunction>(::dlsym(driver, "cuLaunchHostFunc"));
  ::dlclose(driver);
  const int error = host_function != nullptr ? host_function(stream, run_launch, launch.get()) : -1;
#endif
  if (error != 0) return failure(unhandled_device_error, "enqueueing on the stream failed with " + std::to_string(error));
  if (captured) {
    std::lock_guard lock(comm->captured_mutex);
    comm->captured.push_back(std::move(launch));
  } else {
    launch.release();  // run_launch owns it
  }
  return success;
}

// ---- groups ---------------------------------------------------------------------------

struct PendingCall {
  ncclComm* comm;
  void* stream;
  Task task;
};
thread_local int group_depth = 0;
thread_local std::vector<PendingCall> group_calls;

Result launch_calls(std::vector<PendingCall> calls) {
  // One launch per communicator and stream, in the order of first appearance.
  while (!calls.empty()) {
    ncclComm* comm = calls.front().comm;
    void* stream = calls.front().stream;
    auto launch = std::make_unique<Launch>();
    launch->state = comm->state;
    std::vector<PendingCall> rest;
    for (PendingCall& call : calls)
      (call.comm == comm && call.stream == stream ? launch->tasks.push_back(call.task) : rest.push_back(call));
    calls = std::move(rest);
    launch->captured = stream_capturing(stream);
    {
      std::lock_guard lock(comm->state->mutex);
      launch->number = comm->state->launches++;
      if (!launch->captured) ++comm->state->pending;
    }
    const bool captured = launch->captured;
    std::shared_ptr<CommState> state = comm->state;
    if (const Result result = launch_on_stream(comm, stream, std::move(launch)); result != success) {
      if (!captured) finish(*state, false);
      return result;
    }
  }
  return success;
}

Result check_comm(ncclComm* comm) {
  if (comm == nullptr) return failure(invalid_argument, "the communicator is null");
  if (comm->state->aborted.load()) return failure(invalid_usage, "the communicator was aborted");
  if (!comm->state->initialized.load()) return failure(invalid_usage, "the communicator is not initialized yet");
  return success;
}

Result submit(ncclComm* comm, void* stream, Task task) {
  if (const Result result = check_comm(comm); result != success) return result;
  if (size_of(task.type) == 0) return failure(invalid_argument, "data type " + std::to_string(task.type) + " is unknown");
  if (task.type == bf16 && !has_bf16_and_avg())
    return failure(invalid_argument, "ncclBfloat16 needs NCCL 2.10; this is " + std::to_string(library_version()));
  if (task.op == avg && !has_bf16_and_avg())
    return failure(invalid_argument, "ncclAvg needs NCCL 2.10; this is " + std::to_string(library_version()));
  if (task.op < sum || task.op > avg) return failure(invalid_argument, "reduction " + std::to_string(task.op) + " is unknown");
  if ((task.root < 0 || task.root >= comm->state->ranks) &&
      (task.kind == Task::broadcast || task.kind == Task::reduce_to_root || task.kind == Task::gather ||
       task.kind == Task::scatter || task.kind == Task::send || task.kind == Task::recv))
    return failure(invalid_argument, "root/peer " + std::to_string(task.root) + " is not a rank");
  if (group_depth > 0) {
    group_calls.push_back({comm, stream, task});
    return success;
  }
  return launch_calls({{comm, stream, task}});
}

const std::uint8_t* in(const void* pointer) { return static_cast<const std::uint8_t*>(pointer); }
std::uint8_t* out(void* pointer) { return static_cast<std::uint8_t*>(pointer); }

Result create(ncclComm** comm, int ranks, UniqueId id, int rank, bool blocking) {
  if (comm == nullptr || ranks < 1 || rank < 0 || rank >= ranks)
    return failure(invalid_argument, "rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " is not valid");
  id.internal[sizeof(id.internal) - 1] = '\0';
  if (!std::filesystem::is_directory(id.internal))
    return failure(invalid_argument, std::string("the unique id names no directory ('") + id.internal + "')");
  auto handle = std::make_unique<ncclComm>();
  handle->state = std::make_shared<CommState>();
  CommState& state = *handle->state;
  state.directory = id.internal;
  state.ranks = ranks;
  state.rank = rank;
  state.device = current_device_bus_id();  // on the calling thread, whose device the rank is
  state.sent.assign(static_cast<std::size_t>(ranks), 0);
  state.received.assign(static_cast<std::size_t>(ranks), 0);
  if (blocking) {
    join(state);
    if (const Result error = state.async_error.load(); error != success) {
      leave(state);
      return error;  // NCCL hands out no communicator when its init fails
    }
  } else {
    state.init_thread = std::thread([&state] { join(state); });
  }
  *comm = handle.release();
  return blocking ? success : in_progress;
}

void release(ncclComm* comm, bool abort) {
  CommState& state = *comm->state;
  if (abort) state.aborted = true;
  if (state.init_thread.joinable()) state.init_thread.join();
  {
    std::unique_lock lock(state.mutex);
    // Destroy waits for the work enqueued before it; abort only for the
    // launch running now (the flag ends its waits; queued ones skip).
    state.idle.wait(lock, [&] { return abort ? state.active == 0 : state.pending == 0; });
  }
  leave(state);
  delete comm;
}

}  // namespace

// ---- the exported API ---------------------------------------------------------------------

FAKE_EXPORT Result ncclGetVersion(int* version) {
  if (version == nullptr) return failure(invalid_argument, "version is null");
  *version = library_version();
  return success;
}

FAKE_EXPORT Result ncclGetUniqueId(UniqueId* id) {
  if (id == nullptr) return failure(invalid_argument, "id is null");
  const char* base = std::getenv("HAL_FAKE_NCCL_DIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/fake-nccl-XXXXXX";
  if (pattern.size() >= sizeof(id->internal)) return failure(system_error, "the directory name is too long: " + pattern);
  if (::mkdtemp(pattern.data()) == nullptr) return failure(system_error, "mkdtemp(" + pattern + ") failed");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, pattern.c_str(), pattern.size());
  return success;
}

FAKE_EXPORT Result ncclCommInitRank(ncclComm** comm, int ranks, UniqueId id, int rank) {
  return create(comm, ranks, id, rank, true);
}

#ifndef FAKE_NCCL_LEGACY
FAKE_EXPORT Result ncclCommInitRankConfig(ncclComm** comm, int ranks, UniqueId id, int rank, Config* config) {
  if (config != nullptr && (config->magic != config_magic || config->size < sizeof(Config)))
    return failure(invalid_argument, "the config was not initialized with NCCL_CONFIG_INITIALIZER");
  return create(comm, ranks, id, rank, config == nullptr || config->blocking != 0);
}

FAKE_EXPORT const char* ncclGetLastError(ncclComm*) {
  thread_local std::string copy;
  std::lock_guard lock(last_error_mutex);
  copy = last_error_text;
  return copy.c_str();
}
#endif

FAKE_EXPORT Result ncclCommDestroy(ncclComm* comm) {
  if (comm != nullptr) release(comm, false);
  return success;
}

FAKE_EXPORT Result ncclCommAbort(ncclComm* comm) {
  if (comm != nullptr) release(comm, true);
  return success;
}

FAKE_EXPORT Result ncclCommGetAsyncError(ncclComm* comm, Result* async_error) {
  if (comm == nullptr || async_error == nullptr) return failure(invalid_argument, "comm or async_error is null");
  const Result error = comm->state->async_error.load();
  *async_error = error != success ? error : comm->state->initialized.load() ? success : in_progress;
  return success;
}

FAKE_EXPORT Result ncclCommCount(ncclComm* comm, int* count) {
  if (comm == nullptr || count == nullptr) return failure(invalid_argument, "comm or count is null");
  *count = comm->state->ranks;
  return success;
}

FAKE_EXPORT Result ncclCommUserRank(ncclComm* comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return failure(invalid_argument, "comm or rank is null");
  *rank = comm->state->rank;
  return success;
}

FAKE_EXPORT const char* ncclGetErrorString(Result result) {
  switch (result) {
    case success: return "no error";
    case unhandled_device_error: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case system_error: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case internal_error: return "internal error - please report this issue to the NCCL developers";
    case invalid_argument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case invalid_usage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case remote_error: return "remote process exited or there was a network error";
    case in_progress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

FAKE_EXPORT Result ncclAllReduce(const void* send, void* recv, std::size_t count, int type, int op, ncclComm* comm,
                                 void* stream) {
  return submit(comm, stream, {Task::all_reduce, in(send), out(recv), count, type, op, -1});
}
FAKE_EXPORT Result ncclBroadcast(const void* send, void* recv, std::size_t count, int type, int root, ncclComm* comm,
                                 void* stream) {
  return submit(comm, stream, {Task::broadcast, in(send), out(recv), count, type, sum, root});
}
FAKE_EXPORT Result ncclReduce(const void* send, void* recv, std::size_t count, int type, int op, int root,
                              ncclComm* comm, void* stream) {
  return submit(comm, stream, {Task::reduce_to_root, in(send), out(recv), count, type, op, root});
}
FAKE_EXPORT Result ncclAllGather(const void* send, void* recv, std::size_t count, int type, ncclComm* comm,
                                 void* stream) {
  return submit(comm, stream, {Task::all_gather, in(send), out(recv), count, type, sum, -1});
}
FAKE_EXPORT Result ncclReduceScatter(const void* send, void* recv, std::size_t count, int type, int op,
                                     ncclComm* comm, void* stream) {
  return submit(comm, stream, {Task::reduce_scatter, in(send), out(recv), count, type, op, -1});
}
FAKE_EXPORT Result ncclSend(const void* send, std::size_t count, int type, int peer, ncclComm* comm, void* stream) {
  return submit(comm, stream, {Task::send, in(send), nullptr, count, type, sum, peer});
}
FAKE_EXPORT Result ncclRecv(void* recv, std::size_t count, int type, int peer, ncclComm* comm, void* stream) {
  return submit(comm, stream, {Task::recv, nullptr, out(recv), count, type, sum, peer});
}

#ifndef FAKE_NCCL_LEGACY
#ifdef FAKE_NCCL_HIP
FAKE_EXPORT Result ncclAllToAll(const void* send, void* recv, std::size_t count, int type, ncclComm* comm,
                                void* stream) {
#else
FAKE_EXPORT Result ncclAlltoAll(const void* send, void* recv, std::size_t count, int type, ncclComm* comm,
                                void* stream) {
#endif
  return submit(comm, stream, {Task::all_to_all, in(send), out(recv), count, type, sum, -1});
}
FAKE_EXPORT Result ncclGather(const void* send, void* recv, std::size_t count, int type, int root, ncclComm* comm,
                              void* stream) {
  return submit(comm, stream, {Task::gather, in(send), out(recv), count, type, sum, root});
}
FAKE_EXPORT Result ncclScatter(const void* send, void* recv, std::size_t count, int type, int root, ncclComm* comm,
                               void* stream) {
  return submit(comm, stream, {Task::scatter, in(send), out(recv), count, type, sum, root});
}
#endif

FAKE_EXPORT Result ncclGroupStart() {
  ++group_depth;
  return success;
}

FAKE_EXPORT Result ncclGroupEnd() {
  if (group_depth == 0) return failure(invalid_usage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return success;
  return launch_calls(std::exchange(group_calls, {}));
}
