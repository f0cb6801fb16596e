// The Gloo engine of the host collectives: Gloo's TCP transport.
//
// Each operation runs on the stream's worker thread, so it is ordered with
// the copies and fills around it. Gloo lacks bf16 and, on a count mismatch,
// ends the process; libhal's checks and HAL_COLL_CHECK keep mismatches from
// reaching it. After the first failure a communicator is broken (as in NCCL):
// it closes its connections so that its peers fail promptly too, and every
// later operation fails with the first error.
#include <arpa/inet.h>
#include <dirent.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "collectives_engine.hpp"
#include "gloo_listen.hpp"
#include "host_backend.hpp"
#include "reduction.hpp"
#include "store_values.hpp"

namespace hal::host {
namespace {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// Slots of the point-to-point and reduce-scatter messages: a prefix byte
// above the ones Gloo's own collectives use.
constexpr std::uint64_t kPointToPointSlot = 0xA1ull << 56;
constexpr std::uint64_t kReduceScatterSlot = 0xA2ull << 56;

// Adapts libhal's store callbacks to the store Gloo's rendezvous takes by reference.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(const hal_store_v1& store, std::string prefix, Milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string full_key = prefix_ + "/" + key;
    if (store_.set(store_.user_data, full_key.c_str(), data.data(), data.size()) != HAL_OK)
      throw gloo::IoException("the store could not set '" + full_key + "'");
  }
  std::vector<char> get(const std::string& key) override { return get_with_timeout(key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const Milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const auto& key : keys)
      get_with_timeout(key, std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(deadline - Clock::now())));
  }

  std::vector<char> get_with_timeout(const std::string& key, Milliseconds timeout) {
    const std::string full_key = prefix_ + "/" + key;
    std::vector<char> value;
    const hal_status status = store_.get(
        store_.user_data, full_key.c_str(), timeout.count(),
        [](void* sink, const void* data, size_t size) {
          auto* out = static_cast<std::vector<char>*>(sink);
          out->assign(static_cast<const char*>(data), static_cast<const char*>(data) + size);
        },
        &value);
    if (status == HAL_ERROR_TIMEOUT)
      throw gloo::IoException("key '" + full_key + "' did not appear in the store within " +
                              std::to_string(timeout.count()) + " ms; did every rank start?");
    if (status != HAL_OK) throw gloo::IoException("the store could not get '" + full_key + "'");
    return value;
  }

 private:
  const hal_store_v1& store_;
  std::string prefix_;
  Milliseconds timeout_;
};

// "[127.0.0.1]:5000", the way Gloo prints addresses in its errors.
std::string format_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "";
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto& ipv4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &ipv4.sin_addr, text, sizeof(text));
    port = ntohs(ipv4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& ipv6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &ipv6.sin6_addr, text, sizeof(text));
    port = ntohs(ipv6.sin6_port);
  } else {
    return {};
  }
  return "[" + std::string(text) + "]:" + std::to_string(port);
}

// Calls visit(fd, local, remote) for each TCP socket of this process;
// remote is empty for a listening socket.
template <typename Visit>
void for_each_socket(Visit&& visit) {
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return;
  while (const dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    const int fd = std::atoi(entry->d_name);
    struct stat status {};
    if (::fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) continue;
    sockaddr_storage local{}, remote{};
    socklen_t local_size = sizeof(local), remote_size = sizeof(remote);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) continue;
    const bool connected = ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_size) == 0;
    const std::string local_text = format_address(local);
    if (!local_text.empty()) visit(fd, local_text, connected ? format_address(remote) : std::string());
  }
  ::closedir(directory);
}

std::string port_of(const std::string& address) { return address.substr(address.rfind(':') + 1); }

}  // namespace

// ---- the communicator ------------------------------------------------------

struct GlooCommunicator final : CommunicatorEngine {
  int rank = 0;
  int world_size = 1;
  std::string prefix;
  const hal_store_v1* store = nullptr;
  std::shared_ptr<gloo::Context> context;
  // Gloo names peers by address; errors name ranks. Holds the address each
  // peer listens on for this rank and the addresses of the connections
  // peers opened to this rank.
  std::map<std::string, int> rank_by_address;
  // "local remote" of the sockets Gloo opened for this communicator.
  std::set<std::string> connections;

