// One rank of a multi-process collectives test. The rank, world size and
// store come from the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT). Every rank computes the expected result of each operation
// from the inputs of all ranks and compares it element by element.
//
//   collectives_worker ops|split|p2p|kill VICTIM|leave VICTIM|mismatch|shm_mismatch|smoke|abort|engine|
//                      missing VICTIM|fault|legacy|cut FIRST LAST
// Exit status 0 when every check passed; failures are printed. The device is
// HAL_TEST_DEVICE (default host:0; a backend alone means one device per rank),
// so the GPU backends run the same checks.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "dtype_codes.hpp"
#include "hal/hal.hpp"
#include "hal/collectives.hpp"

using hal::BufferView;
using hal::DType;
using hal::ReduceOp;

namespace {

int failures = 0;

#define EXPECT(condition, message)                                                                  \
  do {                                                                                              \
    if (!(condition)) {                                                                             \
      ++failures;                                                                                   \
      if (failures < 20) std::cout << "FAILED: " << message << " (" << #condition << ")" << std::endl; \
    }                                                                                               \
  } while (false)

// ---- values in every data type ------------------------------------------------

void store_value(DType type, void* base, std::size_t i, double value) {
  switch (type) {
    case DType::f32: static_cast<float*>(base)[i] = static_cast<float>(value); break;
    case DType::f64: static_cast<double*>(base)[i] = value; break;
    case DType::f16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(static_cast<float>(value)); break;
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[i] = hal::abi::float_to_bf16_bits(static_cast<float>(value));
      break;
    // Integers wrap like the two's-complement arithmetic of the backend.
    case DType::i8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(static_cast<std::int64_t>(value)); break;
    case DType::u8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(static_cast<std::int64_t>(value)); break;
    case DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(value)); break;
    case DType::i64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(value); break;
  }
}

double load_value(DType type, const void* base, std::size_t i) {
  switch (type) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return static_cast<float>(static_cast<const _Float16*>(base)[i]);
    case DType::bf16: return hal::abi::bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::i8: return static_cast<const std::int8_t*>(base)[i];
    case DType::u8: return static_cast<const std::uint8_t*>(base)[i];
    case DType::i32: return static_cast<const std::int32_t*>(base)[i];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
  }
  return 0;
}

double round_to(DType type, double value) {
  std::int64_t scratch = 0;
  store_value(type, &scratch, 0, value);
  return load_value(type, &scratch, 0);
}

bool is_integer(DType type) {
  return type == DType::i8 || type == DType::u8 || type == DType::i32 || type == DType::i64;
}

// Rank r's input element i: small integers, exact in every type.
double input_of(int rank, std::size_t i) { return 1 + static_cast<double>((rank * 7 + i * 3) % 5); }

// The reduction of element i over every rank, as the backend computes it:
// exactly (small integers), then avg divides in the type's arithmetic
// (f32 for f32/f16/bf16), then one rounding into the type.
double reduced(DType type, ReduceOp op, int world, std::size_t i) {
  double result = input_of(0, i);
  for (int r = 1; r < world; ++r) {
    const double v = input_of(r, i);
    switch (op) {
      case ReduceOp::sum: case ReduceOp::avg: result += v; break;
      case ReduceOp::prod: result *= v; break;
      case ReduceOp::min: result = std::min(result, v); break;
      case ReduceOp::max: result = std::max(result, v); break;
    }
  }
  if (op == ReduceOp::avg) {
    if (is_integer(type))
      return round_to(type, static_cast<double>(static_cast<std::int64_t>(round_to(type, result)) / world));
    if (type == DType::f64) return result / world;
    return round_to(type, static_cast<float>(result) / static_cast<float>(world));
  }
  return round_to(type, result);
}

// ---- running one case ----------------------------------------------------------

// A backend alone ("cuda") is the rank's own device, <backend>:<LOCAL_RANK>.
std::string test_device() {
  const char* device = std::getenv("HAL_TEST_DEVICE");
  const std::string chosen = device != nullptr && *device != '\0' ? device : "host:0";
  if (chosen.find(':') != std::string::npos) return chosen;
  const char* local_rank = std::getenv("LOCAL_RANK");
  return chosen + ":" + (local_rank != nullptr ? local_rank : "0");
}

// The status code an error is expected to carry (HAL_TEST_EXPECT_CODE), else `fallback`.
hal::StatusCode expected_code(hal::StatusCode fallback) {
  const char* name = std::getenv("HAL_TEST_EXPECT_CODE");
  if (name == nullptr || *name == '\0') return fallback;
  for (const hal::StatusCode code : {hal::StatusCode::unsupported, hal::StatusCode::not_present,
                                     hal::StatusCode::timeout, hal::StatusCode::aborted,
                                     hal::StatusCode::device_lost, hal::StatusCode::internal,
                                     hal::StatusCode::invalid_argument})
    if (hal::to_string(code) == std::string_view(name)) return code;
  std::cout << "FAILED: HAL_TEST_EXPECT_CODE='" << name << "' is not a status code" << std::endl;
  std::exit(2);
}

