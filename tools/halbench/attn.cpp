// halbench attn: scaled-dot-product attention through the public API
// (hal::attention_forward / attention_backward with one implementation forced
// per call), in TFLOP/s and as a fraction of the machine's f32 FMA peak
// measured in the same run; optionally beside PyTorch's
// scaled_dot_product_attention on the same shapes (torch_sdpa.py).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmarks.hpp"
#include "common.hpp"
#include "environment.hpp"
#include "hal/attention.hpp"
#include "torch_compare.hpp"

// The one place halbench reaches below the public API and hal/abi: the
// FMA-peak kernel lives beside the host attention kernels, because the peak
// must be measured with the same instruction-set path and thread pool size
// the flash kernels use. It is a plain computation on the CPU; no attention
// call goes through it.
#include "attention/attention_kernels.hpp"
#include "attention/fma_peak.hpp"
#include "dtype_codes.hpp"

namespace halbench {
namespace {

using hal::AttentionImplementation;

constexpr std::uint64_t gibibyte = 1024ull * 1024 * 1024;
const std::vector<std::int64_t> default_seqs{512, 2048, 4096};
constexpr double default_max_call_seconds = 10.0;
constexpr std::uint64_t default_max_workspace = 4 * gibibyte;
// Without --iters, timed calls are repeated until they add up to this, so
// short shapes get many samples and long ones stay within the time budget.
constexpr double auto_target_seconds = 1.0;
constexpr std::uint64_t auto_min_iterations = 2;
constexpr std::uint64_t auto_max_iterations = 50;
// Shapes up to this length run without a time estimate; a longer one with no
// shorter measurement of its implementation and direction is estimated from
// one call at this length.
constexpr std::int64_t calibration_seq = 256;
// A host run whose process got less of the CPUs than this was contended.
constexpr double contended_cpu_share = 0.9;
// The host memcpy bandwidth the kv GB/s column is compared with: two buffers
// of this size, the best of this many copies.
constexpr std::uint64_t memcpy_bytes = 256ull * 1024 * 1024;
constexpr int memcpy_repeats = 5;
// halbench attn --sweep: its prefill lengths, query lengths of decode and a
// chunk, and timed calls per cell unless --iters says.
const std::vector<std::int64_t> sweep_seqs{32, 64, 128, 256, 512, 1024, 2048, 4096};
const std::vector<std::int64_t> sweep_query_lengths{1, 16};
constexpr std::uint64_t sweep_iterations = 5;
// A cell whose goal lies within the 95% interval of its median ratio takes
// more pairs, sweep_extra_pairs at a time, up to --max-pairs or until the
// extra pairs of the cell have taken sweep_settle_seconds.
constexpr std::uint64_t sweep_max_pairs = 41;
constexpr std::uint64_t sweep_extra_pairs = 4;
constexpr double sweep_settle_seconds = 60;
// Its goals: every cell and the short prefill cells at least even with
// torch, the median cell 1.3x.
constexpr double sweep_goal_every_cell = 1.0;
constexpr double sweep_goal_median = 1.3;
constexpr std::int64_t sweep_short_seq = 128;

enum class Direction { forward, backward };
std::string_view to_string(Direction direction) { return direction == Direction::forward ? "forward" : "backward"; }

// One measured shape: query length and key/value length. Without --seq-q
// they are equal (self-attention over one sequence); with it the queries are
// the last seq_q positions of seq_kv (decode, chunked prefill).
struct Shape {
  std::int64_t seq_q;
  std::int64_t seq_kv;
  bool operator==(const Shape&) const = default;
};

struct AttnOptions {
  CommonOptions common;
  std::vector<AttentionImplementation> implementations{AttentionImplementation::flash, AttentionImplementation::math};
  std::vector<std::int64_t> seqs = default_seqs;  // key/value lengths (and query lengths without --seq-q)
  std::vector<std::int64_t> seq_qs;               // --seq-q; empty: query length = key length
  std::int64_t batch = 1;
  std::int64_t heads_q = 32;
  std::int64_t heads_kv = 8;
  std::int64_t head_dim = 128;
  hal::DType dtype = hal::DType::f32;
  hal::AttentionLayout layout = hal::AttentionLayout::bshd;
  bool causal = false;
  bool backward = false;      // also measure backward
  bool forward_only = false;  // explicit default; conflicts with --backward
  double max_call_seconds = default_max_call_seconds;
  std::uint64_t max_workspace = default_max_workspace;
  bool compare_torch = false;
  bool sweep = false;       // every shape class against torch (run_sweep)
  // With --compare-torch: a shape whose median ratio torch/hal is not
  // settled on either side of this value takes more pairs (up to max_pairs).
  std::optional<double> settle_around;
  std::uint64_t max_pairs = sweep_max_pairs;
  bool seqs_given = false;  // --seq was given (the sweep has its own default)
  std::string python = "python3";
  std::optional<std::string> torch_script;

  std::vector<Direction> directions() const {
    if (backward) return {Direction::forward, Direction::backward};
    return {Direction::forward};
  }
  bool separate_seq_q() const { return !seq_qs.empty(); }
  // In measuring order: each --seq value alone, or with --seq-q every
  // (seq_q, seq_kv) pair, by query length and then key length.
  std::vector<Shape> shapes() const {
    std::vector<Shape> result;
    if (!separate_seq_q()) {
      for (const std::int64_t seq : seqs) result.push_back({seq, seq});
      return result;
    }
    for (const std::int64_t seq_q : seq_qs)
      for (const std::int64_t seq_kv : seqs) result.push_back({seq_q, seq_kv});
    return result;
  }
};

// Causal masks with unequal lengths are aligned bottom-right: the queries
// are the last seq_q positions, so the last query sees every key (as in
// decode and chunked prefill). With equal lengths both alignments are the
// same mask; top-left is kept there.
hal::MaskAlignment mask_alignment(const AttnOptions& options, const Shape& shape) {
  return options.causal && shape.seq_q != shape.seq_kv ? hal::MaskAlignment::bottom_right
                                                       : hal::MaskAlignment::top_left;
}

// Bytes of K and V one call reads (each once): what bounds decode, where
// every key and value is used by only a few queries.
std::uint64_t kv_bytes(const AttnOptions& options, const Shape& shape) {
  return static_cast<std::uint64_t>(options.batch * options.heads_kv * shape.seq_kv * (2 * options.head_dim)) *
         hal::size_in_bytes(options.dtype);
}

// "seq 2048", or "seq_q 16 seq_kv 2048" when the lengths differ.
std::string shape_name(const Shape& shape) {
  if (shape.seq_q == shape.seq_kv) return "seq " + std::to_string(shape.seq_kv);
  return "seq_q " + std::to_string(shape.seq_q) + " seq_kv " + std::to_string(shape.seq_kv);
}

hal::AttentionParams make_params(const AttnOptions& options, const Shape& shape) {
  hal::AttentionParams params;
  params.batch = options.batch;
  params.heads_q = options.heads_q;
  params.heads_kv = options.heads_kv;
  params.seq_q = shape.seq_q;
  params.seq_kv = shape.seq_kv;
  params.head_dim_qk = options.head_dim;
  params.head_dim_v = options.head_dim;
  params.dtype = options.dtype;
  params.layout = options.layout;
  params.causal = options.causal;
  params.alignment = mask_alignment(options, shape);
  params.return_lse = true;  // as in training: the backward pass needs it
  return params;
}

// ---- argument parsing -----------------------------------------------------------

std::int64_t parse_positive(std::string_view flag, std::string_view text) {
  const std::uint64_t value = parse_count(flag, text, 1);
  if (value > (1ull << 31)) throw UsageError(std::string(flag) + ": " + std::string(text) + " is too large");
  return static_cast<std::int64_t>(value);
}

// A list of lengths, sorted, each once.
std::vector<std::int64_t> parse_lengths(std::string_view flag, std::string_view text) {
  std::vector<std::int64_t> lengths;
  for (const std::string& item : split_list(flag, text)) lengths.push_back(parse_positive(flag, item));
  std::sort(lengths.begin(), lengths.end());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  return lengths;
}

double parse_seconds(std::string_view flag, std::string_view text) {
  constexpr std::string_view expected = "a number of seconds; expected a number >= 0";
  const double value = parse_real(flag, text, expected);
  if (value < 0) throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not " + std::string(expected));
  return value;
}

// ---- device tensors -----------------------------------------------------------------

// Inputs, outputs and gradients of one shape, filled with values in [-1, 1).
struct Tensors {
  hal::Buffer q, k, v, o, lse, grad_o, grad_q, grad_k, grad_v;
};

hal::Buffer random_buffer(const hal::Device& device, hal::DType dtype, std::int64_t elements, std::mt19937& random) {
  const std::size_t element_bytes = hal::size_in_bytes(dtype);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(elements) * element_bytes);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < elements; ++i) {
    const float value = uniform(random);
    unsigned char* at = bytes.data() + static_cast<std::size_t>(i) * element_bytes;
    if (dtype == hal::DType::f32) {
      std::memcpy(at, &value, sizeof(value));
    } else {
      const std::uint16_t bits =
          dtype == hal::DType::f16 ? hal::abi::float_to_f16_bits(value) : hal::abi::float_to_bf16_bits(value);
      std::memcpy(at, &bits, sizeof(bits));
    }
  }
  hal::Buffer buffer = device.allocate(bytes.size());
  buffer.write(0, bytes.data(), bytes.size());
  return buffer;
}