  std::mutex operation_mutex;  // Gloo runs one operation per context at a time
  std::atomic<bool> aborted{false};
  FirstFailure failure;

  // Shuts this communicator's sockets down. Gloo has no abort and closing its
  // pairs does not wake a waiting operation, but a socket shut down under it
  // does, at once, here and at the peer.
  void hang_up() const {
    for_each_socket([&](int fd, const std::string& local, const std::string& remote) {
      if (!remote.empty() && connections.count(local + " " + remote) != 0) ::shutdown(fd, SHUT_RDWR);
    });
  }

  // The first failure sticks. Publishing it lets the other ranks explain a
  // cascade; hanging up ends their waits now rather than at their timeout.
  bool record_failure(hal_status status, const std::string& message) {
    if (!failure.record(status, message)) return false;
    const std::string key = prefix + "/failed/" + std::to_string(rank);
    store_set(*store, key, message);
    hang_up();
    return true;
  }

  std::pair<hal_status, std::string> first_error() override { return failure.get(); }

  // Waits up to grace for every other rank to report its failure. Returns
  // their reports and, in silent, the ranks that reported nothing: a dead or
  // hung process cannot. When the store goes away first (rank 0, which hosts
  // it, ended its own wait and exited), store_lost is set and silent holds
  // the ranks whose reports were not read by then.
  std::string failures_of_others(Milliseconds grace, std::vector<int>& silent, bool& store_lost) {
    std::map<int, std::string> reports;
    const auto deadline = Clock::now() + grace;
    store_lost = false;
    while (!store_lost) {
      for (int peer = 0; peer < world_size && !store_lost; ++peer) {
        if (peer == rank || reports.count(peer) != 0) continue;
        const std::string key = prefix + "/failed/" + std::to_string(peer);
        std::string message;
        const hal_status status = store_get(*store, key, 0, message);
        if (status == HAL_OK) reports[peer] = message;
        else if (status != HAL_ERROR_TIMEOUT) store_lost = true;
      }
      if (static_cast<int>(reports.size()) == world_size - 1 || Clock::now() >= deadline) break;
      std::this_thread::sleep_for(Milliseconds(20));
    }
    std::string text;
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      if (const auto found = reports.find(peer); found != reports.end())
        text += "\n  reported by rank " + std::to_string(peer) + ": " + found->second;
      else
        silent.push_back(peer);
    }
    return text;
  }

  hal_status execute(std::span<const HostOperation> operations, std::string& message) override;
  void abort() override;
  void shut_down() override;

  std::string name_peers(const std::string& transport_message) const {
    std::string named;
    for (const auto& [address, peer] : rank_by_address)
      if (transport_message.find(address) != std::string::npos)
        named += (named.empty() ? "" : ", ") + std::string("peer rank ") + std::to_string(peer) + " (" + address + ")";
    return named;
  }
};

namespace {

// ---- per-operation execution -------------------------------------------------

// Calls body with a value of the C++ type that carries dtype's reductions;
// f16 and bf16 are reduced in f32.
template <typename Body>
void with_reduction_type(hal_dtype dtype, Body&& body) {
  switch (dtype) {
    case HAL_DTYPE_F32: case HAL_DTYPE_F16: case HAL_DTYPE_BF16: return body(float{});
    case HAL_DTYPE_F64: return body(double{});
    case HAL_DTYPE_I8: return body(std::int8_t{});
    case HAL_DTYPE_U8: return body(std::uint8_t{});
    case HAL_DTYPE_I32: return body(std::int32_t{});
    case HAL_DTYPE_I64: return body(std::int64_t{});
  }
}

class Executor {
 public:
  Executor(GlooCommunicator& communicator, const HostOperation& operation)
      : comm_(communicator), op_(operation.description), send_(operation.send), recv_(operation.recv),
        bytes_(op_.count * element_size(op_.dtype)), timeout_(Milliseconds(op_.timeout_ms)),
        deadline_(Clock::now() + timeout_) {}

