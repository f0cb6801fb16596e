// Communicator: argument checks, sequence numbers, the HAL_COLL_CHECK
// fingerprint exchange, groups and split; the backend does the transfers.
#include "hal/collectives.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "abi.hpp"
#include "loaded_backend.hpp"
#include "environment.hpp"

namespace hal {

// ---- data types and reduce ops ----------------------------------------------

namespace {

constexpr std::array<std::string_view, 5> reduce_op_names{"sum", "prod", "min", "max", "avg"};

}  // namespace


std::string_view to_string(ReduceOp op) {
  const auto index = static_cast<std::size_t>(op);
  return index < reduce_op_names.size() ? reduce_op_names[index] : "unknown";
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (std::size_t i = 0; i < reduce_op_names.size(); ++i)
    if (reduce_op_names[i] == name) return static_cast<ReduceOp>(i);
  throw Error(StatusCode::invalid_argument,
              "reduce op '" + std::string(name) + "' is not known; use sum, prod, min, max or avg");
}

// ---- the communicator's state -------------------------------------------------

namespace {

constexpr std::string_view kind_name(hal_collective_kind kind) {
  switch (kind) {
    case HAL_COLLECTIVE_ALL_REDUCE: return "all_reduce";
    case HAL_COLLECTIVE_BROADCAST: return "broadcast";
    case HAL_COLLECTIVE_REDUCE: return "reduce";
    case HAL_COLLECTIVE_ALL_GATHER: return "all_gather";
    case HAL_COLLECTIVE_REDUCE_SCATTER: return "reduce_scatter";
    case HAL_COLLECTIVE_ALL_TO_ALL: return "all_to_all";
    case HAL_COLLECTIVE_GATHER: return "gather";
    case HAL_COLLECTIVE_SCATTER: return "scatter";
    case HAL_COLLECTIVE_SEND: return "send";
    case HAL_COLLECTIVE_RECV: return "recv";
    case HAL_COLLECTIVE_BARRIER: return "barrier";
  }
  return "unknown";
}

// Lets a backend call back into a hal::Store through plain C.
struct StoreBridge {
  std::shared_ptr<Store> store;
  hal_store_v1 table{};
  std::string last_error;

  explicit StoreBridge(std::shared_ptr<Store> shared_store) : store(std::move(shared_store)) {
    table.struct_size = sizeof(table);
    table.user_data = this;
    table.set = &StoreBridge::set;
    table.get = &StoreBridge::get;
  }

  static hal_status set(void* user_data, const char* key, const void* value, size_t size) {
    auto* self = static_cast<StoreBridge*>(user_data);
    try {
      self->store->set(key, std::string_view(static_cast<const char*>(value), size));
      return HAL_OK;
    } catch (const Error& error) {
      detail::log_message(HAL_LOG_ERROR, error.what());
      return detail::to_abi(error.code());
    } catch (const std::exception& error) {
      detail::log_message(HAL_LOG_ERROR, std::string("store set failed: ") + error.what());
      return HAL_ERROR_INTERNAL;
    }
  }

  static hal_status get(void* user_data, const char* key, int64_t timeout_ms, hal_store_value_sink sink,
                        void* sink_user_data) {
    auto* self = static_cast<StoreBridge*>(user_data);
    try {
      const std::string value = self->store->get(key, std::chrono::milliseconds(timeout_ms));
      sink(sink_user_data, value.data(), value.size());
      return HAL_OK;
    } catch (const Error& error) {
      // A timeout is an expected answer the backend words itself.
      if (error.code() != StatusCode::timeout) detail::log_message(HAL_LOG_ERROR, error.what());
      return detail::to_abi(error.code());
    } catch (const std::exception& error) {
      detail::log_message(HAL_LOG_ERROR, std::string("store get failed: ") + error.what());
      return HAL_ERROR_INTERNAL;
    }
  }
};

// A view of a store under a key prefix: a split's child communicator keeps
// its keys apart from its parent's and its siblings'.
class PrefixedStore final : public Store {
 public:
  PrefixedStore(std::shared_ptr<Store> inner, std::string prefix) : inner_(std::move(inner)), prefix_(std::move(prefix)) {}
  void set(std::string_view key, std::string_view value) override { inner_->set(prefix_ + "/" + std::string(key), value); }
  std::string get(std::string_view key, std::chrono::milliseconds timeout) override {
    return inner_->get(prefix_ + "/" + std::string(key), timeout);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return inner_->add(prefix_ + "/" + std::string(key), delta);
  }

