#include "nccl_collectives.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <utility>
#include <vector>

#include "collective_names.hpp"
#include "communicator_failure.hpp"
#include "dtype_codes.hpp"
#include "last_error.hpp"

namespace hal::backend {

using abi::describe_operation;
using abi::dtype_name;
using abi::element_size;
using abi::kind_name;
using abi::option_value;
using abi::reduce_op_name;

// ---- the port's entry points -----------------------------------------------------

void* GpuCollectivesPort::device_address(const hal_tensor_ref_v1& tensor) const {
  if (tensor.buffer == nullptr) return nullptr;
  return static_cast<std::uint8_t*>(entry_points_.buffer_device_address(tensor.buffer)) + tensor.offset;
}
hal_status GpuCollectivesPort::allocate(std::uint32_t device, std::uint64_t bytes, hal_buffer** out) const {
  return entry_points_.buffer_allocate(backend_, device, HAL_MEMORY_DEVICE, bytes, 0, out);
}
void GpuCollectivesPort::release(hal_buffer* buffer) const {
  if (buffer != nullptr) entry_points_.buffer_free(buffer);
}
hal_status GpuCollectivesPort::copy(hal_stream* stream, hal_buffer* destination, const hal_tensor_ref_v1& source,
                                    std::uint64_t bytes) const {
  return entry_points_.copy_device_to_device(stream, destination, 0, source.buffer, source.offset, bytes);
}
hal_status GpuCollectivesPort::event_create(std::uint32_t device, hal_event** out) const {
  return entry_points_.event_create(backend_, device, out);
}
hal_status GpuCollectivesPort::event_record(hal_event* event, hal_stream* stream) const {
  return entry_points_.event_record(event, stream);
}
hal_status GpuCollectivesPort::event_query(hal_event* event) const { return entry_points_.event_query(event); }
void GpuCollectivesPort::event_destroy(hal_event* event) const {
  if (event != nullptr) entry_points_.event_destroy(event);
}

// ---- errors left on streams ----------------------------------------------------

struct StreamErrors {
  mutable std::mutex mutex;
  std::map<const hal_stream*, std::pair<hal_status, std::string>> errors;

  void record(const hal_stream* stream, hal_status status, const std::string& message) {
    std::lock_guard lock(mutex);
    errors.try_emplace(stream, status, message);  // the first error stays
  }
};

namespace {

using Clock = std::chrono::steady_clock;
using shims::nccl_in_progress;
using shims::nccl_success;
using shims::NcclResult;

// ncclResult_t -> hal_status: a remote error means a peer is gone.
hal_status status_of(NcclResult result) {
  switch (result) {
    case nccl_success: return HAL_OK;
    case shims::nccl_invalid_argument:
    case shims::nccl_invalid_usage: return HAL_ERROR_INVALID_ARGUMENT;
    case shims::nccl_remote_error: return HAL_ERROR_DEVICE_LOST;
    default: return HAL_ERROR_INTERNAL;
  }
}

std::string engine_of_library(const std::string& path) {
  const std::string file = std::filesystem::path(path).filename().string();
  if (file.find("rccl") != std::string::npos) return "rccl";
  if (file.find("pccl") != std::string::npos) return "accl-p";
  if (file.find("accl") != std::string::npos) return "accl-n";
  return "nccl";
}

// ncclDataType_t for a hal dtype; -1 when the library lacks it.
shims::NcclDataType nccl_type(hal_dtype dtype, int version) {
  switch (dtype) {
    case HAL_DTYPE_I8: return shims::nccl_int8;
    case HAL_DTYPE_U8: return shims::nccl_uint8;
    case HAL_DTYPE_I32: return shims::nccl_int32;
    case HAL_DTYPE_I64: return shims::nccl_int64;
    case HAL_DTYPE_F16: return shims::nccl_float16;
    case HAL_DTYPE_F32: return shims::nccl_float32;
    case HAL_DTYPE_F64: return shims::nccl_float64;
    case HAL_DTYPE_BF16: return version >= shims::nccl_version_with_bf16_and_avg ? shims::nccl_bfloat16 : -1;
  }
  return -1;
}

// ncclRedOp_t for a hal reduction; -1 when the library lacks it.
shims::NcclReduction nccl_reduction(hal_reduce_op op, int version) {
  switch (op) {
    case HAL_REDUCE_SUM: return shims::nccl_sum;
    case HAL_REDUCE_PROD: return shims::nccl_prod;
    case HAL_REDUCE_MAX: return shims::nccl_max;
    case HAL_REDUCE_MIN: return shims::nccl_min;
    case HAL_REDUCE_AVG: return version >= shims::nccl_version_with_bf16_and_avg ? shims::nccl_avg : -1;
  }
  return -1;
}

bool uses_reduction(hal_collective_kind kind) {
  return kind == HAL_COLLECTIVE_ALL_REDUCE || kind == HAL_COLLECTIVE_REDUCE || kind == HAL_COLLECTIVE_REDUCE_SCATTER;
}

std::string rank_of(int rank, int world) { return "rank " + std::to_string(rank) + " of " + std::to_string(world); }

// A value from the store; HAL_ERROR_TIMEOUT when it did not appear in time.
hal_status store_get(const hal_store_v1& store, const std::string& key, std::int64_t timeout_ms, std::string& value) {
  return store.get(
      store.user_data, key.c_str(), std::max<std::int64_t>(timeout_ms, 1),
      [](void* sink, const void* data, std::size_t size) {
        static_cast<std::string*>(sink)->assign(static_cast<const char*>(data), size);
      },
      &value);
}

std::int64_t milliseconds_left(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

}  // namespace

// ---- one communicator --------------------------------------------------------------

class NcclCommunicator {
 public:
  NcclCommunicator(const GpuCollectivesPort& port, const shims::Nccl& library, std::string engine,
                   std::shared_ptr<StreamErrors> errors, const hal_communicator_config_v1& config)
      : port_(port),
        library_(library),
        engine_(std::move(engine)),
        api_(library.api()),
        stream_errors_(std::move(errors)),
        rank_(config.rank),
        world_(config.world_size),
        device_(config.device) {
    api_.GetVersion(&version_);
  }
  ~NcclCommunicator() { shut_down(); }

