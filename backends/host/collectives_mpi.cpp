// The MPI engine of the host collectives: every operation is one call of
// libmpi (opened at run time through shims/mpi) on the stream's worker.
//
// MPI has no timeouts and cannot cancel a blocked call, so each
// communicator has a watchdog thread. It publishes, at most every 100 ms,
// how many collectives this rank has entered; when an operation outlives its
// timeout it reads the other ranks' counts from the store, names the ranks
// that did not arrive, and ends the job with MPI_Abort, the only way out of
// a blocked MPI call (docs/collectives.md says what that does to the job).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives_engine.hpp"
#include "mpi_library.hpp"
#include "reduction.hpp"
#include "store_values.hpp"

namespace hal::host {
namespace {

namespace mpi = hal::shims::mpi;
using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

constexpr Milliseconds kPublishPeriod{100};
// MPI counts are int; larger contiguous transfers go in pieces of this many elements.
constexpr std::uint64_t kMaximumPiece = std::uint64_t{1} << 30;
constexpr int kTimeoutExitCode = 124;
constexpr int kAbortExitCode = 125;

// ---- f16/bf16 reductions as user-defined MPI ops ------------------------------
//
// Each call combines two vectors: widened to f32, combined, rounded to
// nearest even once. One combine per element is the whole reduction when the
// op is min or max (exact) or when two ranks take part; otherwise the engine
// reduces an f32 copy instead, so the result is still rounded only once.

template <hal_dtype Type, hal_reduce_op Operation>
void combine_halves(void* input, void* input_output, int* length, mpi::Datatype*) {
  constexpr std::size_t kBlock = 1024;
  float left[kBlock], right[kBlock];
  static const ReductionFunction combine = reduction_function<float>(Operation);
  auto* in = static_cast<const std::uint16_t*>(input);
  auto* in_out = static_cast<std::uint16_t*>(input_output);
  for (std::size_t done = 0, total = static_cast<std::size_t>(*length); done < total; done += kBlock) {
    const std::size_t n = std::min(kBlock, total - done);
    widen_to_f32(Type, in + done, left, n);
    widen_to_f32(Type, in_out + done, right, n);
    combine(right, left, right, n);
    narrow_from_f32(Type, right, in_out + done, n);
  }
}

template <hal_dtype Type>
mpi::UserFunction* half_function(hal_reduce_op op) {
  switch (op) {
    case HAL_REDUCE_PROD: return &combine_halves<Type, HAL_REDUCE_PROD>;
    case HAL_REDUCE_MIN: return &combine_halves<Type, HAL_REDUCE_MIN>;
    case HAL_REDUCE_MAX: return &combine_halves<Type, HAL_REDUCE_MAX>;
    case HAL_REDUCE_SUM: case HAL_REDUCE_AVG: break;
  }
  return &combine_halves<Type, HAL_REDUCE_SUM>;
}

std::string thread_level_name(int level) {
  switch (level) {
    case mpi::thread_single: return "MPI_THREAD_SINGLE";
    case 1: return "MPI_THREAD_FUNNELED";
    case mpi::thread_serialized: return "MPI_THREAD_SERIALIZED";
    case mpi::thread_multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "thread level " + std::to_string(level);
}

// Without MPI_THREAD_MULTIPLE, calls from several threads must not overlap:
// one lock for the whole process, as MPI itself is one per process.
std::mutex& serialized_calls() {
  static std::mutex mutex;
  return mutex;
}

// A lock for threads that rarely meet: taking a free one is one atomic
// exchange and giving it back one store, where std::mutex costs two atomic
// read-modify-writes and two library calls. A waiter yields, and after a
// while sleeps between looks, so that it may wait as long as an MPI call.
class SpinLock {
 public:
  void lock() {
    unsigned looks = 0;
    while (taken_.exchange(true, std::memory_order_acquire))
      while (taken_.load(std::memory_order_relaxed)) {
        if (++looks < 1000)
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
  }
  void unlock() { taken_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> taken_{false};
};

// Reads a key another rank may not have set yet; "" when absent.
std::string peek(const hal_store_v1& store, const std::string& key) {
  std::string value;
  return store_get(store, key, 0, value) == HAL_OK ? value : std::string();
}

// ---- the communicator ------------------------------------------------------------

class MpiCommunicator final : public CommunicatorEngine {
 public:
  MpiCommunicator(hal_backend_context& context, std::shared_ptr<mpi::Session> session,
                  const hal_communicator_config_v1& config)
      : context_(context), session_(std::move(session)), mpi_(session_->library()), rank_(config.rank),
        world_size_(config.world_size), prefix_(config.key_prefix != nullptr ? config.key_prefix : "hal"),
        store_(*config.store), serialize_(session_->thread_level() < mpi::thread_multiple) {}

  ~MpiCommunicator() override { release(); }

  // Builds the MPI communicator of this rank's group; fail()s on error.
  hal_status connect(std::int64_t timeout_ms);

  hal_status execute(std::span<const HostOperation> operations, std::string& message) override;
  void abort() override;
  void shut_down() override;
  std::pair<hal_status, std::string> first_error() override { return failure_.get(); }

 private:
  struct InFlight {
    bool active = false;       // set by in_flight(), from finished_
    std::uint64_t number = 0;  // counts the operations this communicator started
    hal_collective_op_v1 operation{};
    std::size_t group_size = 0;
    std::vector<int> peers;  // send/recv peers of a group
    std::uint64_t collectives_entered = 0;  // what the watchdog publishes
  };

  std::string where(std::span<const HostOperation> operations) const {
    std::string what = describe_operation(rank_, operations.front().description);
    if (operations.size() > 1) what += " and " + std::to_string(operations.size() - 1) + " more in its group";
    return what;
  }
  hal_status run(const HostOperation& operation, std::string& message);
  hal_status run_point_to_point(std::span<const HostOperation> operations, std::string& message);
  int reduction(const HostOperation& operation, std::string& call);
  void watch();
  std::string arrivals(const InFlight& in_flight);
  InFlight in_flight();
  [[noreturn]] void end_job(const std::string& message, int exit_code);
  void release();

  mpi::Datatype carrier(hal_dtype dtype) const {
    switch (dtype) {
      case HAL_DTYPE_F32: return mpi_.float32;
      case HAL_DTYPE_F64: return mpi_.float64;
      case HAL_DTYPE_F16: case HAL_DTYPE_BF16: return mpi_.uint16;
      case HAL_DTYPE_I8: return mpi_.int8;
      case HAL_DTYPE_U8: return mpi_.uint8;
      case HAL_DTYPE_I32: return mpi_.int32;
      case HAL_DTYPE_I64: return mpi_.int64;
    }
    return mpi_.byte;
  }
  mpi::Op predefined(hal_reduce_op op) const {
    switch (op) {
      case HAL_REDUCE_PROD: return mpi_.prod;
      case HAL_REDUCE_MIN: return mpi_.min;
      case HAL_REDUCE_MAX: return mpi_.max;
      case HAL_REDUCE_SUM: case HAL_REDUCE_AVG: break;
    }
    return mpi_.sum;
  }
  std::string progress_key(int rank) const { return prefix_ + "/mpi/progress/" + std::to_string(rank); }

  hal_backend_context& context_;
  std::shared_ptr<mpi::Session> session_;
  const mpi::Library& mpi_;
  int rank_, world_size_;
  std::string prefix_;
  const hal_store_v1& store_;
  bool serialize_;
  mpi::Comm comm_ = nullptr;
  mpi::Op half_ops_[2][4] = {};  // [f16, bf16][sum, prod, min, max]

  SpinLock operation_lock_;  // one operation of this communicator at a time
  std::atomic<bool> aborted_{false};
  FirstFailure failure_;

  // The operation inside MPI, for the watchdog and abort(): the running
  // thread fills it in when an operation starts, and the watchdog copies it
  // at most every 100 ms, so a spin lock is cheaper than a mutex here. The
  // end is one store to finished_, without the lock: an atomic
  // read-modify-write costs about 10 ns, and hal's whole cost over an 8-byte
  // MPI_Allreduce is about 150 ns.
  SpinLock in_flight_lock_;
  InFlight in_flight_;                      // under in_flight_lock_; active unused
  std::atomic<std::uint64_t> finished_{0};  // the number of the last operation that left MPI

  std::mutex watch_mutex_;  // the watchdog's sleep and stopping_
  std::condition_variable watch_wakeup_;
  bool stopping_ = false;
  std::thread watchdog_;
};

hal_status MpiCommunicator::connect(std::int64_t timeout_ms) {
  const std::string who = "rank " + std::to_string(rank_) + " of " + std::to_string(world_size_);
  // Each rank says where it is in MPI_COMM_WORLD; the group is those MPI
  // ranks in hal's rank order. MPI_Comm_create_group involves the members
  // only, so a split's child needs nothing from the ranks outside it.
  const std::string mine = std::to_string(session_->world_rank()) + " " + std::to_string(session_->world_size());
  const std::string member_prefix = prefix_ + "/mpi/member/";
  const std::string my_key = member_prefix + std::to_string(rank_);
  if (const hal_status status = store_set(store_, my_key, mine); status != HAL_OK)
    return fail(status, who + ": publishing its MPI rank failed");
  std::vector<int> world_ranks;
  std::string listing;
  bool one_job = true;
  for (int peer = 0; peer < world_size_; ++peer) {
    std::string text;
    const std::string key = member_prefix + std::to_string(peer);
    const hal_status status = store_get(store_, key, timeout_ms, text);
    if (status != HAL_OK)
      return fail(status, who + ": rank " + std::to_string(peer) + " did not publish its MPI rank within " +
                              std::to_string(timeout_ms) + " ms");
    int world_rank = -1, world_size = -1;
    std::sscanf(text.c_str(), "%d %d", &world_rank, &world_size);
    listing += "\n  rank " + std::to_string(peer) + " is MPI rank " + std::to_string(world_rank) + " of " +
               std::to_string(world_size);
    one_job = one_job && world_size == session_->world_size() && world_rank >= 0 && world_rank < world_size &&
              std::find(world_ranks.begin(), world_ranks.end(), world_rank) == world_ranks.end();
    world_ranks.push_back(world_rank);
  }
  if (!one_job)
    return fail(HAL_ERROR_INVALID_ARGUMENT,
                who + ": the ranks are not one MPI job:" + listing +
                    "\nlaunch every rank with one mpirun or srun, or set HAL_COLL_ENGINE=gloo");

  std::lock_guard serial(serialized_calls());
  mpi::Group world_group = nullptr, group = nullptr;
  int status = mpi_.Comm_group(mpi_.comm_world, &world_group);
  if (status == mpi::success) status = mpi_.Group_incl(world_group, world_size_, world_ranks.data(), &group);
  // Every member derives the same tag from the communicator's store prefix.
  const int tag = static_cast<int>(std::hash<std::string>{}(prefix_) & 0x7fff);
  if (status == mpi::success) status = mpi_.Comm_create_group(mpi_.comm_world, group, tag, &comm_);
  if (group != nullptr) mpi_.Group_free(&group);
  if (world_group != nullptr) mpi_.Group_free(&world_group);
  if (status != mpi::success) {
    comm_ = nullptr;
    return fail(HAL_ERROR_INTERNAL, who + ": MPI_Comm_create_group failed: " + mpi_.error_text(status));
  }
  // Errors come back as codes that hal words, instead of ending the job.
  mpi_.Comm_set_errhandler(comm_, mpi_.errors_return);
  int mpi_rank = -1;
  mpi_.Comm_rank(comm_, &mpi_rank);
  if (mpi_rank != rank_)
    return fail(HAL_ERROR_INTERNAL, who + ": MPI placed this rank at " + std::to_string(mpi_rank) + " of the group");
  for (int type = 0; type < 2; ++type)
    for (int op = 0; op < 4; ++op) {
      const auto reduce_op = static_cast<hal_reduce_op>(op);
      mpi::UserFunction* function =
          type == 0 ? half_function<HAL_DTYPE_F16>(reduce_op) : half_function<HAL_DTYPE_BF16>(reduce_op);
      status = mpi_.Op_create(function, 1, &half_ops_[type][op]);
      if (status != mpi::success)
        return fail(HAL_ERROR_INTERNAL, who + ": MPI_Op_create for f16/bf16 failed: " + mpi_.error_text(status));
    }
  description = thread_level_name(session_->thread_level()) +
                (serialize_ ? " (calls of all communicators serialized)" : "") + ", MPI_COMM_WORLD rank " +
                std::to_string(session_->world_rank()) + " of " + std::to_string(session_->world_size());
  watchdog_ = std::thread([this] { watch(); });
  return succeed();
}

hal_status MpiCommunicator::execute(std::span<const HostOperation> operations, std::string& message) {
  const hal_collective_op_v1& first = operations.front().description;
  std::lock_guard lock(operation_lock_);
  if (const hal_status refused = failure_.refuse(
          aborted_.load(), [&] { return where(operations); }, message);
      refused != HAL_OK)
    return refused;
  const bool point_to_point = first.kind == HAL_COLLECTIVE_SEND || first.kind == HAL_COLLECTIVE_RECV;
  {
    // No clock read per operation: the watchdog starts the timeout when it
    // first sees the operation, which is within its 100 ms period.
    std::lock_guard watch(in_flight_lock_);
    ++in_flight_.number;
    in_flight_.operation = first;
    in_flight_.group_size = operations.size();
    in_flight_.peers.clear();
    if (point_to_point)
      for (const HostOperation& operation : operations) in_flight_.peers.push_back(operation.description.root);
    else
      in_flight_.collectives_entered = first.sequence + 1;
  }
  hal_status status = HAL_OK;
  {
    std::unique_lock serial(serialized_calls(), std::defer_lock);
    if (serialize_) serial.lock();
    status = point_to_point ? run_point_to_point(operations, message) : run(operations.front(), message);
  }
  finished_.store(in_flight_.number, std::memory_order_release);  // only this thread writes number
  if (status != HAL_OK) {
    message = where(operations) + ": " + message;
    failure_.record(status, message);
  }
  return status;
}

// The reductions: predefined ops on the type itself, a user-defined op for
// f16/bf16 when one combine per element is the whole reduction, else an f32
// copy reduced with the predefined op and rounded once at the end.
int MpiCommunicator::reduction(const HostOperation& operation, std::string& call) {
  const hal_collective_op_v1& op = operation.description;
  const std::size_t size = element_size(op.dtype);
  const bool half = is_half(op.dtype);
  const bool exact_in_one_combine =
      op.reduce_op == HAL_REDUCE_MIN || op.reduce_op == HAL_REDUCE_MAX ||
      (world_size_ == 2 && (op.reduce_op == HAL_REDUCE_SUM || op.reduce_op == HAL_REDUCE_PROD));
  const bool staged = half && !exact_in_one_combine;
  const mpi::Datatype type = staged ? mpi_.float32 : carrier(op.dtype);
  const mpi::Op reduce_op = half && !staged ? half_ops_[op.dtype == HAL_DTYPE_F16 ? 0 : 1][op.reduce_op]
                                            : predefined(op.reduce_op);
  const std::uint64_t n = static_cast<std::uint64_t>(world_size_);
  const bool scatter = op.kind == HAL_COLLECTIVE_REDUCE_SCATTER;
  const std::uint64_t input_elements = scatter ? op.count * n : op.count;
  std::uint8_t* const result = op.kind == HAL_COLLECTIVE_REDUCE && rank_ != op.root ? nullptr : operation.recv;

  // The input and output MPI sees; staged (f32) or the buffers themselves.
  std::vector<float> staged_input, staged_output;
  std::vector<std::uint8_t> separate_output;  // reduce_scatter in place: MPI's output must not overlap its input
  const void* input = operation.send;
  void* output = result;
  if (staged) {
    staged_input.resize(input_elements);
    widen_to_f32(op.dtype, operation.send, staged_input.data(), input_elements);
    input = staged_input.data();
    if (scatter) {
      staged_output.resize(op.count);
      output = staged_output.data();
    } else {
      output = result != nullptr ? staged_input.data() : nullptr;
      input = result != nullptr ? mpi::in_place : staged_input.data();
    }
  } else if (scatter) {
    if (operation.recv < operation.send + input_elements * size && operation.send < operation.recv + op.count * size) {
      separate_output.resize(op.count * size);
      output = separate_output.data();
    }
  } else if (result != nullptr && operation.send == result) {
    input = mpi::in_place;
  }

  int status = mpi::success;
  const std::size_t element = staged ? sizeof(float) : size;
  if (scatter) {
    call = "MPI_Reduce_scatter_block";
    status = mpi_.Reduce_scatter_block(input, output, static_cast<int>(op.count), type, reduce_op, comm_);
  } else {
    call = op.kind == HAL_COLLECTIVE_ALL_REDUCE ? "MPI_Allreduce" : "MPI_Reduce";
    for (std::uint64_t done = 0; done < op.count && status == mpi::success; done += kMaximumPiece) {
      const int piece = static_cast<int>(std::min(kMaximumPiece, op.count - done));
      const void* piece_input =
          input == mpi::in_place ? mpi::in_place : static_cast<const std::uint8_t*>(input) + done * element;
      void* piece_output = output != nullptr ? static_cast<std::uint8_t*>(output) + done * element : nullptr;
      status = op.kind == HAL_COLLECTIVE_ALL_REDUCE
                   ? mpi_.Allreduce(piece_input, piece_output, piece, type, reduce_op, comm_)
                   : mpi_.Reduce(piece_input, piece_output, piece, type, reduce_op, op.root, comm_);
    }
  }
  if (status != mpi::success || result == nullptr) return status;

  // avg = sum / ranks in the type's arithmetic (f32 for f16/bf16), then the
  // one rounding into the type.
  const std::uint64_t count = op.count;
  if (staged) {
    float* values = static_cast<float*>(output);
    if (op.reduce_op == HAL_REDUCE_AVG) divide_by(values, count, world_size_);
    narrow_from_f32(op.dtype, values, result, count);
    return status;
  }
  if (output != result) std::memcpy(result, output, count * size);
  if (op.reduce_op == HAL_REDUCE_AVG) {
    switch (op.dtype) {
      case HAL_DTYPE_F32: divide_by(reinterpret_cast<float*>(result), count, world_size_); break;
      case HAL_DTYPE_F64: divide_by(reinterpret_cast<double*>(result), count, world_size_); break;
      case HAL_DTYPE_I8: divide_by(reinterpret_cast<std::int8_t*>(result), count, world_size_); break;
      case HAL_DTYPE_U8: divide_by(reinterpret_cast<std::uint8_t*>(result), count, world_size_); break;
      case HAL_DTYPE_I32: divide_by(reinterpret_cast<std::int32_t*>(result), count, world_size_); break;
      case HAL_DTYPE_I64: divide_by(reinterpret_cast<std::int64_t*>(result), count, world_size_); break;
      case HAL_DTYPE_F16: case HAL_DTYPE_BF16: break;  // staged above
    }
  }
  return status;
}

hal_status MpiCommunicator::run(const HostOperation& operation, std::string& message) {
  const hal_collective_op_v1& op = operation.description;
  if (op.count == 0 && op.kind != HAL_COLLECTIVE_BARRIER) return HAL_OK;
  const bool pieces_allowed = op.kind == HAL_COLLECTIVE_ALL_REDUCE || op.kind == HAL_COLLECTIVE_REDUCE ||
                              op.kind == HAL_COLLECTIVE_BROADCAST;
  if (!pieces_allowed && op.count > static_cast<std::uint64_t>(INT_MAX)) {
    message = "a count of " + std::to_string(op.count) + " per rank exceeds MPI's int counts (" +
              std::to_string(INT_MAX) + "); split the call or use HAL_COLL_ENGINE=gloo";
    return HAL_ERROR_UNSUPPORTED;
  }
  const std::size_t size = element_size(op.dtype);
  const std::uint64_t bytes = op.count * size;
  const mpi::Datatype type = carrier(op.dtype);
  const int count = static_cast<int>(std::min<std::uint64_t>(op.count, INT_MAX));
  const bool is_root = rank_ == op.root;
  std::uint8_t* const send = operation.send;
  std::uint8_t* const recv = operation.recv;
  std::string call;
  int status = mpi::success;
  switch (op.kind) {
    case HAL_COLLECTIVE_ALL_REDUCE: case HAL_COLLECTIVE_REDUCE: case HAL_COLLECTIVE_REDUCE_SCATTER:
      status = reduction(operation, call);
      break;
    case HAL_COLLECTIVE_BROADCAST:
      call = "MPI_Bcast";
      if (is_root && send != recv) std::memcpy(recv, send, bytes);
      for (std::uint64_t done = 0; done < op.count && status == mpi::success; done += kMaximumPiece)
        status = mpi_.Bcast(recv + done * size, static_cast<int>(std::min(kMaximumPiece, op.count - done)), type,
                            op.root, comm_);
      break;
    case HAL_COLLECTIVE_ALL_GATHER:
      call = "MPI_Allgather";
      if (send == recv + static_cast<std::uint64_t>(rank_) * bytes)
        status = mpi_.Allgather(mpi::in_place, 0, type, recv, count, type, comm_);
      else
        status = mpi_.Allgather(send, count, type, recv, count, type, comm_);
      break;
    case HAL_COLLECTIVE_ALL_TO_ALL:
      call = "MPI_Alltoall";
      status = mpi_.Alltoall(send == recv ? mpi::in_place : send, count, type, recv, count, type, comm_);
      break;
    case HAL_COLLECTIVE_GATHER:
      call = "MPI_Gather";
      if (is_root && send == recv + static_cast<std::uint64_t>(op.root) * bytes)
        status = mpi_.Gather(mpi::in_place, 0, type, recv, count, type, op.root, comm_);
      else
        status = mpi_.Gather(send, count, type, is_root ? recv : nullptr, count, type, op.root, comm_);
      break;
    case HAL_COLLECTIVE_SCATTER:
      call = "MPI_Scatter";
      if (is_root && recv == send + static_cast<std::uint64_t>(op.root) * bytes)
        status = mpi_.Scatter(send, count, type, mpi::in_place, count, type, op.root, comm_);
      else
        status = mpi_.Scatter(is_root ? send : nullptr, count, type, recv, count, type, op.root, comm_);
      break;
    case HAL_COLLECTIVE_BARRIER:
      call = "MPI_Barrier";
      status = mpi_.Barrier(comm_);
      break;
    case HAL_COLLECTIVE_SEND: case HAL_COLLECTIVE_RECV:
      message = "send and recv run as a group";
      return HAL_ERROR_INTERNAL;
  }
  if (status == mpi::success) return HAL_OK;
  message = call + " failed: " + mpi_.error_text(status);
  return HAL_ERROR_INTERNAL;
}

// Posts every send and receive of the group, then waits for all of them, so
// a rank that sends to and receives from a peer cannot deadlock. Large
// messages go in pieces; MPI keeps the pieces in order between two ranks.
hal_status MpiCommunicator::run_point_to_point(std::span<const HostOperation> operations, std::string& message) {
  std::vector<mpi::Request> requests;
  for (const HostOperation& operation : operations) {
    const hal_collective_op_v1& op = operation.description;
    const std::size_t size = element_size(op.dtype);
    const mpi::Datatype type = carrier(op.dtype);
    for (std::uint64_t done = 0; done < op.count; done += kMaximumPiece) {
      const int piece = static_cast<int>(std::min(kMaximumPiece, op.count - done));
      mpi::Request request = nullptr;
      const int status = op.kind == HAL_COLLECTIVE_SEND
                             ? mpi_.Isend(operation.send + done * size, piece, type, op.root, 0, comm_, &request)
                             : mpi_.Irecv(operation.recv + done * size, piece, type, op.root, 0, comm_, &request);
      if (status != mpi::success) {
        message = std::string(op.kind == HAL_COLLECTIVE_SEND ? "MPI_Isend" : "MPI_Irecv") + " failed: " +
                  mpi_.error_text(status);
        if (!requests.empty()) mpi_.Waitall(static_cast<int>(requests.size()), requests.data(), nullptr);
        return HAL_ERROR_INTERNAL;
      }
      requests.push_back(request);
    }
  }
  if (requests.empty()) return HAL_OK;
  const int status = mpi_.Waitall(static_cast<int>(requests.size()), requests.data(), nullptr);
  if (status == mpi::success) return HAL_OK;
  message = "MPI_Waitall failed: " + mpi_.error_text(status);
  return HAL_ERROR_INTERNAL;
}

// ---- the watchdog ------------------------------------------------------------------

void MpiCommunicator::watch() {
  std::uint64_t published = 0;
  std::uint64_t watched = 0;  // the operation whose timeout runs, by number; 0: none
  Clock::time_point deadline;
  std::unique_lock lock(watch_mutex_);
  for (;;) {
    Clock::time_point wake = Clock::now() + kPublishPeriod;
    if (watched != 0) wake = std::min(wake, deadline);
    watch_wakeup_.wait_until(lock, wake);
    if (stopping_) return;
    const InFlight current = in_flight();
    const std::uint64_t entered = current.collectives_entered;
    const Clock::time_point now = Clock::now();
    if (!current.active) {
      watched = 0;
    } else if (current.number != watched) {  // seen for the first time: it started within the last period
      watched = current.number;
      deadline = now + Milliseconds(current.operation.timeout_ms);
    }
    if (entered != published) {
      published = entered;
      const std::string key = progress_key(rank_);
      const std::string value = "entered " + std::to_string(published);
      lock.unlock();
      store_set(store_, key, value);
      lock.lock();
      if (stopping_) return;
    }
    if (watched != 0 && now >= deadline) {
      lock.unlock();
      hal_collective_op_v1 op = current.operation;
      std::string message = describe_operation(rank_, op);
      if (current.group_size > 1) message += " and " + std::to_string(current.group_size - 1) + " more in its group";
      message += ": timed out after " + std::to_string(op.timeout_ms) + " ms inside MPI; " + arrivals(current);
      failure_.record(HAL_ERROR_TIMEOUT, message);
      end_job(message, kTimeoutExitCode);
    }
  }
}

// The operation inside MPI now, if any (active).
MpiCommunicator::InFlight MpiCommunicator::in_flight() {
  InFlight copy;
  {
    std::lock_guard lock(in_flight_lock_);
    copy = in_flight_;
  }
  // Read after the copy: an operation that ended before it reads as ended.
  copy.active = copy.number != finished_.load(std::memory_order_acquire);
  return copy;
}

// Which ranks reached the operation, from the counts every rank's watchdog
// publishes. A rank publishes within 100 ms of entering, so a rank that
// stays behind for a short grace period did not arrive.
std::string MpiCommunicator::arrivals(const InFlight& in_flight) {
  const hal_collective_op_v1& op = in_flight.operation;
  const bool point_to_point = op.kind == HAL_COLLECTIVE_SEND || op.kind == HAL_COLLECTIVE_RECV;
  if (point_to_point) {
    std::string peers;
    for (const int peer : in_flight.peers) peers += (peers.empty() ? "" : ", ") + std::string("rank ") + std::to_string(peer);
    return "waiting for the matching send/recv of " + peers + " (point-to-point progress is not tracked)";
  }
  const auto grace = std::clamp(Milliseconds(op.timeout_ms / 3), Milliseconds(300), Milliseconds(1000));
  const auto deadline = Clock::now() + grace;
  std::vector<std::string> states(static_cast<std::size_t>(world_size_));
  for (;;) {
    bool all_arrived = true;
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      std::string& state = states[static_cast<std::size_t>(peer)];
      state = peek(store_, progress_key(peer));
      unsigned long long count = 0;
      const bool arrived = std::sscanf(state.c_str(), "entered %llu", &count) == 1 && count > op.sequence;
      all_arrived = all_arrived && arrived;
    }
    if (all_arrived || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(Milliseconds(50));
  }
  std::string missing;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    const std::string& state = states[static_cast<std::size_t>(peer)];
    unsigned long long count = 0;
    std::string note;
    if (std::sscanf(state.c_str(), "entered %llu", &count) == 1) {
      if (count > op.sequence) continue;
      note = count == 0 ? "it entered no collective" : "its last collective was #" + std::to_string(count - 1);
    } else if (std::sscanf(state.c_str(), "destroyed after %llu", &count) == 1) {
      note = "it destroyed its communicator after " +
             (count == 0 ? std::string("no collective") : "collective #" + std::to_string(count - 1));
    } else {
      note = "it never reported progress";
    }
    missing += (missing.empty() ? "" : "; ") + std::string("rank ") + std::to_string(peer) + " did not arrive (" +
               note + ")";
  }
  return missing.empty() ? "every rank entered it, but MPI did not complete it" : missing;
}

// MPI cannot cancel a blocked call: the message goes to the log, to stderr
// and to the store (for the other ranks), then MPI_Abort ends every rank.
void MpiCommunicator::end_job(const std::string& message, int exit_code) {
  const std::string failed_key = prefix_ + "/failed/" + std::to_string(rank_);
  store_set(store_, failed_key, message);
  const std::string text = message + "\nhal: MPI cannot cancel a blocked operation, so rank " + std::to_string(rank_) +
                           " calls MPI_Abort(MPI_COMM_WORLD, " + std::to_string(exit_code) +
                           "): the launcher ends every rank of the job";
  context_.host.log_message(HAL_LOG_ERROR, text);
  std::fflush(stderr);
  // One MPI_Abort ends the job; several at once can hang Open MPI 4.1's
  // mpirun. The lowest failing rank aborts; the others give it time first.
  std::this_thread::sleep_for(Milliseconds(100) + Milliseconds(300) * std::min(rank_, 10));
  for (int peer = 0; peer < rank_; ++peer)
    if (!peek(store_, prefix_ + "/failed/" + std::to_string(peer)).empty()) {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      break;
    }
  mpi_.Abort(mpi_.comm_world, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is in case a library's does
}

void MpiCommunicator::abort() {
  if (aborted_.exchange(true)) return;
  failure_.record(HAL_ERROR_ABORTED, "rank " + std::to_string(rank_) + ": the communicator was aborted");
  if (const InFlight current = in_flight(); current.active)
    end_job(describe_operation(rank_, current.operation) +
                ": the communicator was aborted while this operation "
                "was blocked inside MPI",
            kAbortExitCode);
}

// Queued operations fail as aborted; one inside MPI runs to its end or its
// timeout (when the watchdog ends the job), since MPI cannot stop it.
void MpiCommunicator::shut_down() {
  aborted_ = true;
  failure_.record(HAL_ERROR_ABORTED, "rank " + std::to_string(rank_) + ": the communicator was destroyed");
  std::lock_guard wait_for_running(operation_lock_);
  release();
}

void MpiCommunicator::release() {
  std::uint64_t entered = 0;
  {
    std::lock_guard lock(watch_mutex_);
    if (stopping_ && !watchdog_.joinable()) return;
    stopping_ = true;
    std::lock_guard in_flight(in_flight_lock_);
    entered = in_flight_.collectives_entered;
  }
  watch_wakeup_.notify_all();
  if (watchdog_.joinable()) {
    watchdog_.join();
    // Lets the peers' watchdogs tell a rank that left from one that hangs.
    const std::string key = progress_key(rank_);
    const std::string value = "destroyed after " + std::to_string(entered);
    store_set(store_, key, value);
  }
  std::unique_lock serial(serialized_calls(), std::defer_lock);
  if (serialize_) serial.lock();
  int finalized = 0;
  mpi_.Finalized(&finalized);
  if (finalized != 0) return;
  for (auto& per_type : half_ops_)
    for (auto& op : per_type)
      if (op != nullptr) mpi_.Op_free(&op);
  if (comm_ != nullptr) mpi_.Comm_free(&comm_);
  comm_ = nullptr;
}

}  // namespace

MpiAvailability mpi_availability() {
  const hal::shims::LoadResult<mpi::Library>& loaded = mpi::load();
  if (loaded.library == nullptr) return {false, loaded.message};
  return {true, (loaded.library->version().empty() ? std::string("MPI") : loaded.library->version()) + " from " +
                    loaded.library->path()};
}

hal_status create_mpi_engine(hal_backend_context& context, const hal_communicator_config_v1& config,
                             std::shared_ptr<CommunicatorEngine>& out) {
  std::shared_ptr<mpi::Session> session;
  try {
    std::lock_guard lock(context.mpi_session_mutex);
    session = mpi::Session::acquire();
    context.mpi_session = session;  // finalized at shutdown, not when the last communicator goes
  } catch (const std::exception& error) {
    return fail(HAL_ERROR_UNSUPPORTED, "rank " + std::to_string(config.rank) + ": the MPI engine cannot start: " +
                                           error.what());
  }
  auto communicator = std::make_shared<MpiCommunicator>(context, std::move(session), config);
  if (const hal_status status = communicator->connect(config.timeout_ms); status != HAL_OK) return status;
  out = std::move(communicator);
  return succeed();
}

}  // namespace hal::host