 private:
  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

const hal_collectives_v2* collectives_v2(const hal_collectives_v1* table) {
  if (table == nullptr || table->struct_size < sizeof(hal_collectives_v2)) return nullptr;
  return reinterpret_cast<const hal_collectives_v2*>(table);
}

// The engine request: the options, then the collectives.engine setting
// (HAL_COLL_ENGINE, the config file).
std::pair<std::string, std::string> engine_request(const Device& device, const CommunicatorOptions& options) {
  if (!options.engine.empty()) {
    if (options.engine != "auto" && options.engine != "gloo" && options.engine != "mpi" && options.engine != "shm")
      throw Error(StatusCode::invalid_argument, "CommunicatorOptions::engine='" + options.engine +
                                                    "' is not a collectives engine; use auto, gloo, mpi or shm");
    return {options.engine, "CommunicatorOptions::engine=" + options.engine};
  }
  const Settings& settings = *detail::Access::backend(device)->settings;
  const Setting& setting = settings.at("collectives.engine");
  return {settings.values().collectives_engine,
          setting.from(SettingSource::Kind::built_in) ? "the default engine setting" : setting.origin()};
}

}  // namespace

struct Communicator::State {
  Device device;
  const hal_collectives_v1* table = nullptr;
  hal_communicator* handle = nullptr;
  int rank = 0;
  int world_size = 1;
  std::unique_ptr<StoreBridge> store;
  std::string prefix;
  std::string description;
  CommunicatorOptions options;
  bool check = false;
  std::atomic<std::uint64_t> collective_sequence{0};
  std::atomic<std::uint64_t> point_to_point_sequence{0};
  std::atomic<std::uint64_t> splits{0};
  std::atomic<bool> destroyed{false};

  std::mutex group_mutex;
  std::atomic<int> group_depth{0};
  std::vector<hal_collective_op_v1> group_operations;
  std::vector<Buffer> group_buffers;  // keeps the group's buffers alive until it is posted
  Stream group_stream;

  State(Device owner) : device(std::move(owner)) {}
  ~State() {
    if (!destroyed.exchange(true)) table->communicator_destroy(handle);
  }

