// halbench coll: collective bandwidth in nccl-tests' conventions (flags,
// columns, bus bandwidth), with the same sizes through Gloo and through MPI
// (libmpi via shims/mpi) called directly beside it, taking turns round by
// round, so hal's overhead reads as a ratio. Run under a launcher:
// `halrun -n 4 halbench coll -b 8 -e 64M -f 2`, or
// `mpirun -np 2 halbench coll --engine mpi -b 1M -e 16M`.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks.hpp"
#include "common.hpp"
#include "dtype_codes.hpp"
#include "gloo_listen.hpp"
#include "hal/collectives.hpp"
#include "mpi_library.hpp"

namespace halbench {
namespace {

namespace mpi = hal::shims::mpi;

constexpr std::uint64_t default_iterations = 20;

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce };
constexpr std::array<std::string_view, 6> collective_names{"all_reduce", "all_gather", "reduce_scatter",
                                                           "all_to_all", "broadcast",  "reduce"};

std::string_view name_of(Collective collective) { return collective_names[static_cast<std::size_t>(collective)]; }

bool reduces(Collective collective) {
  return collective == Collective::all_reduce || collective == Collective::reduce_scatter ||
         collective == Collective::reduce;
}
bool has_root(Collective collective) { return collective == Collective::broadcast || collective == Collective::reduce; }
// The large buffer holds one block per rank: each rank sends or receives one block of it.
bool blocked_by_rank(Collective collective) {
  return collective == Collective::all_gather || collective == Collective::reduce_scatter ||
         collective == Collective::all_to_all;
}

// ---- options ---------------------------------------------------------------------

struct CollOptions {
  CommonOptions common;
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = 64ull << 20;
  double step_factor = 2;
  std::uint64_t warmups = 5;
  bool check = true;
  Collective collective = Collective::all_reduce;
  hal::ReduceOp op = hal::ReduceOp::sum;
  hal::DType type = hal::DType::f32;
  std::uint64_t root = 0;
  bool no_gloo = false;
  bool no_mpi = false;
  std::string engine;  // "" = HAL_COLL_ENGINE / config / auto