Tensors make_tensors(const hal::Device& device, const hal::AttentionParams& p, bool backward) {
  std::mt19937 random(20240607);
  const std::int64_t q_elements = p.batch * p.heads_q * p.seq_q * p.head_dim_qk;
  const std::int64_t kv_elements = p.batch * p.heads_kv * p.seq_kv * p.head_dim_qk;
  Tensors t;
  t.q = random_buffer(device, p.dtype, q_elements, random);
  t.k = random_buffer(device, p.dtype, kv_elements, random);
  t.v = random_buffer(device, p.dtype, kv_elements, random);
  t.o = random_buffer(device, p.dtype, q_elements, random);
  t.lse = device.allocate(static_cast<std::uint64_t>(p.batch * p.heads_q * p.seq_q) * sizeof(float));
  if (backward) {
    t.grad_o = random_buffer(device, p.dtype, q_elements, random);
    t.grad_q = random_buffer(device, p.dtype, q_elements, random);
    t.grad_k = random_buffer(device, p.dtype, kv_elements, random);
    t.grad_v = random_buffer(device, p.dtype, kv_elements, random);
  }
  return t;
}

// ---- measurement ----------------------------------------------------------------------

// CPU time (user + system, every thread of this process) and wall time over
// an interval. cpu / (wall x threads) is the share of `threads` CPUs the
// process got: well below 1 means other work took the CPUs and times of that
// interval are too long by about that much. Rates per CPU-second are what
// time slicing by other work does not change.
class CpuInterval {
 public:
  CpuInterval() : wall_start_(Clock::now()), cpu_start_(process_cpu_seconds()) {}
  struct Elapsed {
    double wall_seconds, cpu_seconds;
    double share(int threads) const { return wall_seconds <= 0 ? 0.0 : cpu_seconds / (wall_seconds * threads); }
  };
  Elapsed finish() const { return {seconds_between(wall_start_, Clock::now()), process_cpu_seconds() - cpu_start_}; }

 private:
  static double process_cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
    };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
  }
  Clock::time_point wall_start_;
  double cpu_start_;
};

// torch's calls of one row, each made right after one of hal's (ABAB...).
struct TorchPairs {
  double ms;                    // median wall time per call
  double cpu_share;             // its process's CPU time / (wall x threads)
  double cpu_seconds_per_call;  // mean
  // torch ms / hal ms of each pair: the median, the range and the median's
  // 95% interval (median_interval).
  double ratio_median, ratio_min, ratio_max;
  Interval ratio_interval;
  std::vector<double> ratios;  // in the order taken
  std::string note;  // how torch runs the case
};

struct Measurement {
  AttentionImplementation implementation;
  Shape shape;
  Direction direction;
  std::uint64_t iterations;
  double event_ms;  // median over timed calls, hal events (execution on the stream)
  double wall_ms;   // median over timed calls, wall clock from enqueue to synchronize
  double min_event_ms;
  double flops;
  std::uint64_t kv_bytes;  // K and V read per call
  std::uint64_t workspace_bytes;
  // Host device only (the work runs in this process): see CpuInterval.
  double cpu_share;
  double cpu_seconds_per_call;  // mean
  std::optional<TorchPairs> torch;  // with --compare-torch, where torch runs the case
  double gflops() const { return flops / (event_ms * 1e-3) * 1e-9; }
  double kv_gbps() const { return static_cast<double>(kv_bytes) / (event_ms * 1e-3) * 1e-9; }
  double gflops_per_cpu_second() const { return cpu_seconds_per_call <= 0 ? 0.0 : flops / cpu_seconds_per_call * 1e-9; }
};

struct Skip {
  AttentionImplementation implementation;
  Shape shape;
  Direction direction;
  std::string reason;
};

class Runner {
 public:
  // threads: how many the host backend's attention pool runs (for the CPU
  // share). torch: the peer each timed call alternates with, or none.
  Runner(const AttnOptions& options, const hal::Device& device, int threads, TorchPeer* torch)
      : options_(options),
        device_(device),
        threads_(threads),
        torch_(torch),
        stream_(device.create_stream()),
        start_(device.create_event()),
        end_(device.create_event()) {}

  // Measures one implementation on one shape and direction, or says why not.
  // `tensors` of this shape are allocated on first use, so a shape that
  // every implementation skips allocates nothing.
  void run(AttentionImplementation implementation, const Shape& shape, Direction direction,
           std::optional<Tensors>& tensors, std::vector<Measurement>& measurements, std::vector<Skip>& skips) {
    const hal::AttentionParams params = make_params(options_, shape);
    const bool backward = direction == Direction::backward;
    const hal::AttentionOptions per_call{{implementation}};
    const hal::AttentionDecision decision = hal::explain_attention(device_, params, backward, per_call);
    const auto candidate =
        std::find_if(decision.candidates.begin(), decision.candidates.end(),
                     [&](const hal::AttentionCandidate& c) { return c.implementation == implementation; });
    if (!decision.found || decision.chosen != implementation || candidate == decision.candidates.end()) {
      std::string reason = "not eligible on " + device_.id();
      if (candidate != decision.candidates.end() && !candidate->reasons.empty())
        reason += ": " + candidate->reasons.front();
      skips.push_back({implementation, shape, direction, reason});
      return;
    }
    const double flops = params.flops(backward);
    if (const std::optional<std::string> reason =
            too_big(implementation, direction, shape, flops, candidate->workspace_bytes)) {
      skips.push_back({implementation, shape, direction, *reason});
      return;
    }
    if (!tensors) tensors = make_tensors(device_, params, options_.backward);

    // The warm-up call faults in the workspace and starts the backend's
    // threads; its time also sizes the automatic iteration count.
    const CallTime warm_up = time_calls(params, backward, per_call, *tensors, 1).front();
    const std::uint64_t iterations = options_.common.iterations.value_or(std::clamp<std::uint64_t>(
        static_cast<std::uint64_t>(std::ceil(auto_target_seconds / std::max(warm_up.event_ms * 1e-3, 1e-6))),
        auto_min_iterations, auto_max_iterations));
    const std::optional<std::size_t> found =
        torch_ != nullptr ? torch_->find_case(shape.seq_q, shape.seq_kv, to_string(direction)) : std::nullopt;
    const bool with_torch = found.has_value();
    const std::size_t torch_case = found.value_or(0);
    if (with_torch) torch_->call(torch_case);  // torch's warm-up
    std::vector<double> event_ms, wall_ms, torch_ms, ratios;
    double cpu_seconds = 0, wall_seconds = 0, torch_cpu_seconds = 0, torch_wall_seconds = 0;
    auto take_turn = [&] {
      const CpuInterval cpu;
      const CallTime time = time_calls(params, backward, per_call, *tensors, 1, false).front();
      const CpuInterval::Elapsed elapsed = cpu.finish();
      event_ms.push_back(time.event_ms);
      wall_ms.push_back(time.wall_ms);
      cpu_seconds += elapsed.cpu_seconds;
      wall_seconds += elapsed.wall_seconds;
      if (!with_torch) return;
      const TorchCall call = torch_->call(torch_case);
      torch_ms.push_back(call.wall_seconds * 1e3);
      ratios.push_back(call.wall_seconds * 1e3 / time.event_ms);
      torch_cpu_seconds += call.cpu_seconds;
      torch_wall_seconds += call.wall_seconds;
    };
    for (std::uint64_t i = 0; i < iterations; ++i) take_turn();
    // Until the median ratio settles on one side of settle_around.
    const Clock::time_point settle_start = Clock::now();
    while (with_torch && options_.settle_around && ratios.size() < options_.max_pairs &&
           median_interval(ratios).contains(*options_.settle_around) &&
           seconds_between(settle_start, Clock::now()) < sweep_settle_seconds)
      for (std::uint64_t i = 0; i < sweep_extra_pairs && ratios.size() < options_.max_pairs; ++i) take_turn();
    const double count = static_cast<double>(event_ms.size());
    const Measurement m{
        implementation,
        shape,
        direction,
        event_ms.size(),
        median(event_ms),
        median(wall_ms),
        *std::min_element(event_ms.begin(), event_ms.end()),
        flops,
        kv_bytes(options_, shape),
        candidate->workspace_bytes,
        CpuInterval::Elapsed{wall_seconds, cpu_seconds}.share(threads_),
        cpu_seconds / count,
        with_torch
            ? std::optional<TorchPairs>(TorchPairs{
                  median(torch_ms),
                  CpuInterval::Elapsed{torch_wall_seconds, torch_cpu_seconds}.share(std::max(torch_->threads(), 1)),
                  torch_cpu_seconds / count, median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                  *std::max_element(ratios.begin(), ratios.end()), median_interval(ratios), ratios,
                  torch_->note(torch_case)})
            : std::nullopt};
    rates_.push_back({implementation, direction, shape, m.gflops()});
    measurements.push_back(m);
  }