  hal_status connect(const hal_communicator_config_v1& config, const std::string& engine_reason);
  hal_status enqueue(hal_stream* stream, const hal_collective_op_v1* operations, std::uint32_t count);
  void abort();
  void shut_down();
  std::pair<hal_status, std::string> first_error() { return failure_.get(); }
  const std::string& description() const { return description_; }

 private:
  struct InFlight {
    hal_event* event;
    const hal_stream* stream;
    std::string what;
    Clock::time_point deadline;
    std::int64_t timeout_ms;
    hal_buffer* scratch;  // freed once the operation completed
  };

  std::string library_text(NcclResult result) const;
  hal_status call_failed(const std::string& what, const char* function, NcclResult result);
  NcclResult wait_while_in_progress(shims::NcclCommunicator handle, NcclResult result, Clock::time_point deadline);
  hal_status issue(hal_stream* stream, const hal_collective_op_v1& op, bool captured, hal_buffer*& scratch);
  hal_status issue_group(hal_stream* stream, const hal_collective_op_v1* operations, std::uint32_t count);
  hal_status unsupported_in(const hal_collective_op_v1& op) const;
  void fail_and_abort(hal_status status, const std::string& message);
  void watch();
  void poll();

  const GpuCollectivesPort& port_;
  const shims::Nccl& library_;
  const std::string engine_;
  const shims::NcclApi& api_;
  std::shared_ptr<StreamErrors> stream_errors_;
  const int rank_, world_;
  const std::uint32_t device_;
  int version_ = 0;
  std::string description_;
  hal_buffer* barrier_buffer_ = nullptr;

  // The library's communicator: calls on it hold the lock shared, abort
  // takes it exclusively to take the handle away, so the library never
  // frees a communicator another thread is inside (NCCL's calls on a
  // non-blocking communicator return at once, so abort never waits long).
  std::shared_mutex handle_mutex_;
  shims::NcclCommunicator handle_ = nullptr;

