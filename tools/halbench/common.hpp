// What every halbench benchmark shares: argument parsing, device selection,
// timing, statistics and table / JSON output.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hal/hal.hpp"

namespace halbench {

// Ordered so that JSON keys come out in the order they are written.
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Exit codes: usage errors are distinct from failures while measuring.
constexpr int exit_success = 0;
constexpr int exit_failure = 1;
constexpr int exit_usage = 2;

// A bad flag or value; main prints it with a pointer to --help and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A minimal "--flag value" / "--flag=value" parser that also writes --help.
// An option may have short aliases ("-b" for "--minbytes"), so that a
// benchmark can keep the flags its users know from other tools.
class OptionParser {
 public:
  // command: "halbench mem"; description: the paragraphs after the usage line.
  OptionParser(std::string command, std::string description);

  void add_switch(std::string name, std::string help, bool& target);
  // parse gets the raw text and throws UsageError for a bad one.
  void add_value(std::string name, std::string value_name, std::string help,
                 std::function<void(std::string_view)> parse);
  // Another name for the option added as name; --help lists it beside that name.
  void add_alias(std::string alias, std::string_view name);

  // Returns false when --help was asked for (the usage is then printed).
  bool parse(std::span<const std::string_view> arguments);
  std::string usage() const;

 private:
  struct Option {
    std::string name;
    std::string value_name;  // empty for a switch
    std::string help;
    std::function<void(std::string_view)> apply;
    std::vector<std::string> aliases;  // short names such as "-b"
  };
  const Option* find(std::string_view name) const;
  // "-b, --minbytes" with separator ", "
  static std::string names_of(const Option& option, std::string_view separator);

  std::string command_;
  std::string description_;
  std::vector<Option> options_;
};

// The flags every subcommand has.
struct CommonOptions {
  std::optional<std::string> device_id;
  bool json = false;
  std::optional<std::uint64_t> iterations;
};

inline constexpr std::string_view default_device_help =
    "device to measure: an id (host:0, cuda:1), UUID or PCI bus id\n"
    "(default: the first accelerator, else the first device)";

// Adds --device, --json and --iters; iterations_help says what one iteration
// is, device_help what --device picks when it is not given.
void add_common_options(OptionParser& parser, CommonOptions& options, std::string iterations_help,
                        std::string_view device_help = default_device_help);
// Parses the arguments of a benchmark that has only the common flags
// (command: "halbench dispatch"); false when --help was asked for.
bool parse_common_options(std::span<const std::string_view> arguments, std::string command,
                          std::string_view description, CommonOptions& options, std::string iterations_help);

// "--iters", "100" -> 100; rejects signs, junk and values below minimum.
std::uint64_t parse_count(std::string_view flag, std::string_view text, std::uint64_t minimum = 1);
// Plain bytes or a binary suffix: 4096, 4K, 4KiB, 256M, 1GiB; at least minimum.
std::uint64_t parse_byte_size(std::string_view flag, std::string_view text, std::uint64_t minimum = 1);
// A finite decimal number ("2", "1.5", "1e-3"); expected completes "'x' is not ..."
// and says what is allowed, e.g. "a number of seconds; expected a number >= 0".
double parse_real(std::string_view flag, std::string_view text, std::string_view expected);
// "a,b,c" -> {"a","b","c"}; empty items are a usage error.
std::vector<std::string> split_list(std::string_view flag, std::string_view text);

// The device named by --device, else the first accelerator, else the first
// device. Throws UsageError listing the devices there are.
hal::Device select_device(const hal::Runtime& runtime, const std::optional<std::string>& device_id);

// A backend option as libhal resolved it (the config file or its HAL_*
// variable), for what halbench runs itself beside hal (the host kernels'
// FMA peak, the raw MPI baseline): the value ("" when unset) and who set it.
struct BackendSetting {
  std::string value;
  std::string origin;  // "HAL_HOST_ISA=avx2", "config backend.host.isa (hal.toml:3)"
};
BackendSetting backend_setting(const hal::Runtime& runtime, const std::string& backend, const std::string& option);

// ---- timing and statistics ------------------------------------------------

double seconds_between(Clock::time_point start, Clock::time_point end);
// Nearest-rank percentile (0..100) of samples; samples must not be empty.
double percentile(std::vector<double> samples, double percent);
double median(std::vector<double> samples);
// A distribution-free 95% confidence interval of the median of samples (the
// order statistics whose binomial tails are each at most 2.5%); below six
// samples no such pair exists and it is their whole range (93.75% at five).
struct Interval {
  double low, high;
  bool contains(double value) const { return low <= value && value <= high; }
};
Interval median_interval(std::vector<double> samples);

// Latency of one operation, timed call by call (dispatch, telemetry).
// Untimed round trips first, so that thread start-up and first-use costs
// do not land in the tail percentiles.
inline constexpr std::uint64_t warm_up_round_trips = 100;

struct LatencyResult {
  std::string name;
  std::string description;
  std::uint64_t iterations = 0;
  double p50_us = 0, p99_us = 0, min_us = 0, mean_us = 0;
};

// Times each call of round_trip on its own and summarises the distribution.
template <typename RoundTrip>
LatencyResult measure_latency(std::string name, std::string description, std::uint64_t iterations,
                              RoundTrip round_trip) {
  for (std::uint64_t i = 0; i < warm_up_round_trips; ++i) round_trip();
  std::vector<double> microseconds;
  microseconds.reserve(iterations);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    const Clock::time_point start = Clock::now();
    round_trip();
    microseconds.push_back(seconds_between(start, Clock::now()) * 1e6);
  }
  LatencyResult result{std::move(name), std::move(description), iterations};
  result.p50_us = percentile(microseconds, 50);
  result.p99_us = percentile(microseconds, 99);
  result.min_us = *std::min_element(microseconds.begin(), microseconds.end());
  result.mean_us = std::accumulate(microseconds.begin(), microseconds.end(), 0.0) / static_cast<double>(iterations);
  return result;
}