struct Context {
  std::shared_ptr<hal::Store> store;
  hal::Device device;
  hal::Stream stream;
  hal::Communicator comm;
  int rank = 0, world = 1;
};

std::vector<std::uint8_t> host_block(DType type, std::size_t count, const std::function<double(std::size_t)>& value) {
  std::vector<std::uint8_t> bytes(std::max<std::size_t>(count * hal::size_in_bytes(type), 1));
  for (std::size_t i = 0; i < count; ++i) store_value(type, bytes.data(), i, value(i));
  return bytes;
}

// Synchronous, so that the caller's bytes may go away at once.
hal::Buffer upload(Context& context, const std::vector<std::uint8_t>& bytes) {
  hal::Buffer buffer = context.device.allocate(bytes.size());
  buffer.write(0, bytes.data(), bytes.size());
  return buffer;
}

// Compares count elements of actual against expected(i); names the case.
void compare(const std::string& name, DType type, const std::vector<std::uint8_t>& actual, std::size_t offset,
             std::size_t count, const std::function<double(std::size_t)>& expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double got = load_value(type, actual.data() + offset * hal::size_in_bytes(type), i);
    const double want = expected(i);
    if (got != want) {
      if (wrong == 0)
        std::cout << "  " << name << ": element " << i << " is " << got << ", expected " << want << std::endl;
      ++wrong;
    }
  }
  EXPECT(wrong == 0, name << ": " << wrong << " of " << count << " elements wrong");
}

