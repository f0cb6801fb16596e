// halbench coll: collective bandwidth in nccl-tests' conventions, with the
// same sizes through Gloo and through MPI (libmpi via shims/mpi) called
// directly beside it, so hal's overhead reads as a ratio. Run under a
// launcher: `halrun -n 4 halbench coll -b 8 -e 64M -f 2`, or
// `mpirun -np 2 halbench coll --engine mpi -b 1M -e 16M`.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hal/collectives.hpp"
#include "hal/hal.hpp"
#include "benchmarks.hpp"
#include "mpi_library.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce };
constexpr const char* collective_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                            "all_to_all", "broadcast",  "reduce"};

struct Options {
  std::uint64_t min_bytes = 8, max_bytes = 64ull << 20;
  double factor = 2;
  int iterations = 20, warmups = 5;
  bool check = true;
  Collective collective = Collective::all_reduce;
  hal::ReduceOp op = hal::ReduceOp::sum;
  hal::DType type = hal::DType::f32;
  int root = 0;
  bool json = false;
  bool gloo_baseline = true;
  bool mpi_baseline = true;
  std::string engine;  // "" = HAL_COLL_ENGINE / config / auto
  std::string device = "host:0";
};

std::uint64_t parse_size(const std::string& text) {
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    throw UsageError("size '" + text + "' is not a number (e.g. 8, 64K, 64M, 1G)");
  }
  const std::string suffix = text.substr(end);
  double scale = 1;
  if (suffix == "K" || suffix == "k") scale = 1024;
  else if (suffix == "M" || suffix == "m") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) throw UsageError("size suffix '" + suffix + "' is not K, M or G");
  if (value < 0) throw UsageError("size '" + text + "' is negative");
  return static_cast<std::uint64_t>(value * scale);
}

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: halbench coll [options]   (start it with halrun, torchrun or mpirun)\n"
               "  -b, --minbytes SIZE   smallest size (default 8)\n"
               "  -e, --maxbytes SIZE   largest size (default 64M)\n"
               "  -f, --stepfactor F    multiply the size by F each step (default 2)\n"
               "  -n, --iters N         timed iterations (default 20)\n"
               "  -w, --warmup_iters N  untimed iterations first (default 5)\n"
               "  -c, --check 0|1       check results and count #wrong (default 1)\n"
               "  -C, --collective NAME all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce\n"
               "  -o, --op OP           sum, prod, min, max, avg (default sum)\n"
               "  -d, --datatype TYPE   f32, f64, f16, bf16, i8, u8, i32, i64 (default f32)\n"
               "  -r, --root N          root of broadcast and reduce (default 0)\n"
               "  --device ID           device (default host:0); a backend alone (cuda) puts each rank on\n"
               "                        its own device, <backend>:<local rank>\n"
               "  --engine ENGINE       host collectives engine: auto, gloo or mpi (default: HAL_COLL_ENGINE,\n"
               "                        then the config, then auto)\n"
               "  --no-gloo             skip the direct Gloo baseline\n"
               "  --no-mpi              skip the direct MPI baseline (run under mpirun or srun to get it)\n"
               "  --json                one JSON document instead of the table\n");
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 0; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      return argv[++i];
    };
    const auto integer = [&](int minimum) {
      const std::string text = value();
      try {
        const int parsed = std::stoi(text);
        if (parsed >= minimum) return parsed;
      } catch (const std::exception&) {
      }
      throw UsageError(flag + " '" + text + "' is not an integer >= " + std::to_string(minimum));
    };
    if (flag == "-b" || flag == "--minbytes") options.min_bytes = parse_size(value());
    else if (flag == "-e" || flag == "--maxbytes") options.max_bytes = parse_size(value());
    else if (flag == "-f" || flag == "--stepfactor") {
      const std::string text = value();
      options.factor = std::atof(text.c_str());
      if (!(options.factor > 1)) throw UsageError("-f '" + text + "' must be a number above 1");
    } else if (flag == "-n" || flag == "--iters") options.iterations = integer(1);
    else if (flag == "-w" || flag == "--warmup_iters") options.warmups = integer(0);
    else if (flag == "-c" || flag == "--check") options.check = integer(0) != 0;
    else if (flag == "-o" || flag == "--op") options.op = hal::parse_reduce_op(value());
    else if (flag == "-d" || flag == "--datatype") options.type = hal::require_dtype(value());
    else if (flag == "-r" || flag == "--root") options.root = integer(0);
    else if (flag == "--device") options.device = value();
    else if (flag == "--json") options.json = true;
    else if (flag == "--no-gloo") options.gloo_baseline = false;
    else if (flag == "--no-mpi") options.mpi_baseline = false;
    else if (flag == "--engine") {
      options.engine = value();
      if (options.engine != "auto" && options.engine != "gloo" && options.engine != "mpi")
        throw UsageError("--engine '" + options.engine + "' is not auto, gloo or mpi");
    }
    else if (flag == "-C" || flag == "--collective") {
      const std::string name = value();
      bool found = false;
      for (int c = 0; c < 6; ++c)
        if (name == collective_names[c]) {
          options.collective = static_cast<Collective>(c);
          found = true;
        }
      if (!found) throw UsageError("collective '" + name + "' is not known; see --help");
    } else if (flag == "-h" || flag == "--help") {
      print_usage(stdout);
      std::exit(0);
    } else {
      throw UsageError("unknown option '" + flag + "'");
    }
  }
  if (options.min_bytes > options.max_bytes) throw UsageError("-b is larger than -e");
  return options;
}

