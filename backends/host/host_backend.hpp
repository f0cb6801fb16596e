// Internal types of the host (CPU) backend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend_options.hpp"
#include "hal/backend_abi.h"
#include "last_error.hpp"
#include "task.hpp"

namespace hal::host {

using backend::fail;
using backend::succeed;

// One host device per NUMA node: its memory is bound to that node.
struct HostDevice {
  int numa_node = -1;
  std::vector<int> cpus;
  std::string name, vendor, uuid;
  std::vector<std::pair<std::string, std::string>> version_strings;
  std::vector<hal_key_value_v1> version_axes;  // points into version_strings
  struct CapabilityStorage {
    std::string key, note;
  };
  std::vector<CapabilityStorage> capability_strings;
  std::vector<hal_capability_v1> capabilities;  // points into capability_strings
  std::uint64_t total_memory = 0;
  std::uint32_t clock_mhz = 0;
};

struct Context {
  void (*log)(void*, hal_log_level, const char*) = nullptr;
  void* log_user_data = nullptr;
  bool multiple_numa_nodes = false;
  std::vector<HostDevice> devices;

  void log_message(hal_log_level level, const std::string& message) const {
    if (log != nullptr) log(log_user_data, level, message.c_str());
  }
};

// Discovers the NUMA nodes, CPUs and identity of this machine.
std::vector<HostDevice> discover_devices();
std::uint64_t free_memory_of_node(int numa_node, bool multiple_nodes);
void fill_device_info(const HostDevice& device, bool multiple_nodes, hal_device_info_v1& info);

// Shared so that work in flight keeps memory alive after buffer_free.
struct Allocation {
  void* data = nullptr;
  std::uint64_t size = 0;
  hal_memory_kind kind = HAL_MEMORY_DEVICE;
  bool locked = false;
  bool owned = true;  // false for imported memory: its owner frees it
  // Imported memory: tells its owner hal is done with it, once the last
  // operation holding this allocation has finished.
  void (*release)(void* user_data) = nullptr;
  void* release_user_data = nullptr;
  ~Allocation();
};

// A work item: gets the stream's status so far, returns HAL_OK or an error
// with message. Items that must run even after an earlier failure (event
// records, callbacks) set always_runs.
struct Operation {
  Task run;
  bool always_runs = false;
  // Short, and never waits on anything but memory (no peers, no events): when
  // the stream is idle, the enqueuing thread runs it at once, which costs
  // less than handing it to the stream's worker and waking it.
  bool runs_inline_when_idle = false;
};

hal_status allocate(const Context& context, std::uint32_t device, hal_memory_kind kind, std::uint64_t size,
                    std::uint64_t alignment, hal_buffer** out);
// The interop table (interop.cpp): imported memory; no native streams.
extern const hal_interop_v1 interop_table;
void fill_bytes(void* destination, std::uint64_t size, const void* pattern, std::uint32_t pattern_size);

struct EventCore {
  std::mutex mutex;
  std::condition_variable completed;
  std::uint64_t records = 0;      // how many records were enqueued
  std::uint64_t completions = 0;  // the highest record reached
  std::int64_t timestamp_ns = 0;  // steady clock when the latest record was reached
};

}  // namespace hal::host

struct hal_buffer {
  std::shared_ptr<hal::host::Allocation> allocation;
  std::uint32_t device = 0;
};

struct hal_event {
  std::shared_ptr<hal::host::EventCore> core = std::make_shared<hal::host::EventCore>();
  std::uint32_t device = 0;
};

// An in-order queue of operations. A worker thread per stream runs them,
// taking every queued operation at once and running it without the lock;
// an idle worker spins a little before it sleeps, so a burst of small
// operations costs no wake-up or lock traffic per operation. A thread that
// synchronizes runs the queued operations itself instead of sleeping until
// the worker is done: the worker stops after its current operation and the
// rest run in order on the synchronizing thread, so waiting for a burst of
// small collectives costs no hand-off at all. Host callbacks run on the
// worker only.
struct hal_stream {
  hal_stream(hal_backend_context* owner, std::uint32_t owner_device);
  ~hal_stream();
  void enqueue(hal::host::Operation&& operation);
  // A host callback: user code that may synchronize other streams, never
  // run by a thread that is synchronizing this one.
  void enqueue_host_callback(hal::host::Operation&& operation);
  hal_status synchronize();
  bool idle();