constexpr DType all_types[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                  DType::i8,  DType::u8,  DType::i32, DType::i64};
constexpr ReduceOp all_reduce_ops[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

// Runs every operation once for (type, count, in_place) and checks it.
void run_all_operations(Context& c, DType type, std::size_t count, bool in_place) {
  const std::size_t size = hal::size_in_bytes(type);
  const int n = c.world, r = c.rank;
  const std::string tag = std::string(hal::to_string(type)) + " count " + std::to_string(count) +
                          (in_place ? " in-place" : " out-of-place") + " rank " + std::to_string(r) + "/" +
                          std::to_string(n);
  const auto mine = [&](std::size_t i) { return input_of(r, i); };
  std::vector<std::uint8_t> result;
  const auto fetch = [&](const hal::Buffer& buffer, std::size_t elements) {
    result.assign(std::max<std::size_t>(elements * size, 1), 0);
    c.stream.copy_to_host(result.data(), buffer, 0, elements * size);
    c.stream.synchronize();
  };
  const std::size_t all = count * static_cast<std::size_t>(n);
  const auto empty = [&](std::size_t elements) {
    return upload(c, std::vector<std::uint8_t>(std::max<std::size_t>(elements * size, 1), 0xEE));
  };

  for (const ReduceOp op : all_reduce_ops) {
    const std::string what = std::string(hal::to_string(op)) + " " + tag;
    {  // all_reduce
      hal::Buffer send = upload(c, host_block(type, count, mine));
      hal::Buffer recv = in_place ? send : empty(count);
      c.comm.all_reduce(send, recv, count, type, op, c.stream);
      fetch(recv, count);
      compare("all_reduce " + what, type, result, 0, count, [&](std::size_t i) { return reduced(type, op, n, i); });
      if (!in_place) {
        fetch(send, count);
        compare("all_reduce send untouched " + what, type, result, 0, count, mine);
      }
    }
    {  // reduce to the last rank
      const int root = n - 1;
      hal::Buffer send = upload(c, host_block(type, count, mine));
      hal::Buffer recv = in_place ? send : empty(count);
      c.comm.reduce(send, recv, count, type, op, root, c.stream);
      fetch(recv, count);
      if (r == root)
        compare("reduce " + what, type, result, 0, count, [&](std::size_t i) { return reduced(type, op, n, i); });
    }
    {  // reduce_scatter: block q of every rank's input is reduced onto rank q
      hal::Buffer send = upload(c, host_block(type, all, mine));
      hal::Buffer recv = in_place ? send : empty(count);
      c.comm.reduce_scatter(send, BufferView(recv, in_place ? r * count * size : 0), count, type, op, c.stream);
      fetch(recv, in_place ? all : count);
      compare("reduce_scatter " + what, type, result, in_place ? r * count : 0, count,
              [&](std::size_t i) { return reduced(type, op, n, r * count + i); });
    }
  }
  {  // broadcast from rank 0 (and from the last rank when there are several)
    for (const int root : {0, n - 1}) {
      hal::Buffer send = upload(c, host_block(type, count, mine));
      hal::Buffer recv = in_place ? send : empty(count);
      c.comm.broadcast(send, recv, count, type, root, c.stream);
      fetch(recv, count);
      compare("broadcast root " + std::to_string(root) + " " + tag, type, result, 0, count,
              [&](std::size_t i) { return input_of(root, i); });
    }
  }
  {  // all_gather
    hal::Buffer recv = empty(all);
    hal::Buffer send = in_place ? recv : upload(c, host_block(type, count, mine));
    if (in_place) {
      const auto own = host_block(type, count, mine);
      recv.write(r * count * size, own.data(), count * size);
    }
    c.comm.all_gather(BufferView(send, in_place ? r * count * size : 0), recv, count, type, c.stream);
    fetch(recv, all);
    compare("all_gather " + tag, type, result, 0, all,
            [&](std::size_t j) { return input_of(static_cast<int>(j / std::max<std::size_t>(count, 1)), j % std::max<std::size_t>(count, 1)); });
  }
  {  // all_to_all: block p of rank r's input goes to rank p
    hal::Buffer send = upload(c, host_block(type, all, mine));
    hal::Buffer recv = in_place ? send : empty(all);
    c.comm.all_to_all(send, recv, count, type, c.stream);
    fetch(recv, all);
    compare("all_to_all " + tag, type, result, 0, all, [&](std::size_t j) {
      const std::size_t block = j / std::max<std::size_t>(count, 1), i = j % std::max<std::size_t>(count, 1);
      return input_of(static_cast<int>(block), r * count + i);
    });
  }
  {  // gather to rank 1 (or 0)
    const int root = n > 1 ? 1 : 0;
    hal::Buffer recv = empty(all);
    hal::Buffer send;
    std::uint64_t send_offset = 0;
    if (in_place && r == root) {
      send = recv;
      send_offset = root * count * size;
      const auto own = host_block(type, count, mine);
      recv.write(send_offset, own.data(), count * size);
    } else {
      send = upload(c, host_block(type, count, mine));
    }
    c.comm.gather(BufferView(send, send_offset), recv, count, type, root, c.stream);
    fetch(recv, all);
    if (r == root)
      compare("gather " + tag, type, result, 0, all, [&](std::size_t j) {
        return input_of(static_cast<int>(j / std::max<std::size_t>(count, 1)), j % std::max<std::size_t>(count, 1));
      });
  }
  {  // scatter from rank 0
    const int root = 0;
    hal::Buffer send = upload(c, host_block(type, all, mine));
    hal::Buffer recv = (in_place && r == root) ? send : empty(count);
    const std::uint64_t recv_offset = (in_place && r == root) ? root * count * size : 0;
    c.comm.scatter(send, BufferView(recv, recv_offset), count, type, root, c.stream);
    fetch(recv, count);
    compare("scatter " + tag, type, result, 0, count, [&](std::size_t i) { return input_of(root, r * count + i); });
  }
}

Context connect(const hal::Runtime& runtime, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto environment = hal::Store::from_environment(std::chrono::seconds(20));
  // Each rank its own shared-memory directory, as if on its own host.
  if (const char* base = std::getenv("HAL_TEST_SHM_DIR_PER_RANK"); base != nullptr)
    ::setenv("HAL_SHM_DIR", (std::string(base) + "/" + std::to_string(environment.rank)).c_str(), 1);
  Context context{environment.store, runtime.device(test_device()), {}, {}, 0, 1};
  context.stream = context.device.create_stream();
  context.rank = environment.rank;
  context.world = environment.world_size;
  hal::CommunicatorOptions options;
  options.timeout = timeout;
  context.comm = hal::Communicator::create(context.device, environment.rank, environment.world_size,
                                           environment.store, options);
  // The MPI tests say which engine must run, so a silent fall back to Gloo
  // fails; shared memory may run beside it.
  const std::string description = context.comm.description();
  if (const char* expected = std::getenv("HAL_TEST_EXPECT_ENGINE"); expected != nullptr) {
    const std::string named = std::string(expected) + " (";
    EXPECT(description.rfind(named, 0) == 0 || (description.rfind("shm (", 0) == 0 &&
                                                description.find("other operations: " + named) != std::string::npos),
           "rank " << environment.rank << " runs '" << description << "', expected engine " << expected);
  }
  // Parts the description must have, separated by '|'.
  if (const char* parts = std::getenv("HAL_TEST_EXPECT_DESCRIPTION"); parts != nullptr) {
    std::string rest = parts;
    for (std::size_t end; !rest.empty(); rest = end == std::string::npos ? "" : rest.substr(end + 1)) {
      end = rest.find('|');
      const std::string part = rest.substr(0, end);
      EXPECT(description.find(part) != std::string::npos,
             "rank " << environment.rank << "'s description '" << description << "' lacks '" << part << "'");
    }
  }
  return context;
}

// ---- scenarios ---------------------------------------------------------------------

void scenario_ops(const hal::Runtime& runtime) {
  Context c = connect(runtime);
  for (const DType type : all_types)
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}})
      for (const bool in_place : {false, true}) run_all_operations(c, type, count, in_place);
  // A large count, for the multi-segment paths of the ring algorithms.
  for (const DType type : {DType::f32, DType::bf16})
    for (const bool in_place : {false, true}) {
      const std::size_t count = (std::size_t{1} << 20) + 3;
      hal::Buffer send = upload(c, host_block(type, count, [&](std::size_t i) { return input_of(c.rank, i); }));
      hal::Buffer recv = in_place ? send : c.device.allocate(count * hal::size_in_bytes(type));
      c.comm.all_reduce(send, recv, count, type, ReduceOp::sum, c.stream);
      std::vector<std::uint8_t> result(count * hal::size_in_bytes(type));
      c.stream.copy_to_host(result.data(), recv, 0, result.size());
      c.stream.synchronize();
      compare("large all_reduce " + std::string(hal::to_string(type)), type, result, 0, count,
              [&](std::size_t i) { return reduced(type, ReduceOp::sum, c.world, i); });
    }
  c.comm.barrier(c.stream);
  c.stream.synchronize();
}