  void run() {
    switch (op_.kind) {
      case HAL_COLLECTIVE_ALL_REDUCE: return all_reduce();
      case HAL_COLLECTIVE_BROADCAST: return broadcast();
      case HAL_COLLECTIVE_REDUCE: return reduce();
      case HAL_COLLECTIVE_ALL_GATHER: return all_gather();
      case HAL_COLLECTIVE_REDUCE_SCATTER: return reduce_scatter();
      case HAL_COLLECTIVE_ALL_TO_ALL: return all_to_all();
      case HAL_COLLECTIVE_GATHER: return gather();
      case HAL_COLLECTIVE_SCATTER: return scatter();
      case HAL_COLLECTIVE_BARRIER: return barrier();
      case HAL_COLLECTIVE_SEND: case HAL_COLLECTIVE_RECV: break;
    }
    throw gloo::InvalidOperationException("point-to-point operations run as a group");
  }

 private:
  std::uint32_t tag() const { return static_cast<std::uint32_t>(op_.sequence); }
  Milliseconds time_left() const {
    const auto left = std::chrono::duration_cast<Milliseconds>(deadline_ - Clock::now());
    if (left.count() <= 0)
      throw gloo::IoException("Timed out: the operation's " + std::to_string(timeout_.count()) + " ms ran out");
    return left;
  }
  const std::shared_ptr<gloo::Context>& context() const { return comm_.context; }
  // Runs a Gloo collective under this operation's tag and what is left of its deadline.
  template <typename Options, typename Collective>
  void call_gloo(Options& options, Collective collective) const {
    options.setTag(tag());
    options.setTimeout(time_left());
    collective(options);
  }

  // Data in the type reductions run in: the buffer itself, or an f32 copy
  // for f16/bf16 (widened now, narrowed with round-to-nearest-even after).
  template <typename T>
  T* reduction_input(std::vector<float>& staging, std::uint8_t* data, std::uint64_t elements) {
    if (!is_half(op_.dtype)) return reinterpret_cast<T*>(data);
    staging.resize(elements);
    widen_to_f32(op_.dtype, data, staging.data(), elements);
    return reinterpret_cast<T*>(staging.data());
  }

  template <typename T>
  void finish_reduction(T* result, std::uint8_t* destination, std::uint64_t elements) {
    if (op_.reduce_op == HAL_REDUCE_AVG) divide_by(result, elements, comm_.world_size);
    if (is_half(op_.dtype))
      narrow_from_f32(op_.dtype, reinterpret_cast<const float*>(result), destination, elements);
    else if (reinterpret_cast<std::uint8_t*>(result) != destination)
      std::memcpy(destination, result, elements * sizeof(T));
  }

  void all_reduce() {
    with_reduction_type(op_.dtype, [&](auto type) {
      using T = decltype(type);
      // Gloo reduces in place: the result is built in recv (or its f32 copy).
      std::vector<float> staging;
      if (!is_half(op_.dtype) && send_ != recv_) std::memcpy(recv_, send_, bytes_);
      T* data = reduction_input<T>(staging, is_half(op_.dtype) ? send_ : recv_, op_.count);
      gloo::AllreduceOptions options(context());
      options.setOutput(data, op_.count);
      options.setReduceFunction(reduction_function<T>(op_.reduce_op));
      call_gloo(options, gloo::allreduce);
      finish_reduction(data, recv_, op_.count);
    });
  }

  void reduce() {
    with_reduction_type(op_.dtype, [&](auto type) {
      using T = decltype(type);
      std::vector<float> staging;
      std::vector<T> scratch;  // Gloo accumulates in an output on every rank
      T* input = reduction_input<T>(staging, send_, op_.count);
      T* output;
      if (comm_.rank == op_.root && !is_half(op_.dtype)) {
        output = reinterpret_cast<T*>(recv_);
      } else {
        scratch.resize(op_.count);
        output = scratch.data();
      }
      if (reinterpret_cast<void*>(output) != reinterpret_cast<void*>(input))
        std::memcpy(output, input, op_.count * sizeof(T));
      gloo::ReduceOptions options(context());
      options.setOutput(output, op_.count);
      options.setRoot(op_.root);
      options.setReduceFunction(reduction_function<T>(op_.reduce_op));
      call_gloo(options, gloo::reduce);
      if (comm_.rank == op_.root) finish_reduction(output, recv_, op_.count);
    });
  }

  void broadcast() {
    if (comm_.rank == op_.root && send_ != recv_) std::memcpy(recv_, send_, bytes_);
    gloo::BroadcastOptions options(context());
    options.setOutput(recv_, bytes_);
    options.setRoot(op_.root);
    call_gloo(options, gloo::broadcast);
  }