  std::uint64_t iterations() const { return common.iterations.value_or(default_iterations); }
  // The columns' redop and root: "none" and -1 where the collective has none.
  std::string redop_text() const { return reduces(collective) ? std::string(hal::to_string(op)) : "none"; }
  int root_column() const { return has_root(collective) ? static_cast<int>(root) : -1; }
};

// hal's parsers already name the value and what is allowed; a bad value is
// still a usage error (exit 2), not a failure while measuring.
template <typename Parse>
auto parse_with_hal(std::string_view flag, Parse parse) {
  try {
    return parse();
  } catch (const hal::Error& error) {
    throw UsageError(std::string(flag) + ": " + error.status().message());
  }
}

Collective parse_collective(std::string_view text) {
  for (std::size_t i = 0; i < collective_names.size(); ++i)
    if (collective_names[i] == text) return static_cast<Collective>(i);
  throw UsageError("--collective: '" + std::string(text) +
                   "' is not a collective; expected all_reduce, all_gather, reduce_scatter, all_to_all, "
                   "broadcast or reduce");
}

constexpr std::string_view description =
    "Collective bandwidth in nccl-tests' columns: for each size, hal's collective out of\n"
    "place and in place (time, algbw, busbw, #wrong elements summed over ranks), then the\n"
    "same sizes through Gloo and MPI called directly and hal's in-place busbw / theirs.\n"
    "Start it with a launcher (halrun, torchrun, mpirun or srun); rank 0 prints. Sizes\n"
    "take plain bytes or K, M, G (powers of 1024). The short flags are nccl-tests'.\n";

CollOptions parse_options(std::span<const std::string_view> arguments, bool& help_shown) {
  CollOptions options;
  OptionParser parser("halbench coll", std::string(description));
  add_common_options(parser, options.common,
                     "timed iterations per size and placement (default " + std::to_string(default_iterations) + ")",
                     "device (default host:0); a backend name alone (cuda) puts each rank on\n"
                     "its own device, <backend>:<local rank>");
  parser.add_alias("-n", "--iters");
  parser.add_value("--minbytes", "SIZE", "smallest size (default 8)",
                   [&](std::string_view text) { options.min_bytes = parse_byte_size("--minbytes", text, 0); });
  parser.add_alias("-b", "--minbytes");
  parser.add_value("--maxbytes", "SIZE", "largest size (default 64M)",
                   [&](std::string_view text) { options.max_bytes = parse_byte_size("--maxbytes", text, 0); });
  parser.add_alias("-e", "--maxbytes");
  parser.add_value("--stepfactor", "F", "multiply the size by F each step (default 2)", [&](std::string_view text) {
    constexpr std::string_view expected = "a step factor; expected a number above 1";
    options.step_factor = parse_real("--stepfactor", text, expected);
    if (!(options.step_factor > 1))
      throw UsageError("--stepfactor: '" + std::string(text) + "' is not " + std::string(expected));
  });
  parser.add_alias("-f", "--stepfactor");
  parser.add_value("--warmup_iters", "N", "untimed iterations first (default 5)",
                   [&](std::string_view text) { options.warmups = parse_count("--warmup_iters", text, 0); });
  parser.add_alias("-w", "--warmup_iters");
  parser.add_value("--check", "0|1", "check results and count #wrong (default 1)",
                   [&](std::string_view text) { options.check = parse_count("--check", text, 0) != 0; });
  parser.add_alias("-c", "--check");
  parser.add_value("--collective", "NAME",
                   "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast or reduce\n(default all_reduce)",
                   [&](std::string_view text) { options.collective = parse_collective(text); });
  parser.add_alias("-C", "--collective");
  parser.add_value("--op", "OP", "sum, prod, min, max or avg (default sum)", [&](std::string_view text) {
    options.op = parse_with_hal("--op", [&] { return hal::parse_reduce_op(text); });
  });
  parser.add_alias("-o", "--op");
  parser.add_value("--datatype", "TYPE", "f32, f64, f16, bf16, i8, u8, i32 or i64 (default f32)",
                   [&](std::string_view text) {
                     options.type = parse_with_hal("--datatype", [&] { return hal::require_dtype(text); });
                   });
  parser.add_alias("-d", "--datatype");
  parser.add_value("--root", "N", "root of broadcast and reduce (default 0)",
                   [&](std::string_view text) { options.root = parse_count("--root", text, 0); });
  parser.add_alias("-r", "--root");
  parser.add_value(
      "--engine", "ENGINE",
      "host collectives engine: auto, gloo, mpi or shm (default: HAL_COLL_ENGINE,\n"
      "then the config, then auto)",
      [&](std::string_view text) {
        if (text != "auto" && text != "gloo" && text != "mpi" && text != "shm")
          throw UsageError("--engine: '" + std::string(text) + "' is not an engine; expected auto, gloo, mpi or shm");
        options.engine = std::string(text);
      });
  parser.add_switch("--no-gloo", "skip the direct Gloo baseline", options.no_gloo);
  parser.add_switch("--no-mpi", "skip the direct MPI baseline (run under mpirun or srun to get it)", options.no_mpi);
  help_shown = !parser.parse(arguments);
  if (options.min_bytes > options.max_bytes)
    throw UsageError("--minbytes " + std::to_string(options.min_bytes) + " is larger than --maxbytes " +
                     std::to_string(options.max_bytes) + "; expected the smallest size first");
  return options;
}

// ---- setup -------------------------------------------------------------------------

// What each rank holds for the whole run.
struct Job {
  hal::Runtime runtime;
  hal::Store::FromEnvironment launcher;
  hal::Device device;
  hal::Communicator comm;
  hal::Stream stream;
  int rank() const { return launcher.rank; }
  int ranks() const { return launcher.world_size; }
};

// host:0 unless --device says otherwise (not the first accelerator as the
// other benchmarks: every rank would pick the same GPU, which NCCL refuses).
// A backend name alone ("cuda") gives each rank its own device.
std::string device_id_of_rank(const std::optional<std::string>& device_id, int local_rank) {
  const std::string id = device_id.value_or("host:0");
  return id.find(':') == std::string::npos ? id + ":" + std::to_string(local_rank) : id;
}

Job join(const CollOptions& options) {
  const hal::Runtime runtime = hal::Runtime::create();
  hal::Store::FromEnvironment launcher = hal::Store::from_environment();
  const hal::Device device = select_device(runtime, device_id_of_rank(options.common.device_id, launcher.local_rank));
  if (options.root >= static_cast<std::uint64_t>(launcher.world_size))
    throw UsageError("--root: " + std::to_string(options.root) + " is not a rank; expected 0 to " +
                     std::to_string(launcher.world_size - 1) + " (world size " + std::to_string(launcher.world_size) +
                     ")");
  hal::CommunicatorOptions communicator_options;
  communicator_options.engine = options.engine;
  hal::Communicator comm =
      hal::Communicator::create(device, launcher.rank, launcher.world_size, launcher.store, communicator_options);
  const hal::Stream stream = device.create_stream();
  return {runtime, std::move(launcher), device, std::move(comm), stream};
}

// ---- direct baselines: setup -------------------------------------------------------------

// A library called directly in the same processes, or why it is not measured.
template <typename Handle>
struct Baseline {
  std::shared_ptr<Handle> handle;
  std::string not_measured;
};

// The type MPI reduces natively, or nullptr (f16/bf16 have none).
mpi::Datatype mpi_type_of(const mpi::Library& library, hal::DType type) {
  switch (type) {
    case hal::DType::f32: return library.float32;
    case hal::DType::f64: return library.float64;
    case hal::DType::i8: return library.int8;
    case hal::DType::u8: return library.uint8;
    case hal::DType::i32: return library.int32;
    case hal::DType::i64: return library.int64;
    case hal::DType::f16:
    case hal::DType::bf16: break;
  }
  return nullptr;
}

mpi::Op mpi_op_of(const mpi::Library& library, hal::ReduceOp op) {
  switch (op) {
    case hal::ReduceOp::sum: return library.sum;
    case hal::ReduceOp::prod: return library.prod;
    case hal::ReduceOp::min: return library.min;
    case hal::ReduceOp::max: return library.max;
    case hal::ReduceOp::avg: break;
  }
  return nullptr;
}

// MPI only when an MPI launcher started the ranks, so that MPI's world is hal's.
Baseline<mpi::Session> open_mpi(const CollOptions& options, const Job& job) {
  if (options.no_mpi) return {nullptr, "off (--no-mpi)"};
  if (hal::abi::environment("OMPI_COMM_WORLD_SIZE") == nullptr && hal::abi::environment("SLURM_PROCID") == nullptr)
    return {nullptr, "only under mpirun or srun"};
  try {
    mpi::use_library_file(
        backend_setting(job.runtime, "host", "mpi_library").value);  // the library hal's MPI engine uses
    std::shared_ptr<mpi::Session> session = mpi::Session::acquire();
    if (session->world_size() != job.ranks() || session->world_rank() != job.rank())
      return {nullptr, "MPI's world (rank " + std::to_string(session->world_rank()) + " of " +
                           std::to_string(session->world_size()) + ") is not hal's"};
    if (mpi_type_of(session->library(), options.type) == nullptr ||
        (reduces(options.collective) && mpi_op_of(session->library(), options.op) == nullptr))
      return {nullptr, "MPI has no native " + std::string(hal::to_string(options.type)) + " or avg"};
    return {std::move(session), ""};
  } catch (const std::exception& error) {
    return {nullptr, error.what()};
  }
}

// Gloo's rendezvous over the launcher's hal::Store.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(hal::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_.get(prefix + key, std::chrono::seconds(60));
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::seconds(60)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& key : keys) prefixed.push_back(prefix + key);
    store_.wait(prefixed, timeout);
  }

 private:
  static constexpr char prefix[] = "halbench/gloo/";
  hal::Store& store_;
};

