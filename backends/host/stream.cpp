// Streams: one worker thread per stream runs operations in order.
#include "host_backend.hpp"

hal_stream::hal_stream(hal_backend_context* owner, std::uint32_t owner_device)
    : context(owner), device(owner_device), worker_([this] { work(); }) {}

hal_stream::~hal_stream() {
  {
    std::unique_lock lock(mutex_);
    // Pending work finishes first: destroying a stream never drops work.
    became_idle_.wait(lock, [&] { return queue_.empty() && !running_operation_; });
    stopping_ = true;
  }
  work_available_.notify_one();
  worker_.join();
}

void hal_stream::enqueue(hal::host::Operation operation) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(operation));
  }
  work_available_.notify_one();
}

hal_status hal_stream::synchronize() {
  if (std::this_thread::get_id() == worker_.get_id())
    return hal::host::fail(HAL_ERROR_INVALID_ARGUMENT,
                           "a host callback synchronized its own stream, which would wait forever; "
                           "synchronize from another thread");
  std::unique_lock lock(mutex_);
  became_idle_.wait(lock, [&] { return queue_.empty() && !running_operation_; });
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
  return queue_.empty() && !running_operation_;
}

void hal_stream::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_available_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    hal::host::Operation operation = std::move(queue_.front());
    queue_.pop_front();
    running_operation_ = true;
    const hal_status stream_status = error_;
    const bool skip = stream_status != HAL_OK && !operation.always_runs;
    lock.unlock();
    std::string message;
    hal_status status = HAL_OK;
    if (!skip) {
      try {
        status = operation.run(stream_status, message);
      } catch (const std::exception& exception) {
        status = HAL_ERROR_INTERNAL;
        message = std::string("an operation threw: ") + exception.what();
      }
    }
    lock.lock();
    if (status != HAL_OK && error_ == HAL_OK) {
      error_ = status;
      error_message_ = std::move(message);
    }
    running_operation_ = false;
    if (queue_.empty()) became_idle_.notify_all();
  }
}