void scenario_split(const hal::Runtime& runtime) {
  Context c = connect(runtime);
  // Even and odd ranks, in reverse order of the old rank.
  hal::Communicator child = c.comm.split(c.rank % 2, -c.rank);
  std::vector<int> members;
  for (int r = c.rank % 2; r < c.world; r += 2) members.insert(members.begin(), r);
  EXPECT(child.world_size() == static_cast<int>(members.size()), "split world size " << child.world_size());
  const int expected_rank = static_cast<int>(std::find(members.begin(), members.end(), c.rank) - members.begin());
  EXPECT(child.rank() == expected_rank, "split rank " << child.rank() << " expected " << expected_rank);
  // all_reduce of the old ranks over the child sums the members.
  const std::int64_t mine = c.rank;
  hal::Buffer buffer = c.device.allocate(sizeof(mine));
  c.stream.copy_to_device(buffer, 0, &mine, sizeof(mine));
  child.all_reduce(buffer, buffer, 1, DType::i64, ReduceOp::sum, c.stream);
  std::int64_t sum = 0;
  c.stream.copy_to_host(&sum, buffer, 0, sizeof(sum));
  c.stream.synchronize();
  std::int64_t expected = 0;
  for (const int member : members) expected += member;
  EXPECT(sum == expected, "split all_reduce gave " << sum << ", expected " << expected);
  // A rank that opts out gets no communicator; the others still work.
  hal::Communicator partial = c.comm.split(c.rank == 0 ? -1 : 0, 0);
  EXPECT(partial.valid() == (c.rank != 0), "split with a negative color");
  if (partial.valid()) {
    EXPECT(partial.world_size() == c.world - 1, "partial world size " << partial.world_size());
    partial.barrier(c.stream);
    c.stream.synchronize();
  }
  c.comm.barrier(c.stream);
  c.stream.synchronize();
}

void scenario_p2p(const hal::Runtime& runtime) {
  Context c = connect(runtime);
  const int right = (c.rank + 1) % c.world, left = (c.rank + c.world - 1) % c.world;
  for (const std::size_t count : {std::size_t{0}, std::size_t{5}, std::size_t{100000}}) {
    const auto data = host_block(DType::i32, count, [&](std::size_t i) { return input_of(c.rank, i); });
    hal::Buffer send = upload(c, data);
    hal::Buffer recv = c.device.allocate(data.size());
    {
      hal::Group group(c.comm);  // both directions at once: no deadlock
      c.comm.send(send, count, DType::i32, right, c.stream);
      c.comm.recv(recv, count, DType::i32, left, c.stream);
    }
    std::vector<std::uint8_t> result(data.size());
    c.stream.copy_to_host(result.data(), recv, 0, result.size());
    c.stream.synchronize();
    compare("ring send/recv count " + std::to_string(count), DType::i32, result, 0, count,
            [&](std::size_t i) { return input_of(left, i); });
  }
}

// A sum all_reduce over the buffer's floats, finished.
void all_reduce_buffer(Context& c, const hal::Buffer& buffer) {
  c.comm.all_reduce(buffer, buffer, buffer.size() / 4, DType::f32, ReduceOp::sum, c.stream);
  c.stream.synchronize();
}

// How an all_reduce that had to fail failed.
struct Failure {
  std::string error;
  double seconds = 0;
};