// Gloo's API is measured with f32 sums only, for the collectives it has.
Baseline<gloo::Context> open_gloo(const CollOptions& options, const Job& job) {
  if (options.no_gloo) return {nullptr, "off (--no-gloo)"};
  if (options.collective == Collective::reduce_scatter || options.collective == Collective::reduce ||
      options.type != hal::DType::f32 || options.op != hal::ReduceOp::sum)
    return {nullptr, "only for all_reduce, all_gather, all_to_all and broadcast of f32 with sum"};
  // Listen where hal's Gloo engine does, so the baseline runs across hosts too.
  const hal::abi::GlooListen listen = hal::abi::gloo_listen();
  gloo::transport::tcp::attr attributes;
  if (!listen.interface_name.empty())
    attributes.iface = listen.interface_name;
  else
    attributes.hostname = listen.host_name;
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attributes);
  auto context = std::make_shared<gloo::rendezvous::Context>(job.rank(), job.ranks());
  GlooStore store(*job.launcher.store);
  context->connectFullMesh(store, device);
  return {std::move(context), ""};
}

// ---- the size sweep ----------------------------------------------------------------------

// One size of the sweep.
struct Shape {
  std::uint64_t size = 0;      // bytes of the largest buffer
  std::uint64_t count = 0;     // its elements
  std::uint64_t per_rank = 0;  // elements of one rank's block (count unless blocked by rank)
};

// nccl-tests' steps: times the factor (at least one byte more) from -b while
// not above -e. Each size is rounded down to whole elements per rank.
std::vector<Shape> sweep(const CollOptions& options, int ranks) {
  const std::uint64_t element = hal::size_in_bytes(options.type);
  const std::uint64_t blocks = blocked_by_rank(options.collective) ? static_cast<std::uint64_t>(ranks) : 1;
  std::vector<Shape> shapes;
  const auto max_bytes = static_cast<double>(options.max_bytes);
  for (auto step = static_cast<double>(options.min_bytes); step <= max_bytes;
       step = std::max(step * options.step_factor, step + 1)) {
    const std::uint64_t size = static_cast<std::uint64_t>(step) / (element * blocks) * (element * blocks);
    shapes.push_back({size, size / element, size / element / blocks});
    if (step >= max_bytes) break;
  }
  return shapes;
}

// ---- per-size measurement ------------------------------------------------------------------

struct Placement {  // hal's figures out of place or in place
  double time_us = 0, algbw = 0, busbw = 0;
  std::uint64_t wrong = 0;
};
struct Direct {  // a direct baseline's figures
  double time_us = 0, busbw = 0;
  double ratio = 0;  // median over the rounds of hal's in-place busbw / this baseline's, paired by round
};
struct Row {
  Shape shape;
  Placement out_of_place, in_place;
  std::optional<Direct> gloo, mpi;
};

