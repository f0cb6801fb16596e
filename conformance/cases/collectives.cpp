// Collective cases. A collective needs several ranks, so each case body is a
// supervisor: it starts N ranks, each a helper process of the case
// program (the case run again with its rank in CaseSettings::helper), joined
// through a FileStore in a temporary directory, and merges their results. When
// the body runs in-process (unit tests) the ranks are threads instead. A CPU
// device takes all N ranks (N = the profile value "collectives.ranks", default
// 2); a GPU backend runs one rank per device (rank_devices).
//
// Reductions use small integers, so every summation order and every
// accumulation precision (f32 or bf16 with f32 accumulation) gives the same
// exact result, and each element is compared exactly. Data movement uses
// arbitrary finite bit patterns, compared bit for bit.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sys/prctl.h>
#include <unistd.h>

#include "case_support.hpp"
#include "hal/collectives.hpp"
#include "hal/conformance/attention_reference.hpp"
#include "hal/conformance/runner.hpp"

namespace hal::conformance::cases {
namespace {

using namespace std::chrono_literals;

constexpr int default_world_size = 2;
constexpr int largest_world_size = 64;
// A rank whose peer is gone notices at once (closed sockets); these bound a
// peer that hangs. A rank process is killed after rank_seconds, which stays
// below the shipped profiles' 60 s per case.
constexpr auto operation_timeout = 20s;
constexpr double rank_seconds = 45;

// What one rank of a case knows about itself and its peers.
struct Rank {
  int rank = 0;
  int world_size = 1;
  Communicator communicator;
  Stream stream;
};
using RankPart = std::function<void(CaseContext&, Rank&)>;

// ---- supervisor and ranks ---------------------------------------------------

class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hal-conformance-store-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw HarnessError("cannot create a directory for the ranks' store under " +
                         std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

int world_size_for(const CaseContext& context) {
  const double value = context.threshold("collectives.ranks").value_or(default_world_size);
  if (value < 2 || value > largest_world_size || value != static_cast<int>(value))
    throw HarnessError("the profile value collectives.ranks = " + format_number(value) +
                       " is not a whole number of ranks in [2, " + std::to_string(largest_world_size) + "]");
  return static_cast<int>(value);
}

std::string last_lines(const std::string& text, std::size_t lines) {
  std::size_t position = text.size();
  while (lines-- > 0 && position > 0) {
    const auto newline = text.rfind('\n', position - 1);
    if (newline == std::string::npos) return text;
    position = newline;
  }
  return text.substr(position == 0 ? 0 : position + 1);
}

// Every device of `device`'s backend, in index order.
std::vector<Device> backend_devices(const Device& device) {
  const Runtime runtime = Runtime::create();
  std::vector<Device> devices;
  for (const Device& candidate : runtime.devices())
    if (candidate.backend_name() == device.backend_name()) devices.push_back(candidate);
  return devices;
}

// The devices the ranks run on. A GPU backend's collectives run the way
// clusters run them, one rank on each of its devices (NCCL refuses two ranks
// on one GPU), once, from its first device; a CPU device takes every rank
// (the profile's collectives.ranks).
std::vector<Device> rank_devices(CaseContext& context) {
  const Device& device = context.device();
  if (device.info().type == DeviceType::cpu)
    return std::vector<Device>(static_cast<std::size_t>(world_size_for(context)), device);
  const std::vector<Device> peers = backend_devices(device);
  if (peers.empty() || peers.size() > largest_world_size)
    throw HarnessError("the " + device.backend_name() + " backend lists " + std::to_string(peers.size()) +
                       " devices; one rank per device needs 1 to " + std::to_string(largest_world_size));
  if (peers.front().index() != device.index())
    context.skip("the " + device.backend_name() + " collectives run once, one rank on each of its " +
                 std::to_string(peers.size()) + " devices, from " + peers.front().id() + "; see that result");
  return peers;
}

// One rank's part, in whatever process or thread it runs.
void run_rank(CaseContext& context, const RankPart& part) {
  const auto& helper = context.settings().helper;
  Rank rank;
  rank.rank = std::stoi(helper.at("rank"));
  rank.world_size = std::stoi(helper.at("world_size"));
  if (helper.at("mode") == "process") {
    // Die with the supervisor: if it is killed (its time limit), no rank lingers.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != static_cast<pid_t>(std::stol(helper.at("supervisor"))))
      throw HarnessError("the case process that started this rank is gone");
  }
  auto store = std::make_shared<FileStore>(helper.at("store"));
  store->default_timeout = operation_timeout;
  CommunicatorOptions options;
  options.timeout = operation_timeout;
  rank.communicator = Communicator::create(context.device(), rank.rank, rank.world_size, store, options);
  if (rank.rank == 0) context.note("communicator: " + rank.communicator.description());
  rank.stream = context.device().create_stream();
  part(context, rank);
  rank.stream.synchronize();
  rank.communicator.destroy();
}

// Starts the ranks, waits for all of them and turns their results into this
// case's: rank 0's measurements, every rank's message, the worst outcome.
void supervise(CaseContext& context, const std::string& case_id, Tier tier, const RankPart& part) {
  const std::vector<Device> devices = rank_devices(context);
  const int world_size = static_cast<int>(devices.size());
  const TemporaryDirectory store;
  const bool processes = !context.case_command().empty();
  // A rank process finds its case by id; a rank thread runs this body.
  const Case rank_case{case_id, tier, "", "", false, 0, [part](CaseContext& rank) { run_rank(rank, part); }};
  std::vector<CaseSettings> settings(static_cast<std::size_t>(world_size), context.settings());
  for (int rank = 0; rank < world_size; ++rank)
    settings[static_cast<std::size_t>(rank)].helper = {{"rank", std::to_string(rank)},
                                                        {"world_size", std::to_string(world_size)},
                                                        {"store", store.path()},
                                                        {"mode", processes ? "process" : "thread"},
                                                        {"supervisor", std::to_string(getpid())}};
  std::vector<CaseResult> results(static_cast<std::size_t>(world_size));
  if (processes) {
    std::vector<PlannedCase> plan;
    for (std::size_t rank = 0; rank < settings.size(); ++rank)
      plan.push_back({&rank_case, devices[rank], settings[rank], rank_seconds});
    RunnerOptions options;
    options.case_command = context.case_command();
    options.jobs = world_size;
    results = run_cases(plan, options);
  } else {
    std::vector<std::thread> threads;
    for (std::size_t rank = 0; rank < results.size(); ++rank)
      threads.emplace_back([&, rank] { results[rank] = run_case_body(rank_case, devices[rank], settings[rank]); });
    for (auto& thread : threads) thread.join();
  }

  std::string failed, errors, skipped;
  auto add_to = [](std::string& list, const std::string& name) { list += (list.empty() ? "" : ", ") + name; };
  for (std::size_t rank = 0; rank < results.size(); ++rank) {
    const CaseResult& result = results[rank];
    const std::string name = "rank " + std::to_string(rank);
    std::string message = result.evidence.message;
    if (result.outcome == Outcome::crash || result.outcome == Outcome::timeout || result.outcome == Outcome::error)
      message += "\n" + last_lines(result.evidence.log, 6);
    char header[96];
    std::snprintf(header, sizeof(header), "%s: %s (%.0f ms)", name.c_str(),
                  std::string(to_string(result.outcome)).c_str(), result.duration_ms);
    context.note(std::string(header) + (message.empty() ? "" : ": " + message));
    if (rank == 0) {
      for (const auto& measurement : result.evidence.measurements) context.measure(measurement);
      for (const auto& series : result.evidence.series) context.add_series(series);
    }
    if (is_failure(result.outcome)) add_to(failed, name);
    else if (result.outcome == Outcome::error) add_to(errors, name);
    else if (result.outcome == Outcome::skipped) add_to(skipped, name);
  }
  const std::string across =
      " of " + std::to_string(world_size) + " ranks on " +
      (devices.front() == devices.back() ? devices.front().id()
                                         : devices.front().id() + " to " + devices.back().id() + ", one each") +
      (processes ? " (one process each)" : " (threads of this process)");
  if (!failed.empty()) context.fail(failed + across + " failed; see each rank's message above");
  if (!errors.empty()) throw HarnessError(errors + across + " hit a harness error; see each rank's message above");
  if (!skipped.empty()) context.skip(skipped + across + " skipped");
}

// The body every collective case registers: a rank's part when this process
// is a rank (started by a supervisor), the supervisor otherwise.
std::function<void(CaseContext&)> collective_body(std::string case_id, Tier tier, RankPart part) {
  return [case_id, tier, part](CaseContext& context) {
    if (!context.settings().helper.empty()) return run_rank(context, part);
    supervise(context, case_id, tier, part);
  };
}

// ---- data --------------------------------------------------------------------


// A small integer: sums over up to 32 ranks stay exact in bf16 (|sum| <= 256).
double reduction_value(int rank, std::size_t index, int salt) {
  return static_cast<double>(static_cast<int>((index * 7 + static_cast<std::size_t>(rank) * 13 +
                                               static_cast<std::size_t>(salt) * 5) % 17) - 8);
}

// Arbitrary bits that are a finite number of the type (no NaN payloads that a
// conversion could legally change).
void store_pattern(DType type, std::uint8_t* data, std::size_t element, int rank, std::size_t index, int salt) {
  std::uint64_t z = 0x9E3779B97F4A7C15ull * (index + 1) ^ (static_cast<std::uint64_t>(rank) << 40) ^
                    (static_cast<std::uint64_t>(salt) << 52);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  if (size_in_bytes(type) == 4) {
    auto bits = static_cast<std::uint32_t>(z);
    if (((bits >> 23) & 0xFFu) == 0xFFu) bits ^= 0x40000000u;
    std::memcpy(data + element * 4, &bits, 4);
  } else {
    auto bits = static_cast<std::uint16_t>(z);
    if (((bits >> 7) & 0xFFu) == 0xFFu) bits ^= 0x4000u;
    std::memcpy(data + element * 2, &bits, 2);
  }
}

// Collects element mismatches of every check, so a rank finishes the whole
// sequence of collectives (its peers expect it to) and reports them all.
class Checker {
 public:
  explicit Checker(CaseContext& context) : context_(context) {}

  void compare(const std::string& what, DType type, const std::vector<std::uint8_t>& actual,
               const std::vector<std::uint8_t>& expected) {
    ++checks_;
    const std::size_t count = expected.size() / size_in_bytes(type);
    std::size_t differing = 0, first = 0;
    for (std::size_t i = 0; i < count; ++i)
      if (std::memcmp(actual.data() + i * size_in_bytes(type), expected.data() + i * size_in_bytes(type), size_in_bytes(type)) != 0) {
        if (differing++ == 0) first = i;
      }
    if (differing == 0) return;
    char text[160];
    std::snprintf(text, sizeof(text), "%zu of %zu elements differ; first at %zu: got %.9g, expected %.9g", differing,
                  count, first, load_element(type, actual.data(), first),
                  load_element(type, expected.data(), first));
    failures_.push_back(what + ": " + text);
  }

  void finish(const std::string& summary) {
    if (failures_.empty()) {
      context_.note(std::to_string(checks_) + " checks matched element for element: " + summary);
      return;
    }
    std::string message = std::to_string(failures_.size()) + " of " + std::to_string(checks_) + " checks differ:";
    for (const auto& failure : failures_) message += "\n  " + failure;
    context_.fail(message);
  }

 private:
  CaseContext& context_;
  std::size_t checks_ = 0;
  std::vector<std::string> failures_;
};

std::vector<std::uint64_t> element_counts(const CaseContext& context) {
  if (context.quick()) return {1, 4099};
  return {1, 4099, (std::uint64_t{1} << 20) + 3};
}

std::vector<std::uint8_t> download(const Buffer& buffer, std::uint64_t offset, std::size_t bytes) {
  std::vector<std::uint8_t> data(bytes);
  buffer.read(offset, data.data(), bytes);
  return data;
}

enum class Operation { all_reduce_sum, all_reduce_max, all_gather, reduce_scatter, broadcast, all_to_all };

std::string name_of(Operation operation) {
  switch (operation) {
    case Operation::all_reduce_sum: return "all_reduce sum";
    case Operation::all_reduce_max: return "all_reduce max";
    case Operation::all_gather: return "all_gather";
    case Operation::reduce_scatter: return "reduce_scatter sum";
    case Operation::broadcast: return "broadcast";
    case Operation::all_to_all: return "all_to_all";
  }
  return "unknown";
}

// One operation, one type, one count, in place or not: inputs from every
// rank's formula, the expected output computed here, compared exactly.
void check_operation(CaseContext& context, Rank& rank, Checker& checker, Operation operation, DType type,
                     std::uint64_t count, bool in_place, int salt) {
  const int n = rank.world_size, me = rank.rank;
  const std::size_t element = size_in_bytes(type);
  const bool reduction = operation == Operation::all_reduce_sum || operation == Operation::all_reduce_max ||
                         operation == Operation::reduce_scatter;
  // Element j of the send data of rank r.
  auto fill_send = [&](std::vector<std::uint8_t>& data, int r, std::size_t elements) {
    data.assign(elements * element, 0);
    for (std::size_t j = 0; j < elements; ++j) {
      if (reduction) store_element(type, data.data(), j, reduction_value(r, j, salt));
      else store_pattern(type, data.data(), j, r, j, salt);
    }
  };
  auto reduced = [&](std::size_t j) {
    double value = reduction_value(0, j, salt);
    for (int r = 1; r < n; ++r)
      value = operation == Operation::all_reduce_max ? std::max(value, reduction_value(r, j, salt))
                                                     : value + reduction_value(r, j, salt);
    return value;
  };
  const int root = n - 1;  // not 0: a backend that ignores the root is caught
  const std::size_t block = static_cast<std::size_t>(count);
  std::size_t send_elements = block, recv_elements = block;
  if (operation == Operation::all_gather) recv_elements = block * static_cast<std::size_t>(n);
  if (operation == Operation::reduce_scatter || operation == Operation::all_to_all) send_elements = block * static_cast<std::size_t>(n);
  if (operation == Operation::all_to_all) recv_elements = send_elements;

  std::vector<std::uint8_t> send, expected(recv_elements * element);
  fill_send(send, me, send_elements);
  switch (operation) {
    case Operation::all_reduce_sum:
    case Operation::all_reduce_max:
      for (std::size_t j = 0; j < block; ++j) store_element(type, expected.data(), j, reduced(j));
      break;
    case Operation::reduce_scatter:
      for (std::size_t j = 0; j < block; ++j)
        store_element(type, expected.data(), j, reduced(static_cast<std::size_t>(me) * block + j));
      break;
    case Operation::all_gather:
      for (int r = 0; r < n; ++r)
        for (std::size_t j = 0; j < block; ++j) store_pattern(type, expected.data(), static_cast<std::size_t>(r) * block + j, r, j, salt);
      break;
    case Operation::broadcast:
      for (std::size_t j = 0; j < block; ++j) store_pattern(type, expected.data(), j, root, j, salt);
      break;
    case Operation::all_to_all:
      // Block r of mine is block `me` of rank r's send data.
      for (int r = 0; r < n; ++r)
        for (std::size_t j = 0; j < block; ++j)
          store_pattern(type, expected.data(), static_cast<std::size_t>(r) * block + j, r,
                        static_cast<std::size_t>(me) * block + j, salt);
      break;
  }

  const Device& device = context.device();
  const std::uint64_t send_bytes = send.size(), recv_bytes = expected.size();
  // In place: one buffer, the send data where the operation expects it (docs/collectives.md).
  std::uint64_t send_offset = 0, recv_offset = 0;
  Buffer send_buffer, recv_buffer;
  if (in_place) {
    recv_buffer = device.allocate(std::max(send_bytes, recv_bytes));
    send_buffer = recv_buffer;
    if (operation == Operation::all_gather) send_offset = static_cast<std::uint64_t>(me) * block * element;
    if (operation == Operation::reduce_scatter) recv_offset = static_cast<std::uint64_t>(me) * block * element;
  } else {
    send_buffer = device.allocate(send_bytes);
    recv_buffer = device.allocate(recv_bytes);
    recv_buffer.fill(0, recv_bytes, 0x7F, 1);  // what is not written stays visibly wrong
  }
  send_buffer.write(send_offset, send.data(), send_bytes);
  const BufferView source(send_buffer, send_offset), destination(recv_buffer, recv_offset);
  const Communicator& communicator = rank.communicator;
  switch (operation) {
    case Operation::all_reduce_sum: communicator.all_reduce(source, destination, count, type, ReduceOp::sum, rank.stream); break;
    case Operation::all_reduce_max: communicator.all_reduce(source, destination, count, type, ReduceOp::max, rank.stream); break;
    case Operation::all_gather: communicator.all_gather(source, destination, count, type, rank.stream); break;
    case Operation::reduce_scatter: communicator.reduce_scatter(source, destination, count, type, ReduceOp::sum, rank.stream); break;
    case Operation::broadcast: communicator.broadcast(source, destination, count, type, root, rank.stream); break;
    case Operation::all_to_all: communicator.all_to_all(source, destination, count, type, rank.stream); break;
  }
  rank.stream.synchronize();
  checker.compare(name_of(operation) + " " + std::string(to_string(type)) + " count " + std::to_string(count) +
                      (in_place ? " in place" : ""),
                  type, download(recv_buffer, recv_offset, recv_bytes), expected);
}

RankPart numerics_part(std::vector<Operation> operations) {
  return [operations](CaseContext& context, Rank& rank) {
    Checker checker(context);
    int salt = 0;
    for (const Operation operation : operations)
      for (const DType type : {DType::f32, DType::bf16})
        for (const std::uint64_t count : element_counts(context))
          for (const bool in_place : {false, true})
            check_operation(context, rank, checker, operation, type, count, in_place, ++salt);
    std::string summary;
    for (const Operation operation : operations) summary += (summary.empty() ? "" : ", ") + name_of(operation);
    checker.finish(summary + " in f32 and bf16, in and out of place, counts 1 to " +
                   std::to_string(element_counts(context).back()));
  };
}

// ---- api -----------------------------------------------------------------------

template <typename Operation>
void expect_invalid(CaseContext& context, const std::string& what, const std::string& named, Operation&& operation) {
  try {
    operation();
  } catch (const Error& error) {
    const std::string message = error.what();
    context.require(error.code() == StatusCode::invalid_argument,
                    what + " was reported as " + std::string(to_string(error.code())) +
                        ", expected invalid_argument: " + message);
    context.require(message.find(named) != std::string::npos,
                    what + " was rejected without naming '" + named + "': " + message);
    return;
  }
  context.fail(what + " was accepted; it must be rejected as invalid_argument before anything is sent");
}

void communicator_semantics(CaseContext& context, Rank& rank) {
  const Communicator& communicator = rank.communicator;
  context.require(communicator.rank() == rank.rank && communicator.world_size() == rank.world_size,
                  "the communicator says rank " + std::to_string(communicator.rank()) + " of " +
                      std::to_string(communicator.world_size()) + "; it was created as rank " +
                      std::to_string(rank.rank) + " of " + std::to_string(rank.world_size));
  context.require(communicator.device() == context.device(), "the communicator is on " + communicator.device().id() +
                                                                 ", not on " + context.device().id());
  communicator.barrier(rank.stream);
  rank.stream.synchronize();

  // Bad arguments are refused on the calling rank; every rank makes the same
  // calls, so nobody waits for a collective that never starts.
  Buffer small = context.device().allocate(16);
  expect_invalid(context, "a broadcast from root " + std::to_string(rank.world_size),
                 "root " + std::to_string(rank.world_size),
                 [&] { communicator.broadcast(small, small, 1, DType::f32, rank.world_size, rank.stream); });
  expect_invalid(context, "an all_reduce of 1000 f32 in a 16-byte buffer", "4000",
                 [&] { communicator.all_reduce(small, small, 1000, DType::f32, ReduceOp::sum, rank.stream); });

  // Point to point around the ring, posted together in a group. A single
  // rank has no ring: its send to itself is refused (a copy is the way).
  const int next = (rank.rank + 1) % rank.world_size, previous = (rank.rank + rank.world_size - 1) % rank.world_size;
  const std::vector<float> mine = {static_cast<float>(rank.rank) + 0.5f, -1.0f, 7.25f};
  Buffer outgoing = context.device().allocate(sizeof(float) * 3), incoming = context.device().allocate(sizeof(float) * 3);
  outgoing.write(0, mine.data(), sizeof(float) * 3);
  if (rank.world_size == 1) {
    expect_invalid(context, "a send from rank 0 to itself", "this rank",
                   [&] { communicator.send(outgoing, 3, DType::f32, 0, rank.stream); });
  } else {
    {
      Group group(communicator);
      communicator.send(outgoing, 3, DType::f32, next, rank.stream);
      communicator.recv(incoming, 3, DType::f32, previous, rank.stream);
    }
    rank.stream.synchronize();
    float received[3];
    incoming.read(0, received, sizeof(received));
    const float expected_ring[3] = {static_cast<float>(previous) + 0.5f, -1.0f, 7.25f};
    context.require_equal_bytes(received, expected_ring, sizeof(received),
                                "the values rank " + std::to_string(previous) + " sent around the ring");
  }

  // Still usable after the refused calls: the ranks sum their numbers.
  const float own = static_cast<float>(rank.rank);
  small.write(0, &own, sizeof(own));
  communicator.all_reduce(small, small, 1, DType::f32, ReduceOp::sum, rank.stream);
  rank.stream.synchronize();
  float total = 0;
  small.read(0, &total, sizeof(total));
  const float expected_total = static_cast<float>(rank.world_size * (rank.world_size - 1) / 2);
  context.require(total == expected_total, "an all_reduce of the rank numbers after the refused calls gave " +
                                               std::to_string(total) + ", expected " + std::to_string(expected_total));
  context.note(rank.world_size == 1 ? "rank, size and device as created; bad root, short buffer and a send to "
                                      "itself refused; an all_reduce after them correct"
                                    : "rank, size and device as created; bad root and short buffer refused; ring "
                                      "send/recv and an all_reduce after them correct");
}

// ---- performance -------------------------------------------------------------------

constexpr const char* bus_bandwidth_run = "bus_bandwidth_run";

// One value reduced over the ranks (f64, which every engine reduces exactly
// for the counts and times here).
double over_ranks(Rank& rank, double value, ReduceOp op) {
  Buffer buffer = rank.communicator.device().allocate(sizeof(double));
  buffer.write(0, &value, sizeof(value));
  rank.communicator.all_reduce(buffer, buffer, 1, DType::f64, op, rank.stream);
  rank.stream.synchronize();
  buffer.read(0, &value, sizeof(value));
  return value;
}

// all_reduce (f32 sum) bus bandwidth as nccl-tests measures it: per size, the
// time of the slowest rank (every rank gets the same), algbw = bytes / time,
// busbw = algbw * 2(n-1)/n, and #wrong, the elements of every rank's result
// that differ from the exact sum, summed over the ranks. The average busbw
// over the sizes is nccl-tests' "Avg bus bandwidth"; repeated runs at the
// largest size are the judged figure (bus_bandwidth_run).
void all_reduce_bandwidth(CaseContext& context, Rank& rank) {
  // Host transports take milliseconds per operation on small machines: the
  // repetitions are bounded so the curve costs seconds, not minutes.
  const std::uint64_t smallest = context.quick() ? (64u << 10) : (4u << 10);
  const std::uint64_t largest = context.quick() ? (4u << 20) : (64u << 20);
  const std::uint64_t bytes_per_point = context.quick() ? (16u << 20) : (256u << 20);
  const std::uint64_t most_repetitions = context.quick() ? 20 : 50;
  const int judged_runs = context.quick() ? 3 : 5;
  const Device& device = context.device();
  const std::uint64_t elements = largest / 4;
  // Small integers that differ by rank and element: their sum is exact in
  // f32, never grows (out of place), and a collective that does not run, or
  // sums the wrong ranks, leaves a result that cannot match.
  const int salt = static_cast<int>(context.seed("all_reduce bandwidth") % 17);
  std::vector<float> values(elements), expected(elements);
  for (std::size_t j = 0; j < elements; ++j) {
    values[j] = static_cast<float>(reduction_value(rank.rank, j, salt));
    double sum = 0;
    for (int r = 0; r < rank.world_size; ++r) sum += reduction_value(r, j, salt);
    expected[j] = static_cast<float>(sum);
  }
  Buffer send = device.allocate(largest), recv = device.allocate(largest);
  send.write(0, values.data(), largest);
  const double bus_factor = 2.0 * (rank.world_size - 1) / rank.world_size;
  auto repetitions_at = [&](std::uint64_t size) {
    return static_cast<int>(std::clamp<std::uint64_t>(bytes_per_point / size, 2, most_repetitions));
  };
  // The busbw of `repetitions` all_reduce of `size` bytes after a warm-up and
  // a barrier, by the slowest rank's time.
  auto timed = [&](std::uint64_t size, int repetitions) {
    rank.communicator.all_reduce(send, recv, size / 4, DType::f32, ReduceOp::sum, rank.stream);  // warm-up
    rank.communicator.barrier(rank.stream);
    rank.stream.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repetitions; ++i)
      rank.communicator.all_reduce(send, recv, size / 4, DType::f32, ReduceOp::sum, rank.stream);
    rank.stream.synchronize();
    const double own = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    require_plausible_seconds(context, own, std::to_string(repetitions) + " all_reduce of " + byte_count(size));
    const double seconds = over_ranks(rank, own, ReduceOp::max);
    return static_cast<double>(size) * repetitions / seconds * bus_factor / 1e9;
  };
  // This rank's elements of the first `size` bytes that differ from the exact sum.
  std::vector<float> result(elements);
  auto wrong_elements = [&](std::uint64_t size) {
    recv.read(0, result.data(), size);
    double wrong = 0;
    for (std::size_t j = 0; j < size / 4; ++j) wrong += result[j] != expected[j] ? 1 : 0;
    return wrong;
  };

  Series curve{"all_reduce bus bandwidth (" + std::to_string(rank.world_size) + " ranks)", "bytes", "GB/s", {}};
  std::string table = "size (B)  count  time (us)  algbw (GB/s)  busbw (GB/s)  #wrong";
  std::string wrong_sizes;
  double wrong_total = 0, busbw_sum = 0;
  for (std::uint64_t size = smallest; size <= largest; size *= 4) {
    recv.fill(0, size, 0xFF, 1);  // NaN: what the runs do not write cannot pass
    const double busbw = timed(size, repetitions_at(size));
    const double wrong = over_ranks(rank, wrong_elements(size), ReduceOp::sum);
    curve.points.emplace_back(static_cast<double>(size), busbw);
    busbw_sum += busbw;
    wrong_total += wrong;
    const double algbw = busbw / bus_factor;
    table += "\n  " + std::to_string(size) + "  " + std::to_string(size / 4) + "  " +
             with_precision(static_cast<double>(size) / algbw / 1e3, 1) + "  " + with_precision(algbw, 3) + "  " +
             with_precision(busbw, 3) + "  " + format_number(wrong);
    if (wrong > 0) wrong_sizes += (wrong_sizes.empty() ? "" : ", ") + byte_count(size) + ": " + format_number(wrong);
  }
  context.add_series(curve);
  const double average = busbw_sum / static_cast<double>(curve.points.size());
  context.measure({"bus_bandwidth_avg", average, "GB/s", {}, {}, "", ""});
  recv.fill(0, largest, 0xFF, 1);
  for (int run = 0; run < judged_runs; ++run)
    context.measure({bus_bandwidth_run, timed(largest, repetitions_at(largest)), "GB/s", {}, {}, "", ""});
  const double wrong_judged = over_ranks(rank, wrong_elements(largest), ReduceOp::sum);
  if (wrong_judged > 0)
    wrong_sizes += (wrong_sizes.empty() ? "" : ", ") + byte_count(largest) + " (judged runs): " + format_number(wrong_judged);
  wrong_total += wrong_judged;
  context.measure({"wrong_elements", wrong_total, "", 0.0, 0.0, "==", ""});
  context.note("all_reduce f32 sum over " + std::to_string(rank.world_size) + " ranks, as nccl-tests reports it:\n  " +
               table + "\n  #wrong total: " + format_number(wrong_total) + "; Avg bus bandwidth: " +
               with_precision(average, 3) + " GB/s");
  if (wrong_total > 0)
    context.fail("#wrong " + format_number(wrong_total) + ": the timed all_reduce computed a wrong sum in " +
                 format_number(wrong_total) + " elements, over every rank (" + wrong_sizes + ")");
}

// Each pair's rate against the link the topology reports between its
// devices: a pair joined by NVLink must beat what PCIe could carry between
// them. Returns one line per pair that does not; notes every pair's link.
std::string compare_with_links(CaseContext& context, const std::vector<Device>& devices,
                               const std::vector<float>& matrix) {
  const std::size_t n = devices.size();
  std::string links, slower;
  for (std::size_t source = 0; source < n; ++source)
    for (std::size_t target = 0; target < n; ++target) {
      if (source == target) continue;
      const double rate = matrix[source * n + target];
      const DeviceLink link = device_link(devices[source], devices[target]);
      const std::string pair = devices[source].id() + " -> " + devices[target].id();
      const std::string pcie =
          link.pcie_gbps ? link.pcie + " (" + with_precision(*link.pcie_gbps, 1) + " GB/s)" : link.pcie;
      links += "\n  " + pair + ": " + std::string(to_string(link.kind)) +
               (link.kind == DeviceLinkKind::nvlink ? " x" + std::to_string(link.nvlinks) : "") + ", " + pcie +
               (link.kind == DeviceLinkKind::unknown ? "; not compared: " + link.detail : "");
      if (link.kind != DeviceLinkKind::nvlink) continue;
      context.measure({"p2p " + pair + " nvlinks", static_cast<double>(link.nvlinks), "", {}, {}, "", ""});
      if (!link.pcie_gbps) continue;
      context.measure({"p2p " + pair + " pcie ceiling", *link.pcie_gbps, "GB/s", {}, {}, "", ""});
      if (rate <= *link.pcie_gbps)
        slower += "\n  " + pair + ": " + with_precision(rate, 2) + " GB/s over " + std::to_string(link.nvlinks) +
                  " NVLink" + (link.nvlinks == 1 ? "" : "s") + ", no better than " + pcie;
    }
  context.note("links, as the topology reports them:" + links);
  return slower;
}

// Every ordered pair of devices, one pair at a time: the source sends a
// buffer of finite f32 bit patterns to the destination, which checks it bit
// for bit; the source times its sends. The rows are gathered on every rank;
// a pair below half the median of all pairs fails (a degraded link), and so
// does a pair joined by NVLink that measures no better than PCIe.
void p2p_matrix(CaseContext& context, Rank& rank) {
  const Device& device = context.device();
  if (device.info().type == DeviceType::cpu)
    context.skip("peer-to-peer bandwidth is between devices; every rank here shares " + device.id());
  if (rank.world_size < 2) context.skip(device.backend_name() + " has one device: no pair to measure");
  const std::uint64_t bytes = context.quick() ? (16u << 20) : (64u << 20);
  const std::uint64_t elements = bytes / 4;
  const int repetitions = context.quick() ? 3 : 5;
  const int salt = static_cast<int>(context.seed("p2p matrix") % 17);
  auto pattern_of = [&](int source) {
    std::vector<std::uint8_t> data(bytes);
    for (std::size_t j = 0; j < elements; ++j) store_pattern(DType::f32, data.data(), j, source, j, salt);
    return data;
  };
  Buffer send = device.allocate(bytes), recv = device.allocate(bytes);
  send.write(0, pattern_of(rank.rank).data(), bytes);
  std::vector<float> row(static_cast<std::size_t>(rank.world_size), 0.0f);  // GB/s from this rank to each peer
  for (int source = 0; source < rank.world_size; ++source)
    for (int target = 0; target < rank.world_size; ++target) {
      if (source == target) continue;
      if (rank.rank == source) {
        rank.communicator.send(send, elements, DType::f32, target, rank.stream);  // warm-up
        rank.stream.synchronize();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < repetitions; ++i) rank.communicator.send(send, elements, DType::f32, target, rank.stream);
        rank.stream.synchronize();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        require_plausible_seconds(context, seconds, std::to_string(repetitions) + " sends of " + byte_count(bytes));
        row[static_cast<std::size_t>(target)] = static_cast<float>(static_cast<double>(bytes) * repetitions / seconds / 1e9);
      } else if (rank.rank == target) {
        recv.fill(0, bytes, 0xFF, 1);
        for (int i = 0; i <= repetitions; ++i) rank.communicator.recv(recv, elements, DType::f32, source, rank.stream);
        rank.stream.synchronize();
        std::vector<std::uint8_t> received(bytes);
        recv.read(0, received.data(), bytes);
        if (received != pattern_of(source))
          context.fail("rank " + std::to_string(target) + " received different bytes from rank " +
                       std::to_string(source) + " than were sent");
      }
      rank.communicator.barrier(rank.stream);
      rank.stream.synchronize();
    }
  Buffer row_buffer = device.allocate(row.size() * 4), matrix_buffer = device.allocate(row.size() * row.size() * 4);
  row_buffer.write(0, row.data(), row.size() * 4);
  rank.communicator.all_gather(row_buffer, matrix_buffer, row.size(), DType::f32, rank.stream);
  rank.stream.synchronize();
  std::vector<float> matrix(row.size() * row.size());
  matrix_buffer.read(0, matrix.data(), matrix.size() * 4);
  if (rank.rank != 0) return;
  auto name = [&](int index) { return device.backend_name() + ":" + std::to_string(index); };
  std::vector<double> rates;
  for (int source = 0; source < rank.world_size; ++source)
    for (int target = 0; target < rank.world_size; ++target)
      if (source != target) {
        const double rate = matrix[static_cast<std::size_t>(source * rank.world_size + target)];
        rates.push_back(rate);
        context.measure({"p2p " + name(source) + " -> " + name(target), rate, "GB/s", {}, {}, "", ""});
      }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::string slow;
  for (int source = 0, pair = 0; source < rank.world_size; ++source)
    for (int target = 0; target < rank.world_size; ++target)
      if (source != target && rates[static_cast<std::size_t>(pair++)] < 0.5 * median)
        slow += (slow.empty() ? "" : ", ") + name(source) + " -> " + name(target);
  const std::vector<Device> devices = backend_devices(device);
  if (devices.size() != static_cast<std::size_t>(rank.world_size))
    throw HarnessError("the " + device.backend_name() + " backend lists " + std::to_string(devices.size()) +
                       " devices to this rank and ran " + std::to_string(rank.world_size) + " ranks");
  const std::string slower_than_pcie = compare_with_links(context, devices, matrix);
  std::string failures;
  if (!slow.empty())
    failures = "below half the median " + std::to_string(median) + " GB/s of the " + std::to_string(rates.size()) +
               " pairs: " + slow + " (a degraded or slower link)";
  if (!slower_than_pcie.empty())
    failures += (failures.empty() ? "" : "; ") + std::string("joined by NVLink, no faster than PCIe:") + slower_than_pcie;
  if (!failures.empty()) context.fail(failures);
  context.note(std::to_string(rates.size()) + " pairs of " + byte_count(bytes) + " sends, each checked bit for bit; "
               "median " + std::to_string(median) + " GB/s");
}

// The verdict on what all_reduce_bandwidth measured (in this context): the
// average busbw over the sizes against collectives.all_reduce.min_avg_bus_gbps
// where the profile sets it, then the largest size's runs against
// collectives.all_reduce.min_bus_gbps (MEASURED without one).
void judge_bandwidth(CaseContext& context) {
  auto& measurements = context.evidence().measurements;
  std::vector<double> runs;
  for (const auto& m : measurements)
    if (m.name == bus_bandwidth_run) runs.push_back(m.value);
  std::erase_if(measurements, [](const Measurement& m) { return m.name == bus_bandwidth_run; });
  if (runs.empty()) throw HarnessError("rank 0 reported no " + std::string(bus_bandwidth_run));
  const std::string average_key = "collectives.all_reduce.min_avg_bus_gbps";
  if (const auto floor = context.threshold(average_key)) {
    const auto average = std::find_if(measurements.begin(), measurements.end(),
                                      [](const Measurement& m) { return m.name == "bus_bandwidth_avg"; });
    if (average == measurements.end()) throw HarnessError("rank 0 reported no bus_bandwidth_avg");
    average->expected = *floor;
    average->comparison = ">=";
    average->threshold = average_key;
    const std::string measured = "Avg bus bandwidth " + with_precision(average->value, 3) +
                                 " GB/s (nccl-tests' average of busbw over the sizes)";
    if (average->value < *floor)
      context.fail(measured + " is below the profile minimum " + with_precision(*floor, 3) + " GB/s (" + average_key +
                   ") for this device model");
    context.note(measured + " >= minimum " + with_precision(*floor, 3) + " GB/s");
  }
  judge_minimum(context, "bus_bandwidth", spread_of(runs), "GB/s", "collectives.all_reduce.min_bus_gbps",
                "all_reduce bus bandwidth (f32 sum, the largest size)");
}

void all_reduce_bandwidth_case(CaseContext& context, const std::function<void(CaseContext&)>& ranks) {
  ranks(context);  // rank 0's measurements become this case's
  judge_bandwidth(context);
}

// A job a launcher started with more than one rank: halrun or torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK), mpirun (OMPI_COMM_WORLD_*), srun (SLURM_*),
// in Store::from_environment's order. Read without connecting anywhere.
struct LaunchedJob {
  int world_size = 1;
  int local_rank = 0;
  std::string launcher;
};

std::optional<LaunchedJob> launched_job() {
  struct Source {
    const char *rank, *size, *local_rank, *launcher;
  };
  for (const Source& source : {Source{"RANK", "WORLD_SIZE", "LOCAL_RANK", "halrun or torchrun"},
                               Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
                               Source{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "srun"}}) {
    const char* rank = std::getenv(source.rank);
    const char* size = std::getenv(source.size);
    if (rank == nullptr || size == nullptr) continue;
    const int world_size = std::atoi(size);
    if (world_size < 2) return std::nullopt;
    const char* local = std::getenv(source.local_rank);
    return LaunchedJob{world_size, local != nullptr ? std::atoi(local) : 0, source.launcher};
  }
  return std::nullopt;
}

// Under a launcher this case process is one rank of the launcher's job, on
// the device its local rank picks, joined through the launcher's store
// (Store::from_environment: a TcpStore at MASTER_ADDR:MASTER_PORT, ...), so
// the ranks may be on several hosts; each rank's report judges the job.
void launched_bandwidth_case(CaseContext& context, const LaunchedJob& job) {
  const Device& device = context.device();
  const std::vector<Device> devices = backend_devices(device);
  if (devices.empty()) throw HarnessError("the " + device.backend_name() + " backend lists no devices to this rank");
  const Device& mine = devices[static_cast<std::size_t>(job.local_rank) % devices.size()];
  if (mine.index() != device.index())
    context.skip("this process is local rank " + std::to_string(job.local_rank) + " of a " +
                 std::to_string(job.world_size) + "-rank job (" + job.launcher + "): it takes part on " + mine.id() +
                 "; see that result");
  Store::FromEnvironment launch = Store::from_environment();
  launch.store->default_timeout = operation_timeout;
  CommunicatorOptions options;
  options.timeout = operation_timeout;
  Rank rank;
  rank.rank = launch.rank;
  rank.world_size = launch.world_size;
  rank.communicator = Communicator::create(device, launch.rank, launch.world_size, launch.store, options);
  context.note("rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.world_size) + " (" + launch.source +
               "), one process each; communicator: " + rank.communicator.description());
  rank.stream = device.create_stream();
  all_reduce_bandwidth(context, rank);
  rank.stream.synchronize();
  rank.communicator.destroy();
  judge_bandwidth(context);
}

}  // namespace

void register_cases_collectives(Registry& registry) {
  auto add = [&](const std::string& id, Tier tier, const std::string& description, RankPart part) {
    registry.add({id, tier, description + " (" + std::to_string(default_world_size) + " ranks by default)",
                  "collectives", false, 0, collective_body(id, tier, std::move(part))});
  };
  add("api.collectives.communicator", Tier::api,
      "a communicator knows its rank, size and device; a bad root and a short buffer are refused on the calling "
      "rank; grouped ring send/recv and a later all_reduce are correct",
      communicator_semantics);
  add("numerics.collectives.all_reduce", Tier::numerics,
      "all_reduce sum and max, f32 and bf16, in and out of place, checked element by element",
      numerics_part({Operation::all_reduce_sum, Operation::all_reduce_max}));
  add("numerics.collectives.all_gather", Tier::numerics,
      "all_gather, f32 and bf16, in and out of place, checked bit for bit", numerics_part({Operation::all_gather}));
  add("numerics.collectives.reduce_scatter", Tier::numerics,
      "reduce_scatter sum, f32 and bf16, in and out of place, checked element by element",
      numerics_part({Operation::reduce_scatter}));
  add("numerics.collectives.broadcast", Tier::numerics,
      "broadcast from the last rank, f32 and bf16, in and out of place, checked bit for bit",
      numerics_part({Operation::broadcast}));
  add("numerics.collectives.all_to_all", Tier::numerics,
      "all_to_all, f32 and bf16, in and out of place, checked bit for bit", numerics_part({Operation::all_to_all}));

  registry.add({"performance.collectives.p2p_matrix", Tier::performance,
                "send/recv bandwidth of every ordered pair of devices of a GPU backend, one rank per device, each "
                "transfer checked bit for bit; a pair below half the median of all pairs fails, and so does a pair "
                "joined by NVLink (the topology's) that measures no better than PCIe",
                "collectives", false, 0,
                collective_body("performance.collectives.p2p_matrix", Tier::performance, p2p_matrix),
                [](const CaseSettings& settings) { return settings.quick ? 4.0 : 15.0; }});

  const std::string bandwidth_id = "performance.collectives.all_reduce_bus_bandwidth";
  auto ranks = collective_body(bandwidth_id, Tier::performance, all_reduce_bandwidth);
  registry.add({bandwidth_id, Tier::performance,
                "all_reduce (f32 sum) bus bandwidth per size from 4 KiB up as nccl-tests reports it, #wrong (elements "
                "that differ from the exact sum, over every rank) 0, the average over the sizes against "
                "collectives.all_reduce.min_avg_bus_gbps and the mean of repeated runs at the largest size against "
                "collectives.all_reduce.min_bus_gbps (" + std::to_string(default_world_size) + " ranks by default; "
                "under halrun, mpirun or srun one rank per process, across hosts)",
                "collectives", false, 0,
                [ranks](CaseContext& context) {
                  if (!context.settings().helper.empty()) return ranks(context);  // a rank: no verdict of its own
                  if (const std::optional<LaunchedJob> job = launched_job()) return launched_bandwidth_case(context, *job);
                  all_reduce_bandwidth_case(context, ranks);
                },
                [](const CaseSettings& settings) { return settings.quick ? 8.0 : 30.0; }});
}

}  // namespace hal::conformance::cases
