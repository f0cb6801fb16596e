// Streams: operations run in order, on the stream's worker thread or on a
// thread that synchronizes the stream (host_backend.hpp says why).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention/thread_pool.hpp"
#include "host_backend.hpp"
#include "spin_wait.hpp"

namespace {

// How long an idle worker keeps looking for work before it sleeps: long
// enough to catch the next operation of a caller that enqueues in a loop,
// short enough that an idle stream costs nothing.
constexpr std::chrono::microseconds kWorkerSpin{50};
// How long a synchronizing thread waits for the worker's current operation
// before it sleeps: a small operation ends well within it.
constexpr std::chrono::microseconds kSynchronizeSpin{20};

}  // namespace

hal_stream::hal_stream(hal_backend_context* owner, std::uint32_t owner_device)
    : context(owner), device(owner_device), worker_([this] { work(); }) {}

hal_stream::~hal_stream() {
  {
    std::unique_lock lock(mutex_);
    // Pending work finishes first: destroying a stream never drops work.
    state_changed_.wait(lock, [&] { return idle_locked(); });
    stopping_ = true;
  }
  work_available_.notify_one();
  worker_.join();
}

void hal_stream::enqueue(hal::host::Operation&& operation) { push(std::move(operation), false); }

void hal_stream::enqueue_host_callback(hal::host::Operation&& operation) { push(std::move(operation), true); }

void hal_stream::push(hal::host::Operation&& operation, bool worker_only) {
  bool wake = false;
  {
    std::unique_lock lock(mutex_);
    if (operation.runs_inline_when_idle && !worker_only && idle_locked()) {
      // Nothing runs or waits before it: running it here keeps stream order,
      // and a failure is reported by the next synchronize as for queued work.
      queue_.emplace_back(std::move(operation), false);
      queued_.store(true, std::memory_order_release);
      take(caller_batch_, false, false);
      run(caller_batch_, lock, false);
      return;
    }
    // While a thread synchronizes, it runs what is queued; the worker is
    // needed only for host callbacks.
    wake = worker_sleeping_ && (claims_ == 0 || worker_only);
    queue_.emplace_back(std::move(operation), worker_only);
    queued_.store(true, std::memory_order_release);
    if (wake) worker_sleeping_ = false;  // one wake-up is enough
  }
  // A worker that is running or spinning finds the operation without a wake-up.
  if (wake) work_available_.notify_one();
}

void hal_stream::take(std::vector<Queued>& batch, bool everything, bool worker_only) {
  std::size_t end = queue_.size();
  if (!everything) {
    end = head_;
    while (end < queue_.size() && queue_[end].worker_only == worker_only) ++end;
  }
  if (head_ == 0 && end == queue_.size()) {
    batch.swap(queue_);  // keeps both vectors' capacity
  } else {
    batch.insert(batch.end(), std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(head_)),
                 std::make_move_iterator(queue_.begin() + static_cast<std::ptrdiff_t>(end)));
    head_ = end;
  }
  if (head_ == queue_.size()) {
    queue_.clear();
    head_ = 0;
  }
  queued_.store(!queue_empty(), std::memory_order_relaxed);
}

void hal_stream::run(std::vector<Queued>& batch, std::unique_lock<std::mutex>& lock, bool yield_to_claims) {
  running_batch_ = true;
  hal_status stream_status = error_;
  lock.unlock();
  hal_status first_failure = HAL_OK;
  std::string first_message, message;
  std::size_t done = 0;
  for (; done < batch.size(); ++done) {
    hal::host::Operation& operation = batch[done].operation;
    if (yield_to_claims && claims_.load(std::memory_order_relaxed) > 0 && !batch[done].worker_only) break;
    const bool skip = stream_status != HAL_OK && !operation.always_runs;
    hal_status status = HAL_OK;
    if (!skip) {
      message.clear();
      try {
        status = operation.run(stream_status, message);
      } catch (const std::exception& exception) {
        status = HAL_ERROR_INTERNAL;
        message = std::string("an operation threw: ") + exception.what();
      }
    }
    // What the operation captured (allocations, a communicator) goes
    // before the stream can be seen idle.
    operation.run.reset();
    if (status != HAL_OK && stream_status == HAL_OK) {
      stream_status = status;
      first_failure = status;
      first_message = std::move(message);
    }
  }
  lock.lock();
  if (done < batch.size()) {  // back to the front, for the synchronizing thread
    queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(head_),
                  std::make_move_iterator(batch.begin() + static_cast<std::ptrdiff_t>(done)),
                  std::make_move_iterator(batch.end()));
    queued_.store(true, std::memory_order_relaxed);
  }
  batch.clear();
  if (first_failure != HAL_OK && error_ == HAL_OK) {
    error_ = first_failure;
    error_message_ = std::move(first_message);
  }
  running_batch_ = false;
  batches_ended_.fetch_add(1, std::memory_order_release);
  state_changed_.notify_all();
}

hal_status hal_stream::synchronize() {
  if (std::this_thread::get_id() == worker_.get_id())
    return hal::host::fail(HAL_ERROR_INVALID_ARGUMENT,
                           "a host callback synchronized its own stream, which would wait forever; "
                           "synchronize from another thread");
  std::unique_lock lock(mutex_);
  claims_.fetch_add(1, std::memory_order_relaxed);
  while (!idle_locked()) {
    if (!running_batch_ && !queue_[head_].worker_only) {
      take(caller_batch_, false, false);
      run(caller_batch_, lock, false);
      continue;
    }
    if (!running_batch_ && worker_sleeping_) {  // a host callback is next: the worker runs it
      worker_sleeping_ = false;
      work_available_.notify_one();
    }
    // The worker stops after its current operation; a small one ends soon.
    const std::uint64_t seen = batches_ended_.load(std::memory_order_acquire);
    lock.unlock();
    await_batch_end(seen);
    lock.lock();
    if (batches_ended_.load(std::memory_order_relaxed) == seen)
      state_changed_.wait(lock, [&] { return batches_ended_.load(std::memory_order_relaxed) != seen; });
  }
  claims_.fetch_sub(1, std::memory_order_relaxed);
  if (error_ == HAL_OK) return hal::host::succeed();
  // Reported once: the stream is usable again after this.
  const hal_status error = error_;
  std::string message = std::move(error_message_);
  error_ = HAL_OK;
  error_message_.clear();
  return hal::host::fail(error, std::move(message));
}

bool hal_stream::idle() {
  std::lock_guard lock(mutex_);
  return idle_locked();
}

void hal_stream::await_work() const {
  hal::host::spin_until([&] { return queued_.load(std::memory_order_acquire); }, kWorkerSpin);
}

void hal_stream::await_batch_end(std::uint64_t seen) const {
  hal::host::spin_until([&] { return batches_ended_.load(std::memory_order_acquire) != seen; }, kSynchronizeSpin);
}

void hal_stream::work() {
  hal::host::ThreadPool::use_pool_on_this_thread();
  std::unique_lock lock(mutex_);
  for (;;) {
    if (worker_may_take()) {
      // Without a synchronizing thread the worker takes everything queued;
      // with one, only the host callbacks at the front.
      take(worker_batch_, claims_ == 0, true);
      run(worker_batch_, lock, true);
      continue;
    }
    if (stopping_) return;
    if (claims_ == 0) {
      lock.unlock();
      await_work();
      lock.lock();
      if (worker_may_take() || stopping_) continue;
    }
    while (!stopping_ && !worker_may_take()) {
      worker_sleeping_ = true;
      work_available_.wait(lock);
    }
    worker_sleeping_ = false;
  }
}
