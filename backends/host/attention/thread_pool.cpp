#include "attention/thread_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <system_error>

#include "environment.hpp"

namespace hal::host {
namespace {

// Lets a nested parallel_for see that its thread already works for a pool.
struct CurrentWorker {
  const ThreadPool* pool = nullptr;
  int worker = 0;
};
thread_local CurrentWorker current_worker;

class WorkerScope {
 public:
  WorkerScope(const ThreadPool* pool, int worker) : saved_(current_worker) {
    current_worker = CurrentWorker{pool, worker};
  }
  ~WorkerScope() { current_worker = saved_; }
  WorkerScope(const WorkerScope&) = delete;
  WorkerScope& operator=(const WorkerScope&) = delete;

 private:
  CurrentWorker saved_;
};

// A positive integer, or 0 for anything else (unset, empty, garbage).
unsigned positive_integer(const char* text) {
  if (text == nullptr) return 0;
  unsigned value = 0;
  const char* end = text + std::char_traits<char>::length(text);
  const auto [rest, error] = std::from_chars(text, end, value);
  return error == std::errc{} && rest == end ? value : 0;
}

}  // namespace

ThreadCount default_thread_count() {
  for (const char* variable : {"HAL_HOST_THREADS", "OMP_NUM_THREADS"}) {
    if (const unsigned threads = positive_integer(abi::environment(variable))) {
      return {threads, std::string(variable) + "=" + std::to_string(threads)};
    }
  }
  const unsigned online = std::max(1u, std::thread::hardware_concurrency());
  unsigned allowed = online;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) allowed = std::max(1, CPU_COUNT(&mask));
  if (allowed < online) {
    return {allowed, std::to_string(allowed) + " of " + std::to_string(online) + " CPUs in this process's affinity mask"};
  }
  for (const char* variable : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const unsigned ranks = positive_integer(abi::environment(variable)); ranks > 1) {
      const unsigned share = std::max(1u, allowed / ranks);
      return {share, std::to_string(allowed) + " CPUs shared by " + std::string(variable) + "=" + std::to_string(ranks) +
                         " ranks on this machine"};
    }
  }
  return {allowed, std::to_string(allowed) + " CPUs"};
}

ThreadPool::ThreadPool(unsigned thread_count) {
  const unsigned total = std::max(1u, thread_count);
  workers_.reserve(total - 1);
  for (unsigned worker = 1; worker < total; ++worker) {
    workers_.emplace_back([this, worker] { worker_loop(static_cast<int>(worker)); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(std::int64_t count,
                              const std::function<void(std::int64_t, std::int64_t)>& body) {
  parallel_for_with_worker(count, [&body](int, std::int64_t begin, std::int64_t end) { body(begin, end); });
}

void ThreadPool::parallel_for_with_worker(
    std::int64_t count, const std::function<void(int, std::int64_t, std::int64_t)>& body) {
  if (count <= 0) return;
  const bool nested = current_worker.pool == this;
  if (nested || workers_.empty() || count == 1) {
    // Nested call, single thread or nothing to share: run here. A nested call
    // keeps the worker index of the body it runs in (its scratch stays its own).
    const int worker = nested ? current_worker.worker : 0;
    WorkerScope scope(this, worker);
    body(worker, 0, count);
    return;
  }

  std::lock_guard submit(submit_mutex_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    count_ = count;
    // About eight chunks per thread: small enough to balance uneven chunks
    // (causal attention), large enough to keep the shared counter cold.
    const std::int64_t target_chunks = static_cast<std::int64_t>(thread_count()) * 8;
    chunk_ = std::max<std::int64_t>(1, (count + target_chunks - 1) / target_chunks);
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(0);

  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_workers_ == 0; });
    body_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run_chunks(int worker) {
  WorkerScope scope(this, worker);
  for (;;) {
    const std::int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= count_) return;
    const std::int64_t end = std::min(count_, begin + chunk_);
    try {
      (*body_)(worker, begin, end);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(count_, std::memory_order_relaxed);  // skip what is left
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  std::uint64_t seen_generation = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    run_chunks(worker);
    {
      std::lock_guard lock(mutex_);
      if (--busy_workers_ == 0) done_.notify_all();
    }
  }
}

}  // namespace hal::host
