// Planning a run and running each case in its own process with a time limit,
// so a backend that crashes or hangs is recorded and the run goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hal/conformance/case.hpp"
#include "hal/conformance/profile.hpp"
#include "hal/device.hpp"
#include "hal/probe_cache.hpp"

namespace hal::conformance {

struct PlannedCase {
  const Case* test_case = nullptr;
  Device device;
  CaseSettings settings;
  double timeout_seconds = 60;
};

struct Plan {
  std::vector<PlannedCase> to_run;
  // Results known without running anything: UNSUPPORTED (capability not
  // claimed) and SKIPPED (profile patterns no registered case implements).
  std::vector<CaseResult> decided;
};

// Levels, as operators plan maintenance windows: each sets the tiers, the
// sizes, the soak time and how much memory the memory test covers, and has a
// time budget the plan's estimate is held against.
enum class Level { quick, standard, extended, burn_in };
std::string_view to_string(Level level);
// Throws std::invalid_argument naming the bad value and the levels.
Level parse_level(std::string_view text);

struct LevelPreset {
  std::vector<Tier> tiers;
  bool quick = true;
  double stress_seconds = 10;
  std::uint64_t memtest_max_bytes = 0;  // 0: memtest_fraction of the free memory
  double budget_seconds = 60;
};
// burn-in soaks for `duration` seconds (default one hour); the other levels ignore it.
LevelPreset preset_of(Level level, std::optional<double> duration = std::nullopt);
void apply_level(CaseSettings& settings, const LevelPreset& preset);

struct PlanOptions {
  std::optional<std::vector<Tier>> tiers;  // --tier: replaces the profile's tiers
  std::vector<std::string> filters;        // --filter globs; any may match
  bool probes_only = false;                // --probe-only: only probe cases
  std::optional<double> timeout_seconds;   // --timeout: replaces the profile's
  std::uint64_t seed = 1;                  // --seed: recorded in every result
  std::optional<LevelPreset> level;        // --level: tiers (unless --tier), sizes, soak, memtest cap
};

// Seconds the planned cases take by their estimates, run `jobs` at a time.
double estimated_seconds(const std::vector<PlannedCase>& plan, int jobs);

Plan make_plan(const Registry& registry, const Profile& profile, const std::vector<Device>& devices,
               const PlanOptions& options);

struct Progress {
  std::size_t finished = 0, total = 0;
  const CaseResult* result = nullptr;  // the case that just finished, or null when one started
  std::vector<std::string> running;    // "case on device" of the cases in flight
};

struct RunnerOptions {
  // The program and leading arguments that run one case; the runner appends
  // --run-case ID --device ID --case-settings JSON --result-fd 3.
  std::vector<std::string> case_command;
  int jobs = 1;
  std::function<void(const Progress&)> on_progress;  // called from one thread at a time
};

// Runs every planned case in a child process, `jobs` at a time; results come
// back in plan order. A child that dies is CRASH, one past its time limit is
// killed (SIGKILL to its process group) and TIMEOUT, one that cannot be
// started or reports garbage is ERROR.
std::vector<CaseResult> run_cases(const std::vector<PlannedCase>& plan, const RunnerOptions& options);
CaseResult run_case_process(const PlannedCase& planned, const std::vector<std::string>& case_command);

// The case process: runs one case on one device and writes its result as
// JSON to result_fd. Returns the process exit status (0 when a result was
// written, whatever the outcome).
int case_process_main(const Registry& registry, std::string_view case_id, std::string_view device_id,
                      std::string_view settings_json, int result_fd);

// A device more than peer_rate_margin slower than the median of its peers of
// the same model (models: device id -> model name) in a compute soak
// ("stress.compute.*" results with a "rate") fails it, naming the figures;
// one device, or one of a model, has no peers and is left as it is.
inline constexpr double peer_rate_margin = 0.10;
void compare_with_peers(std::vector<CaseResult>& results, const std::map<std::string, std::string>& models);

// One result per profile requirement and device ("requirement.<name>"): PASS
// when a matching case passed there, FAIL when matching cases ran and none
// passed, SKIPPED when none is implemented in this build or none ran.
std::vector<CaseResult> evaluate_requirements(const Profile& profile, const Registry& registry,
                                              const std::vector<Device>& devices,
                                              const std::vector<CaseResult>& results);

// Writes each probe case's verdict (present: it passed; absent: it failed,
// crashed or timed out) for its capability. Returns how many were recorded.
std::size_t record_probes(ProbeCache& cache, const std::vector<CaseResult>& results,
                          const std::vector<Device>& devices);

}  // namespace hal::conformance