  void all_gather() {
    std::uint8_t* own_block = recv_ + static_cast<std::uint64_t>(comm_.rank) * bytes_;
    if (send_ != own_block) std::memmove(own_block, send_, bytes_);
    gloo::AllgatherOptions options(context());
    options.setOutput(recv_, bytes_ * static_cast<std::uint64_t>(comm_.world_size));
    call_gloo(options, gloo::allgather);
  }

  void gather() {
    std::vector<std::uint8_t> copy;
    std::uint8_t* input = send_;
    if (comm_.rank == op_.root && send_ == recv_ + static_cast<std::uint64_t>(op_.root) * bytes_) {
      copy.assign(send_, send_ + bytes_);  // Gloo copies input to output; keep them apart
      input = copy.data();
    }
    gloo::GatherOptions options(context());
    options.setInput(input, bytes_);
    if (comm_.rank == op_.root) options.setOutput(recv_, bytes_ * static_cast<std::uint64_t>(comm_.world_size));
    options.setRoot(op_.root);
    call_gloo(options, gloo::gather);
  }

  void scatter() {
    std::vector<std::uint8_t> own;
    std::uint8_t* output = recv_;
    if (comm_.rank == op_.root && recv_ == send_ + static_cast<std::uint64_t>(op_.root) * bytes_) {
      own.resize(bytes_);  // in place: the root's block is already there
      output = own.data();
    }
    gloo::ScatterOptions options(context());
    if (comm_.rank == op_.root) {
      std::vector<std::uint8_t*> blocks;
      for (int peer = 0; peer < comm_.world_size; ++peer)
        blocks.push_back(send_ + static_cast<std::uint64_t>(peer) * bytes_);
      options.setInputs(blocks, bytes_);
    }
    options.setOutput(output, bytes_);
    options.setRoot(op_.root);
    call_gloo(options, gloo::scatter);
  }

  void all_to_all() {
    const std::uint64_t total = bytes_ * static_cast<std::uint64_t>(comm_.world_size);
    std::vector<std::uint8_t> copy;
    std::uint8_t* input = send_;
    if (send_ == recv_) {
      copy.assign(send_, send_ + total);
      input = copy.data();
    }
    gloo::AlltoallOptions options(context());
    options.setInput(input, total);
    options.setOutput(recv_, total);
    call_gloo(options, gloo::alltoall);
  }

  void barrier() {
    gloo::BarrierOptions options(context());
    call_gloo(options, gloo::barrier);
  }

  // Ring reduce-scatter: in step s, rank r sends its partial sum of block
  // (r - s - 1) to the right and adds the left's partial sum of block
  // (r - s - 2) into its own; after n - 1 steps block r holds every rank's
  // contribution.
  void reduce_scatter() {
    with_reduction_type(op_.dtype, [&](auto type) {
      using T = decltype(type);
      const std::uint64_t n = static_cast<std::uint64_t>(comm_.world_size);
      const std::uint64_t count = op_.count;
      const std::uint64_t rank = static_cast<std::uint64_t>(comm_.rank);
      std::vector<T> accumulator(count * n);
      if (is_half(op_.dtype))
        widen_to_f32(op_.dtype, send_, reinterpret_cast<float*>(accumulator.data()), count * n);
      else
        std::memcpy(accumulator.data(), send_, count * n * sizeof(T));
      if (n > 1) {
        std::vector<T> incoming(count);
        const std::size_t block_bytes = count * sizeof(T);
        auto accumulator_buffer = context()->createUnboundBuffer(accumulator.data(), block_bytes * n);
        auto incoming_buffer = context()->createUnboundBuffer(incoming.data(), block_bytes);
        const auto combine = reduction_function<T>(op_.reduce_op);
        const int right = static_cast<int>((rank + 1) % n);
        const int left = static_cast<int>((rank + n - 1) % n);
        const std::uint64_t slot = kReduceScatterSlot | tag();
        for (std::uint64_t step = 0; step + 1 < n; ++step) {
          const std::uint64_t send_block = (rank + 2 * n - step - 1) % n;
          const std::uint64_t receive_block = (rank + 2 * n - step - 2) % n;
          accumulator_buffer->send(right, slot, send_block * block_bytes, block_bytes);
          incoming_buffer->recv(left, slot, 0, block_bytes);
          incoming_buffer->waitRecv(time_left());
          T* target = accumulator.data() + receive_block * count;
          combine(target, target, incoming.data(), count);
          accumulator_buffer->waitSend(time_left());
        }
      }
      finish_reduction(accumulator.data() + rank * count, recv_, count);
    });
  }