// nccl-tests' bus bandwidth factors: what each rank's link carries relative
// to the algorithm bandwidth of an optimal ring.
double bus_factor(Collective collective, int ranks) {
  const double n = ranks;
  switch (collective) {
    case Collective::all_reduce: return 2 * (n - 1) / n;
    case Collective::all_gather: case Collective::reduce_scatter: case Collective::all_to_all: return (n - 1) / n;
    case Collective::broadcast: case Collective::reduce: return 1;
  }
  return 1;
}

// The value every element of a rank's input holds, and what each result
// element must be. Small integers: exact in every type.
double input_value(int rank) { return rank + 1; }

double expected_value(const Options& options, int ranks, int rank, std::uint64_t block) {
  const auto reduced = [&] {
    double result = 0;
    switch (options.op) {
      case hal::ReduceOp::sum: result = ranks * (ranks + 1) / 2.0; break;
      case hal::ReduceOp::prod: result = 1; for (int r = 1; r <= ranks; ++r) result *= r; break;
      case hal::ReduceOp::min: result = 1; break;
      case hal::ReduceOp::max: result = ranks; break;
      case hal::ReduceOp::avg: {
        const double sum = ranks * (ranks + 1) / 2.0;
        const bool integer = options.type == hal::DType::i8 || options.type == hal::DType::u8 ||
                             options.type == hal::DType::i32 || options.type == hal::DType::i64;
        result = integer ? static_cast<double>(static_cast<long long>(sum) / ranks) : sum / ranks;
      } break;
    }
    return result;
  };
  switch (options.collective) {
    case Collective::all_reduce: case Collective::reduce_scatter: case Collective::reduce: return reduced();
    case Collective::all_gather: case Collective::all_to_all: return input_value(static_cast<int>(block));
    case Collective::broadcast: return input_value(options.root);
  }
  (void)rank;
  return 0;
}

void store_element(hal::DType type, void* base, std::size_t i, double value) {
  switch (type) {
    case hal::DType::f32: static_cast<float*>(base)[i] = static_cast<float>(value); break;
    case hal::DType::f64: static_cast<double*>(base)[i] = value; break;
    case hal::DType::f16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(static_cast<float>(value)); break;
    case hal::DType::bf16: {
      const float f = static_cast<float>(value);
      std::uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      static_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    } break;
    case hal::DType::i8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(static_cast<long long>(value)); break;
    case hal::DType::u8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(static_cast<long long>(value)); break;
    case hal::DType::i32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(value); break;
    case hal::DType::i64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(value); break;
  }
}

bool same_element(hal::DType type, const void* actual, std::size_t i, double expected) {
  std::int64_t reference = 0;
  store_element(type, &reference, 0, expected);
  const std::size_t size = hal::size_in_bytes(type);
  return std::memcmp(static_cast<const std::uint8_t*>(actual) + i * size, &reference, size) == 0;
}

// Gloo's rendezvous over a hal::Store, for the direct baseline.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(hal::Store& store) : store_(store) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set("halbench/gloo/" + key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_.get("halbench/gloo/" + key, std::chrono::seconds(60));
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::seconds(60)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& key : keys) prefixed.push_back("halbench/gloo/" + key);
    store_.wait(prefixed, timeout);
  }

 private:
  hal::Store& store_;
};