 private:
  struct CallTime {
    double event_ms;
    double wall_ms;
  };
  struct Rate {
    AttentionImplementation implementation;
    Direction direction;
    Shape shape;
    double gflops;
  };

  // `count` calls, each timed alone. Backward reads O and LSE: with
  // need_forward_outputs they come first from this implementation's forward.
  std::vector<CallTime> time_calls(const hal::AttentionParams& params, bool backward,
                                   const hal::AttentionOptions& per_call, Tensors& t, std::uint64_t count,
                                   bool need_forward_outputs = true) {
    auto forward = [&] { hal::attention_forward(stream_, params, {t.q}, {t.k}, {t.v}, {t.o}, {t.lse}, per_call); };
    if (backward && need_forward_outputs) {
      forward();
      stream_.synchronize();
    }
    std::vector<CallTime> times;
    for (std::uint64_t i = 0; i < count; ++i) {
      const Clock::time_point wall_start = Clock::now();
      stream_.record(start_);
      if (backward)
        hal::attention_backward(stream_, params, {t.q}, {t.k}, {t.v}, {t.o}, {t.grad_o}, {t.lse}, {t.grad_q},
                                {t.grad_k}, {t.grad_v}, per_call);
      else
        forward();
      stream_.record(end_);
      stream_.synchronize();
      const double wall_ms = seconds_between(wall_start, Clock::now()) * 1e3;
      times.push_back({hal::Event::elapsed_milliseconds(start_, end_), wall_ms});
    }
    return times;
  }

  // The rate this implementation reached on the largest shape below `shape`
  // measured in this run: the same query length and a shorter key length
  // (or, without --seq-q, a shorter sequence); when there is none, one
  // untimed-for-results call at key length calibration_seq (and the query
  // length, at most calibration_seq) provides it.
  const Rate& rate_below(AttentionImplementation implementation, Direction direction, const Shape& shape) {
    const bool equal = shape.seq_q == shape.seq_kv;
    auto below = [&](const Shape& other) {
      return equal ? other.seq_q == other.seq_kv && other.seq_kv < shape.seq_kv
                   : other.seq_q == shape.seq_q && other.seq_kv < shape.seq_kv;
    };
    const Rate* best = nullptr;
    for (const Rate& rate : rates_)
      if (rate.implementation == implementation && rate.direction == direction && below(rate.shape) &&
          (best == nullptr || rate.shape.seq_kv > best->shape.seq_kv))
        best = &rate;
    if (best != nullptr) return *best;
    const Shape calibration{std::min(shape.seq_q, calibration_seq), calibration_seq};
    const hal::AttentionParams params = make_params(options_, calibration);
    const bool backward = direction == Direction::backward;
    Tensors tensors = make_tensors(device_, params, backward);
    const CallTime time = time_calls(params, backward, {{implementation}}, tensors, 1).front();
    const double flops = params.flops(backward);
    rates_.push_back({implementation, direction, calibration, flops / (time.event_ms * 1e-3) * 1e-9});
    return rates_.back();
  }

  // Why a shape is skipped: its workspace is over --max-workspace, or its
  // call would take over --max-call-seconds at the rate of rate_below (FLOPs
  // grow as seq_q * seq_kv; the rate per FLOP of math does not improve with size).
  std::optional<std::string> too_big(AttentionImplementation implementation, Direction direction, const Shape& shape,
                                     double flops, std::uint64_t workspace_bytes) {
    if (options_.max_workspace > 0 && workspace_bytes > options_.max_workspace)
      return "needs " + format_bytes(workspace_bytes) + " of workspace, over --max-workspace " +
             format_bytes(options_.max_workspace);
    if (options_.max_call_seconds <= 0 || (shape.seq_q <= calibration_seq && shape.seq_kv <= calibration_seq))
      return std::nullopt;
    const Rate& rate = rate_below(implementation, direction, shape);
    const double estimate = flops / (rate.gflops * 1e9);
    if (estimate <= options_.max_call_seconds) return std::nullopt;
    return "estimated " + format_fixed(estimate, 1) + " s per call (at the " + format_fixed(rate.gflops, 1) +
           " GFLOP/s measured at " + shape_name(rate.shape) + "), over --max-call-seconds " +
           format_fixed(options_.max_call_seconds, 1);
  }

  static std::string format_bytes(std::uint64_t bytes) {
    if (bytes >= gibibyte) return format_fixed(static_cast<double>(bytes) / static_cast<double>(gibibyte), 2) + " GiB";
    return format_fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1) + " MiB";
  }

  const AttnOptions& options_;
  hal::Device device_;
  int threads_;
  TorchPeer* torch_;
  hal::Stream stream_;
  hal::Event start_, end_;
  std::vector<Rate> rates_;
};

// ---- the f32 FMA peak -------------------------------------------------------------------

constexpr int peak_attempts = 3;
constexpr double peak_seconds_per_figure = 0.1;

struct PeakSample {
  hal::host::FmaPeak peak;       // best of peak_attempts, every thread of the pool
  double gflops_per_cpu_second;  // one core, other work's time slices taken out
};

// Measured before and again after the attention runs: other work on the
// machine moves both figures, and efficiency is quoted against the higher one
// so that a busy moment during one measurement does not inflate it.
struct PeakReport {
  PeakSample before{};
  PeakSample after{};
  bool applies = false;  // the device is this CPU: efficiency is meaningful
  // The host's memcpy bandwidth on the same thread count, measured once
  // before the attention runs (host device only): what kv GB/s compares with.
  std::optional<MemcpyBandwidth> memcpy;
  int threads() const { return before.peak.threads; }
  double reference_gflops() const { return std::max(before.peak.all_threads_gflops, after.peak.all_threads_gflops); }
  double reference_gflops_per_cpu_second() const {
    return std::max(before.gflops_per_cpu_second, after.gflops_per_cpu_second);
  }
};

PeakSample measure_peak() {
  const hal::host::FlashIsa isa = hal::host::flash_selected_isa();
  PeakSample sample{};
  {
    // The same thread count as the host backend's attention pool
    // (default_thread_count); this pool is gone before attention runs.
    hal::host::ThreadPool pool;
    sample.peak = hal::host::measure_fma_peak(pool, isa, peak_seconds_per_figure);
    // The best of a few short measurements, so a moment of other work on the
    // machine does not lower it.
    for (int attempt = 1; attempt < peak_attempts; ++attempt) {
      const hal::host::FmaPeak peak = hal::host::measure_fma_peak(pool, isa, peak_seconds_per_figure);
      sample.peak.per_thread_gflops = std::max(sample.peak.per_thread_gflops, peak.per_thread_gflops);
      sample.peak.all_threads_gflops = std::max(sample.peak.all_threads_gflops, peak.all_threads_gflops);
    }
  }
  // Per CPU-second: on a one-thread pool everything runs on this thread, so
  // the CPU share of the whole measurement converts its rate (median of a few).
  hal::host::ThreadPool one_thread(1);
  std::vector<double> rates;
  for (int attempt = 0; attempt < peak_attempts; ++attempt) {
    const CpuInterval cpu;
    const hal::host::FmaPeak peak = hal::host::measure_fma_peak(one_thread, isa, peak_seconds_per_figure);
    const double share = cpu.finish().share(1);
    if (share > 0) rates.push_back(std::max(peak.per_thread_gflops, peak.all_threads_gflops) / std::min(share, 1.0));
  }
  sample.gflops_per_cpu_second = rates.empty() ? 0.0 : median(rates);
  return sample;
}

std::optional<double> efficiency(const Measurement& m, const PeakReport& peak) {
  if (!peak.applies || peak.reference_gflops() <= 0) return std::nullopt;
  return m.gflops() / peak.reference_gflops();
}

// GFLOP per CPU-second of the attention / of one core's FMA peak: the
// efficiency with other work's time slices taken out of both.
std::optional<double> efficiency_per_cpu_second(const Measurement& m, const PeakReport& peak) {
  if (!peak.applies || peak.reference_gflops_per_cpu_second() <= 0 || m.cpu_seconds_per_call <= 0) return std::nullopt;
  return m.gflops_per_cpu_second() / peak.reference_gflops_per_cpu_second();
}