// An all_reduce over the buffer that must fail because rank `victim` is gone
// (how: "was killed", "left"): prints the error and when it came; nothing,
// after saying FAILED, when the all_reduce succeeded.
std::optional<Failure> failing_all_reduce(Context& c, const hal::Buffer& buffer, int victim, std::string_view how) {
  const auto start = std::chrono::steady_clock::now();
  try {
    all_reduce_buffer(c, buffer);
    std::cout << "FAILED: the all_reduce succeeded although rank " << victim << " " << how << std::endl;
    return std::nullopt;
  } catch (const hal::Error& error) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "error after " << seconds << " s: " << error.what() << std::endl;
    return Failure{error.what(), seconds};
  }
}

// The victim dies while the others wait inside an all_reduce; they must fail
// with an error naming it, within the 3 s timeout.
int scenario_kill(const hal::Runtime& runtime, int victim) {
  const auto timeout = std::chrono::seconds(3);
  Context c = connect(runtime, timeout);
  hal::Buffer buffer = c.device.allocate(1 << 20);
  for (int round = 0; round < 3; ++round) all_reduce_buffer(c, buffer);
  if (c.rank == victim) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others are waiting by now
    std::raise(SIGKILL);
  }
  const std::optional<Failure> failure = failing_all_reduce(c, buffer, victim, "was killed");
  if (!failure) return 1;
  EXPECT(failure->error.find("rank " + std::to_string(victim)) != std::string::npos, "the error names the victim");
  EXPECT(failure->error.find("all_reduce #3") != std::string::npos, "the error names the operation and its sequence");
  EXPECT(failure->seconds < 3.0 + 1.0, "failed within the timeout");
  EXPECT(!c.comm.async_error().is_ok(), "the communicator reports the error too");
  return failures == 0 ? 0 : 1;
}

// The connection of a mismatch scenario and its 64-byte buffer.
struct Mismatch {
  Context c;
  hal::Buffer buffer;
};

// Connects, then runs one all_reduce the ranks agree on and one where rank 1
// passes 5 elements and the others 4: it must fail as invalid_argument with
// an error holding each of `expected` (fragment, what it shows).
Mismatch mismatched_all_reduce(const hal::Runtime& runtime,
                               const std::vector<std::pair<std::string, std::string>>& expected) {
  Mismatch mismatch{connect(runtime, std::chrono::seconds(5)), {}};
  auto& [c, buffer] = mismatch;
  buffer = c.device.allocate(64);
  c.comm.all_reduce(buffer, buffer, 4, DType::f32, ReduceOp::sum, c.stream);  // agrees
  c.stream.synchronize();
  try {
    c.comm.all_reduce(buffer, buffer, c.rank == 1 ? 5 : 4, DType::f32, ReduceOp::sum, c.stream);
    c.stream.synchronize();
    EXPECT(false, "the mismatched all_reduce succeeded");
  } catch (const hal::Error& error) {
    std::cout << error.what() << std::endl;
    const std::string text = error.what();
    EXPECT(error.code() == hal::StatusCode::invalid_argument, "a mismatch is invalid_argument");
    for (const auto& [fragment, what] : expected) EXPECT(text.find(fragment) != std::string::npos, what);
  }
  return mismatch;
}

// HAL_COLL_CHECK=1 is set by the test: rank 1 passes a different count.
void scenario_mismatch(const hal::Runtime& runtime) {
  auto [c, buffer] =
      mismatched_all_reduce(runtime, {{"HAL_COLL_CHECK", "the error names the check"},
                                      {"rank 1: all_reduce count=5", "the error shows rank 1's fingerprint"},
                                      {"all_reduce #1", "the error names the sequence number"}});
  // The communicator is still usable: nothing reached the transport.
  c.comm.all_reduce(buffer, buffer, 4, DType::f32, ReduceOp::sum, c.stream);
  c.stream.synchronize();
}

// Without HAL_COLL_CHECK: rank 1 passes a different count, which the shm
// engine finds itself; the communicator is broken afterwards.
void scenario_shm_mismatch(const hal::Runtime& runtime) {
  auto [c, buffer] =
      mismatched_all_reduce(runtime, {{"the ranks called different operations", "the error says what is wrong"},
                                      {"rank 1: all_reduce #1 of 5 x f32 sum", "the error shows rank 1's call"},
                                      {"rank 0: all_reduce #1 of 4 x f32 sum", "the error shows rank 0's call"}});
  try {
    c.comm.all_reduce(buffer, buffer, 4, DType::f32, ReduceOp::sum, c.stream);
    c.stream.synchronize();
    EXPECT(false, "the broken communicator ran another all_reduce");
  } catch (const hal::Error& error) {
    EXPECT(std::string(error.what()).find("failed earlier") != std::string::npos, "names the earlier failure");
  }
}