// nccl-tests' bus bandwidth factors: what each rank's link carries relative
// to the algorithm bandwidth of an optimal ring.
double bus_factor(Collective collective, int ranks) {
  const double n = ranks;
  switch (collective) {
    case Collective::all_reduce: return 2 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (n - 1) / n;
    case Collective::broadcast:
    case Collective::reduce: return 1;
  }
  return 1;
}

double algorithm_gbps(const Shape& shape, double seconds) {
  return seconds > 0 ? static_cast<double>(shape.size) / seconds / 1e9 : 0;
}

// One contender of a shape: hal in or out of place, or a direct baseline.
// line_up makes every rank start together (no clock starts while another
// rank still runs something else); finish waits for work still queued.
struct Timed {
  std::function<void()> call, line_up, finish;
};

// Rounds the timed calls are split into: the contenders take turns round by
// round (hal, hal, gloo, mpi, hal, ...), so that the machine's noise lands
// on all of them alike and each ratio pairs calls made side by side.
constexpr std::uint64_t kRounds = 5;

// Per contender, the seconds per call of each round, after untimed warm-up
// calls of each. Every rank runs the contenders in the same order.
std::vector<std::vector<double>> take_turns(const CollOptions& options, const std::vector<const Timed*>& contenders) {
  for (const Timed* timed : contenders) {
    for (std::uint64_t i = 0; i < options.warmups; ++i) timed->call();
    timed->finish();
  }
  const std::uint64_t rounds = std::min(kRounds, std::max<std::uint64_t>(options.iterations(), 1));
  const std::uint64_t calls = std::max<std::uint64_t>(options.iterations() / rounds, 1);
  std::vector<std::vector<double>> seconds(contenders.size());
  for (std::uint64_t round = 0; round < rounds; ++round) {
    for (std::size_t index = 0; index < contenders.size(); ++index) {
      const Timed& timed = *contenders[index];
      timed.line_up();
      const Clock::time_point start = Clock::now();
      for (std::uint64_t i = 0; i < calls; ++i) timed.call();
      timed.finish();
      seconds[index].push_back(seconds_between(start, Clock::now()) / static_cast<double>(calls));
    }
  }
  return seconds;
}

// Enqueues hal's collective once. In place, all_gather sends from and
// reduce_scatter receives into this rank's own block of the one buffer.
void enqueue_collective(const Job& job, const CollOptions& options, const Shape& shape, const hal::Buffer& send,
                        const hal::Buffer& recv, bool in_place) {
  const hal::DType type = options.type;
  const int root = static_cast<int>(options.root);
  const std::uint64_t own_block =
      in_place ? static_cast<std::uint64_t>(job.rank()) * shape.per_rank * hal::size_in_bytes(type) : 0;
  switch (options.collective) {
    case Collective::all_reduce: job.comm.all_reduce(send, recv, shape.count, type, options.op, job.stream); break;
    case Collective::all_gather:
      job.comm.all_gather(hal::BufferView(send, own_block), recv, shape.per_rank, type, job.stream);
      break;
    case Collective::reduce_scatter:
      job.comm.reduce_scatter(send, hal::BufferView(recv, own_block), shape.per_rank, type, options.op, job.stream);
      break;
    case Collective::all_to_all: job.comm.all_to_all(send, recv, shape.per_rank, type, job.stream); break;
    case Collective::broadcast: job.comm.broadcast(send, recv, shape.count, type, root, job.stream); break;
    case Collective::reduce: job.comm.reduce(send, recv, shape.count, type, options.op, root, job.stream); break;
  }
}

// ---- verification ------------------------------------------------------------------------

// The value every element of a rank's input holds. Small integers: exact in every type.
double input_value(std::uint64_t rank) { return static_cast<double>(rank) + 1; }

double reduced_value(const CollOptions& options, int ranks) {
  const double n = ranks;
  switch (options.op) {
    case hal::ReduceOp::sum: return n * (n + 1) / 2;
    case hal::ReduceOp::prod: {
      double product = 1;
      for (int r = 1; r <= ranks; ++r) product *= r;
      return product;
    }
    case hal::ReduceOp::min: return 1;
    case hal::ReduceOp::max: return n;
    case hal::ReduceOp::avg: {
      const double sum = n * (n + 1) / 2;
      const bool integer = options.type == hal::DType::i8 || options.type == hal::DType::u8 ||
                           options.type == hal::DType::i32 || options.type == hal::DType::i64;
      return integer ? static_cast<double>(static_cast<long long>(sum) / ranks) : sum / n;  // integers truncate
    }
  }
  return 0;
}