  GlooCommunicator& comm_;
  const hal_collective_op_v1& op_;
  std::uint8_t* send_;
  std::uint8_t* recv_;
  std::uint64_t bytes_;
  Milliseconds timeout_;
  Clock::time_point deadline_;
};

// Posts every send and receive of the group, then waits for them all, so a
// rank that both sends to and receives from a peer cannot deadlock.
void run_point_to_point_group(GlooCommunicator& comm, std::span<const HostOperation> operations,
                              std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& buffers) {
  const auto& context = comm.context;
  for (const HostOperation& operation : operations) {
    const auto& op = operation.description;
    const std::size_t bytes = op.count * element_size(op.dtype);
    if (bytes == 0) {
      buffers.emplace_back();
      continue;
    }
    const bool sending = op.kind == HAL_COLLECTIVE_SEND;
    buffers.push_back(context->createUnboundBuffer(sending ? operation.send : operation.recv, bytes));
    if (sending)
      buffers.back()->send(op.root, kPointToPointSlot);
    else
      buffers.back()->recv(op.root, kPointToPointSlot);
  }
  for (std::size_t i = 0; i < operations.size(); ++i) {
    if (!buffers[i]) continue;
    const auto& op = operations[i].description;
    const Milliseconds timeout(op.timeout_ms);
    if (op.kind == HAL_COLLECTIVE_SEND)
      buffers[i]->waitSend(timeout);
    else
      buffers[i]->waitRecv(timeout);
  }
}

hal_status run_operations(GlooCommunicator& comm, std::span<const HostOperation> operations, std::string& message) {
  const auto& first = operations.front().description;
  // Built only for a message: a small operation's whole cost is its transfer.
  const auto what = [&] {
    std::string text = describe_operation(comm.rank, first);
    if (operations.size() > 1) text += " and " + std::to_string(operations.size() - 1) + " more in its group";
    return text;
  };
  std::lock_guard lock(comm.operation_mutex);
  if (const hal_status refused = comm.failure.refuse(comm.aborted.load(), what, message); refused != HAL_OK)
    return refused;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;  // outlive the error handling below
  try {
    const bool point_to_point = first.kind == HAL_COLLECTIVE_SEND || first.kind == HAL_COLLECTIVE_RECV;
    if (point_to_point)
      run_point_to_point_group(comm, operations, buffers);
    else if (first.count > 0 || first.kind == HAL_COLLECTIVE_BARRIER)
      Executor(comm, operations.front()).run();
    return HAL_OK;
  } catch (const std::exception& error) {
    const std::string transport = error.what();
    const std::string peers = comm.name_peers(transport);
    hal_status status;
    std::string cause;
    if (comm.aborted.load()) {
      status = HAL_ERROR_ABORTED;
      cause = "aborted while running";
    } else if (transport.find("Timed out") != std::string::npos) {
      status = HAL_ERROR_TIMEOUT;
      cause = "timed out after " + std::to_string(first.timeout_ms) + " ms waiting for " +
              (peers.empty() ? std::string("a peer") : peers);
    } else {
      status = HAL_ERROR_DEVICE_LOST;
      cause = "lost the connection to " + (peers.empty() ? std::string("a peer") : peers) +
              " (it exited, was killed, aborted or failed)";
    }
    message = what() + ": " + cause + " [gloo: " + transport + "]";
    if (!comm.record_failure(status, message) || status == HAL_ERROR_ABORTED) return status;
    // Name the rank behind a cascade: every live rank reports its failure
    // within the grace period; one that stays silent is dead or hung.
    std::vector<int> silent;
    bool store_lost = false;
    const std::string others = comm.failures_of_others(
        std::min(Milliseconds(1000), Milliseconds(std::max<std::int64_t>(first.timeout_ms / 3, 1))), silent,
        store_lost);
    if (!silent.empty()) {
      message += store_lost ? "; the store closed (rank 0, which hosts it, exited) before these ranks reported a "
                              "failure (dead, hung or slower):"
                            : "; ranks that reported no failure (dead or hung):";
      for (const int peer : silent) message += " rank " + std::to_string(peer);
    }
    if (!others.empty()) message += "; failures on other ranks:" + others;
    comm.failure.replace_message(message);
    return status;
  }
}

}  // namespace