// An all_reduce and a broadcast, checked: the engine works, whichever runs.
void scenario_smoke(const hal::Runtime& runtime) {
  Context c = connect(runtime);
  std::cout << "description: " << c.comm.description() << std::endl;
  const std::int64_t mine = c.rank + 1;
  hal::Buffer buffer = c.device.allocate(sizeof(mine));
  buffer.write(0, &mine, sizeof(mine));
  c.comm.all_reduce(buffer, buffer, 1, DType::i64, ReduceOp::sum, c.stream);
  c.comm.broadcast(buffer, buffer, 1, DType::i64, c.world - 1, c.stream);
  std::int64_t sum = 0;
  c.stream.copy_to_host(&sum, buffer, 0, sizeof(sum));
  c.stream.synchronize();
  EXPECT(sum == static_cast<std::int64_t>(c.world) * (c.world + 1) / 2, "all_reduce gave " << sum);
}

// Rank 0 aborts an all_reduce that rank 1 never joins: it ends promptly.
void scenario_abort(const hal::Runtime& runtime) {
  Context c = connect(runtime, std::chrono::seconds(20));
  hal::Buffer buffer = c.device.allocate(64);
  if (c.rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.comm.abort();
    });
    try {
      c.comm.all_reduce(buffer, buffer, 4, DType::f32, ReduceOp::sum, c.stream);
      c.stream.synchronize();
      EXPECT(false, "the aborted all_reduce succeeded");
    } catch (const hal::Error& error) {
      std::cout << error.what() << std::endl;
      EXPECT(error.code() == hal::StatusCode::aborted, "an aborted operation reports aborted");
    }
    aborter.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT(seconds < 5, "abort ended the operation after " << seconds << " s, long before the 20 s timeout");
    c.store->set("abort-scenario-done", "1");
  } else {
    // Takes no part, but stays connected until rank 0 is done.
    c.store->get("abort-scenario-done", std::chrono::seconds(30));
  }
}

// The victim leaves after three all_reduces (destroys its communicator and
// shuts its runtime down); the others' fourth all_reduce must fail within
// its 3 s timeout with an error naming the victim. With the MPI engine that
// error ends the job (MPI_Abort), so the test reads it from the output.
int scenario_leave(const hal::Runtime& runtime, int victim) {
  Context c = connect(runtime, std::chrono::seconds(3));
  hal::Buffer buffer = c.device.allocate(1 << 16);
  for (int round = 0; round < 3; ++round) all_reduce_buffer(c, buffer);
  if (c.rank == victim) {
    std::cout << "rank " << victim << " leaves early" << std::endl;
    c.comm.destroy();
    return 0;
  }
  // The Gloo engine reports here; the MPI engine ended the job before.
  const std::optional<Failure> failure = failing_all_reduce(c, buffer, victim, "left");
  if (!failure) return 1;
  EXPECT(failure->error.find("rank " + std::to_string(victim)) != std::string::npos,
         "the error names the rank that left");
  return failures == 0 ? 0 : 1;
}

// Prints which engine a communicator would run on and checks it against
// HAL_TEST_EXPECT_ENGINE and HAL_TEST_EXPECT_REASON (a part of the reason).
void scenario_engine(const hal::Runtime& runtime) {
  const hal::Device device = runtime.device(test_device());
  const hal::CollectivesEngineChoice choice = hal::collectives_engine(device);
  std::cout << "engine '" << choice.engine << "': " << choice.reason << "\nengines: " << choice.engines << std::endl;
  const char* engine = std::getenv("HAL_TEST_EXPECT_ENGINE");
  const char* reason = std::getenv("HAL_TEST_EXPECT_REASON");
  EXPECT(engine == nullptr || choice.engine == engine, "engine " << choice.engine << ", expected " << engine);
  EXPECT(reason == nullptr || choice.reason.find(reason) != std::string::npos,
         "reason '" << choice.reason << "' lacks '" << reason << "'");
  if (choice.engine.empty()) {
    try {
      const auto launch = hal::Store::from_environment(std::chrono::seconds(20));
      hal::Communicator::create(device, launch.rank, launch.world_size, launch.store);
      EXPECT(false, "a communicator was created although no engine can run");
    } catch (const hal::Error& error) {
      std::cout << error.what() << std::endl;
      EXPECT(error.code() == expected_code(hal::StatusCode::unsupported),
             "creating reports " << hal::to_string(error.code()));
      EXPECT(reason == nullptr || std::string(error.what()).find(reason) != std::string::npos, "the error says why");
    }
  } else {
    Context c = connect(runtime);  // checks HAL_TEST_EXPECT_ENGINE against the description too
    std::cout << "description: " << c.comm.description() << std::endl;
    c.comm.barrier(c.stream);
    c.stream.synchronize();
  }
}