// What element i of block `block` of the result must be.
double expected_value(const CollOptions& options, int ranks, std::uint64_t block) {
  switch (options.collective) {
    case Collective::all_reduce:
    case Collective::reduce_scatter:
    case Collective::reduce: return reduced_value(options, ranks);
    case Collective::all_gather:
    case Collective::all_to_all: return input_value(block);
    case Collective::broadcast: return input_value(options.root);
  }
  return 0;
}

void store_element(hal::DType type, void* base, std::size_t i, double value) {
  switch (type) {
    case hal::DType::f32: static_cast<float*>(base)[i] = static_cast<float>(value); break;
    case hal::DType::f64: static_cast<double*>(base)[i] = value; break;
    case hal::DType::f16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(static_cast<float>(value)); break;
    case hal::DType::bf16:
      static_cast<std::uint16_t*>(base)[i] = hal::abi::float_to_bf16_bits(static_cast<float>(value));
      break;
    case hal::DType::i8:
      static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(static_cast<long long>(value));
      break;
    case hal::DType::u8:
      static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(static_cast<long long>(value));
      break;
    case hal::DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(value); break;
    case hal::DType::i64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(value); break;
  }
}

// Compared as stored bytes, so that the check needs no arithmetic per type.
bool same_element(hal::DType type, const void* actual, std::size_t i, double expected) {
  std::int64_t reference = 0;
  store_element(type, &reference, 0, expected);
  const std::size_t size = hal::size_in_bytes(type);
  return std::memcmp(static_cast<const std::uint8_t*>(actual) + i * size, &reference, size) == 0;
}

// The timed calls leave whatever they computed, so the inputs are filled with
// known values and the collective runs once more; returns the result elements
// that differ from the expected ones, summed over every rank.
std::uint64_t count_wrong(const Job& job, const CollOptions& options, const Shape& shape, const hal::Buffer& send,
                          const hal::Buffer& recv, bool in_place) {
  std::vector<std::uint8_t> host(send.size());
  for (std::uint64_t i = 0; i < shape.count; ++i)
    store_element(options.type, host.data(), i, input_value(static_cast<std::uint64_t>(job.rank())));
  send.write(0, host.data(), host.size());
  enqueue_collective(job, options, shape, send, recv, in_place);
  job.stream.synchronize();
  recv.read(0, host.data(), host.size());

  std::uint64_t wrong = 0;
  // reduce leaves a result on the root only; reduce_scatter one block per rank.
  const bool has_result = options.collective != Collective::reduce || job.rank() == static_cast<int>(options.root);
  const bool scattered = options.collective == Collective::reduce_scatter;
  const std::uint64_t result_elements = scattered ? shape.per_rank : shape.count;
  const std::uint64_t result_start =
      scattered && in_place ? static_cast<std::uint64_t>(job.rank()) * shape.per_rank : 0;
  if (has_result)
    for (std::uint64_t i = 0; i < result_elements; ++i) {
      const std::uint64_t block = shape.per_rank > 0 ? i / shape.per_rank : 0;
      if (!same_element(options.type, host.data(), result_start + i, expected_value(options, job.ranks(), block)))
        ++wrong;
    }

  const hal::Buffer total = job.device.allocate(sizeof(std::int64_t));
  std::int64_t sum = static_cast<std::int64_t>(wrong);
  total.write(0, &sum, sizeof(sum));
  job.comm.all_reduce(total, total, 1, hal::DType::i64, hal::ReduceOp::sum, job.stream);
  job.stream.synchronize();
  total.read(0, &sum, sizeof(sum));
  return static_cast<std::uint64_t>(sum);
}

// hal's buffers for one placement.
struct HalBuffers {
  hal::Buffer send, recv;
  bool in_place;
};

HalBuffers hal_buffers(const Job& job, const Shape& shape, bool in_place) {
  const std::uint64_t bytes = std::max<std::uint64_t>(shape.size, 1);
  const hal::Buffer send = job.device.allocate(bytes);
  return {send, in_place ? send : job.device.allocate(bytes), in_place};
}

// hal's collective on those buffers, as a contender.
Timed hal_contender(const Job& job, const CollOptions& options, const Shape& shape, const HalBuffers& buffers) {
  return {[&job, &options, &shape, &buffers] {
            enqueue_collective(job, options, shape, buffers.send, buffers.recv, buffers.in_place);
          },
          [&job] {
            job.comm.barrier(job.stream);
            job.stream.synchronize();
          },
          [&job] { job.stream.synchronize(); }};
}

// hal's figures for one placement from its rounds, then the check.
Placement hal_placement(const Job& job, const CollOptions& options, const Shape& shape, const HalBuffers& buffers,
                        const std::vector<double>& round_seconds) {
  const double seconds = median(round_seconds);
  Placement placement;
  placement.time_us = seconds * 1e6;
  placement.algbw = algorithm_gbps(shape, seconds);
  placement.busbw = placement.algbw * bus_factor(options.collective, job.ranks());
  if (options.check) placement.wrong = count_wrong(job, options, shape, buffers.send, buffers.recv, buffers.in_place);
  return placement;
}

