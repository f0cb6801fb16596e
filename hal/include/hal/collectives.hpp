// Collectives: rendezvous stores and communicators across processes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal/device.hpp"
#include "hal/dtype.hpp"
#include "hal/memory.hpp"
#include "hal/status.hpp"
#include "hal/stream.hpp"

namespace hal {

// ---- rendezvous stores ----------------------------------------------------

// A key-value store the ranks of a job share to find each other. Values are
// bytes. get() waits for a key another rank has not set yet.
class Store {
 public:
  virtual ~Store();
  virtual void set(std::string_view key, std::string_view value) = 0;
  // Waits up to timeout for the key; throws timeout naming the key.
  virtual std::string get(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer at key (0 when missing); returns the new value.
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  // Waits until every key exists.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::string get(std::string_view key) { return get(key, default_timeout); }

  std::chrono::milliseconds default_timeout{std::chrono::seconds(300)};

  struct FromEnvironment;
  // Reads the launcher's environment (torchrun, halrun, mpirun); see
  // docs/collectives.md for the variables and which wins.
  static FromEnvironment from_environment(std::chrono::milliseconds connect_timeout = std::chrono::seconds(60));

 private:
  friend class Communicator;
  // Names the store keys of each communicator created on this store; every
  // rank creates its communicators in the same order.
  std::atomic<std::uint64_t> communicators_created_{0};
};

struct Store::FromEnvironment {
  std::shared_ptr<Store> store;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string source;  // which variables were used, for messages
};

// The first host of a Slurm node list: "node[01-04,07],login" -> "node01".
// Throws invalid_argument naming the list when it is malformed.
std::string first_host_of_slurm_nodelist(std::string_view list);

// A directory all ranks can see (local disk or a shared file system).
class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory);
  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, std::chrono::milliseconds timeout) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  using Store::get;

 private:
  std::string path_of(std::string_view key) const;
  std::string directory_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;          // the server picks a free port when 0 (see TcpStore::port)
  bool is_server = false;          // rank 0 hosts
  // Clients retry with back-off until this deadline, then fail naming host:port.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Non-empty: the server answers only clients that present the same token
  // (halrun sets HAL_STORE_TOKEN for its ranks), so another process that can
  // reach the port cannot read or set keys.
  std::string token;
  // The largest value the server takes (and a client sends); a larger one is
  // refused with the limit named rather than buffered.
  std::uint64_t max_value_bytes = 64ull << 20;
  // With a token, the server closes a connection that has not presented it
  // this long after connecting; connections that have are never timed out.
  std::chrono::milliseconds auth_timeout{std::chrono::seconds(10)};
};

// Rank 0 runs the server inside its process; every rank (rank 0 too) talks
// to it over one TCP connection.
class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;
  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key, std::chrono::milliseconds timeout) override;
  std::int64_t add(std::string_view key, std::int64_t delta) override;
  using Store::get;
  std::uint16_t port() const;

  struct Server;
  struct Client;

 private:
  std::uint64_t max_value_bytes_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// ---- communicators --------------------------------------------------------

// The values are the plugin ABI's hal_reduce_op codes (checked in the library).
enum class ReduceOp : std::uint32_t { sum = 0, prod = 1, min = 2, max = 3, avg = 4 };

std::string_view to_string(ReduceOp op);
// Throws invalid_argument naming the op and the ones allowed.
ReduceOp parse_reduce_op(std::string_view name);

// A buffer and a byte offset into it.
struct BufferView {
  BufferView(const Buffer& b) : buffer(b) {}  // NOLINT: implicit on purpose
  BufferView(const Buffer& b, std::uint64_t byte_offset) : buffer(b), offset(byte_offset) {}
  Buffer buffer;
  std::uint64_t offset = 0;
};

struct CommunicatorOptions {
  // Default for every operation; an operation may pass its own. nullopt:
  // the collectives.timeout_seconds setting (300 s unless configured).
  std::optional<std::chrono::milliseconds> timeout;
  // Compare every collective's fingerprint across ranks before running it.
  // nullopt: the collectives.check setting (HAL_COLL_CHECK=1 turns it on).
  std::optional<bool> check;
  // Backend options, e.g. {"interface", "eth0"} or {"hostname", "10.0.0.5"}
  // for the host backend.
  std::vector<std::pair<std::string, std::string>> backend_options;
  // The host backend's engine: "auto", "gloo", "mpi" or "shm". Empty: the
  // collectives.engine setting (HAL_COLL_ENGINE, the config file), else auto
  // (MPI when launched by mpirun or srun and libmpi loads, Gloo otherwise,
  // with shared memory beside it when every rank shares the host).
  std::string engine;
};

