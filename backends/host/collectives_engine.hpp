// The host backend's collectives engines (Gloo over TCP, MPI, shared memory)
// behind one interface, and what they share: resolved operations, names for
// messages, the first failure, the engine choice.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collective_names.hpp"
#include "communicator_failure.hpp"
#include "dtype_codes.hpp"
#include "hal/backend_abi.h"
#include "host_backend.hpp"

namespace hal::host {

// An operation with its buffers resolved to host memory; the allocations
// stay alive until it ran.
struct HostOperation {
  hal_collective_op_v1 description;
  std::shared_ptr<Allocation> send_allocation, recv_allocation;
  std::uint8_t* send = nullptr;
  std::uint8_t* recv = nullptr;
};

// One communicator of one engine. libhal has checked the arguments; the
// engine moves the bytes. After its first failure a communicator is broken
// (as in NCCL): every later operation fails with that error.
class CommunicatorEngine {
 public:
  virtual ~CommunicatorEngine() = default;
  // Runs one collective, or a group of send/recv; on the stream's worker.
  virtual hal_status execute(std::span<const HostOperation> operations, std::string& message) = 0;
  // Any thread, any time.
  virtual void abort() = 0;
  // Aborts what still runs and waits until no operation is inside the engine.
  virtual void shut_down() = 0;
  // HAL_OK or the first error, with its message.
  virtual std::pair<hal_status, std::string> first_error() = 0;

  // "gloo: ..." or "mpi: ...": which engine runs and why.
  std::string description;
};

// Names and descriptions shared with the GPU backends' engine.
using abi::describe_operation;
using abi::dtype_name;
using abi::element_size;
using abi::FirstFailure;
using abi::is_half;
using abi::kind_name;
using abi::option_value;

// Whether the shared-memory engine runs beside the chosen one.
enum class ShmUse {
  never,
  when_shared,  // auto: when every rank shares this host
  required,     // shm was asked for: ranks on several hosts are an error
};

// Which engine a communicator runs on. requested: "auto", "gloo", "mpi" or
// "shm"; requested_by says where that came from, for the reason.
struct EngineChoice {
  std::string engine;   // "gloo" or "mpi"; empty when the request cannot be met
  std::string reason;   // why, or why the request cannot be met
  std::string engines;  // each engine and whether it can run in this process
  ShmUse shm = ShmUse::never;  // shm runs its operations, engine the others
};
EngineChoice choose_engine(std::string_view requested, std::string_view requested_by);

// Both return HAL_OK with out set, or the status fail() recorded.
hal_status create_gloo_engine(const hal_communicator_config_v1& config, std::shared_ptr<CommunicatorEngine>& out);
hal_status create_mpi_engine(hal_backend_context& context, const hal_communicator_config_v1& config,
                             std::shared_ptr<CommunicatorEngine>& out);
// The shared-memory engine beside `beside` (which runs what shm does not).
// HAL_OK with out set; HAL_OK with out empty and not_used saying why when
// the ranks do not share a host (auto) or the segment cannot be made (every
// rank then goes on with `beside`); or the status fail() recorded.
hal_status create_shm_engine(hal_backend_context& context, const hal_communicator_config_v1& config, ShmUse use,
                             std::shared_ptr<CommunicatorEngine> beside, std::shared_ptr<CommunicatorEngine>& out,
                             std::string& not_used);
// "shm: available (/dev/shm, 11.8 GiB free, avx512 reductions)" or why not, for halinfo.
std::string shm_availability();

// What the engines need to know about MPI without starting it: whether
// libmpi loads, and which launcher started this process.
struct MpiAvailability {
  bool loadable = false;
  std::string detail;  // the library and version, or why it cannot be loaded
};
MpiAvailability mpi_availability();
// "mpirun (OMPI_COMM_WORLD_SIZE=4)", "srun (SLURM_PROCID=0)", or "" when neither.
std::string mpi_launcher();

}  // namespace hal::host

struct hal_communicator {
  std::shared_ptr<hal::host::CommunicatorEngine> engine;
};