// ---- per-size measurement: direct baselines ----------------------------------------------

// A baseline's figures from its rounds, and hal's in-place speed over it
// paired round by round.
Direct direct_figures(const CollOptions& options, const Shape& shape, int ranks,
                      const std::vector<double>& round_seconds, const std::vector<double>& hal_in_place_seconds) {
  const double seconds = median(round_seconds);
  std::vector<double> ratios;
  for (std::size_t round = 0; round < round_seconds.size(); ++round)
    ratios.push_back(round_seconds[round] / hal_in_place_seconds[round]);
  return {seconds * 1e6, algorithm_gbps(shape, seconds) * bus_factor(options.collective, ranks), median(ratios)};
}

// Gloo directly, in place on host memory: the floor hal's host backend builds on.
std::optional<Timed> gloo_contender(const Baseline<gloo::Context>& baseline, const Job& job, const CollOptions& options,
                                    const Shape& shape) {
  if (!baseline.handle || shape.count == 0) return std::nullopt;
  const std::shared_ptr<gloo::Context> context = baseline.handle;
  std::vector<float> data(shape.count, static_cast<float>(input_value(static_cast<std::uint64_t>(job.rank()))));
  std::vector<float> output(blocked_by_rank(options.collective) ? shape.count : 0);
  std::uint32_t tag = 0;
  const auto call = [&options, &shape, context, data = std::move(data), output = std::move(output), tag]() mutable {
    switch (options.collective) {
      case Collective::all_reduce: {
        gloo::AllreduceOptions o(context);
        o.setOutput(data.data(), shape.count);
        o.setReduceFunction([](void* c, const void* a, const void* b, size_t n) {
          auto* out = static_cast<float*>(c);
          const auto* x = static_cast<const float*>(a);
          const auto* y = static_cast<const float*>(b);
          for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
        });
        o.setTag(tag++);
        gloo::allreduce(o);
      } break;
      case Collective::all_gather: {
        gloo::AllgatherOptions o(context);
        o.setInput(data.data(), shape.per_rank);
        o.setOutput(output.data(), shape.count);
        o.setTag(tag++);
        gloo::allgather(o);
      } break;
      case Collective::all_to_all: {
        gloo::AlltoallOptions o(context);
        o.setInput(data.data(), shape.count);
        o.setOutput(output.data(), shape.count);
        o.setTag(tag++);
        gloo::alltoall(o);
      } break;
      case Collective::broadcast: {
        gloo::BroadcastOptions o(context);
        o.setOutput(data.data(), shape.count);
        o.setRoot(static_cast<int>(options.root));
        o.setTag(tag++);
        gloo::broadcast(o);
      } break;
      case Collective::reduce_scatter:
      case Collective::reduce: break;  // open_gloo left these out
    }
  };
  return Timed{call,
               [&job] {
                 job.comm.barrier(job.stream);
                 job.stream.synchronize();
               },
               [] {}};
}