// A latency as one row of a document's results.
Json latency_json(const LatencyResult& latency);

// Keeps the compiler from dropping work whose result nobody reads (a memcpy
// into a buffer that is never read again may legally be removed).
inline void keep_memory_effects(const void* pointer) { asm volatile("" : : "r"(pointer) : "memory"); }

// std::memcpy that the compiler cannot drop: halbench mem's baseline copy,
// and each thread's copy in measure_host_memcpy.
inline void copy_host_memory(void* destination, const void* source, std::size_t bytes) {
  std::memcpy(destination, source, bytes);
  keep_memory_effects(destination);
}

// Host memory bandwidth by std::memcpy on `threads` threads at once: each
// thread copies its own contiguous share of a `bytes` source into a `bytes`
// destination (plain host memory, first touched by the thread that copies
// it). One untimed copy, then `repeats` timed ones; a timed copy runs from
// the moment all threads are released to the moment the last one is done,
// and the fastest counts (the best of a few, so that a moment of other work
// on the machine does not lower it).
struct MemcpyBandwidth {
  double gbps = 0;     // bytes copied per second / 1e9; memory traffic is twice that (each byte read and written)
  double seconds = 0;  // the fastest copy of all `bytes`
  int threads = 0;
  std::uint64_t bytes = 0;
  int repeats = 0;
};
MemcpyBandwidth measure_host_memcpy(std::uint64_t bytes, int threads, int repeats);

// ---- output ----------------------------------------------------------------

// A text table whose columns are as wide as their widest cell: names
// left-aligned, numbers right-aligned so their digits line up.
class Table {
 public:
  struct Column {
    std::string header;
    bool align_left = false;
  };
  explicit Table(std::vector<Column> columns);
  void add_row(std::vector<std::string> cells);
  void print(std::FILE* out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

std::string format_fixed(double value, int decimals);
// "256 MiB", "1 GiB"
std::string format_size(std::uint64_t bytes);

// The "hal.bench/1" document: schema, benchmark, device, parameters, results, environment.
Json make_document(std::string_view benchmark, const hal::Runtime& runtime, const hal::Device& device,
                   Json parameters, Json results);
void print_json(const Json& document);
// The first line of table output: benchmark, device, hal version and machine load.
void print_heading(std::string_view benchmark, const hal::Device& device);

}  // namespace halbench
