// halbench: hal benchmarks. This file only picks the subcommand; each
// benchmark lives in its own file.
#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks.hpp"
#include "common.hpp"

namespace {

struct Subcommand {
  std::string_view name;
  std::string_view summary;
  int (*run)(std::span<const std::string_view> arguments);
};

constexpr std::array subcommands{
    Subcommand{"mem", "copy and fill bandwidth over a size sweep, against memcpy / memset", halbench::run_mem},
    Subcommand{"dispatch", "latency and throughput of empty stream operations and events", halbench::run_dispatch},
    Subcommand{"attn", "attention forward/backward TFLOP/s per implementation, against the FMA peak", halbench::run_attn},
    Subcommand{"coll", "collectives in nccl-tests columns, beside raw Gloo (run under halrun)", halbench::run_coll},
    Subcommand{"telemetry", "the cost of one telemetry snapshot (hal::telemetry)", halbench::run_telemetry},
};

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: halbench <benchmark> [options]\n\nbenchmarks:\n");
  for (const Subcommand& subcommand : subcommands)
    std::fprintf(out, "  %-10s %s\n", std::string(subcommand.name).c_str(), std::string(subcommand.summary).c_str());
  std::fprintf(out,
               "\nEvery benchmark takes --device ID, --iters N, --json and --help;\n"
               "run 'halbench <benchmark> --help' for the rest.\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> arguments(argv + 1, argv + argc);
  if (arguments.empty()) {
    print_usage(stderr);
    return halbench::exit_usage;
  }
  if (arguments[0] == "--help" || arguments[0] == "-h" || arguments[0] == "help") {
    print_usage(stdout);
    return halbench::exit_success;
  }
  const auto subcommand = std::find_if(subcommands.begin(), subcommands.end(),
                                       [&](const Subcommand& s) { return s.name == arguments[0]; });
  if (subcommand == subcommands.end()) {
    std::string known;
    for (const Subcommand& s : subcommands) known += (known.empty() ? "" : ", ") + std::string(s.name);
    std::fprintf(stderr, "halbench: unknown benchmark '%s'; the benchmarks are %s\n",
                 std::string(arguments[0]).c_str(), known.c_str());
    return halbench::exit_usage;
  }
  try {
    return subcommand->run(std::span(arguments).subspan(1));
  } catch (const halbench::UsageError& error) {
    std::fprintf(stderr, "halbench %s: %s\n(see 'halbench %s --help')\n", std::string(subcommand->name).c_str(),
                 error.what(), std::string(subcommand->name).c_str());
    return halbench::exit_usage;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "halbench %s: error: %s\n", std::string(subcommand->name).c_str(), error.what());
    return halbench::exit_failure;
  }
}