// MPI directly on MPI_COMM_WORLD, in place where MPI allows it.
std::optional<Timed> mpi_contender(const Baseline<mpi::Session>& baseline, const Job& job, const CollOptions& options,
                                   const Shape& shape) {
  if (!baseline.handle || shape.count == 0 || shape.count > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    return std::nullopt;
  const mpi::Library& library = baseline.handle->library();
  const mpi::Datatype type = mpi_type_of(library, options.type);
  const mpi::Op op = reduces(options.collective) ? mpi_op_of(library, options.op) : nullptr;
  const std::uint64_t element = hal::size_in_bytes(options.type);
  std::vector<std::uint8_t> data(shape.count * element), output(blocked_by_rank(options.collective) ? data.size() : 0);
  for (std::uint64_t i = 0; i < shape.count; ++i)
    store_element(options.type, data.data(), i, input_value(static_cast<std::uint64_t>(job.rank())));
  const int n = static_cast<int>(shape.count), block = static_cast<int>(shape.per_rank);
  const int root = static_cast<int>(options.root);
  const auto world = library.comm_world;
  const int rank = job.rank();
  const auto call = [&options, &library, type, op, data = std::move(data), output = std::move(output), n, block, root,
                     world, rank]() mutable {
    switch (options.collective) {
      case Collective::all_reduce: library.Allreduce(mpi::in_place, data.data(), n, type, op, world); break;
      case Collective::all_gather:
        library.Allgather(data.data(), block, type, output.data(), block, type, world);
        break;
      case Collective::reduce_scatter:
        library.Reduce_scatter_block(data.data(), output.data(), block, type, op, world);
        break;
      case Collective::all_to_all: library.Alltoall(data.data(), block, type, output.data(), block, type, world); break;
      case Collective::broadcast: library.Bcast(data.data(), n, type, root, world); break;
      case Collective::reduce:
        library.Reduce(rank == root ? mpi::in_place : data.data(), data.data(), n, type, op, root, world);
        break;
    }
  };
  return Timed{call, [&library, world] { library.Barrier(world); }, [] {}};
}

// Every contender of a shape, taking turns (take_turns), then hal's checks.
Row measure_shape(const Job& job, const CollOptions& options, const Shape& shape,
                  const Baseline<gloo::Context>& gloo_baseline, const Baseline<mpi::Session>& mpi_baseline) {
  const HalBuffers out_of_place = hal_buffers(job, shape, false);
  const HalBuffers in_place = hal_buffers(job, shape, true);
  const Timed hal_out_of_place = hal_contender(job, options, shape, out_of_place);
  const Timed hal_in_place = hal_contender(job, options, shape, in_place);
  const std::optional<Timed> gloo = gloo_contender(gloo_baseline, job, options, shape);
  const std::optional<Timed> mpi = mpi_contender(mpi_baseline, job, options, shape);
  std::vector<const Timed*> contenders{&hal_out_of_place, &hal_in_place};
  if (gloo) contenders.push_back(&*gloo);
  if (mpi) contenders.push_back(&*mpi);
  const std::vector<std::vector<double>> seconds = take_turns(options, contenders);
  Row row{shape, hal_placement(job, options, shape, out_of_place, seconds[0]),
          hal_placement(job, options, shape, in_place, seconds[1]), std::nullopt, std::nullopt};
  std::size_t next = 2;
  if (gloo) row.gloo = direct_figures(options, shape, job.ranks(), seconds[next++], seconds[1]);
  if (mpi) row.mpi = direct_figures(options, shape, job.ranks(), seconds[next++], seconds[1]);
  return row;
}

// ---- output -----------------------------------------------------------------------------

std::uint64_t total_wrong(const std::vector<Row>& rows) {
  std::uint64_t wrong = 0;
  for (const Row& row : rows) wrong += row.out_of_place.wrong + row.in_place.wrong;
  return wrong;
}

// The yardstick of a host collective's busbw: std::memcpy of the largest
// size on one thread of every rank at once, as the ranks run a collective.
std::optional<MemcpyBandwidth> measure_memcpy(const Job& job, const std::vector<Row>& rows) {
  if (job.device.info().type != hal::DeviceType::cpu || rows.empty()) return std::nullopt;
  job.comm.barrier(job.stream);
  job.stream.synchronize();
  return measure_host_memcpy(std::max<std::uint64_t>(rows.back().shape.size, 1), 1, 5);
}

// hal's in-place busbw at the largest size over the memcpy bandwidth.
std::optional<double> busbw_over_memcpy(const std::vector<Row>& rows, const std::optional<MemcpyBandwidth>& memcpy) {
  if (!memcpy || rows.empty() || memcpy->gbps <= 0) return std::nullopt;
  return rows.back().in_place.busbw / memcpy->gbps;
}

// nccl-tests' layout: fixed-width columns under a placement header, units on a second line.
void print_table(const Job& job, const CollOptions& options, const std::vector<Row>& rows, const std::string& gloo_note,
                 const std::string& mpi_note, const std::optional<MemcpyBandwidth>& memcpy) {
  print_heading("coll", job.device);
  std::printf("# %s, %d ranks, %llu iterations after %llu warmups, busbw factor %.3f\n",
              std::string(name_of(options.collective)).c_str(), job.ranks(),
              static_cast<unsigned long long>(options.iterations()), static_cast<unsigned long long>(options.warmups),
              bus_factor(options.collective, job.ranks()));
  std::printf("# engine: %s\n", job.comm.description().c_str());
  std::printf("#%60s%38s%27s%27s\n", "out-of-place", "in-place", "gloo direct", "mpi direct");
  const char* header = "%12s %12s %6s %6s %5s %10s %8s %8s %7s %10s %8s %8s %7s %10s %8s %6s %10s %8s %6s\n";
  std::printf(header, "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong", "time", "busbw", "ratio", "time", "busbw", "ratio");
  std::printf(header, "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
              "(us)", "(GB/s)", "", "(us)", "(GB/s)", "");
  const std::string type_text(hal::to_string(options.type));
  for (const Row& row : rows) {
    std::printf("%12llu %12llu %6s %6s %5d", static_cast<unsigned long long>(row.shape.size),
                static_cast<unsigned long long>(row.shape.count), type_text.c_str(), options.redop_text().c_str(),
                options.root_column());
    for (const Placement& placement : {row.out_of_place, row.in_place})
      std::printf(" %10.1f %8.3f %8.3f %7llu", placement.time_us, placement.algbw, placement.busbw,
                  static_cast<unsigned long long>(placement.wrong));
    for (const std::optional<Direct>& direct : {row.gloo, row.mpi}) {
      if (direct)
        std::printf(" %10.1f %8.3f %6.3f", direct->time_us, direct->busbw, direct->ratio);
      else
        std::printf(" %10s %8s %6s", "-", "-", "-");
    }
    std::printf("\n");
  }
  std::printf("# #wrong total: %llu%s\n", static_cast<unsigned long long>(total_wrong(rows)),
              options.check ? "" : " (checks off: -c 0)");
  if (!gloo_note.empty()) std::printf("# gloo direct: %s\n", gloo_note.c_str());
  if (!mpi_note.empty()) std::printf("# mpi direct: %s\n", mpi_note.c_str());
  if (memcpy)
    std::printf(
        "# memcpy: %.3f GB/s (one thread on each of the %d ranks at once, %s each, best of %d); in-place busbw "
        "at %s / memcpy = %.3f\n",
        memcpy->gbps, job.ranks(), format_size(memcpy->bytes).c_str(), memcpy->repeats,
        format_size(rows.empty() ? 0 : rows.back().shape.size).c_str(), busbw_over_memcpy(rows, memcpy).value_or(0.0));
}

Json placement_json(const Placement& placement) {
  return {{"time_us", placement.time_us},
          {"algbw", placement.algbw},
          {"busbw", placement.busbw},
          {"wrong", placement.wrong}};
}

Json direct_json(const std::optional<Direct>& direct) {
  if (!direct) return nullptr;
  return {{"time_us", direct->time_us}, {"busbw", direct->busbw}, {"ratio", direct->ratio}};
}

Json to_json(const Job& job, const CollOptions& options, const std::vector<Row>& rows, const std::string& gloo_note,
             const std::string& mpi_note, const std::optional<MemcpyBandwidth>& memcpy) {
  const std::string type_text(hal::to_string(options.type));
  Json parameters = {{"collective", name_of(options.collective)},
                     {"ranks", job.ranks()},
                     {"min_bytes", options.min_bytes},
                     {"max_bytes", options.max_bytes},
                     {"step_factor", options.step_factor},
                     {"iterations", options.iterations()},
                     {"warmup_iterations", options.warmups},
                     {"check", options.check},
                     {"type", type_text},
                     {"redop", options.redop_text()},
                     {"root", options.root_column()},
                     {"bus_factor", bus_factor(options.collective, job.ranks())},
                     {"engine", job.comm.description()},
                     {"clock", "steady_clock (wall), rank 0's"}};
  Json results = Json::array();
  for (const Row& row : rows)
    results.push_back({{"size", row.shape.size},
                       {"count", row.shape.count},
                       {"type", type_text},
                       {"redop", options.redop_text()},
                       {"root", options.root_column()},
                       {"out_of_place", placement_json(row.out_of_place)},
                       {"in_place", placement_json(row.in_place)},
                       {"gloo", direct_json(row.gloo)},
                       {"mpi", direct_json(row.mpi)}});
  Json document = make_document("coll", job.runtime, job.device, std::move(parameters), std::move(results));
  Json skipped = Json::array();
  for (const auto& [baseline, reason] : {std::pair{"gloo", gloo_note}, std::pair{"mpi", mpi_note}})
    if (!reason.empty()) skipped.push_back({{"baseline", baseline}, {"reason", reason}});
  document["skipped"] = std::move(skipped);
  document["memcpy"] = memcpy ? Json{{"gbps", memcpy->gbps},
                                     {"bytes", memcpy->bytes},
                                     {"repeats", memcpy->repeats},
                                     {"ranks_at_once", job.ranks()},
                                     {"busbw_over_memcpy", *busbw_over_memcpy(rows, memcpy)}}
                              : Json(nullptr);
  return document;
}

}  // namespace