  std::string where(std::string_view operation, std::uint64_t sequence) const {
    return "rank " + std::to_string(rank) + ": " + std::string(operation) + " #" + std::to_string(sequence);
  }
  void check_alive(std::string_view operation) const {
    if (destroyed.load())
      throw Error(StatusCode::invalid_argument, "rank " + std::to_string(rank) + ": " + std::string(operation) +
                                                    ": the communicator was destroyed; create a new one");
  }
  const detail::LoadedBackend& backend() const { return *detail::Access::backend(device); }
};

namespace {

using CommunicatorState = Communicator::State;

// Names an operation in messages ("rank 1: all_reduce #12"). The text is
// built only when a message needs it: a call that passes its checks formats
// nothing.
struct Where {
  const CommunicatorState& state;
  std::string_view operation;
  std::uint64_t sequence;
  std::string text() const { return state.where(operation, sequence); }
};

hal_tensor_ref_v1 tensor_of(const BufferView& view) {
  if (!detail::Access::state(view.buffer)) return {nullptr, 0};
  return detail::Access::state(view.buffer)->ref(view.offset);
}

std::uint64_t bytes_of(std::uint64_t count, std::uint64_t multiplier, DType type, const Where& where) {
  std::uint64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(count, multiplier, &elements) ||
      __builtin_mul_overflow(elements, static_cast<std::uint64_t>(size_in_bytes(type)), &bytes))
    throw Error(StatusCode::invalid_argument, where.text() + ": count " + std::to_string(count) +
                                                  (multiplier > 1 ? " x " + std::to_string(multiplier) + " ranks" : "") +
                                                  " of " + std::string(to_string(type)) +
                                                  " overflows 64-bit byte sizes");
  return bytes;
}

void check_view(const CommunicatorState& state, const BufferView& view, std::uint64_t bytes, const char* role,
                const Where& where) {
  if (!detail::Access::state(view.buffer))
    throw Error(StatusCode::invalid_argument,
                where.text() + ": the " + role + " buffer is empty; pass an allocated buffer");
  const auto& buffer = *detail::Access::state(view.buffer);
  if (!(buffer.device == state.device))
    throw Error(StatusCode::invalid_argument, where.text() + ": the " + role + " " + buffer.describe() +
                                                  " is not on the communicator's device " + state.device.id());
  if (!buffer.fits(view.offset, bytes)) buffer.check_range(view.offset, bytes, where.text() + " (" + role + ")");
}

void check_root(const CommunicatorState& state, int root, const char* what, const Where& where) {
  if (root < 0 || root >= state.world_size)
    throw Error(StatusCode::invalid_argument, where.text() + ": " + what + " " + std::to_string(root) +
                                                  " is outside the communicator's ranks [0, " +
                                                  std::to_string(state.world_size) + ")");
}

// Every rank publishes its fingerprint of the operation and compares all of
// them, so a mismatch is one clear error on every rank instead of a hang or
// a crash inside the transport.
void compare_fingerprints(CommunicatorState& state, const hal_collective_op_v1& operation, DType type,
                          const Where& where) {
  std::string fingerprint = std::string(kind_name(operation.kind)) + " count=" + std::to_string(operation.count);
  if (operation.kind != HAL_COLLECTIVE_BARRIER) fingerprint += " dtype=" + std::string(to_string(type));
  if (operation.kind == HAL_COLLECTIVE_ALL_REDUCE || operation.kind == HAL_COLLECTIVE_REDUCE ||
      operation.kind == HAL_COLLECTIVE_REDUCE_SCATTER)
    fingerprint += " op=" + std::string(to_string(static_cast<ReduceOp>(operation.reduce_op)));
  if (operation.root >= 0) fingerprint += " root=" + std::to_string(operation.root);
  const std::string key_base = state.prefix + "/check/" + std::to_string(operation.sequence) + "/";
  state.store->store->set(key_base + std::to_string(state.rank), fingerprint);
  std::vector<std::string> fingerprints(static_cast<std::size_t>(state.world_size));
  for (int peer = 0; peer < state.world_size; ++peer) {
    if (peer == state.rank) {
      fingerprints[static_cast<std::size_t>(peer)] = fingerprint;
      continue;
    }
    try {
      fingerprints[static_cast<std::size_t>(peer)] =
          state.store->store->get(key_base + std::to_string(peer), std::chrono::milliseconds(operation.timeout_ms));
    } catch (const Error& error) {
      throw Error(error.code(), where.text() + ": HAL_COLL_CHECK: peer rank " + std::to_string(peer) +
                                    " did not reach collective #" + std::to_string(operation.sequence) + " within " +
                                    std::to_string(operation.timeout_ms) + " ms (" + error.what() + ")");
    }
  }
  if (std::all_of(fingerprints.begin(), fingerprints.end(), [&](const std::string& f) { return f == fingerprint; }))
    return;
  std::string listing;
  for (int peer = 0; peer < state.world_size; ++peer)
    listing += "\n  rank " + std::to_string(peer) + ": " + fingerprints[static_cast<std::size_t>(peer)];
  throw Error(StatusCode::invalid_argument, where.text() + ": HAL_COLL_CHECK: the ranks called different collectives as #" +
                                                std::to_string(operation.sequence) + ":" + listing +
                                                "\nevery rank must call the same operation with the same count, type, "
                                                "reduce op and root");
}

}  // namespace

// ---- creation, split, abort, destroy --------------------------------------------

Communicator Communicator::create(const Device& device, int rank, int world_size, std::shared_ptr<Store> store,
                                  const CommunicatorOptions& options) {
  const std::string where = "Communicator::create (rank " + std::to_string(rank) + " of " +
                            std::to_string(world_size) + " on " + device.id() + ")";
  if (world_size < 1) throw Error(StatusCode::invalid_argument, where + ": world size must be at least 1");
  if (rank < 0 || rank >= world_size)
    throw Error(StatusCode::invalid_argument, where + ": rank must be in [0, " + std::to_string(world_size) + ")");
  if (!store) throw Error(StatusCode::invalid_argument, where + ": the store is null; pass a FileStore or TcpStore");
  const Config& settings = detail::Access::backend(device)->settings->values();
  const auto timeout = options.timeout.value_or(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(settings.collectives_timeout_seconds)));
  if (timeout.count() <= 0)
    throw Error(StatusCode::invalid_argument, where + ": the timeout must be positive, got " +
                                                  std::to_string(timeout.count()) + " ms");
  const hal_collectives_v1* table = detail::Access::backend(device)->collectives();
  if (table == nullptr)
    throw Error(StatusCode::unsupported, where + ": the " + device.backend_name() +
                                             " backend has no collectives (capability 'collectives' is false)");
  auto state = std::make_shared<State>(device);
  state->table = table;
  state->rank = rank;
  state->world_size = world_size;
  state->options = options;
  state->options.timeout = timeout;  // split communicators keep it
  state->check = options.check.value_or(settings.collectives_check);
  state->prefix = "hal/communicator" + std::to_string(store->communicators_created_.fetch_add(1));
  state->store = std::make_unique<StoreBridge>(std::move(store));