// kv GB/s over the host's memcpy GB/s (bytes read per second over bytes copied per second).
std::optional<double> kv_over_memcpy(const Measurement& m, const PeakReport& peak) {
  if (!peak.memcpy || peak.memcpy->gbps <= 0) return std::nullopt;
  return m.kv_gbps() / peak.memcpy->gbps;
}

// ---- flash / math ratios -------------------------------------------------------------------

struct Ratio {
  Shape shape;
  Direction direction;
  double speedup;       // math ms / flash ms
  double memory_ratio;  // math workspace / flash workspace
};

std::vector<Ratio> flash_math_ratios(const std::vector<Measurement>& measurements) {
  std::vector<Ratio> ratios;
  for (const Measurement& flash : measurements) {
    if (flash.implementation != AttentionImplementation::flash) continue;
    for (const Measurement& math : measurements)
      if (math.implementation == AttentionImplementation::math && math.shape == flash.shape &&
          math.direction == flash.direction)
        ratios.push_back({flash.shape, flash.direction, math.event_ms / flash.event_ms,
                          flash.workspace_bytes == 0 ? 0.0
                                                     : static_cast<double>(math.workspace_bytes) /
                                                           static_cast<double>(flash.workspace_bytes)});
  }
  return ratios;
}

// ---- torch on the instruction set hal runs ---------------------------------------------

// When HAL_HOST_ISA lowers hal's flash kernels, torch_sdpa.py gets the
// variables that lower torch the same way: ATen's own kernels
// (ATEN_CPU_CAPABILITY) and the GEMMs it hands to MKL and oneDNN, which
// otherwise keep using the best instruction set of the CPU. A variable the
// user already set is left alone.
struct TorchIsa {
  std::string requested;    // the host backend's isa option
  std::string origin;       // who set it: "HAL_HOST_ISA=avx2"
  std::string isa;          // the path hal's flash kernels run (lower when the CPU lacks the requested one)
  bool recognized = false;  // a path the host kernels have (hal ignores other values)
  std::vector<std::pair<std::string, std::string>> set;   // passed to torch_sdpa.py
  std::vector<std::pair<std::string, std::string>> kept;  // already set by the user
};

std::optional<TorchIsa> torch_isa(const BackendSetting& requested) {
  if (requested.value.empty()) return std::nullopt;
  TorchIsa result;
  result.requested = requested.value;
  result.origin = requested.origin;
  const hal::host::FlashIsa runs = hal::host::flash_selected_isa();
  result.isa = hal::host::flash_isa_name(runs);
  result.recognized = hal::host::parse_flash_isa(result.requested).has_value();
  // amx, the top path, lowers nothing: torch keeps the CPU's best as hal does.
  if (!result.recognized || runs == hal::host::FlashIsa::amx) return result;
  // Each variable's value for the paths below amx, indexed by FlashIsa; torch
  // has no scalar path: for scalar its lowest (ATen's default kernels; SSE4.2
  // in MKL, SSE4.1 in oneDNN).
  struct Variable {
    const char* name;
    const char* values[4];  // scalar, avx2, avx512, avx512bf16
  };
  constexpr Variable variables[] = {{"ATEN_CPU_CAPABILITY", {"default", "avx2", "avx512", "avx512"}},
                                    {"MKL_ENABLE_INSTRUCTIONS", {"SSE4_2", "AVX2", "AVX512", "AVX512"}},
                                    {"ONEDNN_MAX_CPU_ISA", {"SSE41", "AVX2", "AVX512_CORE", "AVX512_CORE_BF16"}}};
  for (const Variable& variable : variables) {
    if (const char* already = hal::abi::environment(variable.name)) {
      result.kept.emplace_back(variable.name, already);
      continue;
    }
    result.set.emplace_back(variable.name, variable.values[static_cast<std::size_t>(runs)]);
  }
  return result;
}

std::string join_variables(const std::vector<std::pair<std::string, std::string>>& variables) {
  std::string text;
  for (const auto& [name, value] : variables) text += (text.empty() ? "" : " ") + name + "=" + value;
  return text;
}

// One header line: which variables torch_sdpa.py gets, and why.
void print_torch_isa(const TorchIsa& isa) {
  if (!isa.recognized) {
    std::printf(
        "# torch ISA: %s names no path of the host kernels (hal ignores it); torch's environment is left as is\n",
        isa.origin.c_str());
    return;
  }
  std::string line = "# torch ISA: " + isa.origin + " (flash runs " + isa.isa + "): ";
  line += isa.set.empty() ? "nothing set" : "torch_sdpa.py runs with " + join_variables(isa.set);
  if (!isa.kept.empty()) line += "; already set, kept: " + join_variables(isa.kept);
  if (isa.isa == "scalar") line += " (torch has no scalar path: its lowest)";
  std::printf("%s\n", line.c_str());
}

Json torch_isa_json(const TorchIsa& isa) {
  Json set = Json::object(), kept = Json::object();
  for (const auto& [name, value] : isa.set) set[name] = value;
  for (const auto& [name, value] : isa.kept) kept[name] = value;
  return {{"hal_host_isa", isa.requested}, {"isa", isa.isa}, {"set", set}, {"kept", kept}};
}

// ---- output ----------------------------------------------------------------------------------

std::string layout_name(hal::AttentionLayout layout, bool upper) {
  if (layout == hal::AttentionLayout::bhsd) return upper ? "BHSD" : "bhsd";
  return upper ? "BSHD" : "bshd";
}

std::string shape_text(const AttnOptions& o) {
  const std::string mask = !o.causal            ? "no mask"
                           : o.separate_seq_q() ? "causal (bottom-right where seq_q != seq_kv)"
                                                : "causal";
  return "batch " + std::to_string(o.batch) + ", " + std::to_string(o.heads_q) + " query heads, " +
         std::to_string(o.heads_kv) + " kv heads, head dim " + std::to_string(o.head_dim) + ", " +
         std::string(hal::to_string(o.dtype)) + ", " + mask + ", " + layout_name(o.layout, true);
}