// The victim never creates its communicator (it stays alive until the
// others are done); the others' create must time out naming it.
void scenario_missing(const hal::Runtime& runtime, int victim) {
  const auto launch = hal::Store::from_environment(std::chrono::seconds(20));
  if (launch.rank == victim) {
    launch.store->get("missing-scenario-done", std::chrono::seconds(30));
    return;
  }
  hal::CommunicatorOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  try {
    hal::Communicator::create(runtime.device(test_device()), launch.rank, launch.world_size, launch.store, options);
    EXPECT(false, "a communicator was created although rank " << victim << " never came");
  } catch (const hal::Error& error) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "error after " << seconds << " s: " << error.what() << std::endl;
    EXPECT(error.code() == hal::StatusCode::timeout, "a missing rank is a timeout, got " << hal::to_string(error.code()));
    EXPECT(std::string(error.what()).find("rank(s) " + std::to_string(victim) + " did not arrive") != std::string::npos,
           "the error names the missing rank");
    EXPECT(seconds < 4, "failed within the timeout");
  }
  // Rank 0 hosts the store: it leaves last, the victim with it.
  launch.store->set("missing-scenario/" + std::to_string(launch.rank), "1");
  if (launch.rank != 0) return;
  for (int peer = 1; peer < launch.world_size; ++peer)
    if (peer != victim) launch.store->get("missing-scenario/" + std::to_string(peer), std::chrono::seconds(30));
  launch.store->set("missing-scenario-done", "1");
}

// Two all_reduces, then a third that a fault the test injected (through the
// fake library's environment) makes fail: prints `code=NAME` and the error,
// which the test checks per rank.
void scenario_fault(const hal::Runtime& runtime) {
  Context c = connect(runtime, std::chrono::milliseconds(1500));
  hal::Buffer buffer = c.device.allocate(256);
  for (int round = 0; round < 2; ++round) {
    c.comm.all_reduce(buffer, buffer, 64, DType::f32, ReduceOp::sum, c.stream);
    c.stream.synchronize();
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    c.comm.all_reduce(buffer, buffer, 64, DType::f32, ReduceOp::sum, c.stream);
    c.stream.synchronize();
    EXPECT(false, "the all_reduce succeeded despite the injected fault");
  } catch (const hal::Error& error) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "code=" << hal::to_string(error.code()) << " after " << seconds << " s: " << error.what() << std::endl;
    EXPECT(seconds < 1.5 + 2.0, "failed within the timeout");
    const hal::Status async = c.comm.async_error();
    EXPECT(async.code() == error.code(), "async_error() reports it too: " << async.message());
  }
  try {  // a broken communicator refuses further work at once
    c.comm.all_reduce(buffer, buffer, 64, DType::f32, ReduceOp::sum, c.stream);
    EXPECT(false, "the broken communicator accepted another all_reduce");
  } catch (const hal::Error& error) {
    EXPECT(std::string(error.what()).find("failed before") != std::string::npos, "names the earlier failure");
  }
}