  const auto [engine, engine_source] = engine_request(device, options);
  std::vector<hal_key_value_v1> backend_options;
  for (const auto& [key, value] : options.backend_options) backend_options.push_back({key.c_str(), value.c_str()});
  if (collectives_v2(table) != nullptr) {  // a backend with engines to choose from
    backend_options.push_back({"engine", engine.c_str()});
    backend_options.push_back({"engine_source", engine_source.c_str()});
  }
  // The job's store token names the shm engine's segments, so that another job cannot guess them.
  const std::string job_token = abi::environment_value("HAL_STORE_TOKEN").value_or("");
  if (!job_token.empty()) backend_options.push_back({"job_token", job_token.c_str()});
  hal_communicator_config_v1 config{};
  config.struct_size = sizeof(config);
  config.device = device.index();
  config.rank = rank;
  config.world_size = world_size;
  config.timeout_ms = timeout.count();
  config.store = &state->store->table;
  config.key_prefix = state->prefix.c_str();
  config.options = backend_options.data();
  config.option_count = static_cast<std::uint32_t>(backend_options.size());
  const hal_status status = table->communicator_create(detail::Access::backend(device)->context, &config, &state->handle);
  if (status != HAL_OK) {
    state->destroyed = true;  // nothing to destroy
    throw Error(detail::Access::backend(device)->error(status, where));
  }
  if (const hal_collectives_v2* v2 = collectives_v2(table); v2 != nullptr && v2->communicator_description != nullptr)
    state->description = v2->communicator_description(state->handle);
  else
    state->description = device.backend_name() + " collectives";
  return Communicator(std::move(state));
}

