// Internal types of the host (CPU) backend.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// An in-order queue executed by one worker thread.
struct hal_stream {
  hal_stream(hal_backend_context* owner, std::uint32_t owner_device);
  ~hal_stream();
  void enqueue(hal::host::Operation operation);
  hal_status synchronize();
  bool idle();

  hal_backend_context* context;
  std::uint32_t device;

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::condition_variable became_idle_;
  std::deque<hal::host::Operation> queue_;
  bool running_operation_ = false;
  bool stopping_ = false;
  hal_status error_ = HAL_OK;  // first failure since the last synchronize
  std::string error_message_;
  std::thread worker_;  // last: started after the members above exist
};

namespace hal::host {
class ThreadPool;
class HostTelemetry;
struct TelemetryBaseline;
extern const hal_attention_v1 attention_table;
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
  std::mutex telemetry_mutex;
  std::unique_ptr<hal::host::HostTelemetry> telemetry;
  std::vector<hal::host::TelemetryBaseline> telemetry_baselines;
};