// An old library (the legacy fake, NCCL 2.8): all_to_all, gather and scatter
// from grouped send/recv; bf16 and avg are clear unsupported errors.
void scenario_legacy(const hal::Runtime& runtime) {
  Context c = connect(runtime);
  for (const DType type : {DType::f32, DType::i8, DType::f16})
    for (const std::size_t count : {std::size_t{1}, std::size_t{33}})
      for (const bool in_place : {false, true}) {
        // Everything but avg, which this library lacks.
        const std::size_t size = hal::size_in_bytes(type);
        const int n = c.world, r = c.rank;
        const auto mine = [&](std::size_t i) { return input_of(r, i); };
        std::vector<std::uint8_t> result(count * n * size);
        hal::Buffer send = upload(c, host_block(type, count * n, mine));
        hal::Buffer recv = in_place ? send : c.device.allocate(count * n * size);
        c.comm.all_to_all(send, recv, count, type, c.stream);
        c.stream.copy_to_host(result.data(), recv, 0, result.size());
        c.stream.synchronize();
        compare("legacy all_to_all", type, result, 0, count * n, [&](std::size_t j) {
          return input_of(static_cast<int>(j / count), r * count + j % count);
        });
        hal::Buffer gathered = c.device.allocate(count * n * size);
        const auto own = host_block(type, count, mine);
        gathered.write(r * count * size, own.data(), own.size());
        hal::Buffer single = upload(c, own);
        const bool gather_in_place = in_place && r == 1;
        c.comm.gather(BufferView(gather_in_place ? gathered : single, gather_in_place ? r * count * size : 0), gathered,
                      count, type, 1, c.stream);
        c.stream.copy_to_host(result.data(), gathered, 0, result.size());
        c.stream.synchronize();
        if (r == 1)
          compare("legacy gather", type, result, 0, count * n,
                  [&](std::size_t j) { return input_of(static_cast<int>(j / count), j % count); });
        hal::Buffer whole = upload(c, host_block(type, count * n, mine));
        hal::Buffer part = (in_place && r == 0) ? whole : c.device.allocate(count * size);
        c.comm.scatter(whole, BufferView(part, (in_place && r == 0) ? 0 : 0), count, type, 0, c.stream);
        c.stream.copy_to_host(result.data(), part, 0, count * size);
        c.stream.synchronize();
        compare("legacy scatter", type, result, 0, count, [&](std::size_t i) { return input_of(0, r * count + i); });
      }
  hal::Buffer buffer = c.device.allocate(64);
  for (const auto& [type, op, what] : {std::tuple{DType::bf16, ReduceOp::sum, "bf16"},
                                       std::tuple{DType::f32, ReduceOp::avg, "avg"}}) {
    try {
      c.comm.all_reduce(buffer, buffer, 4, type, op, c.stream);
      EXPECT(false, "the legacy library ran a " << what << " all_reduce");
    } catch (const hal::Error& error) {
      std::cout << error.what() << std::endl;
      EXPECT(error.code() == hal::StatusCode::unsupported, what << " is unsupported");
      EXPECT(std::string(error.what()).find("NCCL 2.10") != std::string::npos, "the error says which release has it");
    }
  }
  // The communicator still works: nothing reached the library.
  c.comm.barrier(c.stream);
  c.stream.synchronize();
}

}  // namespace
// Ranks FIRST..LAST lose the network, or stop, while every rank loops
// all_reduces (the multi-host test cuts their host's link, or sends SIGSTOP,
// once each rank has said "ready"). The others must fail within the 3 s
// timeout plus the second of waiting for reports, naming a cut rank. A rank
// cut off ends too, later: its failure report goes to a store it cannot
// reach, whose answers it waits for (TcpStore's 10 s margin) before giving up.
int scenario_cut(const hal::Runtime& runtime, int first_cut, int last_cut) {
  const auto timeout = std::chrono::seconds(3);
  Context c = connect(runtime, timeout);
  hal::Buffer buffer = c.device.allocate(1 << 16);
  all_reduce_buffer(c, buffer);
  std::cout << "ready" << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto start = std::chrono::steady_clock::now();
  try {
    while (std::chrono::steady_clock::now() < deadline) {
      start = std::chrono::steady_clock::now();
      all_reduce_buffer(c, buffer);
    }
    std::cout << "FAILED: all_reduces went on for 60 s although ranks " << first_cut << ".." << last_cut
              << " lost the network" << std::endl;
    return 1;
  } catch (const hal::Error& error) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "error after " << seconds << " s: " << error.what() << std::endl;
    const std::string text = error.what();
    const bool cut = c.rank >= first_cut && c.rank <= last_cut;
    EXPECT(seconds < (cut ? 3.0 + 25.0 : 3.0 + 2.0), "failed within the timeout (" << seconds << " s)");
    bool names_a_cut_rank = false;
    for (int rank = first_cut; rank <= last_cut; ++rank)
      names_a_cut_rank = names_a_cut_rank || text.find("rank " + std::to_string(rank)) != std::string::npos;
    if (!cut) EXPECT(names_a_cut_rank, "the error names a rank that lost the network");
  }
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: collectives_worker ops|split|p2p|kill VICTIM|leave VICTIM|mismatch|shm_mismatch|smoke|abort|"
                 "engine|missing VICTIM|fault|legacy|cut FIRST LAST"
              << std::endl;
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    const hal::Runtime runtime = hal::Runtime::create();
    if (scenario == "ops") scenario_ops(runtime);
    else if (scenario == "split") scenario_split(runtime);
    else if (scenario == "p2p") scenario_p2p(runtime);
    else if (scenario == "kill" && argc > 2) return scenario_kill(runtime, std::atoi(argv[2]));
    else if (scenario == "mismatch") scenario_mismatch(runtime);
    else if (scenario == "shm_mismatch")
      scenario_shm_mismatch(runtime);
    else if (scenario == "smoke")
      scenario_smoke(runtime);
    else if (scenario == "abort") scenario_abort(runtime);
    else if (scenario == "leave" && argc > 2) return scenario_leave(runtime, std::atoi(argv[2]));
    else if (scenario == "engine") scenario_engine(runtime);
    else if (scenario == "missing" && argc > 2) scenario_missing(runtime, std::atoi(argv[2]));
    else if (scenario == "fault") scenario_fault(runtime);
    else if (scenario == "cut" && argc > 3) return scenario_cut(runtime, std::atoi(argv[2]), std::atoi(argv[3]));
    else if (scenario == "legacy") scenario_legacy(runtime);
    else {
      std::cerr << "unknown scenario '" << scenario << "'" << std::endl;
      return 2;
    }
  } catch (const std::exception& error) {
    std::cout << "FAILED with an exception: " << error.what() << std::endl;
    return 1;
  }
  if (failures != 0) std::cout << failures << " checks failed" << std::endl;
  return failures == 0 ? 0 : 1;
}