CollectivesEngineChoice collectives_engine(const Device& device, const CommunicatorOptions& options) {
  const hal_collectives_v1* table = detail::Access::backend(device)->collectives();
  if (table == nullptr)
    throw Error(StatusCode::unsupported, "the " + device.backend_name() + " backend of " + device.id() +
                                             " has no collectives (capability 'collectives' is false)");
  CollectivesEngineChoice choice;
  std::tie(choice.requested, choice.requested_by) = engine_request(device, options);
  const hal_collectives_v2* v2 = collectives_v2(table);
  if (v2 == nullptr || v2->choose_engine == nullptr) {
    choice.engine = device.backend_name();
    choice.reason = "the " + device.backend_name() + " backend has one collectives engine";
    choice.engines = choice.engine;
    return choice;
  }
  hal_collectives_engine_v1 out{};
  out.struct_size = sizeof(out);
  detail::Access::backend(device)->check(
      v2->choose_engine(detail::Access::backend(device)->context, choice.requested.c_str(), choice.requested_by.c_str(), &out),
      "choosing the collectives engine of " + device.id());
  choice.engine = out.engine != nullptr ? out.engine : "";
  choice.reason = out.reason != nullptr ? out.reason : "";
  choice.engines = out.engines != nullptr ? out.engines : "";
  return choice;
}

namespace {
Communicator::State& usable(const std::shared_ptr<Communicator::State>& state, std::string_view operation) {
  if (!state)
    throw Error(StatusCode::invalid_argument, std::string(operation) +
                                                  ": the communicator is empty (default-constructed, moved from, or "
                                                  "the result of split with a negative color)");
  state->check_alive(operation);
  return *state;
}
}  // namespace

int Communicator::rank() const { return usable(state_, "Communicator::rank").rank; }
int Communicator::world_size() const { return usable(state_, "Communicator::world_size").world_size; }
Device Communicator::device() const { return usable(state_, "Communicator::device").device; }
std::string Communicator::description() const { return usable(state_, "Communicator::description").description; }

Communicator Communicator::split(int color, int key) const {
  auto& state = usable(state_, "Communicator::split");
  const std::uint64_t split_index = state.splits.fetch_add(1);
  const std::string where = state.where("split", split_index);
  const std::string base = state.prefix + "/split" + std::to_string(split_index) + "/";
  Store& store = *state.store->store;
  store.set(base + std::to_string(state.rank), std::to_string(color) + " " + std::to_string(key));
  struct Member {
    int color, key, old_rank;
  };
  std::vector<Member> members;
  for (int peer = 0; peer < state.world_size; ++peer) {
    std::string text;
    try {
      text = store.get(base + std::to_string(peer), *state.options.timeout);
    } catch (const Error& error) {
      throw Error(error.code(), where + ": rank " + std::to_string(peer) + " did not join the split within " +
                                    std::to_string(state.options.timeout->count()) + " ms: " + error.what());
    }
    Member member{0, 0, peer};
    if (std::sscanf(text.c_str(), "%d %d", &member.color, &member.key) != 2)
      throw Error(StatusCode::internal, where + ": rank " + std::to_string(peer) + " published '" + text +
                                            "' for the split; the store holds foreign keys under " + base);
    members.push_back(member);
  }
  if (color < 0) return Communicator();
  std::vector<Member> group;
  std::copy_if(members.begin(), members.end(), std::back_inserter(group),
               [&](const Member& m) { return m.color == color; });
  std::stable_sort(group.begin(), group.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.old_rank < b.old_rank;
  });
  const int new_rank = static_cast<int>(
      std::find_if(group.begin(), group.end(), [&](const Member& m) { return m.old_rank == state.rank; }) -
      group.begin());
  // The child's keys live under the parent's, named by split and color.
  auto child_store = std::make_shared<PrefixedStore>(state.store->store, base + "color" + std::to_string(color));
  return create(state.device, new_rank, static_cast<int>(group.size()), std::move(child_store), state.options);
}