  abi::FirstFailure failure_;
  std::mutex mutex_;  // everything below
  std::deque<InFlight> in_flight_;
  std::vector<hal_event*> spare_events_;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread watchdog_;
};

std::string NcclCommunicator::library_text(NcclResult result) const {
  std::string text = api_.GetErrorString != nullptr ? api_.GetErrorString(result) : "";
  text += " (ncclResult_t " + std::to_string(result) + ")";
  if (api_.GetLastError != nullptr) {
    const char* last = api_.GetLastError(nullptr);
    if (last != nullptr && *last != '\0') text += "; last error: " + std::string(last);
  }
  return text;
}

// Records a failed library call as the communicator's first error.
hal_status NcclCommunicator::call_failed(const std::string& what, const char* function, NcclResult result) {
  const hal_status status = status_of(result);
  const std::string message = what + ": " + function + " failed: " + library_text(result) +
                              "; the communicator is unusable now, create a new one";
  failure_.record(status, message);
  return fail(status, message, result);
}

// A non-blocking communicator answers ncclInProgress until the call took
// effect; its state then comes from ncclCommGetAsyncError.
NcclResult NcclCommunicator::wait_while_in_progress(shims::NcclCommunicator handle, NcclResult result,
                                                    Clock::time_point deadline) {
  while (result == nccl_in_progress && handle != nullptr && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (api_.CommGetAsyncError(handle, &result) != nccl_success) return shims::nccl_internal_error;
  }
  return result;
}

hal_status NcclCommunicator::connect(const hal_communicator_config_v1& config, const std::string& engine_reason) {
  const hal_store_v1& store = *config.store;
  const std::string prefix = std::string(config.key_prefix != nullptr ? config.key_prefix : "hal") + "/nccl/";
  const std::string who = rank_of(rank_, world_);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  const CurrentDevice scope = port_.current_device(device_);
  if (!scope) return scope.status();

  // The unique id: rank 0 creates it, the others read it from the store.
  shims::NcclUniqueId id{};
  const std::string id_key = prefix + "unique_id";
  if (rank_ == 0) {
    if (const NcclResult result = api_.GetUniqueId(&id); result != nccl_success)
      return fail(status_of(result), who + ": ncclGetUniqueId failed: " + library_text(result), result);
    if (hal_status status = store.set(store.user_data, id_key.c_str(), &id, sizeof(id)); status != HAL_OK)
      return fail(status, who + ": publishing the NCCL unique id under '" + id_key + "' failed");
  } else {
    std::string value;
    const hal_status status = store_get(store, id_key, config.timeout_ms, value);
    if (status == HAL_ERROR_TIMEOUT)
      return fail(status, who + ": rank 0 did not publish the NCCL unique id ('" + id_key + "') within " +
                              std::to_string(config.timeout_ms) + " ms; did rank 0 start and create its communicator?");
    if (status != HAL_OK) return fail(status, who + ": reading the NCCL unique id ('" + id_key + "') failed");
    if (value.size() != sizeof(id))
      return fail(HAL_ERROR_INTERNAL, who + ": the store holds " + std::to_string(value.size()) + " bytes under '" +
                                          id_key + "', not a " + std::to_string(sizeof(id)) + "-byte NCCL unique id");
    std::memcpy(&id, value.data(), sizeof(id));
  }

  // Every rank marks its arrival, so a missing one is named instead of
  // hanging inside the library's bootstrap.
  const std::string arrived = prefix + "arrived/";
  const std::string mine = std::to_string(rank_);
  if (hal_status status = store.set(store.user_data, (arrived + mine).c_str(), mine.data(), mine.size());
      status != HAL_OK)
    return fail(status, who + ": marking its arrival in the store failed");
  std::string missing;
  for (int peer = 0; peer < world_; ++peer) {
    std::string value;
    const std::int64_t wait = missing.empty() ? milliseconds_left(deadline) : 1;
    const hal_status status = store_get(store, arrived + std::to_string(peer), wait, value);
    if (status == HAL_ERROR_TIMEOUT) {
      shims::append_listed(missing, std::to_string(peer), ", ");
    } else if (status != HAL_OK) {
      return fail(status, who + ": reading rank " + std::to_string(peer) + "'s arrival from the store failed");
    }
  }
  if (!missing.empty())
    return fail(HAL_ERROR_TIMEOUT, who + ": rank(s) " + missing + " did not arrive to create the " + engine_ +
                                       " communicator within " + std::to_string(config.timeout_ms) +
                                       " ms; did every rank start and call Communicator::create?");

  // Init: non-blocking where the library can, so it can time out.
  NcclResult result;
  shims::NcclCommunicator handle = nullptr;
  const bool non_blocking = api_.CommInitRankConfig != nullptr;
  if (non_blocking) {
    shims::NcclConfig nccl_config;
    nccl_config.blocking = 0;
    result = api_.CommInitRankConfig(&handle, world_, id, rank_, &nccl_config);
  } else {
    result = api_.CommInitRank(&handle, world_, id, rank_);
  }
  {
    std::unique_lock lock(handle_mutex_);
    handle_ = handle;
  }
  result = wait_while_in_progress(handle, result, deadline);
  const char* init_function = non_blocking ? "ncclCommInitRankConfig" : "ncclCommInitRank";
  if (result == nccl_in_progress) {
    abort();
    return fail(HAL_ERROR_TIMEOUT, who + ": " + init_function + " did not complete within " +
                                       std::to_string(config.timeout_ms) +
                                       " ms although every rank arrived in the store; the library's bootstrap could "
                                       "not connect the ranks (check NCCL_SOCKET_IFNAME and that the ranks reach "
                                       "each other); the communicator was aborted");
  }
  if (result != nccl_success) {
    const hal_status status = status_of(result);
    const std::string text = library_text(result);
    abort();
    return fail(status, who + ": " + init_function + " failed: " + text, result);
  }
  int count = 0, rank = -1;
  if (api_.CommCount(handle, &count) != nccl_success || api_.CommUserRank(handle, &rank) != nccl_success ||
      count != world_ || rank != rank_) {
    abort();
    return fail(HAL_ERROR_INTERNAL, who + ": the library's communicator has rank " + std::to_string(rank) + " of " +
                                        std::to_string(count) + "; the unique id under '" + id_key +
                                        "' belongs to another communicator");
  }
  if (hal_status status = port_.allocate(device_, 16, &barrier_buffer_); status != HAL_OK) {
    abort();
    return status;
  }
  const std::string version = shims::Nccl::format_version(version_);
  description_ = engine_ + " (" + engine_reason + "); " + library_.display_name() + " " + version + " from " +
                 library_.path() + ", " + who + " on " + port_.device_name(device_) +
                 (non_blocking ? ", non-blocking init" : ", blocking init (no ncclCommInitRankConfig)");
  watchdog_ = std::thread([this] { watch(); });
  return HAL_OK;
}

hal_status NcclCommunicator::unsupported_in(const hal_collective_op_v1& op) const {
  const std::string library = library_.display_name() + " " + shims::Nccl::format_version(version_);
  if (nccl_type(op.dtype, version_) < 0)
    return fail(HAL_ERROR_UNSUPPORTED, describe_operation(rank_, op) + ": " + library + " has no " +
                                           dtype_name(op.dtype) +
                                           " (ncclBfloat16 came in NCCL 2.10); use f32 or f16, "
                                           "or a newer library");
  if (uses_reduction(op.kind) && nccl_reduction(op.reduce_op, version_) < 0)
    return fail(HAL_ERROR_UNSUPPORTED, describe_operation(rank_, op) + ": " + library + " has no " +
                                           reduce_op_name(op.reduce_op) +
                                           " (ncclAvg came in NCCL 2.10); reduce with sum and divide, or use a "
                                           "newer library");
  return HAL_OK;
}

// Posts one operation on the stream. scratch: a buffer to free once it ran.
// captured: the stream is capturing a graph. The caller holds handle_mutex_ shared.
hal_status NcclCommunicator::issue(hal_stream* stream, const hal_collective_op_v1& op, bool captured,
                                   hal_buffer*& scratch) {
  const std::string what = describe_operation(rank_, op);
  const shims::NcclCommunicator handle = handle_;
  void* native = port_.native_stream(stream);
  void* send = port_.device_address(op.send);
  void* recv = port_.device_address(op.recv);
  const shims::NcclDataType type = nccl_type(op.dtype, version_);
  const shims::NcclReduction reduction = nccl_reduction(op.reduce_op, version_);
  const std::size_t count = op.count;
  const std::size_t block = count * element_size(op.dtype);
  const auto at = [](void* base, std::size_t offset) { return static_cast<std::uint8_t*>(base) + offset; };
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(op.timeout_ms);
  const auto checked = [&](const char* function, NcclResult result) {
    result = wait_while_in_progress(handle, result, deadline);
    return result == nccl_success ? HAL_OK : call_failed(what, function, result);
  };
  // gather, scatter and all_to_all as grouped send/recv where the library lacks them.
  const auto grouped = [&](const char* name, auto&& post) {
    if (NcclResult result = api_.GroupStart(); result != nccl_success)
      return call_failed(what, "ncclGroupStart", result);
    NcclResult posted = nccl_success;
    const char* failed = name;
    post([&](const char* function, NcclResult result) {
      if (posted == nccl_success && result != nccl_success && result != nccl_in_progress) {
        posted = result;
        failed = function;
      }
    });
    const NcclResult ended = api_.GroupEnd();
    if (posted != nccl_success) return call_failed(what, failed, posted);
    return checked("ncclGroupEnd", ended);
  };

  switch (op.kind) {
    case HAL_COLLECTIVE_ALL_REDUCE:
      return checked("ncclAllReduce", api_.AllReduce(send, recv, count, type, reduction, handle, native));
    case HAL_COLLECTIVE_BROADCAST:
      return checked("ncclBroadcast", api_.Broadcast(send, recv, count, type, op.root, handle, native));
    case HAL_COLLECTIVE_REDUCE:
      return checked("ncclReduce", api_.Reduce(send, recv, count, type, reduction, op.root, handle, native));
    case HAL_COLLECTIVE_ALL_GATHER:
      return checked("ncclAllGather", api_.AllGather(send, recv, count, type, handle, native));
    case HAL_COLLECTIVE_REDUCE_SCATTER:
      return checked("ncclReduceScatter", api_.ReduceScatter(send, recv, count, type, reduction, handle, native));
    case HAL_COLLECTIVE_BARRIER: {
      void* flag = port_.device_address({barrier_buffer_, 0});
      return checked("ncclAllReduce (barrier)",
                     api_.AllReduce(flag, flag, 1, shims::nccl_int32, shims::nccl_sum, handle, native));
    }
    case HAL_COLLECTIVE_SEND: return checked("ncclSend", api_.Send(send, count, type, op.root, handle, native));
    case HAL_COLLECTIVE_RECV: return checked("ncclRecv", api_.Recv(recv, count, type, op.root, handle, native));
    case HAL_COLLECTIVE_ALL_TO_ALL: {
      // Blocks may move in any order, so in place reads from a copy.
      if (send == recv && count > 0 && world_ > 1) {
        if (captured)
          return fail(HAL_ERROR_UNSUPPORTED, what +
                                                 ": in place on a stream that is capturing a graph: the copy it "
                                                 "reads from would be freed before the graph runs; capture it with "
                                                 "separate send and recv buffers");
        if (hal_status status = port_.allocate(device_, block * world_, &scratch); status != HAL_OK) return status;
        if (hal_status status = port_.copy(stream, scratch, op.send, block * world_); status != HAL_OK) return status;
        send = port_.device_address({scratch, 0});
      }
      if (api_.AllToAll != nullptr)
        return checked("ncclAlltoAll", api_.AllToAll(send, recv, count, type, handle, native));
      return grouped("all_to_all", [&](auto&& note) {
        for (int peer = 0; peer < world_; ++peer) {
          note("ncclSend", api_.Send(at(send, peer * block), count, type, peer, handle, native));
          note("ncclRecv", api_.Recv(at(recv, peer * block), count, type, peer, handle, native));
        }
      });
    }
    case HAL_COLLECTIVE_GATHER:
      if (api_.Gather != nullptr)
        return checked("ncclGather", api_.Gather(send, recv, count, type, op.root, handle, native));
      return grouped("gather", [&](auto&& note) {
        const bool in_place = rank_ == op.root && send == at(recv, op.root * block);
        if (!in_place) note("ncclSend", api_.Send(send, count, type, op.root, handle, native));
        if (rank_ != op.root) return;
        for (int peer = 0; peer < world_; ++peer)
          if (peer != rank_ || !in_place)
            note("ncclRecv", api_.Recv(at(recv, peer * block), count, type, peer, handle, native));
      });
    case HAL_COLLECTIVE_SCATTER:
      if (api_.Scatter != nullptr)
        return checked("ncclScatter", api_.Scatter(send, recv, count, type, op.root, handle, native));
      return grouped("scatter", [&](auto&& note) {
        const bool in_place = rank_ == op.root && recv == at(send, op.root * block);
        if (rank_ == op.root)
          for (int peer = 0; peer < world_; ++peer)
            if (peer != rank_ || !in_place)
              note("ncclSend", api_.Send(at(send, peer * block), count, type, peer, handle, native));
        if (!in_place) note("ncclRecv", api_.Recv(recv, count, type, op.root, handle, native));
      });
  }
  return fail(HAL_ERROR_INVALID_ARGUMENT, what + ": unknown operation kind " + std::to_string(op.kind));
}

hal_status NcclCommunicator::issue_group(hal_stream* stream, const hal_collective_op_v1* operations,
                                         std::uint32_t count) {
  if (NcclResult result = api_.GroupStart(); result != nccl_success)
    return call_failed(describe_operation(rank_, operations[0]), "ncclGroupStart", result);
  hal_status status = HAL_OK;
  for (std::uint32_t i = 0; i < count && status == HAL_OK; ++i) {
    hal_buffer* unused = nullptr;
    status = issue(stream, operations[i], false, unused);  // send and recv take no scratch
  }
  const NcclResult ended = api_.GroupEnd();
  if (status != HAL_OK) return status;
  const std::int64_t longest = std::max_element(operations, operations + count, [](const auto& a, const auto& b) {
                                 return a.timeout_ms < b.timeout_ms;
                               })->timeout_ms;
  const NcclResult result = wait_while_in_progress(handle_, ended, Clock::now() + std::chrono::milliseconds(longest));
  return result == nccl_success
             ? HAL_OK
             : call_failed(describe_operation(rank_, operations[0]) + " (a group of " + std::to_string(count) + ")",
                           "ncclGroupEnd", result);
}

hal_status NcclCommunicator::enqueue(hal_stream* stream, const hal_collective_op_v1* operations, std::uint32_t count) {
  const hal_collective_op_v1& first = operations[0];
  for (std::uint32_t i = 0; i < count; ++i) {
    const hal_collective_op_v1& op = operations[i];
    if (op.struct_size < sizeof(hal_collective_op_v1))
      return fail(HAL_ERROR_INVALID_ARGUMENT, "operation struct_size is smaller than v1; rebuild libhal");
    if (element_size(op.dtype) == 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  describe_operation(rank_, op) + ": dtype " + std::to_string(op.dtype) + " is not known");
    const bool point_to_point = op.kind == HAL_COLLECTIVE_SEND || op.kind == HAL_COLLECTIVE_RECV;
    if (count > 1 && !point_to_point)
      return fail(HAL_ERROR_INVALID_ARGUMENT,
                  "only send and recv can be grouped; " + kind_name(op.kind) + " was in a group");
    if (hal_status status = unsupported_in(op); status != HAL_OK) return status;
  }
  if (stream == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, describe_operation(rank_, first) + ": GPU collectives need a stream");
  if (port_.stream_device(stream) != device_)
    return fail(HAL_ERROR_INVALID_ARGUMENT, describe_operation(rank_, first) + ": the stream is on " +
                                                port_.device_name(port_.stream_device(stream)) +
                                                ", the communicator on " + port_.device_name(device_));
  hal_event* event = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (failure_.failed()) {
      const auto [status, earlier] = failure_.get();
      return fail(status, describe_operation(rank_, first) + ": the communicator failed before: " + earlier);
    }
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
  }
  const CurrentDevice scope = port_.current_device(device_);
  if (!scope) return scope.status();
  if (event == nullptr)
    if (hal_status status = port_.event_create(device_, &event); status != HAL_OK) return status;
  hal_buffer* scratch = nullptr;
  std::shared_lock calls(handle_mutex_);
  if (handle_ == nullptr) {
    calls.unlock();
    std::lock_guard lock(mutex_);
    spare_events_.push_back(event);
    const auto [status, earlier] = failure_.get();
    return fail(status != HAL_OK ? status : HAL_ERROR_ABORTED,
                describe_operation(rank_, first) + ": the communicator failed before: " + earlier);
  }
  // On a stream capturing a graph the operation is recorded, not run: it runs
  // when the graph is launched, perhaps much later, perhaps many times. So it
  // is not in flight, and gets no deadline; an event recorded in the capture
  // could not be queried anyway (that fails and breaks the capture). Failures
  // of its launches still reach the watchdog through ncclCommGetAsyncError.
  const bool captured = port_.capturing(stream);
  const hal_status status =
      count == 1 ? issue(stream, first, captured, scratch) : issue_group(stream, operations, count);
  hal_status recorded = status == HAL_OK && !captured ? port_.event_record(event, stream) : status;
  for (std::uint32_t i = 0; i < count && recorded == HAL_OK; ++i)
    for (const hal_tensor_ref_v1* tensor : {&operations[i].send, &operations[i].recv})
      if (recorded == HAL_OK) recorded = port_.note_use(stream, *tensor);
  calls.unlock();
  std::lock_guard lock(mutex_);
  if (recorded != HAL_OK) {
    spare_events_.push_back(event);
    port_.release(scratch);
    return recorded;
  }
  if (captured) {  // nothing to watch, and no scratch (issue refuses what needs one)
    spare_events_.push_back(event);
    return succeed();
  }
  std::string what = describe_operation(rank_, first);
  if (count > 1) what += " and " + std::to_string(count - 1) + " more send/recv of its group";
  in_flight_.push_back({event, stream, std::move(what), Clock::now() + std::chrono::milliseconds(first.timeout_ms),
                        first.timeout_ms, scratch});
  // An abort that raced with this call already marked the streams it saw.
  if (failure_.failed()) {
    const auto [status, earlier] = failure_.get();
    stream_errors_->record(stream, status, earlier);
  }
  return succeed();
}

// The communicator's first error, on it and on every stream with its work
// in flight; then the library's communicator is aborted, which ends that work.
void NcclCommunicator::fail_and_abort(hal_status status, const std::string& message) {
  shims::NcclCommunicator handle;
  {
    std::lock_guard lock(mutex_);  // with enqueue's check: each stream with work in flight is marked
    failure_.record(status, message);
    const auto [first_status, first_message] = failure_.get();
    for (const InFlight& work : in_flight_)
      if (work.event != nullptr) stream_errors_->record(work.stream, first_status, first_message);
  }
  {
    std::unique_lock lock(handle_mutex_);
    handle = std::exchange(handle_, nullptr);
  }
  if (handle != nullptr) api_.CommAbort(handle);
}

void NcclCommunicator::abort() {
  std::string pending;
  {
    std::lock_guard lock(mutex_);
    for (const InFlight& work : in_flight_)
      if (work.event != nullptr) pending += (pending.empty() ? " while " : "; ") + work.what + " was in flight";
  }
  fail_and_abort(HAL_ERROR_ABORTED, rank_of(rank_, world_) + ": the " + engine_ + " communicator was aborted" +
                                        pending + "; create a new one");
}

void NcclCommunicator::poll() {
  NcclResult async_error = nccl_success;
  {
    std::shared_lock calls(handle_mutex_);
    if (handle_ == nullptr || api_.CommGetAsyncError(handle_, &async_error) != nccl_success) async_error = nccl_success;
  }
  if (async_error != nccl_success && async_error != nccl_in_progress) {
    std::string pending;
    {
      std::lock_guard lock(mutex_);
      for (const InFlight& work : in_flight_)
        if (work.event != nullptr) shims::append_listed(pending, work.what, "; ");
    }
    fail_and_abort(status_of(async_error),
                   (pending.empty() ? rank_of(rank_, world_) : pending) + ": " + library_.display_name() +
                       " reported an asynchronous error: " + library_text(async_error) +
                       "; the communicator was aborted (a peer may have died or lost its network)");
    return;
  }
  std::unique_lock lock(mutex_);
  while (!in_flight_.empty()) {
    InFlight& work = in_flight_.front();
    const bool done = work.event == nullptr ? true : port_.event_query(work.event) == HAL_OK;
    if (!done) {
      if (failure_.failed() || Clock::now() < work.deadline) return;
      const std::string message = work.what + ": did not complete within " + std::to_string(work.timeout_ms) +
                                  " ms; the " + library_.display_name() +
                                  " communicator was aborted. A peer rank did not join this operation, died, or "
                                  "hangs: look for the same sequence number in the other ranks' errors";
      lock.unlock();
      fail_and_abort(HAL_ERROR_TIMEOUT, message);
      return;
    }
    if (work.event != nullptr) spare_events_.push_back(work.event);
    port_.release(work.scratch);
    in_flight_.pop_front();
  }
}

void NcclCommunicator::watch() {
  // hal's own thread: the context stays current for its event queries, and
  // they leave other threads' graph captures alone.
  const CurrentDevice scope = port_.current_device(device_);
  port_.relax_capture_mode();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(5));
    if (stopping_) break;
    lock.unlock();
    poll();
    lock.lock();
  }
}

