// The host backend's collectives sub-table: argument checks, the engine
// choice (Gloo or MPI, with shared memory beside either) per communicator,
// and the stream plumbing the engines share.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "collectives_engine.hpp"
#include "environment.hpp"
#include "store_values.hpp"

namespace hal::host {

std::string mpi_launcher() {
  // OpenMPI's variables first: mpirun inside a Slurm allocation inherits the
  // allocation's SLURM_* too.
  if (const char* size = abi::environment("OMPI_COMM_WORLD_SIZE")) return "mpirun (OMPI_COMM_WORLD_SIZE=" + std::string(size) + ")";
  if (const char* rank = abi::environment("SLURM_PROCID")) return "srun (SLURM_PROCID=" + std::string(rank) + ")";
  return {};
}

namespace {

// Auto's choice between MPI and Gloo, the reason in words that follow "since".
EngineChoice automatic_choice() {
  EngineChoice choice;
  const std::string launcher = mpi_launcher();
  if (launcher.empty()) {
    choice.engine = "gloo";
    choice.reason = "the process was not launched by mpirun or srun";
  } else if (const MpiAvailability mpi = mpi_availability(); mpi.loadable) {
    choice.engine = "mpi";
    choice.reason = "the process was launched by " + launcher + "; " + mpi.detail;
  } else {
    choice.engine = "gloo";
    choice.reason = "the process was launched by " + launcher + ", but MPI cannot be used: " + mpi.detail;
  }
  return choice;
}

}  // namespace

EngineChoice choose_engine(std::string_view requested, std::string_view requested_by) {
  EngineChoice choice;
  const std::string by(requested_by);
  if (requested == "gloo") {
    choice.engine = "gloo";
    choice.reason = by + " asks for gloo";
  } else if (requested == "mpi") {
    const MpiAvailability mpi = mpi_availability();
    if (mpi.loadable) {
      choice.engine = "mpi";
      choice.reason = by + " asks for mpi; " + mpi.detail;
    } else {
      choice.reason = by + " asks for mpi, but " + mpi.detail;
    }
  } else if (requested == "auto") {
    choice = automatic_choice();
    choice.reason = by + " is auto and " + choice.reason + "; shm runs beside it when every rank shares this host";
    choice.shm = ShmUse::when_shared;
  } else if (requested == "shm") {
    // Beside it, auto's engine runs the operations shm does not.
    choice = automatic_choice();
    choice.reason =
        by + " asks for shm; the other operations run on " + choice.engine + ", auto's choice since " + choice.reason;
    choice.shm = ShmUse::required;
  } else {
    choice.reason = by + " is '" + std::string(requested) + "', which is not an engine; use auto, gloo, mpi or shm";
  }
  return choice;
}

namespace {

// Every rank must run the same engine, or the first operation would wait for
// peers listening elsewhere until its timeout: compare the choices first.
hal_status agree_on_engine(const hal_communicator_config_v1& config, const std::string& prefix,
                           const std::string& engine) {
  const hal_store_v1& store = *config.store;
  const std::string mine = prefix + "/engine/" + std::to_string(config.rank);
  if (const hal_status status = store_set(store, mine, engine); status != HAL_OK)
    return fail(status, "rank " + std::to_string(config.rank) + ": publishing the collectives engine failed");
  std::string listing;
  bool same = true;
  for (int peer = 0; peer < config.world_size; ++peer) {
    std::string theirs;
    const std::string key = prefix + "/engine/" + std::to_string(peer);
    const hal_status status = store_get(store, key, config.timeout_ms, theirs);
    if (status == HAL_ERROR_TIMEOUT)
      return fail(status, "rank " + std::to_string(config.rank) + " of " + std::to_string(config.world_size) +
                              ": rank " + std::to_string(peer) + " did not create its communicator within " +
                              std::to_string(config.timeout_ms) + " ms; did every rank start?");
    if (status != HAL_OK) return fail(status, "rank " + std::to_string(config.rank) + ": reading '" + key + "' failed");
    same = same && theirs == engine;
    listing += "\n  rank " + std::to_string(peer) + ": " + theirs;
  }
  if (same) return HAL_OK;
  return fail(HAL_ERROR_INVALID_ARGUMENT,
              "rank " + std::to_string(config.rank) + ": the ranks chose different collectives engines:" + listing +
                  "\nset HAL_COLL_ENGINE to the same value on every rank, and launch every rank the same way");
}

hal_status communicator_create(hal_backend_context* backend, const hal_communicator_config_v1* config,
                               hal_communicator** out) {
  if (backend == nullptr || config == nullptr || out == nullptr || config->store == nullptr)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "communicator_create needs a context, a config with a store, and out");
  if (config->struct_size < sizeof(hal_communicator_config_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "communicator config struct_size " + std::to_string(config->struct_size) +
                                                " is smaller than v1; rebuild libhal");
  if (config->device >= backend->host.devices.size())
    return fail(HAL_ERROR_INVALID_ARGUMENT, "device index " + std::to_string(config->device) + " is out of range");
  if (config->world_size < 1 || config->rank < 0 || config->rank >= config->world_size || config->timeout_ms <= 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "rank " + std::to_string(config->rank) + " / world size " +
                                                std::to_string(config->world_size) + " / timeout " +
                                                std::to_string(config->timeout_ms) + " ms are not valid");
  std::string requested = option_value(*config, "engine");
  std::string requested_by = option_value(*config, "engine_source");
  if (requested.empty()) requested = "auto";
  if (requested_by.empty()) requested_by = "the engine setting";
  const EngineChoice choice = choose_engine(requested, requested_by);
  if (choice.engine.empty())
    return fail(HAL_ERROR_UNSUPPORTED, "rank " + std::to_string(config->rank) + ": no collectives engine: " +
                                           choice.reason);
  const std::string prefix = config->key_prefix != nullptr ? config->key_prefix : "hal";
  const std::string agreed = choice.engine + (choice.shm == ShmUse::required      ? " + shm"
                                              : choice.shm == ShmUse::when_shared ? " + shm on one host"
                                                                                  : "");
  if (const hal_status status = agree_on_engine(*config, prefix, agreed); status != HAL_OK) return status;
  std::shared_ptr<CommunicatorEngine> engine;
  const hal_status status =
      choice.engine == "mpi" ? create_mpi_engine(*backend, *config, engine) : create_gloo_engine(*config, engine);
  if (status != HAL_OK) return status;
  engine->description = choice.engine + " (" + choice.reason + "); " + engine->description;
  if (choice.shm != ShmUse::never) {
    std::shared_ptr<CommunicatorEngine> shm;
    std::string not_used;
    if (const hal_status shm_status = create_shm_engine(*backend, *config, choice.shm, engine, shm, not_used);
        shm_status != HAL_OK) {
      engine->shut_down();
      return shm_status;
    }
    if (shm) {
      shm->description = "shm (" + requested_by + (choice.shm == ShmUse::required ? " asks for shm" : " is auto") +
                         " and " + shm->description + "); other operations: " + engine->description;
      engine = std::move(shm);
    } else {
      engine->description += "; shm not used: " + not_used;
    }
  }
  *out = new hal_communicator{std::move(engine)};
  return succeed();
}

hal_status communicator_abort(hal_communicator* communicator) {
  if (communicator == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the communicator is null");
  communicator->engine->abort();
  return succeed();
}

hal_status communicator_destroy(hal_communicator* communicator) {
  if (communicator == nullptr) return succeed();
  communicator->engine->shut_down();
  delete communicator;  // queued operations hold the engine until they ran (and failed as aborted)
  return succeed();
}

hal_status communicator_get_async_error(hal_communicator* communicator) {
  if (communicator == nullptr) return fail(HAL_ERROR_INVALID_ARGUMENT, "the communicator is null");
  const auto [status, message] = communicator->engine->first_error();
  return status == HAL_OK ? succeed() : fail(status, message);
}

void resolve(const hal_tensor_ref_v1& tensor, std::shared_ptr<Allocation>& allocation, std::uint8_t*& address) {
  if (tensor.buffer == nullptr) return;
  allocation = tensor.buffer->allocation;
  address = static_cast<std::uint8_t*>(allocation->data) + tensor.offset;
}

// What a queued collective holds: its engine and its operations, one of
// them inline (a collective) or a group of send/recv on the heap.
struct QueuedOperations {
  std::shared_ptr<CommunicatorEngine> engine;
  HostOperation single;
  std::vector<HostOperation> group;

  std::span<const HostOperation> operations() const {
    return group.empty() ? std::span<const HostOperation>(&single, 1) : std::span<const HostOperation>(group);
  }
  hal_status operator()(hal_status, std::string& message) const { return engine->execute(operations(), message); }
};
static_assert(sizeof(QueuedOperations) <= Task::inline_size, "a queued collective must not need the heap");

hal_status enqueue(hal_communicator* communicator, hal_stream* stream, const hal_collective_op_v1* operations,
                   std::uint32_t op_count) {
  if (communicator == nullptr || operations == nullptr || op_count == 0)
    return fail(HAL_ERROR_INVALID_ARGUMENT, "enqueue needs a communicator and at least one operation");
  QueuedOperations queued{communicator->engine, {}, {}};
  if (op_count > 1) queued.group.resize(op_count);
  for (std::uint32_t i = 0; i < op_count; ++i) {
    if (operations[i].struct_size < sizeof(hal_collective_op_v1))
      return fail(HAL_ERROR_INVALID_ARGUMENT, "operation struct_size is smaller than v1; rebuild libhal");
    const bool point_to_point = operations[i].kind == HAL_COLLECTIVE_SEND || operations[i].kind == HAL_COLLECTIVE_RECV;
    if (op_count > 1 && !point_to_point)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "only send and recv can be grouped; " +
                                                  kind_name(operations[i].kind) + " was in a group");
    if (element_size(operations[i].dtype) == 0)
      return fail(HAL_ERROR_INVALID_ARGUMENT, "dtype " + std::to_string(operations[i].dtype) + " is not known");
    HostOperation& host = op_count > 1 ? queued.group[i] : queued.single;
    host.description = operations[i];
    resolve(operations[i].send, host.send_allocation, host.send);
    // In place, one reference keeps the allocation alive.
    if (operations[i].recv.buffer != nullptr && operations[i].recv.buffer->allocation == host.send_allocation)
      host.recv = static_cast<std::uint8_t*>(host.send_allocation->data) + operations[i].recv.offset;
    else
      resolve(operations[i].recv, host.recv_allocation, host.recv);
    if (stream != nullptr &&
        ((operations[i].send.buffer != nullptr && operations[i].send.buffer->device != stream->device) ||
         (operations[i].recv.buffer != nullptr && operations[i].recv.buffer->device != stream->device)))
      return fail(HAL_ERROR_INVALID_ARGUMENT, describe_operation(0, operations[i]) +
                                                  ": a buffer is on another host device than the stream");
  }
  if (stream == nullptr) {
    std::string message;
    const hal_status status = queued(HAL_OK, message);
    return status == HAL_OK ? succeed() : fail(status, message);
  }
  stream->enqueue({std::move(queued), false});
  return succeed();
}

hal_status choose_engine_entry(hal_backend_context*, const char* requested, const char* requested_by,
                               hal_collectives_engine_v1* out) {
  if (out == nullptr || out->struct_size < sizeof(hal_collectives_engine_v1))
    return fail(HAL_ERROR_INVALID_ARGUMENT, "choose_engine needs an out struct of at least v1's size");
  // Valid until the next call on this thread, as the ABI promises.
  thread_local EngineChoice choice;
  choice = choose_engine(requested != nullptr ? requested : "auto",
                         requested_by != nullptr ? requested_by : "the engine setting");
  const MpiAvailability mpi = mpi_availability();
  choice.engines = "gloo: available (TCP); mpi: " + std::string(mpi.loadable ? "available, " : "unavailable, ") +
                   mpi.detail + "; shm: " + shm_availability();
  if (choice.shm == ShmUse::required) choice.engine = "shm";
  out->engine = choice.engine.c_str();
  out->reason = choice.reason.c_str();
  out->engines = choice.engines.c_str();
  return succeed();
}

const char* communicator_description(hal_communicator* communicator) {
  return communicator != nullptr ? communicator->engine->description.c_str() : "";
}

constexpr hal_collectives_v2 make_table() {
  hal_collectives_v2 table{};
  table.v1.struct_size = sizeof(hal_collectives_v2);
  table.v1.communicator_create = communicator_create;
  table.v1.communicator_destroy = communicator_destroy;
  table.v1.communicator_abort = communicator_abort;
  table.v1.communicator_get_async_error = communicator_get_async_error;
  table.v1.enqueue = enqueue;
  table.choose_engine = choose_engine_entry;
  table.communicator_description = communicator_description;
  return table;
}

constexpr hal_collectives_v2 collectives_table = make_table();

}  // namespace

const hal_collectives_v1* collectives() { return &collectives_table.v1; }

}  // namespace hal::host