void Communicator::abort() const {
  const auto& state = usable(state_, "Communicator::abort");
  const hal_status status = state.table->communicator_abort(state.handle);
  if (status != HAL_OK) throw Error(state.backend().error(status, "rank " + std::to_string(state.rank) + ": abort"));
}

Status Communicator::async_error() const {
  const auto& state = usable(state_, "Communicator::async_error");
  const hal_status status = state.table->communicator_get_async_error(state.handle);
  if (status == HAL_OK) return Status::ok();
  return state.backend().error(status, "rank " + std::to_string(state.rank) + ": an enqueued collective");
}

void Communicator::destroy() {
  auto& state = usable(state_, "Communicator::destroy");
  if (!state.destroyed.exchange(true)) {
    const hal_status status = state.table->communicator_destroy(state.handle);
    state.handle = nullptr;
    if (status != HAL_OK)
      throw Error(state.backend().error(status, "rank " + std::to_string(state.rank) + ": destroying a communicator"));
  }
  state_.reset();
}

// ---- operations -----------------------------------------------------------------

namespace {

struct OperationRequest {
  hal_collective_kind kind;
  DType type = DType::u8;
  ReduceOp reduce_op = ReduceOp::sum;
  int root = -1;
  std::uint64_t count = 0;
  const BufferView* send = nullptr;  // nullptr when unused on this rank
  const BufferView* recv = nullptr;
  std::uint64_t send_elements = 0;   // how many elements each side spans
  std::uint64_t recv_elements = 0;
};

}  // namespace

namespace {

// Checks one operation and either posts it or queues it in the open group.
void submit_collective(Communicator::State& state, const Stream& stream, OperationRequest request,
                       OperationOptions options) {
  state.check_alive(kind_name(request.kind));
  const bool point_to_point = request.kind == HAL_COLLECTIVE_SEND || request.kind == HAL_COLLECTIVE_RECV;
  const std::uint64_t sequence =
      point_to_point ? state.point_to_point_sequence.fetch_add(1) : state.collective_sequence.fetch_add(1);
  const Where where{state, kind_name(request.kind), sequence};

  if (!detail::Access::state(stream))
    throw Error(StatusCode::invalid_argument,
                where.text() + ": the stream is empty; create one on " + state.device.id());
  if (!(detail::Access::state(stream)->device == state.device))
    throw Error(StatusCode::invalid_argument, where.text() + ": the stream is on " +
                                                  detail::Access::state(stream)->device.id() + ", the communicator on " +
                                                  state.device.id() + "; use a stream of the communicator's device");
  if (options.timeout.count() < 0)
    throw Error(StatusCode::invalid_argument,
                where.text() + ": the timeout " + std::to_string(options.timeout.count()) + " ms is negative");
  if (request.root >= 0 || request.kind == HAL_COLLECTIVE_BROADCAST || request.kind == HAL_COLLECTIVE_REDUCE ||
      request.kind == HAL_COLLECTIVE_GATHER || request.kind == HAL_COLLECTIVE_SCATTER || point_to_point)
    check_root(state, request.root, point_to_point ? "peer" : "root", where);
  if (point_to_point && request.root == state.rank)
    throw Error(StatusCode::invalid_argument,
                where.text() + ": peer " + std::to_string(request.root) + " is this rank; copy the buffer instead");
  if (request.send != nullptr)
    check_view(state, *request.send, bytes_of(request.send_elements, 1, request.type, where), "send", where);
  if (request.recv != nullptr)
    check_view(state, *request.recv, bytes_of(request.recv_elements, 1, request.type, where), "recv", where);

  hal_collective_op_v1 operation{};
  operation.struct_size = sizeof(operation);
  operation.kind = request.kind;
  operation.dtype = detail::to_abi(request.type);
  operation.reduce_op = detail::to_abi(request.reduce_op);
  operation.root = request.root;
  operation.count = request.count;
  operation.sequence = sequence;
  operation.timeout_ms = (options.timeout.count() > 0 ? options.timeout : *state.options.timeout).count();
  operation.send = request.send != nullptr ? tensor_of(*request.send) : hal_tensor_ref_v1{nullptr, 0};
  operation.recv = request.recv != nullptr ? tensor_of(*request.recv) : hal_tensor_ref_v1{nullptr, 0};

  // group_depth is written under group_mutex; outside a group (the common
  // case) the operation goes straight to the backend.
  if (state.group_depth.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(state.group_mutex);
    if (state.group_depth.load(std::memory_order_relaxed) > 0) {
      if (!point_to_point)
        throw Error(StatusCode::invalid_argument,
                    where.text() + ": only send and recv can be grouped; call group_end() before a collective");
      if (detail::Access::state(state.group_stream) && detail::Access::state(state.group_stream) != detail::Access::state(stream))
        throw Error(StatusCode::invalid_argument,
                    where.text() + ": every operation of a group must use the same stream");
      state.group_stream = stream;
      state.group_operations.push_back(operation);
      if (request.send != nullptr) state.group_buffers.push_back(request.send->buffer);
      if (request.recv != nullptr) state.group_buffers.push_back(request.recv->buffer);
      return;
    }
  }
  if (state.check && !point_to_point) compare_fingerprints(state, operation, request.type, where);
  const hal_status status = state.table->enqueue(state.handle, detail::Access::state(stream)->handle, &operation, 1);
  if (status != HAL_OK) throw Error(state.backend().error(status, where.text()));
}

std::uint64_t times_world(const Communicator::State& state, std::uint64_t count) {
  std::uint64_t elements = 0;
  if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(state.world_size), &elements))
    throw Error(StatusCode::invalid_argument, "rank " + std::to_string(state.rank) + ": count " +
                                                  std::to_string(count) + " x " + std::to_string(state.world_size) +
                                                  " ranks overflows 64 bits");
  return elements;
}