hal_status GlooCommunicator::execute(std::span<const HostOperation> operations, std::string& message) {
  return run_operations(*this, operations, message);
}

void GlooCommunicator::abort() {
  if (aborted.exchange(true)) return;
  failure.record(HAL_ERROR_ABORTED, "rank " + std::to_string(rank) + ": the communicator was aborted");
  hang_up();  // ends the waits of an operation in flight on another thread
}

void GlooCommunicator::shut_down() {
  abort();
  std::lock_guard wait_for_running(operation_mutex);
}

hal_status create_gloo_engine(const hal_communicator_config_v1& config, std::shared_ptr<CommunicatorEngine>& out) {
  auto comm = std::make_shared<GlooCommunicator>();
  comm->rank = config.rank;
  comm->world_size = config.world_size;
  comm->prefix = config.key_prefix != nullptr ? config.key_prefix : "hal";
  comm->store = config.store;
  const Milliseconds timeout(config.timeout_ms);

  // Where to listen: an interface name, a host name/address, else loopback
  // (single node). Options beat the environment.
  const abi::GlooListen listen = abi::gloo_listen(option_value(config, "interface"), option_value(config, "hostname"));
  gloo::transport::tcp::attr attributes;
  if (!listen.interface_name.empty())
    attributes.iface = listen.interface_name;
  else
    attributes.hostname = listen.host_name;
  const std::string listen_on = listen.describe();

  // The connections that appear while connecting are this communicator's,
  // except those accepted by a server that listened before (the store's).
  std::set<std::string> sockets_before, listening_ports_before;
  for_each_socket([&](int, const std::string& local, const std::string& remote) {
    if (remote.empty())
      listening_ports_before.insert(port_of(local));
    else
      sockets_before.insert(local + " " + remote);
  });
  try {
    auto device = gloo::transport::tcp::CreateDevice(attributes);
    auto context = std::make_shared<gloo::rendezvous::Context>(comm->rank, comm->world_size);
    context->setTimeout(timeout);
    StoreAdapter store(*config.store, comm->prefix + "/gloo", timeout);
    context->connectFullMesh(store, device);
    comm->context = context;

    // Learn which address each peer's connection to this rank has, so that
    // transport errors can name ranks.
    std::string mine;
    for (int peer = 0; peer < comm->world_size; ++peer) {
      if (peer == comm->rank) continue;
      const std::string address = context->getPair(peer)->address().str();
      mine += std::to_string(peer) + " " + address + "\n";
    }
    StoreAdapter address_store(*config.store, comm->prefix + "/addresses", timeout);
    address_store.set(std::to_string(comm->rank), std::vector<char>(mine.begin(), mine.end()));
    for (int peer = 0; peer < comm->world_size; ++peer) {
      if (peer == comm->rank) continue;
      const auto bytes = address_store.get(std::to_string(peer));
      std::istringstream lines(std::string(bytes.begin(), bytes.end()));
      int towards;
      std::string address;
      while (lines >> towards >> address)
        if (towards == comm->rank) comm->rank_by_address[address] = peer;
    }
    for_each_socket([&](int, const std::string& local, const std::string& remote) {
      const std::string connection = local + " " + remote;
      if (!remote.empty() && sockets_before.count(connection) == 0 && listening_ports_before.count(port_of(local)) == 0)
        comm->connections.insert(connection);
    });
  } catch (const std::exception& error) {
    const std::string text = error.what();
    const bool timed_out = text.find("did not appear") != std::string::npos || text.find("Timed out") != std::string::npos;
    return fail(timed_out ? HAL_ERROR_TIMEOUT : HAL_ERROR_INTERNAL,
         "rank " + std::to_string(comm->rank) + " of " + std::to_string(comm->world_size) +
             ": connecting the Gloo TCP transport on " + listen_on + " failed: " + text +
                    (timed_out ? "" : "; set HAL_GLOO_INTERFACE or HAL_GLOO_HOSTNAME to a reachable interface"));
  }
  comm->description = "TCP on " + listen_on;
  out = std::move(comm);
  return succeed();
}

}  // namespace hal::host