int run_coll(std::span<const std::string_view> arguments) {
  bool help_shown = false;
  const CollOptions options = parse_options(arguments, help_shown);
  if (help_shown) return exit_success;

  const Job job = join(options);
  const Baseline<mpi::Session> mpi_baseline = open_mpi(options, job);
  const Baseline<gloo::Context> gloo_baseline = open_gloo(options, job);

  std::vector<Row> rows;
  for (const Shape& shape : sweep(options, job.ranks()))
    rows.push_back(measure_shape(job, options, shape, gloo_baseline, mpi_baseline));
  const std::optional<MemcpyBandwidth> memcpy = measure_memcpy(job, rows);
  // No rank leaves while another still needs it for a collective.
  job.comm.barrier(job.stream);
  job.stream.synchronize();

  // Every rank holds the same #wrong sums, but only rank 0 reports: a launcher
  // stops all ranks when one exits non-zero, which could cut rank 0's output short.
  if (job.rank() != 0) return exit_success;
  if (options.common.json)
    print_json(to_json(job, options, rows, gloo_baseline.not_measured, mpi_baseline.not_measured, memcpy));
  else
    print_table(job, options, rows, gloo_baseline.not_measured, mpi_baseline.not_measured, memcpy);
  return total_wrong(rows) == 0 ? exit_success : exit_failure;
}

}  // namespace halbench