std::string format_mib(std::uint64_t bytes) { return format_fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

// The lines printed before measuring starts: what runs, and the FMA peak.
void print_preamble(const AttnOptions& options, const hal::Device& device, const PeakReport& peak,
                    const std::optional<TorchIsa>& isa) {
  print_heading("attn", device);
  std::printf(
      "# f32 FMA peak (%s, %d threads): %.1f GFLOP/s all threads, %.1f GFLOP/s one thread, "
      "%.1f GFLOP per CPU-second%s\n",
      peak.before.peak.isa, peak.threads(), peak.before.peak.all_threads_gflops, peak.before.peak.per_thread_gflops,
      peak.before.gflops_per_cpu_second,
      peak.applies ? "" : " -- of the host CPU, not of this device: no efficiency column");
  if (peak.memcpy)
    std::printf(
        "# memcpy (%d threads, each copying its share of %s, best of %d): %.2f GB/s, counted as bytes copied per\n"
        "# second (as halbench mem; each byte is read and written, so memory traffic is twice that)\n",
        peak.memcpy->threads, format_size(peak.memcpy->bytes).c_str(), peak.memcpy->repeats, peak.memcpy->gbps);
  else
    std::printf("# memcpy: not measured (the device is not the host CPU); no kv/memcpy column\n");
  std::printf("# %s; FLOPs count visible query/key pairs only\n", shape_text(options).c_str());
  std::printf(
      "# kv GB/s = bytes of K and V read per call (batch x kv heads x seq_kv x (d_qk + d_v) x %zu bytes) / ms;\n"
      "# kv/memcpy = kv GB/s / memcpy GB/s (reading alone can pass 1: a copy also writes)\n",
      hal::size_in_bytes(options.dtype));
  if (options.compare_torch && isa) print_torch_isa(*isa);
  std::fflush(stdout);
}

// CPU seconds per call of torch / of hal: the speed ratio with other work's
// time slices taken out (host device only, where hal's work is in-process).
std::optional<double> torch_over_hal_cpu_seconds(const Measurement& m) {
  if (!m.torch || m.torch->cpu_seconds_per_call <= 0 || m.cpu_seconds_per_call <= 0) return std::nullopt;
  return m.torch->cpu_seconds_per_call / m.cpu_seconds_per_call;
}

// The shape's columns: "seq", or with --seq-q "seq_q" and "seq_kv".
std::vector<Table::Column> shape_columns(const AttnOptions& options) {
  if (options.separate_seq_q()) return {{"seq_q"}, {"seq_kv"}};
  return {{"seq"}};
}

std::vector<std::string> shape_cells(const AttnOptions& options, const Shape& shape) {
  if (options.separate_seq_q()) return {std::to_string(shape.seq_q), std::to_string(shape.seq_kv)};
  return {std::to_string(shape.seq_kv)};
}

void print_table(const AttnOptions& options, const hal::Device& device, const PeakReport& peak,
                 const std::vector<Measurement>& measurements, const std::vector<Skip>& skips, const TorchPeer* torch) {
  std::printf(
      "# f32 FMA peak again after the runs: %.1f GFLOP/s all threads, %.1f GFLOP per CPU-second;\n"
      "# efficiency is against the higher of each pair%s\n",
      peak.after.peak.all_threads_gflops, peak.after.gflops_per_cpu_second,
      device.info().type == hal::DeviceType::cpu ? "" : " -- not applicable to this device");
  std::printf(
      "# ms = median per call by hal events (wall = enqueue to synchronize); eff = GFLOP/s / FMA peak;\n"
      "# cpu = CPU time this process got / (wall time x %d threads); cpu eff = GFLOP per CPU-second /\n"
      "# FMA GFLOP per CPU-second (other work's time slices taken out); extra = workspace of one call\n",
      peak.threads());
  const bool with_torch = torch != nullptr && torch->reason().empty();
  std::vector<Table::Column> columns{{"impl", true}, {"dir", true}};
  for (Table::Column& column : shape_columns(options)) columns.push_back(std::move(column));
  for (const char* name :
       {"iters", "ms", "wall ms", "TFLOP/s", "eff %", "kv GB/s", "kv/memcpy", "cpu %", "cpu eff %", "extra MiB"})
    columns.push_back({name});
  if (with_torch) {
    columns.push_back({"torch ms"});
    columns.push_back({"torch cpu %"});
    columns.push_back({"torch/hal"});
    columns.push_back({"range"});
    columns.push_back({"torch/hal cpu-s"});
  }
  Table table(columns);
  for (const Measurement& m : measurements) {
    const std::optional<double> eff = efficiency(m, peak);
    const std::optional<double> cpu_eff = efficiency_per_cpu_second(m, peak);
    const std::optional<double> kv_ratio = kv_over_memcpy(m, peak);
    std::vector<std::string> row{std::string(hal::to_string(m.implementation)), std::string(to_string(m.direction))};
    for (std::string& cell : shape_cells(options, m.shape)) row.push_back(std::move(cell));
    for (std::string& cell : std::vector<std::string>{
             std::to_string(m.iterations), format_fixed(m.event_ms, 2), format_fixed(m.wall_ms, 2),
             format_fixed(m.gflops() * 1e-3, 3), eff ? format_fixed(*eff * 100, 1) : "-", format_fixed(m.kv_gbps(), 2),
             kv_ratio ? format_fixed(*kv_ratio, 2) : "-", peak.applies ? format_fixed(m.cpu_share * 100, 0) : "-",
             cpu_eff ? format_fixed(*cpu_eff * 100, 1) : "-", format_mib(m.workspace_bytes)})
      row.push_back(std::move(cell));
    if (with_torch) {
      const std::optional<TorchPairs>& t = m.torch;
      row.push_back(t ? format_fixed(t->ms, 2) : "-");
      row.push_back(t ? format_fixed(t->cpu_share * 100, 0) : "-");
      row.push_back(t ? format_fixed(t->ratio_median, 2) : "-");
      row.push_back(t ? format_fixed(t->ratio_min, 2) + ".." + format_fixed(t->ratio_max, 2) : "-");
      const std::optional<double> cpu_ratio = peak.applies ? torch_over_hal_cpu_seconds(m) : std::nullopt;
      row.push_back(cpu_ratio ? format_fixed(*cpu_ratio, 2) : "-");
    }
    table.add_row(std::move(row));
  }
  if (measurements.empty())
    std::printf("# nothing measured\n");
  else
    table.print(stdout);
  if (peak.applies && std::any_of(measurements.begin(), measurements.end(),
                                  [](const Measurement& m) { return m.cpu_share < contended_cpu_share; }))
    std::printf(
        "# warning: rows with cpu %% below %.0f ran while other work took CPUs: their times are too long\n"
        "# and their eff %% is unreliable (the FMA peak may have been lowered too); rerun on a quiet machine\n",
        contended_cpu_share * 100);
  for (const Skip& skip : skips)
    std::printf("# skipped %s %s %s: %s\n", std::string(hal::to_string(skip.implementation)).c_str(),
                std::string(to_string(skip.direction)).c_str(), shape_name(skip.shape).c_str(), skip.reason.c_str());

  const std::vector<Ratio> ratios = flash_math_ratios(measurements);
  if (!ratios.empty()) {
    std::printf("# flash vs math: speedup = math ms / flash ms, memory = math extra / flash extra\n");
    std::vector<Table::Column> ratio_columns = shape_columns(options);
    for (const Table::Column& column : {Table::Column{"dir", true}, Table::Column{"speedup"}, Table::Column{"memory"}})
      ratio_columns.push_back(column);
    Table ratio_table(std::move(ratio_columns));
    for (const Ratio& r : ratios) {
      std::vector<std::string> row = shape_cells(options, r.shape);
      row.push_back(std::string(to_string(r.direction)));
      row.push_back(format_fixed(r.speedup, 2));
      row.push_back(format_fixed(r.memory_ratio, 2));
      ratio_table.add_row(std::move(row));
    }
    ratio_table.print(stdout);
  }
  if (torch != nullptr) {
    if (!torch->reason().empty()) {
      std::printf("# torch: not measured: %s\n", torch->reason().c_str());
    } else {
      const std::string capability = torch->cpu_capability();
      std::printf(
          "# torch %s%s, %d threads: torch.nn.functional.scaled_dot_product_attention in a child process, its\n"
          "# calls alternating with hal's (ABAB...); torch ms = median wall time; torch/hal = median of each\n"
          "# pair's torch ms / hal ms, range = their lowest..highest; > 1: hal is faster; torch/hal cpu-s:\n"
          "# the same by CPU seconds per call\n",
          torch->version().c_str(), capability.empty() ? "" : (" (CPU capability " + capability + ")").c_str(),
          torch->threads());
      std::vector<std::string> notes;
      for (const Measurement& m : measurements)
        if (m.torch && !m.torch->note.empty() && std::find(notes.begin(), notes.end(), m.torch->note) == notes.end())
          notes.push_back(m.torch->note);
      for (const std::string& note : notes) std::printf("# torch: %s\n", note.c_str());
    }
  }
}

Json to_json(const AttnOptions& options, const hal::Runtime& runtime, const hal::Device& device, const PeakReport& peak,
             const std::vector<Measurement>& measurements, const std::vector<Skip>& skips, const TorchPeer* torch,
             const std::optional<TorchIsa>& isa) {
  Json directions = Json::array();
  for (const Direction d : options.directions()) directions.push_back(to_string(d));
  Json implementations = Json::array();
  for (const AttentionImplementation i : options.implementations) implementations.push_back(hal::to_string(i));
  Json parameters = {
      {"implementations", implementations},
      {"seq", options.seqs},
      {"seq_q", options.separate_seq_q() ? Json(options.seq_qs) : Json(nullptr)},
      {"batch", options.batch},
      {"heads_q", options.heads_q},
      {"heads_kv", options.heads_kv},
      {"head_dim", options.head_dim},
      {"dtype", hal::to_string(options.dtype)},
      {"causal", options.causal},
      {"causal_alignment", options.causal
                               ? Json(options.separate_seq_q() ? "bottom_right where seq_q != seq_kv" : "top_left")
                               : Json(nullptr)},
      {"layout", layout_name(options.layout, false)},
      {"directions", directions},
      {"iterations", options.common.iterations ? Json(*options.common.iterations) : Json("auto")},
      {"statistic", "median"},
      {"clock", "hal events (execution); wall clock also reported"},
      {"flops", "visible query/key pairs only: forward 2*pairs*(d_qk+d_v), backward 2*pairs*(3*d_qk+2*d_v)"},
      {"kv_bytes", "K and V read once per call: batch*heads_kv*seq_kv*(d_qk+d_v)*dtype size; kv_gbps = kv_bytes/s/1e9"},
      {"max_call_seconds", options.max_call_seconds},
      {"max_workspace_bytes", options.max_workspace}};
  Json results = Json::array();
  for (const Measurement& m : measurements) {
    const std::optional<double> eff = efficiency(m, peak);
    Json row = {{"implementation", hal::to_string(m.implementation)},
                {"direction", to_string(m.direction)},
                {"seq", m.shape.seq_kv},
                {"seq_q", m.shape.seq_q},
                {"iterations", m.iterations},
                {"ms_per_call", m.event_ms},
                {"wall_ms_per_call", m.wall_ms},
                {"min_ms_per_call", m.min_event_ms},
                {"flops", m.flops},
                {"tflops", m.gflops() * 1e-3},
                {"efficiency", eff ? Json(*eff) : Json(nullptr)},
                {"kv_bytes", m.kv_bytes},
                {"kv_gbps", m.kv_gbps()},
                {"kv_over_memcpy", kv_over_memcpy(m, peak) ? Json(*kv_over_memcpy(m, peak)) : Json(nullptr)},
                {"cpu_share", peak.applies ? Json(m.cpu_share) : Json(nullptr)},
                {"gflops_per_cpu_second", peak.applies ? Json(m.gflops_per_cpu_second()) : Json(nullptr)},
                {"efficiency_per_cpu_second",
                 efficiency_per_cpu_second(m, peak) ? Json(*efficiency_per_cpu_second(m, peak)) : Json(nullptr)},
                {"peak_extra_bytes", m.workspace_bytes}};
    if (torch != nullptr) {
      const std::optional<TorchPairs>& t = m.torch;
      row["torch_ms_per_call"] = t ? Json(t->ms) : Json(nullptr);
      row["torch_cpu_share"] = t ? Json(t->cpu_share) : Json(nullptr);
      row["torch_over_hal"] = t ? Json(t->ratio_median) : Json(nullptr);
      row["torch_over_hal_range"] = t ? Json::array({t->ratio_min, t->ratio_max}) : Json(nullptr);
      const std::optional<double> cpu_ratio = torch_over_hal_cpu_seconds(m);
      row["torch_over_hal_cpu_seconds"] = cpu_ratio && peak.applies ? Json(*cpu_ratio) : Json(nullptr);
      row["torch_note"] = t ? Json(t->note) : Json(nullptr);
    }
    results.push_back(std::move(row));
  }
  Json document = make_document("attn", runtime, device, std::move(parameters), std::move(results));
  document["fma_peak"] = {{"isa", peak.before.peak.isa},
                          {"threads", peak.threads()},
                          {"per_thread_gflops", peak.before.peak.per_thread_gflops},
                          {"all_threads_gflops", peak.before.peak.all_threads_gflops},
                          {"gflops_per_cpu_second", peak.before.gflops_per_cpu_second},
                          {"all_threads_gflops_after", peak.after.peak.all_threads_gflops},
                          {"gflops_per_cpu_second_after", peak.after.gflops_per_cpu_second},
                          {"efficiency_reference_gflops", peak.reference_gflops()},
                          {"efficiency_reference_gflops_per_cpu_second", peak.reference_gflops_per_cpu_second()},
                          {"applies_to_device", peak.applies}};
  document["memcpy"] = peak.memcpy ? Json{{"gbps", peak.memcpy->gbps},
                                          {"seconds", peak.memcpy->seconds},
                                          {"threads", peak.memcpy->threads},
                                          {"bytes", peak.memcpy->bytes},
                                          {"repeats", peak.memcpy->repeats},
                                          {"statistic", "best"},
                                          {"bandwidth",
                                           "bytes copied per second, 1e9 (as halbench mem); memory "
                                           "traffic is twice that: each byte is read and written"}}
                                   : Json(nullptr);
  Json ratios = Json::array();
  for (const Ratio& r : flash_math_ratios(measurements))
    ratios.push_back({{"seq", r.shape.seq_kv},
                      {"seq_q", r.shape.seq_q},
                      {"direction", to_string(r.direction)},
                      {"flash_speedup_over_math", r.speedup},
                      {"math_over_flash_memory", r.memory_ratio}});
  document["flash_vs_math"] = std::move(ratios);
  Json skipped = Json::array();
  for (const Skip& s : skips)
    skipped.push_back({{"implementation", hal::to_string(s.implementation)},
                       {"direction", to_string(s.direction)},
                       {"seq", s.shape.seq_kv},
                       {"seq_q", s.shape.seq_q},
                       {"reason", s.reason}});
  document["skipped"] = std::move(skipped);
  if (torch != nullptr) {
    document["torch"] = torch->document();
    document["torch_pairing"] = "alternating: each timed hal call is followed by one torch call (ABAB...)";
    document["torch_isa_environment"] = isa && isa->recognized ? torch_isa_json(*isa) : Json(nullptr);
  }
  return document;
}

constexpr std::string_view description =
    "Scaled-dot-product attention through hal::attention_forward / attention_backward,\n"
    "one implementation forced per call, over a sequence-length sweep. Default shape:\n"
    "Llama-3-8B (32 query heads, 8 kv heads, head dim 128). Reports ms per call,\n"
    "TFLOP/s (visible query/key pairs only), the implementation's workspace, and\n"
    "efficiency against the f32 FMA peak measured first in the same run; plus the\n"
    "flash/math speed ratio per shape. Shapes whose call would take longer than\n"
    "--max-call-seconds (estimated from the smaller shapes) or need more workspace\n"
    "than --max-workspace are skipped and listed as such.\n";

AttnOptions parse_options(std::span<const std::string_view> arguments, bool& help_shown) {
  AttnOptions options;
  OptionParser parser("halbench attn", std::string(description));
  add_common_options(parser, options.common,
                     "timed calls per shape, after one warm-up call\n"
                     "(default: enough for about 1 s, at least 2, at most 50)");
  parser.add_value(
      "--impl", "LIST", "implementations, in order: flash, math, fused (default flash,math)",
      [&](std::string_view text) {
        options.implementations.clear();
        for (const std::string& item : split_list("--impl", text)) {
          const auto implementation = hal::parse_attention_implementation(item);
          if (!implementation)
            throw UsageError("--impl: '" + item + "' is not an implementation; expected flash, math or fused");
          options.implementations.push_back(*implementation);
        }
      });
  parser.add_value("--seq", "LIST",
                   "sequence lengths (query = key/value), e.g. 512,1024,2048,4096,8192\n"
                   "(default 512,2048,4096); with --seq-q the key/value lengths",
                   [&](std::string_view text) {
                     options.seqs = parse_lengths("--seq", text);
                     options.seqs_given = true;
                   });
  parser.add_value("--seq-q", "LIST",
                   "query lengths, e.g. 1,16 (decode, chunked prefill): every pair of a --seq-q\n"
                   "and a --seq value is measured; with --causal the queries are the last\n"
                   "seq_q positions (mask aligned bottom-right). Default: query = key length",
                   [&](std::string_view text) { options.seq_qs = parse_lengths("--seq-q", text); });
  parser.add_value("--batch", "N", "batch size (default 1)",
                   [&](std::string_view text) { options.batch = parse_positive("--batch", text); });
  parser.add_value("--heads-q", "N", "query heads (default 32)",
                   [&](std::string_view text) { options.heads_q = parse_positive("--heads-q", text); });
  parser.add_value("--heads-kv", "N", "key/value heads; must divide --heads-q (default 8)",
                   [&](std::string_view text) { options.heads_kv = parse_positive("--heads-kv", text); });
  parser.add_value("--head-dim", "N", "head dimension of q, k and v (default 128)",
                   [&](std::string_view text) { options.head_dim = parse_positive("--head-dim", text); });
  parser.add_value("--dtype", "TYPE", "f32, f16 or bf16 (default f32)", [&](std::string_view text) {
    const std::optional<hal::DType> dtype = hal::parse_dtype(text);
    if (!dtype || (*dtype != hal::DType::f32 && *dtype != hal::DType::f16 && *dtype != hal::DType::bf16))
      throw UsageError("--dtype: '" + std::string(text) + "' is not an attention dtype; expected f32, f16 or bf16");
    options.dtype = *dtype;
  });
  parser.add_value("--layout", "ORDER",
                   "memory order of q, k, v and o: bshd ([batch, seq, heads, dim], as flash-attn takes them)\n"
                   "or bhsd ([batch, heads, seq, dim], as a KV cache usually holds them) (default bshd)",
                   [&](std::string_view text) {
                     if (text == "bshd") {
                       options.layout = hal::AttentionLayout::bshd;
                     } else if (text == "bhsd") {
                       options.layout = hal::AttentionLayout::bhsd;
                     } else {
                       throw UsageError("--layout: '" + std::string(text) + "' is not a layout; expected bshd or bhsd");
                     }
                   });
  parser.add_switch("--causal",
                    "causal mask; with --seq-q and unequal lengths aligned bottom-right\n"
                    "(query i sees keys up to i + seq_kv - seq_q)",
                    options.causal);
  parser.add_switch("--backward", "measure the backward pass too (about 2.5x the forward FLOPs)", options.backward);
  parser.add_switch("--forward-only", "measure the forward pass only (the default)", options.forward_only);
  parser.add_value(
      "--max-call-seconds", "S", "skip a shape whose call is estimated to take longer (default 10; 0: no limit)",
      [&](std::string_view text) { options.max_call_seconds = parse_seconds("--max-call-seconds", text); });
  parser.add_value("--max-workspace", "BYTES", "skip a shape whose workspace is larger (default 4G)",
                   [&](std::string_view text) { options.max_workspace = parse_byte_size("--max-workspace", text); });
  parser.add_switch("--compare-torch",
                    "also run PyTorch's scaled_dot_product_attention (torch_sdpa.py, same shapes\n"
                    "and threads) call by call alternating with hal's, and add torch ms and\n"
                    "torch/hal (median of the paired ratios, with their range) columns",
                    options.compare_torch);
  parser.add_switch("--sweep",
                    "every shape class against torch, call by call: f32 and bf16 x head dim 64\n"
                    "and 128 x causal and full; prefill (--seq, default 32..4096) forward and\n"
                    "backward, decode and a 16-query chunk against each length forward; prints\n"
                    "the grid of torch/hal ratios and the goals (the first --impl runs; default\n"
                    "5 timed calls a cell, more while a cell's ratio is unsettled around 1.0)",
                    options.sweep);
  parser.add_value("--max-pairs", "N",
                   "--sweep: the most hal/torch pairs a cell takes while 1.0 lies within the\n"
                   "95% interval of its median ratio (default 41; at most --iters: none extra)",
                   [&](std::string_view text) { options.max_pairs = parse_count("--max-pairs", text); });
  parser.add_value("--python", "PATH", "Python interpreter for --compare-torch (default python3)",
                   [&](std::string_view text) { options.python = std::string(text); });
  parser.add_value(
      "--torch-script", "PATH",
      "torch_sdpa.py for --compare-torch (default: the one beside halbench's sources\nor installed in share/hal)",
      [&](std::string_view text) { options.torch_script = std::string(text); });
  help_shown = !parser.parse(arguments);
  if (options.sweep) {
    if (!options.seq_qs.empty() || options.backward || options.forward_only)
      throw UsageError(
          "--sweep chooses the query lengths and directions itself; leave out --seq-q, --backward and "
          "--forward-only");
    if (!options.seqs_given) options.seqs = sweep_seqs;
    if (!options.common.iterations) options.common.iterations = sweep_iterations;
    options.compare_torch = true;
    options.settle_around = sweep_goal_every_cell;
  }
  if (options.backward && options.forward_only)
    throw UsageError("--backward and --forward-only contradict each other; give one");
  // Keeps every element count and byte offset far from overflowing.
  constexpr double max_elements = 1ull << 40;
  const std::int64_t longest = std::max(options.seqs.back(), options.seq_qs.empty() ? 0 : options.seq_qs.back());
  const double largest = static_cast<double>(options.batch) * static_cast<double>(options.heads_q) *
                         static_cast<double>(longest) * static_cast<double>(options.head_dim);
  if (largest > max_elements)
    throw UsageError("the shape batch " + std::to_string(options.batch) + " x heads " +
                     std::to_string(options.heads_q) + " x seq " + std::to_string(longest) + " x head dim " +
                     std::to_string(options.head_dim) + " has over 2^40 elements per tensor; choose a smaller one");
  if (options.heads_q % options.heads_kv != 0)
    throw UsageError("--heads-kv " + std::to_string(options.heads_kv) + " does not divide --heads-q " +
                     std::to_string(options.heads_q) + "; expected a divisor (GQA groups are equal)");
  return options;
}

// ---- --sweep --------------------------------------------------------------------------------

struct SweepRow {
  std::string name;  // "f32 d64 causal fwd"
  hal::DType dtype;
  std::int64_t head_dim;
  bool causal;
  Direction direction;
  std::vector<std::size_t> cells;  // indices into the sweep's measurements
};

// Beside a cell's ratio: "*" where it took extra pairs and settled, "?"
// where 1.0 is still within its median's interval.
std::string settle_mark(const TorchPairs& torch, std::uint64_t iterations) {
  if (torch.ratio_interval.contains(sweep_goal_every_cell)) return "?";
  return torch.ratios.size() > iterations ? "*" : "";
}

// "32" for prefill, "q1/32" for a query length against a key length.
std::string sweep_column(const Shape& shape) {
  return shape.seq_q == shape.seq_kv ? std::to_string(shape.seq_kv)
                                     : "q" + std::to_string(shape.seq_q) + "/" + std::to_string(shape.seq_kv);
}

// Runs every (dtype, head dim, mask): prefill forward and backward, then the
// decode and chunk shapes forward, each cell hal's call and torch's taking
// turns; prints the grid of torch/hal (median of the paired ratios) and the
// goals, or the JSON document.
int run_sweep(const AttnOptions& options, const hal::Runtime& runtime, const hal::Device& device, PeakReport& peak,
              const std::optional<TorchIsa>& isa) {
  std::vector<Measurement> measurements;
  std::vector<Skip> skips;
  std::vector<SweepRow> rows;
  std::vector<std::string> skip_rows;  // the configuration of each skip, e.g. "f32 d64 causal"
  std::string torch_version, torch_capability;
  for (const hal::DType dtype : {hal::DType::f32, hal::DType::bf16})
    for (const std::int64_t head_dim : {std::int64_t{64}, std::int64_t{128}})
      for (const bool causal : {true, false}) {
        const std::string name =
            std::string(hal::to_string(dtype)) + " d" + std::to_string(head_dim) + (causal ? " causal" : " full");
        SweepRow forward{name + " fwd", dtype, head_dim, causal, Direction::forward, {}};
        SweepRow backward{name + " bwd", dtype, head_dim, causal, Direction::backward, {}};
        for (const bool decode : {false, true}) {
          AttnOptions cell_options = options;
          cell_options.dtype = dtype;
          cell_options.head_dim = head_dim;
          cell_options.causal = causal;
          cell_options.backward = !decode;
          cell_options.seq_qs = decode ? sweep_query_lengths : std::vector<std::int64_t>{};
          TorchPeer torch(
              TorchRequest{.seqs = cell_options.seqs,
                           .seq_qs = cell_options.seq_qs,
                           .batch = cell_options.batch,
                           .heads_q = cell_options.heads_q,
                           .heads_kv = cell_options.heads_kv,
                           .head_dim = head_dim,
                           .dtype = std::string(hal::to_string(dtype)),
                           .causal = causal,
                           .backward = !decode,
                           .threads = peak.threads(),
                           .environment = isa ? isa->set : std::vector<std::pair<std::string, std::string>>{}},
              options.python, options.torch_script);
          if (!torch.reason().empty()) {
            std::fprintf(stderr, "halbench attn --sweep: torch cannot run: %s\n", torch.reason().c_str());
            return exit_failure;
          }
          torch_version = torch.version();
          torch_capability = torch.cpu_capability();
          Runner runner(cell_options, device, peak.threads(), &torch);
          const std::size_t first = measurements.size();
          for (const Shape& shape : cell_options.shapes()) {
            if (decode && shape.seq_q >= shape.seq_kv) continue;  // a prefill cell already
            std::optional<Tensors> tensors;
            for (const Direction direction : cell_options.directions())
              runner.run(options.implementations.front(), shape, direction, tensors, measurements, skips);
          }
          skip_rows.resize(skips.size(), name);
          for (std::size_t i = first; i < measurements.size(); ++i)
            (measurements[i].direction == Direction::forward ? forward : backward).cells.push_back(i);
        }
        rows.push_back(std::move(forward));
        rows.push_back(std::move(backward));
      }
  peak.after = measure_peak();

  // The goals, over every cell torch and hal both ran.
  std::vector<double> ratios;
  const Measurement* worst = nullptr;
  const Measurement* worst_short = nullptr;
  const SweepRow* worst_row = nullptr;
  for (const SweepRow& row : rows)
    for (const std::size_t index : row.cells) {
      const Measurement* m = &measurements[index];
      if (!m->torch) continue;
      ratios.push_back(m->torch->ratio_median);
      if (worst == nullptr || m->torch->ratio_median < worst->torch->ratio_median) {
        worst = m;
        worst_row = &row;
      }
      if (m->shape.seq_q == m->shape.seq_kv && m->shape.seq_kv <= sweep_short_seq &&
          (worst_short == nullptr || m->torch->ratio_median < worst_short->torch->ratio_median))
        worst_short = m;
    }
  const double median_ratio = ratios.empty() ? 0.0 : median(ratios);
  auto verdict = [](bool met) { return met ? "met" : "missed"; };

  if (options.common.json) {
    Json cells = Json::array();
    for (const SweepRow& row : rows)
      for (const std::size_t index : row.cells) {
        const Measurement* m = &measurements[index];
        cells.push_back(
            {{"dtype", hal::to_string(row.dtype)},
             {"head_dim", row.head_dim},
             {"causal", row.causal},
             {"direction", to_string(row.direction)},
             {"seq_q", m->shape.seq_q},
             {"seq", m->shape.seq_kv},
             {"implementation", hal::to_string(m->implementation)},
             {"iterations", m->iterations},
             {"ms_per_call", m->event_ms},
             {"torch_ms_per_call", m->torch ? Json(m->torch->ms) : Json(nullptr)},
             {"torch_over_hal", m->torch ? Json(m->torch->ratio_median) : Json(nullptr)},
             {"torch_over_hal_range",
              m->torch ? Json::array({m->torch->ratio_min, m->torch->ratio_max}) : Json(nullptr)},
             {"torch_over_hal_interval95",
              m->torch ? Json::array({m->torch->ratio_interval.low, m->torch->ratio_interval.high}) : Json(nullptr)},
             {"torch_over_hal_pairs", m->torch ? Json(m->torch->ratios) : Json(nullptr)},
             {"pairs", m->torch ? Json(m->torch->ratios.size()) : Json(nullptr)}});
      }
    Json skipped = Json::array();
    for (std::size_t i = 0; i < skips.size(); ++i) {
      const Skip& skip = skips[i];
      skipped.push_back({{"configuration", skip_rows[i]},
                         {"direction", to_string(skip.direction)},
                         {"seq", skip.shape.seq_kv},
                         {"seq_q", skip.shape.seq_q},
                         {"reason", skip.reason}});
    }
    Json parameters = {{"seq", options.seqs},
                       {"seq_q", sweep_query_lengths},
                       {"batch", options.batch},
                       {"heads_q", options.heads_q},
                       {"heads_kv", options.heads_kv},
                       {"layout", layout_name(options.layout, false)},
                       {"implementation", hal::to_string(options.implementations.front())},
                       {"iterations", *options.common.iterations},
                       {"max_pairs", options.max_pairs},
                       {"pairing", "alternating: each timed hal call is followed by one torch call (ABAB...)"},
                       {"statistic", "median of the per-pair ratios torch ms / hal ms"},
                       {"settling",
                        "a cell whose 95% interval of the median ratio contains 1.0 takes more pairs, up to "
                        "max_pairs"}};
    Json document = make_document("attn_sweep", runtime, device, std::move(parameters), std::move(cells));
    document["skipped"] = std::move(skipped);
    document["torch"] = {{"version", torch_version}, {"cpu_capability", torch_capability}};
    document["torch_isa_environment"] = isa && isa->recognized ? torch_isa_json(*isa) : Json(nullptr);
    document["goals"] = {
        {"every_cell",
         {{"goal", sweep_goal_every_cell}, {"value", worst ? Json(worst->torch->ratio_median) : Json(nullptr)}}},
        {"median_cell", {{"goal", sweep_goal_median}, {"value", median_ratio}, {"cells", ratios.size()}}},
        {"short_prefill",
         {{"goal", sweep_goal_every_cell},
          {"value", worst_short ? Json(worst_short->torch->ratio_median) : Json(nullptr)}}}};
    print_json(document);
    return exit_success;
  }

  std::printf(
      "# sweep: %s; batch %lld, %lld query heads, %lld kv heads, %s; %llu calls a cell, each hal call followed by\n"
      "# one torch call (torch %s%s); a cell = the median of the per-pair ratios torch ms / hal ms (> 1: hal is\n"
      "# faster); columns: prefill length, or q<n>/<keys> (n queries against that many keys, causal bottom-right)\n"
      "# a cell whose median's 95%% interval held 1.0 took more pairs, up to %llu: * settled, ? still unsettled\n",
      std::string(hal::to_string(options.implementations.front())).c_str(), static_cast<long long>(options.batch),
      static_cast<long long>(options.heads_q), static_cast<long long>(options.heads_kv),
      layout_name(options.layout, true).c_str(), static_cast<unsigned long long>(*options.common.iterations),
      torch_version.c_str(), torch_capability.empty() ? "" : (", CPU capability " + torch_capability).c_str(),
      static_cast<unsigned long long>(options.max_pairs));
  std::vector<std::string> column_names;
  for (const SweepRow& row : rows)
    for (const std::size_t index : row.cells)
      if (const std::string column = sweep_column(measurements[index].shape);
          std::find(column_names.begin(), column_names.end(), column) == column_names.end())
        column_names.push_back(column);
  std::vector<Table::Column> columns{{"cell", true}};
  for (const std::string& column : column_names) columns.push_back({column});
  Table table(std::move(columns));
  for (const SweepRow& row : rows) {
    std::vector<std::string> cells(column_names.size() + 1, "");
    cells[0] = row.name;
    for (const std::size_t index : row.cells) {
      const Measurement* m = &measurements[index];
      const auto at = std::find(column_names.begin(), column_names.end(), sweep_column(m->shape));
      cells[static_cast<std::size_t>(at - column_names.begin()) + 1] =
          m->torch ? format_fixed(m->torch->ratio_median, 2) + settle_mark(*m->torch, *options.common.iterations) : "-";
    }
    table.add_row(std::move(cells));
  }
  table.print(stdout);
  for (std::size_t i = 0; i < skips.size(); ++i)
    std::printf("# skipped %s %s %s: %s\n", skip_rows[i].c_str(), std::string(to_string(skips[i].direction)).c_str(),
                shape_name(skips[i].shape).c_str(), skips[i].reason.c_str());
  if (worst != nullptr)
    std::printf("goal every cell >= %.1fx: %.2f (worst: %s at %s, %zu pairs, 95%% interval %.2f..%.2f): %s\n",
                sweep_goal_every_cell, worst->torch->ratio_median, worst_row->name.c_str(),
                sweep_column(worst->shape).c_str(), worst->torch->ratios.size(), worst->torch->ratio_interval.low,
                worst->torch->ratio_interval.high, verdict(worst->torch->ratio_median >= sweep_goal_every_cell));
  std::printf("goal median cell >= %.1fx: %.2f (%zu cells): %s\n", sweep_goal_median, median_ratio, ratios.size(),
              verdict(median_ratio >= sweep_goal_median));
  if (worst_short != nullptr)
    std::printf("goal forward and backward at seq <= %lld >= %.1fx: %.2f: %s\n",
                static_cast<long long>(sweep_short_seq), sweep_goal_every_cell, worst_short->torch->ratio_median,
                verdict(worst_short->torch->ratio_median >= sweep_goal_every_cell));
  return exit_success;
}

}  // namespace

