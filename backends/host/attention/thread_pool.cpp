#include "attention/thread_pool.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <system_error>

#include "environment.hpp"
#include "spin_wait.hpp"

namespace hal::host {
namespace {

// Lets a nested parallel_for see that its thread already works for a pool.
struct CurrentWorker {
  const ThreadPool* pool = nullptr;
  int worker = 0;
};
thread_local CurrentWorker current_worker;

// How long an idle worker looks for the next job before it sleeps.
constexpr std::chrono::microseconds kWorkerSpin{30};

// Set on threads whose parallel work must stay on the pool.
thread_local bool pool_only_thread = false;

// The entry points of an OpenMP runtime (libgomp's ABI) some other library
// of the process loaded; looked up once, on the first parallel_for.
struct OpenMpRuntime {
  void (*parallel)(void (*function)(void*), void* data, unsigned threads, unsigned flags) = nullptr;
  int (*thread_num)() = nullptr;
  int (*max_threads)() = nullptr;
};

const OpenMpRuntime* loaded_openmp() {
  static const OpenMpRuntime runtime = [] {
    OpenMpRuntime found;
    // RTLD_NOLOAD: only a runtime that is there already; the handle is
    // kept, so it stays loaded while hal uses it.
    void* library = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (library == nullptr) return found;
    found.parallel = reinterpret_cast<decltype(found.parallel)>(dlsym(library, "GOMP_parallel"));
    found.thread_num = reinterpret_cast<decltype(found.thread_num)>(dlsym(library, "omp_get_thread_num"));
    found.max_threads = reinterpret_cast<decltype(found.max_threads)>(dlsym(library, "omp_get_max_threads"));
    if (found.parallel == nullptr || found.thread_num == nullptr || found.max_threads == nullptr) found = {};
    return found;
  }();
  return runtime.parallel != nullptr ? &runtime : nullptr;
}

// The OpenMP runtime a parallel_for from this thread runs on, or null.
const OpenMpRuntime* openmp_for_this_thread() {
  if (pool_only_thread || current_worker.pool != nullptr) return nullptr;
  return loaded_openmp();
}

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

namespace {
std::mutex configured_mutex;
ThreadCount configured{0, ""};
}  // namespace

void configure_thread_count(unsigned threads, std::string origin) {
  std::lock_guard lock(configured_mutex);
  configured = {threads, std::move(origin)};
}

ThreadCount default_thread_count() {
  {
    std::lock_guard lock(configured_mutex);
    if (configured.threads > 0) return configured;
  }
  if (const unsigned threads = positive_integer(abi::environment("OMP_NUM_THREADS")))
    return {threads, "OMP_NUM_THREADS=" + std::to_string(threads)};
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

void ThreadPool::use_pool_on_this_thread() { pool_only_thread = true; }

bool ThreadPool::uses_openmp_team() const { return openmp_for_this_thread() != nullptr; }

int ThreadPool::thread_count() const {
  if (const OpenMpRuntime* openmp = openmp_for_this_thread()) return std::max(1, openmp->max_threads());
  return static_cast<int>(workers_.size()) + 1;
}

void ThreadPool::parallel_for(std::int64_t count,
                              const std::function<void(std::int64_t, std::int64_t)>& body) {
  parallel_for_with_worker(count, [&body](int, std::int64_t begin, std::int64_t end) { body(begin, end); });
}

void ThreadPool::parallel_for_with_worker(
    std::int64_t count, const std::function<void(int, std::int64_t, std::int64_t)>& body) {
  if (count <= 0) return;
  const bool nested = current_worker.pool == this;
  // Sized as thread_count() said to this thread: the caller's scratch is.
  const OpenMpRuntime* openmp = nested ? nullptr : openmp_for_this_thread();
  const int team_size = openmp != nullptr ? openmp->max_threads() : 0;
  if (team_size > 1 && count > 1) {
    run_on_openmp_team(team_size, count, body);
    return;
  }
  if (nested || openmp != nullptr || workers_.empty() || count == 1) {
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
    busy_workers_ = 0;
    job_open_ = true;
    ++generation_;
    posted_generation_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(0);

  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    // Every chunk is taken: a worker that has not joined yet has nothing to
    // do, so it is not waited for (and must not touch body_ once we return).
    job_open_ = false;
    done_.wait(lock, [this] { return busy_workers_ == 0; });
    body_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::run_on_openmp_team(int team_size, std::int64_t count,
                                    const std::function<void(int, std::int64_t, std::int64_t)>& body) {
  struct Job {
    ThreadPool* pool;
    const OpenMpRuntime* openmp;
    const std::function<void(int, std::int64_t, std::int64_t)>* body;
    std::int64_t count;
    std::int64_t chunk;
    std::atomic<std::int64_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
  } job{this,
        loaded_openmp(),
        &body,
        count,
        std::max<std::int64_t>(1, (count + team_size * 8 - 1) / (team_size * 8)),
        {},
        {},
        {}};
  // The team may have fewer threads than asked for; chunks go to whoever
  // comes, as on the pool, and nothing may escape into the runtime.
  job.openmp->parallel(
      [](void* data) {
        Job& job = *static_cast<Job*>(data);
        const int worker = job.openmp->thread_num();
        WorkerScope scope(job.pool, worker);
        for (;;) {
          const std::int64_t begin = job.next.fetch_add(job.chunk, std::memory_order_relaxed);
          if (begin >= job.count) return;
          try {
            (*job.body)(worker, begin, std::min(job.count, begin + job.chunk));
          } catch (...) {
            std::lock_guard lock(job.error_mutex);
            if (!job.error) job.error = std::current_exception();
            job.next.store(job.count, std::memory_order_relaxed);
          }
        }
      },
      &job, static_cast<unsigned>(team_size), 0);
  if (job.error) std::rethrow_exception(job.error);
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
    // A kernel's phases follow each other closely: look for the next one
    // for a moment before sleeping (a wake-up costs more than the wait).
    spin_until([&] { return posted_generation_.load(std::memory_order_acquire) != seen_generation; }, kWorkerSpin);
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      if (!job_open_) continue;  // the caller finished it alone
      ++busy_workers_;
    }
    run_chunks(worker);
    {
      std::lock_guard lock(mutex_);
      if (--busy_workers_ == 0) done_.notify_all();
    }
  }
}

}  // namespace hal::host
