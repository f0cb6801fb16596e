// A fixed-size pool of worker threads owned by its caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hal::host {

// Threads one process should use for CPU kernels, and why:
//   HAL_HOST_THREADS, else OMP_NUM_THREADS (as PyTorch reads it), when set to
//   a positive integer;
//   else the CPUs this process may run on (its affinity mask), shared evenly
//   by the ranks on this machine (LOCAL_WORLD_SIZE from halrun or torchrun,
//   OMPI_COMM_WORLD_LOCAL_SIZE from mpirun, SLURM_NTASKS_PER_NODE) when
//   their launcher left every rank on every CPU, so that two ranks on one
//   machine do not each start a thread per CPU.
struct ThreadCount {
  unsigned threads;
  std::string reason;
};
ThreadCount default_thread_count();

class ThreadPool {
 public:
  // `thread_count` counts the calling thread: a pool of N starts N - 1 workers.
  // Zero means one.
  explicit ThreadPool(unsigned thread_count = default_thread_count().threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int thread_count() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(begin, end) over disjoint chunks covering [0, count) on the
  // workers and the calling thread; returns when every chunk is done. Chunks
  // are handed out in increasing order as threads become free. The first
  // exception thrown by a chunk is rethrown here (remaining chunks are
  // skipped). A call from inside a body runs serially on that thread.
  void parallel_for(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body);

  // Same, also telling the body which thread runs it: worker is in
  // [0, thread_count()) and no two concurrently running bodies share one, so
  // it can index per-thread scratch memory.
  void parallel_for_with_worker(std::int64_t count,
                                const std::function<void(int, std::int64_t, std::int64_t)>& body);

 private:
  void worker_loop(int worker);
  void run_chunks(int worker);

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one parallel_for at a time from outside threads
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;
  int busy_workers_ = 0;
  bool stopping_ = false;

  const std::function<void(int, std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace hal::host