struct Row {
  std::uint64_t size = 0, count = 0;
  double time_us[2] = {0, 0};  // out-of-place, in-place
  double algbw[2] = {0, 0}, busbw[2] = {0, 0};
  std::uint64_t wrong[2] = {0, 0};
  std::optional<double> gloo_time_us, gloo_busbw;
  std::optional<double> mpi_time_us, mpi_busbw;
};

namespace mpi = hal::shims::mpi;

// The type MPI reduces natively, or nullptr (f16/bf16 have none).
mpi::Datatype mpi_type_of(const mpi::Library& library, hal::DType type) {
  switch (type) {
    case hal::DType::f32: return library.float32;
    case hal::DType::f64: return library.float64;
    case hal::DType::i8: return library.int8;
    case hal::DType::u8: return library.uint8;
    case hal::DType::i32: return library.int32;
    case hal::DType::i64: return library.int64;
    case hal::DType::f16: case hal::DType::bf16: break;
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

}  // namespace

static std::string json_escaped(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return escaped;
}

int run_collective_benchmark(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "halbench coll: %s (see --help)\n", error.what());
    return 2;
  }
  const hal::Runtime runtime = hal::Runtime::create();
  auto launcher = hal::Store::from_environment();
  // A backend name alone ("cuda"): each rank on its own device, as NCCL
  // requires (it refuses two ranks on one GPU).
  if (options.device.find(':') == std::string::npos)
    options.device += ":" + std::to_string(launcher.local_rank);
  const hal::Device device = runtime.device(options.device);
  const int rank = launcher.rank, ranks = launcher.world_size;
  if (options.root >= ranks) {
    std::fprintf(stderr, "halbench coll: root %d is outside [0, %d)\n", options.root, ranks);
    return 2;
  }
  hal::CommunicatorOptions communicator_options;
  communicator_options.engine = options.engine;
  hal::Communicator comm = hal::Communicator::create(device, rank, ranks, launcher.store, communicator_options);
  hal::Stream stream = device.create_stream();

  // MPI directly, in the same processes: only when an MPI launcher started
  // them, so that MPI's world is hal's.
  std::shared_ptr<mpi::Session> mpi_session;
  std::string mpi_note;
  const bool reduces = options.collective == Collective::all_reduce || options.collective == Collective::reduce ||
                       options.collective == Collective::reduce_scatter;
  if (!options.mpi_baseline) {
    mpi_note = "off (--no-mpi)";
  } else if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("SLURM_PROCID") == nullptr) {
    mpi_note = "only under mpirun or srun";
  } else {
    try {
      mpi_session = mpi::Session::acquire();
      if (mpi_session->world_size() != ranks || mpi_session->world_rank() != rank) {
        mpi_note = "MPI's world (rank " + std::to_string(mpi_session->world_rank()) + " of " +
                   std::to_string(mpi_session->world_size()) + ") is not hal's";
        mpi_session.reset();
      } else if (mpi_type_of(mpi_session->library(), options.type) == nullptr ||
                 (reduces && mpi_op_of(mpi_session->library(), options.op) == nullptr)) {
        mpi_note = "MPI has no native " + std::string(hal::to_string(options.type)) + " or avg";
        mpi_session.reset();
      }
    } catch (const std::exception& error) {
      mpi_note = error.what();
    }
  }

  std::shared_ptr<gloo::Context> gloo_context;
  const bool gloo_has_it = options.collective != Collective::reduce_scatter && options.collective != Collective::reduce &&
                           options.type == hal::DType::f32 && options.op == hal::ReduceOp::sum;
  if (options.gloo_baseline && gloo_has_it) {
    // Listen where hal's Gloo engine does, so the baseline runs across hosts too.
    gloo::transport::tcp::attr attributes;
    if (const char* interface_name = std::getenv("HAL_GLOO_INTERFACE"); interface_name != nullptr && *interface_name)
      attributes.iface = interface_name;
    else if (const char* host_name = std::getenv("HAL_GLOO_HOSTNAME"); host_name != nullptr && *host_name)
      attributes.hostname = host_name;
    else
      attributes.hostname = "127.0.0.1";
    auto gloo_device = gloo::transport::tcp::CreateDevice(attributes);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
    GlooStore store(*launcher.store);
    context->connectFullMesh(store, gloo_device);
    gloo_context = context;
  }

  const std::size_t element = hal::size_in_bytes(options.type);
  const double factor = bus_factor(options.collective, ranks);
  const bool gathers = options.collective == Collective::all_gather || options.collective == Collective::reduce_scatter ||
                       options.collective == Collective::all_to_all;
  std::vector<Row> rows;
  for (double size_step = static_cast<double>(options.min_bytes); size_step <= static_cast<double>(options.max_bytes);
       size_step = std::max(size_step * options.factor, size_step + 1)) {
    // Sizes are of the whole (largest) buffer, rounded down to whole elements per rank.
    const std::uint64_t unit = element * (gathers ? static_cast<std::uint64_t>(ranks) : 1);
    const std::uint64_t size = static_cast<std::uint64_t>(size_step) / unit * unit;
    const std::uint64_t count = size / element;                          // elements of the large buffer
    const std::uint64_t per_rank = gathers ? count / static_cast<std::uint64_t>(ranks) : count;
    Row row;
    row.size = size;
    row.count = count;
    for (int in_place = 0; in_place < 2; ++in_place) {
      const std::uint64_t bytes = std::max<std::uint64_t>(size, 1);
      hal::Buffer send = device.allocate(bytes), recv = in_place ? send : device.allocate(bytes);
      const std::uint64_t own_offset = static_cast<std::uint64_t>(rank) * per_rank * element;
      const auto run_once = [&] {
        switch (options.collective) {
          case Collective::all_reduce: comm.all_reduce(send, recv, count, options.type, options.op, stream); break;
          case Collective::all_gather:
            comm.all_gather(hal::BufferView(send, in_place ? own_offset : 0), recv, per_rank, options.type, stream);
            break;
          case Collective::reduce_scatter:
            comm.reduce_scatter(send, hal::BufferView(recv, in_place ? own_offset : 0), per_rank, options.type,
                                options.op, stream);
            break;
          case Collective::all_to_all: comm.all_to_all(send, recv, per_rank, options.type, stream); break;
          case Collective::broadcast: comm.broadcast(send, recv, count, options.type, options.root, stream); break;
          case Collective::reduce: comm.reduce(send, recv, count, options.type, options.op, options.root, stream); break;
        }
      };
      for (int i = 0; i < options.warmups; ++i) run_once();
      comm.barrier(stream);
      stream.synchronize();
      const auto start = Clock::now();
      for (int i = 0; i < options.iterations; ++i) run_once();
      stream.synchronize();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / options.iterations;
      row.time_us[in_place] = seconds * 1e6;
      row.algbw[in_place] = seconds > 0 ? static_cast<double>(size) / seconds / 1e9 : 0;
      row.busbw[in_place] = row.algbw[in_place] * factor;

      if (options.check) {
        // Fill the inputs with known values, run once more, count wrong elements.
        std::vector<std::uint8_t> host(bytes);
        for (std::uint64_t i = 0; i < count; ++i) store_element(options.type, host.data(), i, input_value(rank));
        send.write(0, host.data(), bytes);
        run_once();
        stream.synchronize();
        recv.read(0, host.data(), bytes);
        std::uint64_t wrong = 0;
        const bool has_result = !((options.collective == Collective::reduce) && rank != options.root);
        const std::uint64_t result_elements =
            options.collective == Collective::reduce_scatter ? per_rank : count;
        const std::uint64_t result_start = options.collective == Collective::reduce_scatter && in_place
                                               ? static_cast<std::uint64_t>(rank) * per_rank : 0;
        if (has_result)
          for (std::uint64_t i = 0; i < result_elements; ++i) {
            const std::uint64_t block = per_rank > 0 ? i / per_rank : 0;
            if (!same_element(options.type, host.data(), result_start + i,
                              expected_value(options, ranks, rank, block)))
              ++wrong;
          }
        // Every rank's count, summed.
        hal::Buffer total = device.allocate(sizeof(std::int64_t));
        const std::int64_t mine = static_cast<std::int64_t>(wrong);
        total.write(0, &mine, sizeof(mine));
        comm.all_reduce(total, total, 1, hal::DType::i64, hal::ReduceOp::sum, stream);
        stream.synchronize();
        std::int64_t sum = 0;
        total.read(0, &sum, sizeof(sum));
        row.wrong[in_place] = static_cast<std::uint64_t>(sum);
      }
    }
    if (gloo_context && count > 0) {
      // Gloo directly, in place on host memory: the floor hal's host backend builds on.
      std::vector<float> data(count, static_cast<float>(input_value(rank)));
      std::vector<float> output(gathers ? count : 0);
      std::uint32_t tag = 0;
      const auto run_gloo = [&] {
        switch (options.collective) {
          case Collective::all_reduce: {
            gloo::AllreduceOptions o(gloo_context);
            o.setOutput(data.data(), count);
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
            gloo::AllgatherOptions o(gloo_context);
            o.setInput(data.data(), per_rank);
            o.setOutput(output.data(), count);
            o.setTag(tag++);
            gloo::allgather(o);
          } break;
          case Collective::all_to_all: {
            gloo::AlltoallOptions o(gloo_context);
            o.setInput(data.data(), count);
            o.setOutput(output.data(), count);
            o.setTag(tag++);
            gloo::alltoall(o);
          } break;
          case Collective::broadcast: {
            gloo::BroadcastOptions o(gloo_context);
            o.setOutput(data.data(), count);
            o.setRoot(options.root);
            o.setTag(tag++);
            gloo::broadcast(o);
          } break;
          default: break;
        }
      };
      for (int i = 0; i < options.warmups; ++i) run_gloo();
      comm.barrier(stream);
      stream.synchronize();
      const auto start = Clock::now();
      for (int i = 0; i < options.iterations; ++i) run_gloo();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / options.iterations;
      row.gloo_time_us = seconds * 1e6;
      row.gloo_busbw = static_cast<double>(size) / seconds / 1e9 * factor;
    }
    if (mpi_session && count > 0 && count <= static_cast<std::uint64_t>(INT32_MAX)) {
      // MPI directly on MPI_COMM_WORLD, in place where MPI allows it.
      const mpi::Library& library = mpi_session->library();
      const mpi::Datatype type = mpi_type_of(library, options.type);
      const mpi::Op op = reduces ? mpi_op_of(library, options.op) : nullptr;
      std::vector<std::uint8_t> data(count * element), output(gathers ? count * element : 0);
      for (std::uint64_t i = 0; i < count; ++i) store_element(options.type, data.data(), i, input_value(rank));
      const int n = static_cast<int>(count), block = static_cast<int>(per_rank);
      const auto world = library.comm_world;
      const auto run_mpi = [&] {
        switch (options.collective) {
          case Collective::all_reduce: library.Allreduce(mpi::in_place, data.data(), n, type, op, world); break;
          case Collective::all_gather:
            library.Allgather(data.data(), block, type, output.data(), block, type, world);
            break;
          case Collective::reduce_scatter:
            library.Reduce_scatter_block(data.data(), output.data(), block, type, op, world);
            break;
          case Collective::all_to_all: library.Alltoall(data.data(), block, type, output.data(), block, type, world); break;
          case Collective::broadcast: library.Bcast(data.data(), n, type, options.root, world); break;
          case Collective::reduce:
            library.Reduce(rank == options.root ? mpi::in_place : data.data(), data.data(), n, type, op, options.root,
                           world);
            break;
        }
      };
      for (int i = 0; i < options.warmups; ++i) run_mpi();
      library.Barrier(world);
      const auto start = Clock::now();
      for (int i = 0; i < options.iterations; ++i) run_mpi();
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / options.iterations;
      row.mpi_time_us = seconds * 1e6;
      row.mpi_busbw = static_cast<double>(size) / seconds / 1e9 * factor;
    }
    rows.push_back(row);
    if (size_step >= static_cast<double>(options.max_bytes)) break;
  }
  comm.barrier(stream);
  stream.synchronize();

  if (rank != 0) return 0;
  const std::string type_text(hal::to_string(options.type));
  const std::string op_text = (options.collective == Collective::all_reduce ||
                               options.collective == Collective::reduce_scatter ||
                               options.collective == Collective::reduce)
                                  ? std::string(hal::to_string(options.op))
                                  : "none";
  const int root = (options.collective == Collective::broadcast || options.collective == Collective::reduce)
                       ? options.root : -1;
  std::uint64_t total_wrong = 0;
  if (options.json) {
    std::printf("{\"schema\": \"hal.bench.coll/1\", \"collective\": \"%s\", \"ranks\": %d, \"device\": \"%s\", "
                "\"iterations\": %d, \"warmups\": %d, \"bus_factor\": %.6f, \"engine\": \"%s\", \"rows\": [",
                collective_names[static_cast<int>(options.collective)], ranks, options.device.c_str(),
                options.iterations, options.warmups, factor, json_escaped(comm.description()).c_str());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& row = rows[i];
      std::printf("%s\n  {\"size\": %llu, \"count\": %llu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, "
                  "\"out_of_place\": {\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %llu}, "
                  "\"in_place\": {\"time_us\": %.3f, \"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %llu}",
                  i ? "," : "", static_cast<unsigned long long>(row.size), static_cast<unsigned long long>(row.count),
                  type_text.c_str(), op_text.c_str(), root, row.time_us[0], row.algbw[0], row.busbw[0],
                  static_cast<unsigned long long>(row.wrong[0]), row.time_us[1], row.algbw[1], row.busbw[1],
                  static_cast<unsigned long long>(row.wrong[1]));
      if (row.gloo_time_us)
        std::printf(", \"gloo\": {\"time_us\": %.3f, \"busbw\": %.4f, \"ratio\": %.4f}", *row.gloo_time_us,
                    *row.gloo_busbw, *row.gloo_busbw > 0 ? row.busbw[1] / *row.gloo_busbw : 0.0);
      if (row.mpi_time_us)
        std::printf(", \"mpi\": {\"time_us\": %.3f, \"busbw\": %.4f, \"ratio\": %.4f}", *row.mpi_time_us,
                    *row.mpi_busbw, *row.mpi_busbw > 0 ? row.busbw[1] / *row.mpi_busbw : 0.0);
      std::printf("}");
      total_wrong += row.wrong[0] + row.wrong[1];
    }
    std::printf("\n]}\n");
  } else {
    std::printf("# halbench coll: %s, %d ranks on %s, %d iterations after %d warmups, busbw factor %.3f\n",
                collective_names[static_cast<int>(options.collective)], ranks, options.device.c_str(),
                options.iterations, options.warmups, factor);
    std::printf("# engine: %s\n", comm.description().c_str());
    std::printf("#%60s%38s%27s%27s\n", "out-of-place", "in-place", "gloo direct", "mpi direct");
    std::printf("%12s %12s %6s %6s %5s %10s %8s %8s %7s %10s %8s %8s %7s %10s %8s %6s %10s %8s %6s\n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "time",
                "busbw", "ratio", "time", "busbw", "ratio");
    std::printf("%12s %12s %6s %6s %5s %10s %8s %8s %7s %10s %8s %8s %7s %10s %8s %6s %10s %8s %6s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "", "(us)", "(GB/s)", "");
    for (const Row& row : rows) {
      std::printf("%12llu %12llu %6s %6s %5d %10.1f %8.3f %8.3f %7llu %10.1f %8.3f %8.3f %7llu",
                  static_cast<unsigned long long>(row.size), static_cast<unsigned long long>(row.count),
                  type_text.c_str(), op_text.c_str(), root, row.time_us[0], row.algbw[0], row.busbw[0],
                  static_cast<unsigned long long>(row.wrong[0]), row.time_us[1], row.algbw[1], row.busbw[1],
                  static_cast<unsigned long long>(row.wrong[1]));
      for (const auto& [time_us, busbw] : {std::pair{row.gloo_time_us, row.gloo_busbw},
                                           std::pair{row.mpi_time_us, row.mpi_busbw}}) {
        if (time_us)
          std::printf(" %10.1f %8.3f %6.3f", *time_us, *busbw, *busbw > 0 ? row.busbw[1] / *busbw : 0.0);
        else
          std::printf(" %10s %8s %6s", "-", "-", "-");
      }
      std::printf("\n");
      total_wrong += row.wrong[0] + row.wrong[1];
    }
    std::printf("# #wrong total: %llu%s\n", static_cast<unsigned long long>(total_wrong),
                options.check ? "" : " (checks off: -c 0)");
    if (!gloo_has_it && options.gloo_baseline)
      std::printf("# gloo direct: only for all_reduce, all_gather, all_to_all and broadcast of f32 with sum\n");
    if (!mpi_note.empty()) std::printf("# mpi direct: %s\n", mpi_note.c_str());
  }
  return total_wrong == 0 ? 0 : 1;
}

namespace halbench {

// The collectives benchmark keeps nccl-tests' argv-style flags (-b -e -f ...).
int run_coll(std::span<const std::string_view> arguments) {
  std::vector<std::string> owned(arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& argument : owned) argv.push_back(argument.data());
  argv.push_back(nullptr);
  return run_collective_benchmark(static_cast<int>(owned.size()), argv.data());
}

}  // namespace halbench