int run_attn(std::span<const std::string_view> arguments) {
  bool help_shown = false;
  const AttnOptions options = parse_options(arguments, help_shown);
  if (help_shown) return exit_success;

  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = select_device(runtime, options.common.device_id);
  // halbench runs the host kernels itself (the FMA peak and its thread pool):
  // with the instruction set and thread count the host plugin runs (it warns
  // about a value it ignores).
  const BackendSetting host_isa = backend_setting(runtime, "host", "isa");
  const BackendSetting host_threads = backend_setting(runtime, "host", "threads");
  hal::host::configure_host_kernels({host_isa.value, host_isa.origin}, {host_threads.value, host_threads.origin});
  // Measured before any attention call, while the machine runs nothing of ours.
  PeakReport peak;
  peak.before = measure_peak();
  peak.applies = device.info().type == hal::DeviceType::cpu;
  if (peak.applies) peak.memcpy = measure_host_memcpy(memcpy_bytes, peak.threads(), memcpy_repeats);
  const std::optional<TorchIsa> isa = options.compare_torch ? torch_isa(host_isa) : std::nullopt;
  if (options.sweep) {
    if (!options.common.json) {
      print_heading("attn --sweep", device);
      if (isa) print_torch_isa(*isa);
      std::fflush(stdout);
    }
    return run_sweep(options, runtime, device, peak, isa);
  }
  if (!options.common.json) print_preamble(options, device, peak, isa);

  // Started before hal's calls: each timed hal call is followed by one of torch's.
  std::unique_ptr<TorchPeer> torch;
  if (options.compare_torch)
    torch = std::make_unique<TorchPeer>(
        TorchRequest{.seqs = options.seqs,
                     .seq_qs = options.seq_qs,
                     .batch = options.batch,
                     .heads_q = options.heads_q,
                     .heads_kv = options.heads_kv,
                     .head_dim = options.head_dim,
                     .dtype = std::string(hal::to_string(options.dtype)),
                     .causal = options.causal,
                     .backward = options.backward,
                     .threads = peak.threads(),
                     .environment = isa ? isa->set : std::vector<std::pair<std::string, std::string>>{}},
        options.python, options.torch_script);

  std::vector<Measurement> measurements;
  std::vector<Skip> skips;
  Runner runner(options, device, peak.threads(), torch && torch->reason().empty() ? torch.get() : nullptr);
  for (const Shape& shape : options.shapes()) {
    std::optional<Tensors> tensors;
    for (const Direction direction : options.directions())
      for (const AttentionImplementation implementation : options.implementations)
        runner.run(implementation, shape, direction, tensors, measurements, skips);
  }

  peak.after = measure_peak();

  if (options.common.json)
    print_json(to_json(options, runtime, device, peak, measurements, skips, torch.get(), isa));
  else
    print_table(options, device, peak, measurements, skips, torch.get());
  return exit_success;
}

}  // namespace halbench
