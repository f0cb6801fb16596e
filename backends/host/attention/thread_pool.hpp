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
//   the host backend's `threads` option (configure_thread_count; HAL_HOST_THREADS
//   sets it), else OMP_NUM_THREADS (as PyTorch reads it) when a positive integer;
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
// The host backend's `threads` option (HAL_HOST_THREADS sets it), which
// default_thread_count() takes first; 0 clears it. `origin` names where it was
// set, for the reason ("HAL_HOST_THREADS=5").
void configure_thread_count(unsigned threads, std::string origin);

class ThreadPool {
 public:
  // `thread_count` counts the calling thread: a pool of N starts N - 1 workers.
  // Zero means one.
  explicit ThreadPool(unsigned thread_count = default_thread_count().threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads a parallel_for from the calling thread runs on: its OpenMP
  // team's size when it would use one (see below), else the pool's.
  int thread_count() const;

  // When the process has an OpenMP runtime loaded already (PyTorch's
  // libgomp, say), a parallel_for from a thread other than the host
  // backend's own runs on that thread's OpenMP team instead of this pool's
  // workers: a framework's OpenMP threads keep spinning for milliseconds
  // after each of its operations, and two thread pools on the same CPUs
  // would each get a part of them. The framework's thread then runs hal's
  // kernels exactly as it runs its own. hal never loads an OpenMP runtime
  // itself. The stream workers call this once: their work stays on the pool
  // (a team of their own would be one more set of spinning threads).
  static void use_pool_on_this_thread();
  // Whether a parallel_for from the calling thread would run on its OpenMP
  // team (whose threads are awake already: sharing even small work pays).
  bool uses_openmp_team() const;

  // Runs body(begin, end) over disjoint chunks covering [0, count) on the
  // workers and the calling thread; returns when every chunk is done. Chunks
  // are handed out in increasing order as threads become free; a worker the
  // system has not run by the time the calling thread took the last chunk
  // is not waited for (on a CPU another runtime's threads keep busy, it
  // could take a scheduler tick to come). The first exception thrown by a
  // chunk is rethrown here (remaining chunks are skipped). A call from
  // inside a body runs serially on that thread.
  void parallel_for(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body);

  // Same, also telling the body which thread runs it: worker is in
  // [0, thread_count()) and no two concurrently running bodies share one, so
  // it can index per-thread scratch memory.
  void parallel_for_with_worker(std::int64_t count,
                                const std::function<void(int, std::int64_t, std::int64_t)>& body);

 private:
  void worker_loop(int worker);
  void run_chunks(int worker);
  void run_on_openmp_team(int team_size, std::int64_t count,
                          const std::function<void(int, std::int64_t, std::int64_t)>& body);

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one parallel_for at a time from outside threads
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;
  // Workers inside the current job; none may join once it is closed.
  int busy_workers_ = 0;
  bool job_open_ = false;
  bool stopping_ = false;
  // Bumped with generation_, read without the lock by workers that spin
  // briefly before sleeping: the phases of one kernel follow each other
  // within microseconds.
  std::atomic<std::uint64_t> posted_generation_{0};

  const std::function<void(int, std::int64_t, std::int64_t)>* body_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace hal::host