// The buffer of a rooted operation that only its root passes: the send of
// broadcast and scatter, the recv of reduce and gather.
enum class RootOnly { send, recv };

// submit_collective for a rooted operation: on the other ranks the root's
// own buffer is not passed on (nor checked).
void submit_rooted(Communicator::State& state, const Stream& stream, OperationRequest request, RootOnly root_only,
                   OperationOptions options) {
  if (request.root != state.rank) (root_only == RootOnly::send ? request.send : request.recv) = nullptr;
  submit_collective(state, stream, request, options);
}

}  // namespace

#define HAL_COLLECTIVE_STATE(name) auto& state = usable(state_, "Communicator::" name)

void Communicator::all_reduce(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op,
                              const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("all_reduce");
  submit_collective(state, stream, {HAL_COLLECTIVE_ALL_REDUCE, type, op, -1, count, &send, &recv, count, count},
                    options);
}

void Communicator::broadcast(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
                             const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("broadcast");
  submit_rooted(state, stream, {HAL_COLLECTIVE_BROADCAST, type, ReduceOp::sum, root, count, &send, &recv, count, count},
                RootOnly::send, options);
}

void Communicator::reduce(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op, int root,
                          const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("reduce");
  submit_rooted(state, stream, {HAL_COLLECTIVE_REDUCE, type, op, root, count, &send, &recv, count, count},
                RootOnly::recv, options);
}

void Communicator::all_gather(BufferView send, BufferView recv, std::uint64_t count, DType type,
                              const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("all_gather");
  submit_collective(state, stream,
                    {HAL_COLLECTIVE_ALL_GATHER, type, ReduceOp::sum, -1, count, &send, &recv, count,
                     times_world(state, count)},
                    options);
}