// Aborts what is still in flight (destroy must not wait for peers that may
// never come), then releases everything.
void NcclCommunicator::shut_down() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  const CurrentDevice scope = port_.current_device(device_);
  bool pending = false;
  {
    std::lock_guard lock(mutex_);
    for (const InFlight& work : in_flight_)
      pending = pending || (work.event != nullptr && port_.event_query(work.event) != HAL_OK);
  }
  if (pending) abort();
  shims::NcclCommunicator handle;
  {
    std::unique_lock lock(handle_mutex_);
    handle = std::exchange(handle_, nullptr);
  }
  if (handle != nullptr) api_.CommDestroy(handle);
  std::lock_guard lock(mutex_);
  for (InFlight& work : in_flight_) {
    port_.event_destroy(work.event);
    port_.release(work.scratch);
  }
  in_flight_.clear();
  for (hal_event* event : spare_events_) port_.event_destroy(event);
  spare_events_.clear();
  port_.release(std::exchange(barrier_buffer_, nullptr));
}

}  // namespace hal::backend

struct hal_communicator {
  std::unique_ptr<hal::backend::NcclCommunicator> communicator;
};

namespace hal::backend {

NcclCollectives::NcclCollectives(std::unique_ptr<GpuCollectivesPort> port, const shims::Nccl* library,
                                 std::string load_status)
    : port_(std::move(port)),
      library_(library),
      load_status_(std::move(load_status)),
      engine_(library != nullptr ? engine_of_library(library->path()) : ""),
      stream_errors_(std::make_shared<StreamErrors>()) {}

NcclCollectives::~NcclCollectives() = default;

std::string NcclCollectives::capability_note() const {
  if (library_ == nullptr) return load_status_;
  return engine_ + " engine: " + library_->display_name() + " " + library_->version() + " from " + library_->path();
}

hal_status NcclCollectives::choose_engine(const char* requested, const char* requested_by,
                                          hal_collectives_engine_v1* out) {
  if (out == nullptr || out->struct_size < sizeof(hal_collectives_engine_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "choose_engine needs an out struct of at least v1's size");
  thread_local std::string engine, reason, engines;  // valid until the next call on this thread
  const std::string asked = requested != nullptr ? requested : "auto";
  const std::string by = requested_by != nullptr ? requested_by : "the engine setting";
  engine.clear();
  if (library_ == nullptr) {
    reason = "no NCCL-compatible library could be loaded: " + load_status_;
    engines = "none: " + load_status_;
  } else {
    engines = capability_note();
    if (asked == "auto" || asked == engine_) {
      engine = engine_;
      reason = by + " is " + asked + "; " + library_->display_name() + " " + library_->version() + " from " +
               library_->path();
    } else {
      reason = by + " asks for " + asked + ", which this backend does not have; its only engine is " + engine_ + " (" +
               library_->path() + "); gloo and mpi run on the host backend";
    }
  }
  out->engine = engine.c_str();
  out->reason = reason.c_str();
  out->engines = engines.c_str();
  return succeed();
}

hal_status NcclCollectives::create(const hal_communicator_config_v1& config, hal_communicator** out) {
  if (config.struct_size < sizeof(hal_communicator_config_v1) || config.store == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "communicator_create needs a v1 config with a store; rebuild libhal");
  const std::string who = rank_of(config.rank, config.world_size);
  if (library_ == nullptr)
    return fail(HAL_ERROR_NOT_PRESENT, who +
                                           ": no collectives on this backend without an NCCL-compatible "
                                           "library: " +
                                           load_status_);
  if (config.device >= port_->device_count())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(config.device) + " is out of range");
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size || config.timeout_ms <= 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "rank " + std::to_string(config.rank) + " / world size " +
                                                std::to_string(config.world_size) + " / timeout " +
                                                std::to_string(config.timeout_ms) + " ms are not valid");
  hal_collectives_engine_v1 choice{};
  choice.struct_size = sizeof(choice);
  std::string requested = option_value(config, "engine"), requested_by = option_value(config, "engine_source");
  choose_engine(requested.empty() ? "auto" : requested.c_str(),
                requested_by.empty() ? "the engine setting" : requested_by.c_str(), &choice);
  const std::string reason = choice.reason;
  if (*choice.engine == '\0') return fail(HAL_ERROR_UNSUPPORTED, who + ": no collectives engine: " + reason);
  auto communicator = std::make_unique<NcclCommunicator>(*port_, *library_, engine_, stream_errors_, config);
  if (hal_status status = communicator->connect(config, reason); status != HAL_OK) return status;
  *out = new hal_communicator{std::move(communicator)};
  return succeed();
}