// Which engine a communicator created now with these options would run on.
struct CollectivesEngineChoice {
  std::string requested;     // "auto", "gloo", "mpi" or "shm"
  std::string requested_by;  // "HAL_COLL_ENGINE=mpi", "config collectives.engine (/etc/hal/hal.toml:12)", ...
  std::string engine;        // "gloo", "mpi", "shm"; empty when the request cannot be met
  std::string reason;        // why that engine, or why the request cannot be met
  std::string engines;       // every engine of the backend and whether it can run here
};
// Throws unsupported when the device's backend has no collectives, and
// invalid_argument for an engine name other than auto, gloo, mpi and shm.
CollectivesEngineChoice collectives_engine(const Device& device, const CommunicatorOptions& options = {});

// Per call: 0 means the communicator's timeout.
struct OperationOptions {
  std::chrono::milliseconds timeout{0};
};

class Communicator {
 public:
  Communicator() = default;
  // Collective over all world_size ranks: every rank calls it with the same
  // store and its own rank.
  static Communicator create(const Device& device, int rank, int world_size, std::shared_ptr<Store> store,
                             const CommunicatorOptions& options = {});

  bool valid() const { return state_ != nullptr; }
  int rank() const;
  int world_size() const;
  Device device() const;
  // Which engine runs this communicator and why, e.g. "mpi (HAL_COLL_ENGINE=auto
  // is auto and the process was launched by mpirun ...); Open MPI v4.1.4 ...".
  std::string description() const;

  // Collective over this communicator: ranks with the same color form a new
  // communicator, ordered by key then by old rank. color < 0 takes no part
  // and gets an invalid Communicator.
  Communicator split(int color, int key) const;
  // Any thread, any time: in-flight and later operations fail with aborted.
  void abort() const;
  // The first error of an operation that ran on a stream, else ok.
  Status async_error() const;
  // Waits for nothing: aborts what still runs, then releases the backend's
  // communicator. Copies of this Communicator become invalid to use.
  void destroy();

  void all_reduce(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op,
                  const Stream& stream, OperationOptions options = {}) const;
  void broadcast(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
                 const Stream& stream, OperationOptions options = {}) const;
  // recv matters on root only.
  void reduce(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op, int root,
              const Stream& stream, OperationOptions options = {}) const;
  // count elements from each rank; recv holds world_size * count.
  void all_gather(BufferView send, BufferView recv, std::uint64_t count, DType type, const Stream& stream,
                  OperationOptions options = {}) const;
  // send holds world_size * count; each rank gets its reduced block of count.
  void reduce_scatter(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op,
                      const Stream& stream, OperationOptions options = {}) const;
  // count elements to and from each peer; both hold world_size * count.
  void all_to_all(BufferView send, BufferView recv, std::uint64_t count, DType type, const Stream& stream,
                  OperationOptions options = {}) const;
  // recv (root only) holds world_size * count.
  void gather(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
              const Stream& stream, OperationOptions options = {}) const;
  // send (root only) holds world_size * count.
  void scatter(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
               const Stream& stream, OperationOptions options = {}) const;
  void barrier(const Stream& stream, OperationOptions options = {}) const;

  // Point to point. Between group_start() and group_end() they are queued and
  // posted together at group_end, so a rank may send and receive at once.
  void send(BufferView buffer, std::uint64_t count, DType type, int peer, const Stream& stream,
            OperationOptions options = {}) const;
  void recv(BufferView buffer, std::uint64_t count, DType type, int peer, const Stream& stream,
            OperationOptions options = {}) const;
  void group_start() const;
  void group_end() const;
  // Drops what was queued since group_start() without sending it.
  void group_cancel() const;

  struct State;

 private:
  explicit Communicator(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// group_start() on construction; group_end() on scope exit, or
// group_cancel() when the scope is left by an exception.
class Group {
 public:
  explicit Group(const Communicator& communicator)
      : communicator_(communicator), exceptions_at_start_(std::uncaught_exceptions()) {
    communicator_.group_start();
  }
  ~Group() noexcept(false) {
    if (std::uncaught_exceptions() > exceptions_at_start_)
      communicator_.group_cancel();
    else
      communicator_.group_end();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

 private:
  const Communicator& communicator_;
  int exceptions_at_start_;
};

}  // namespace hal