void Communicator::reduce_scatter(BufferView send, BufferView recv, std::uint64_t count, DType type, ReduceOp op,
                                  const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("reduce_scatter");
  submit_collective(state, stream,
                    {HAL_COLLECTIVE_REDUCE_SCATTER, type, op, -1, count, &send, &recv, times_world(state, count),
                     count},
                    options);
}

void Communicator::all_to_all(BufferView send, BufferView recv, std::uint64_t count, DType type,
                              const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("all_to_all");
  const std::uint64_t total = times_world(state, count);
  submit_collective(state, stream,
                    {HAL_COLLECTIVE_ALL_TO_ALL, type, ReduceOp::sum, -1, count, &send, &recv, total, total}, options);
}

void Communicator::gather(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
                          const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("gather");
  submit_rooted(
      state, stream,
      {HAL_COLLECTIVE_GATHER, type, ReduceOp::sum, root, count, &send, &recv, count, times_world(state, count)},
      RootOnly::recv, options);
}

void Communicator::scatter(BufferView send, BufferView recv, std::uint64_t count, DType type, int root,
                           const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("scatter");
  submit_rooted(
      state, stream,
      {HAL_COLLECTIVE_SCATTER, type, ReduceOp::sum, root, count, &send, &recv, times_world(state, count), count},
      RootOnly::send, options);
}

void Communicator::barrier(const Stream& stream, OperationOptions options) const {
  HAL_COLLECTIVE_STATE("barrier");
  submit_collective(state, stream, {HAL_COLLECTIVE_BARRIER, DType::u8, ReduceOp::sum, -1, 0, nullptr, nullptr, 0, 0},
                    options);
}

void Communicator::send(BufferView buffer, std::uint64_t count, DType type, int peer, const Stream& stream,
                        OperationOptions options) const {
  HAL_COLLECTIVE_STATE("send");
  submit_collective(state, stream, {HAL_COLLECTIVE_SEND, type, ReduceOp::sum, peer, count, &buffer, nullptr, count, 0},
                    options);
}

void Communicator::recv(BufferView buffer, std::uint64_t count, DType type, int peer, const Stream& stream,
                        OperationOptions options) const {
  HAL_COLLECTIVE_STATE("recv");
  submit_collective(state, stream, {HAL_COLLECTIVE_RECV, type, ReduceOp::sum, peer, count, nullptr, &buffer, 0, count},
                    options);
}

#undef HAL_COLLECTIVE_STATE

void Communicator::group_start() const {
  auto& state = usable(state_, "Communicator::group_start");
  std::lock_guard lock(state.group_mutex);
  ++state.group_depth;
}

void Communicator::group_end() const {
  auto& state = usable(state_, "Communicator::group_end");
  std::vector<hal_collective_op_v1> operations;
  std::vector<Buffer> buffers;
  Stream stream;
  {
    std::lock_guard lock(state.group_mutex);
    if (state.group_depth == 0)
      throw Error(StatusCode::invalid_argument,
                  "rank " + std::to_string(state.rank) + ": group_end() without a matching group_start()");
    if (--state.group_depth > 0) return;  // nested: the outermost end posts
    operations.swap(state.group_operations);
    buffers.swap(state.group_buffers);
    stream = std::exchange(state.group_stream, Stream());
  }
  if (operations.empty()) return;
  const hal_status status = state.table->enqueue(state.handle, detail::Access::state(stream)->handle, operations.data(),
                                                 static_cast<std::uint32_t>(operations.size()));
  if (status != HAL_OK)
    throw Error(state.backend().error(status, "rank " + std::to_string(state.rank) + ": a group of " +
                                                  std::to_string(operations.size()) + " send/recv operations"));
}

void Communicator::group_cancel() const {
  auto& state = usable(state_, "Communicator::group_cancel");
  std::lock_guard lock(state.group_mutex);
  state.group_depth = 0;
  state.group_operations.clear();
  state.group_buffers.clear();
  state.group_stream = Stream();
}

}  // namespace hal