  hal_backend_context* context;
  std::uint32_t device;

 private:
  struct Queued {
    Queued(hal::host::Operation&& queued, bool only_on_worker)
        : operation(std::move(queued)), worker_only(only_on_worker) {}
    hal::host::Operation operation;
    bool worker_only = false;
  };

  void push(hal::host::Operation&& operation, bool worker_only);
  void work();
  bool queue_empty() const { return head_ == queue_.size(); }
  bool idle_locked() const { return queue_empty() && !running_batch_; }
  bool worker_may_take() const {
    return !running_batch_ && !queue_empty() && (claims_ == 0 || queue_[head_].worker_only);
  }
  // Moves the longest prefix of the queue whose worker_only is `worker_only`
  // (or all of it, when `everything`) into batch.
  void take(std::vector<Queued>& batch, bool everything, bool worker_only);
  // Runs batch in order with the lock released, then records its first
  // failure. The worker (yield_to_claims) stops early when a thread starts
  // to synchronize and puts the rest back at the front of the queue.
  void run(std::vector<Queued>& batch, std::unique_lock<std::mutex>& lock, bool yield_to_claims);
  // Spins, then yields, for up to a short while until an operation is queued.
  void await_work() const;
  // Spins, then yields, for up to a short while until the running batch ends.
  void await_batch_end(std::uint64_t seen) const;

  std::mutex mutex_;
  std::condition_variable work_available_;  // the worker waits here
  std::condition_variable state_changed_;   // synchronizers: a batch ended, the stream became idle
  std::vector<Queued> queue_;               // from head_ on; swapped with a runner's batch
  std::size_t head_ = 0;                    // what runners took from the front is before it
  std::vector<Queued> worker_batch_;        // the worker's
  std::vector<Queued> caller_batch_;        // a synchronizing or inline-running thread's (one runs at a time)
  std::atomic<bool> queued_{false};         // the queue is not empty; read without the lock
  std::atomic<std::uint64_t> batches_ended_{0};
  std::atomic<int> claims_{0};              // threads in synchronize; changed under the lock
  bool running_batch_ = false;              // the worker or a synchronizing thread runs a batch
  bool worker_sleeping_ = false;
  bool stopping_ = false;
  hal_status error_ = HAL_OK;  // first failure since the last synchronize
  std::string error_message_;
  std::thread worker_;  // last: started after the members above exist
};

namespace hal::host {
class ThreadPool;
class HostTelemetry;
struct TelemetryBaseline;
extern const hal_attention_v3 attention_table;
// telemetry.cpp: sysfs and procfs under telemetry_root (telemetry_sources.hpp).
extern const hal_telemetry_v1 telemetry_table;
}  // namespace hal::host

struct hal_backend_context {
  hal_backend_context();
  ~hal_backend_context();
  hal::host::Context host;
  // Attention's worker threads, started on first use.
  std::mutex attention_pool_mutex;
  std::unique_ptr<hal::host::ThreadPool> attention_pool;
  // The process's MPI session (shims/mpi), held from the first MPI
  // communicator until shutdown, which finalizes MPI when hal started it.
  std::mutex mpi_session_mutex;
  std::shared_ptr<void> mpi_session;
  // Telemetry: the sensors are found on the first snapshot, so start-up
  // scans nothing; the baselines hold each device's counters for its rates.
  std::filesystem::path telemetry_root = "/";
  // The shm engine's area per rank and buffer: the `shm_bytes` option, read
  // when a communicator is made ("" for the default).
  hal::backend::BackendOption shm_bytes;
  std::mutex telemetry_mutex;
  std::unique_ptr<hal::host::HostTelemetry> telemetry;
  std::vector<hal::host::TelemetryBaseline> telemetry_baselines;
};