hal_status NcclCollectives::stream_status(const hal_stream* stream) const {
  std::lock_guard lock(stream_errors_->mutex);
  const auto found = stream_errors_->errors.find(stream);
  if (found == stream_errors_->errors.end()) return succeed();
  return fail(found->second.first, found->second.second);
}

void NcclCollectives::forget_stream(const hal_stream* stream) const {
  std::lock_guard lock(stream_errors_->mutex);
  stream_errors_->errors.erase(stream);
}

hal_status no_collectives_context() {
  return fail(HAL_ERROR_INVALID_ARGUMENT, "the collectives call needs the backend context, a config and out");
}

hal_status nccl_communicator_destroy(hal_communicator* communicator) {
  delete communicator;  // shuts down: aborts what is still in flight
  return succeed();
}

hal_status nccl_communicator_abort(hal_communicator* communicator) {
  if (communicator == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the communicator is null");
  communicator->communicator->abort();
  return succeed();
}

hal_status nccl_communicator_get_async_error(hal_communicator* communicator) {
  if (communicator == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the communicator is null");
  const auto [status, message] = communicator->communicator->first_error();
  return status == HAL_OK ? succeed() : fail(status, message);
}

hal_status nccl_enqueue(hal_communicator* communicator, hal_stream* stream, const hal_collective_op_v1* operations,
                        std::uint32_t op_count) {
  if (communicator == nullptr || operations == nullptr || op_count == 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "enqueue needs a communicator and at least one operation");
  return communicator->communicator->enqueue(stream, operations, op_count);
}

const char* nccl_communicator_description(hal_communicator* communicator) {
  return communicator != nullptr ? communicator->communicator->description().c_str() : "";
}

}  // namespace hal::backend
