// The run plan, the case processes and their supervision.
#include "hal/conformance/runner.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "hal/runtime.hpp"

extern char** environ;

namespace hal::conformance {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t log_tail_bytes = 8192;
constexpr int result_descriptor = 3;  // the child's end of the result pipe

bool filtered_in(const std::vector<std::string>& filters, std::string_view id) {
  return filters.empty() ||
         std::any_of(filters.begin(), filters.end(), [&](const std::string& filter) { return glob_match(filter, id); });
}

CaseResult decided_result(const std::string& case_id, const Device& device, std::string tier, Outcome outcome,
                          std::string message) {
  CaseResult result;
  result.case_id = case_id;
  result.device_id = device.id();
  result.tier = std::move(tier);
  result.outcome = outcome;
  result.evidence.message = std::move(message);
  return result;
}

std::string signal_description(int signal) {
  const char* name = sigabbrev_np(signal);
  return std::string("SIG") + (name != nullptr ? name : "?") + " (" + std::to_string(signal) + ")";
}

// A pipe whose ends sit above the descriptors the child maps (0-3), both
// close-on-exec so concurrently started children do not inherit them.
bool make_pipe(int ends[2]) {
  int raw[2];
  if (pipe2(raw, O_CLOEXEC) != 0) return false;
  for (int i = 0; i < 2; ++i) {
    ends[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    close(raw[i]);
  }
  return ends[0] >= 0 && ends[1] >= 0;
}

// The environment of the case process: the parent's, with HAL_BACKENDS
// narrowed to the device's backend so no other backend is loaded there.
std::vector<std::string> child_environment(const std::string& backend) {
  std::vector<std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (std::strncmp(*entry, "HAL_BACKENDS=", 13) != 0) variables.emplace_back(*entry);
  variables.push_back("HAL_BACKENDS=" + backend);
  return variables;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& text : strings) result.push_back(text.data());
  result.push_back(nullptr);
  return result;
}

// The program this process runs, as a path another process can start.
std::string running_executable() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw HarnessError("cannot find the running program (/proc/self/exe): " + error.message());
  return path.string();
}

}  // namespace

std::string_view to_string(Level level) {
  switch (level) {
    case Level::quick: return "quick";
    case Level::standard: return "standard";
    case Level::extended: return "extended";
    case Level::burn_in: return "burn-in";
  }
  return "quick";
}

Level parse_level(std::string_view text) {
  for (const Level level : {Level::quick, Level::standard, Level::extended, Level::burn_in})
    if (to_string(level) == text) return level;
  throw std::invalid_argument("unknown level '" + std::string(text) + "'; levels are quick, standard, extended, burn-in");
}

LevelPreset preset_of(Level level, std::optional<double> duration) {
  using enum Tier;
  switch (level) {
    case Level::quick: return {{identity, api, numerics, stress}, true, 5, 64ull << 20, 60};
    case Level::standard: return {{identity, api, numerics, performance, stress}, true, 30, 1ull << 30, 300};
    case Level::extended: return {all_tiers(), false, 300, 0, 1800};
    case Level::burn_in: {
      const double seconds = duration.value_or(3600);
      return {all_tiers(), false, seconds, 0, seconds + 1800};
    }
  }
  return {};
}

void apply_level(CaseSettings& settings, const LevelPreset& preset) {
  settings.quick = preset.quick;
  settings.stress_seconds = preset.stress_seconds;
  settings.memtest_max_bytes = preset.memtest_max_bytes;
}

double estimated_seconds(const std::vector<PlannedCase>& plan, int jobs) {
  double total = 0;
  for (const auto& planned : plan) total += estimated_seconds(*planned.test_case, planned.settings);
  return total / std::max(1, jobs);
}

Plan make_plan(const Registry& registry, const Profile& profile, const std::vector<Device>& devices,
               const PlanOptions& options) {
  Plan plan;
  const std::vector<Tier> tiers = options.tiers ? *options.tiers : options.level ? options.level->tiers : profile.tiers;
  const auto in_tiers = [&](const Case& test_case) {
    return std::find(tiers.begin(), tiers.end(), test_case.tier) != tiers.end();
  };
  std::vector<const Case*> selected;
  for (const auto& test_case : registry.cases()) {
    bool wanted;
    if (options.probes_only) {
      wanted = test_case.probe;
    } else {
      Profile narrowed = profile;
      narrowed.tiers = tiers;
      const bool required = std::any_of(profile.requirements.begin(), profile.requirements.end(), [&](const auto& r) {
        return std::any_of(r.any_of.begin(), r.any_of.end(),
                           [&](const std::string& pattern) { return glob_match(pattern, test_case.id); });
      });
      wanted = narrowed.selects(test_case) || (required && in_tiers(test_case));
    }
    if (wanted && filtered_in(options.filters, test_case.id)) selected.push_back(&test_case);
  }
  // Profile patterns nothing implements are reported, never silently dropped.
  std::vector<std::string> unimplemented;
  if (!options.probes_only)
    for (const auto& pattern : profile.cases)
      if (registry.matching(pattern).empty() && filtered_in(options.filters, pattern)) unimplemented.push_back(pattern);

  for (const auto& device : devices) {
    CaseSettings settings = profile.settings_for(device.info());
    settings.seed = options.seed;
    if (options.level) apply_level(settings, *options.level);
    for (const Case* test_case : selected) {
      if (!test_case->capability.empty()) {
        CapabilityClaim claim = resolve_claim(device, test_case->capability);
        if (!claim.claimed) {
          CaseResult result = decided_result(
              test_case->id, device, std::string(to_string(test_case->tier)), Outcome::unsupported,
              "'" + claim.key + "' is not claimed on " + device.id() + " (" +
                  (claim.source == "none" ? "no layer declares it" : claim.source + " says false") +
                  (claim.note.empty() ? "" : ": " + claim.note) + ")");
          result.capability = std::move(claim);
          result.probe = test_case->probe;
          result.seed = settings.seed;
          plan.decided.push_back(std::move(result));
          continue;
        }
      }
      double timeout = options.timeout_seconds.value_or(
          test_case->timeout_seconds > 0 ? test_case->timeout_seconds : profile.timeout_seconds);
      if (test_case->tier == Tier::stress) timeout += settings.stress_seconds;  // the soak's own time comes on top
      // A case expected to take long (a memory test of a large device) gets
      // twice its estimate, so a slow device is not mistaken for a hang.
      if (!options.timeout_seconds) timeout = std::max(timeout, 2 * estimated_seconds(*test_case, settings));
      plan.to_run.push_back({test_case, device, settings, timeout});
    }
    for (const auto& pattern : unimplemented)
      plan.decided.push_back(decided_result(pattern, device, "", Outcome::skipped,
                                            "not implemented in this build: profile '" + profile.name +
                                                "' asks for cases matching '" + pattern +
                                                "' and no registered case matches"));
  }
  return plan;
}

CaseResult run_case_process(const PlannedCase& planned, const std::vector<std::string>& case_command) {
  CaseResult result;
  result.case_id = planned.test_case->id;
  result.device_id = planned.device.id();
  result.tier = std::string(to_string(planned.test_case->tier));
  result.probe = planned.test_case->probe;
  result.seed = planned.settings.seed;  // also on a crash, a timeout or a harness error
  if (!planned.test_case->capability.empty())
    result.capability = resolve_claim(planned.device, planned.test_case->capability);
  const auto started = Clock::now();
  auto harness_error = [&](const std::string& message) {
    result.outcome = Outcome::error;
    result.evidence.message = "harness error: " + message;
    result.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    return result;
  };
  if (case_command.empty()) return harness_error("no command to run the case process with");

  std::vector<std::string> arguments = case_command;
  for (const std::string& argument :
       {std::string("--run-case"), planned.test_case->id, std::string("--device"), planned.device.id(),
        std::string("--case-settings"), planned.settings.to_json().dump(), std::string("--result-fd"),
        std::to_string(result_descriptor)})
    arguments.push_back(argument);
  std::vector<std::string> environment = child_environment(planned.device.backend_name());
  std::vector<char*> argv = pointers(arguments), envp = pointers(environment);

  int result_pipe[2] = {-1, -1}, log_pipe[2] = {-1, -1};
  if (!make_pipe(result_pipe) || !make_pipe(log_pipe)) return harness_error(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, log_pipe[1], 2);
  posix_spawn_file_actions_adddup2(&actions, result_pipe[1], result_descriptor);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // Its own process group, so a timeout kills whatever the case started too.
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t child = -1;
  const int spawn_error = posix_spawn(&child, argv[0], &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  close(result_pipe[1]);
  close(log_pipe[1]);
  if (spawn_error != 0) {
    close(result_pipe[0]);
    close(log_pipe[0]);
    return harness_error("cannot start " + arguments[0] + ": " + std::strerror(spawn_error));
  }

  std::string result_text, log;
  bool timed_out = false;
  const auto deadline = started + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(planned.timeout_seconds));
  pollfd descriptors[2] = {{result_pipe[0], POLLIN, 0}, {log_pipe[0], POLLIN, 0}};
  int open_descriptors = 2;
  char chunk[16384];
  while (open_descriptors > 0) {
    int wait_ms = -1;
    if (!timed_out) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        timed_out = true;
        kill(-child, SIGKILL);
        continue;
      }
      wait_ms = static_cast<int>(std::min<long long>(left, 1000));
    }
    if (poll(descriptors, 2, wait_ms) < 0 && errno != EINTR) break;
    for (auto& descriptor : descriptors) {
      if (descriptor.fd < 0 || descriptor.revents == 0) continue;
      const ssize_t count = read(descriptor.fd, chunk, sizeof(chunk));
      if (count > 0) {
        std::string& target = descriptor.fd == result_pipe[0] ? result_text : log;
        target.append(chunk, static_cast<std::size_t>(count));
        if (&target == &log && log.size() > 4 * log_tail_bytes) log.erase(0, log.size() - log_tail_bytes);
      } else if (count == 0 || errno != EINTR) {
        close(descriptor.fd);
        descriptor.fd = -1;
        --open_descriptors;
      }
    }
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  // A grandchild that kept the pipes open is gone with the group as well.
  if (timed_out) kill(-child, SIGKILL);
  const double elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (log.size() > log_tail_bytes) log.erase(0, log.size() - log_tail_bytes);

  if (timed_out) {
    result.outcome = Outcome::timeout;
    char limit[32];
    std::snprintf(limit, sizeof(limit), "%g", planned.timeout_seconds);
    result.evidence.message = "no result within " + std::string(limit) +
                              " s; the case process was killed (SIGKILL). The backend hangs in this case, or it "
                              "needs a longer --timeout";
  } else if (WIFSIGNALED(status)) {
    result.outcome = Outcome::crash;
    result.evidence.message = "the case process was killed by " + signal_description(WTERMSIG(status)) +
                              (result_text.empty() ? "" : " after reporting a result") + "; see the log below";
  } else if (result_text.empty()) {
    result.outcome = Outcome::crash;
    result.evidence.message = "the case process exited with status " + std::to_string(WEXITSTATUS(status)) +
                              " without reporting a result; see the log below";
  } else {
    try {
      CaseResult reported = case_result_from_json(nlohmann::json::parse(result_text));
      if (reported.case_id != result.case_id || reported.device_id != result.device_id)
        return harness_error("the case process reported " + reported.case_id + " on " + reported.device_id);
      reported.evidence.log = log;
      return reported;
    } catch (const std::exception& error) {
      return harness_error(std::string("the case process wrote a malformed result: ") + error.what());
    }
  }
  result.evidence.log = log;
  result.duration_ms = elapsed_ms;
  return result;
}

std::vector<CaseResult> run_cases(const std::vector<PlannedCase>& plan, const RunnerOptions& options) {
  std::vector<CaseResult> results(plan.size());
  std::atomic<std::size_t> next{0};
  std::mutex progress_mutex;
  Progress progress;
  progress.total = plan.size();
  std::vector<std::string> running;
  auto label = [&](std::size_t index) { return plan[index].test_case->id + " on " + plan[index].device.id(); };
  auto worker = [&] {
    for (std::size_t index = next++; index < plan.size(); index = next++) {
      {
        std::lock_guard lock(progress_mutex);
        running.push_back(label(index));
        progress.running = running;
        progress.result = nullptr;
        if (options.on_progress) options.on_progress(progress);
      }
      results[index] = run_case_process(plan[index], options.case_command);
      std::lock_guard lock(progress_mutex);
      running.erase(std::find(running.begin(), running.end(), label(index)));
      ++progress.finished;
      progress.running = running;
      progress.result = &results[index];
      if (options.on_progress) options.on_progress(progress);
    }
  };
  const int jobs = std::max(1, std::min<int>(options.jobs, static_cast<int>(std::max<std::size_t>(plan.size(), 1))));
  std::vector<std::thread> threads;
  for (int i = 1; i < jobs; ++i) threads.emplace_back(worker);
  worker();
  for (auto& thread : threads) thread.join();
  return results;
}

int case_process_main(const Registry& registry, std::string_view case_id, std::string_view device_id,
                      std::string_view settings_json, int result_fd) {
  CaseResult result;
  result.case_id = std::string(case_id);
  result.device_id = std::string(device_id);
  result.outcome = Outcome::error;
  try {
    const Case* test_case = registry.find(case_id);
    if (test_case == nullptr) throw HarnessError("no case '" + std::string(case_id) + "' is registered");
    result.tier = std::string(to_string(test_case->tier));
    const CaseSettings settings = CaseSettings::from_json(nlohmann::json::parse(settings_json));
    const Runtime runtime = Runtime::create();
    const auto device = runtime.find_device(device_id);
    if (!device) throw HarnessError("device " + std::string(device_id) + " is not present in the case process");
    // This program runs cases (it was started with --run-case), so it can
    // start more of itself for a case that needs helper processes.
    result = run_case_body(*test_case, *device, settings, {running_executable()});
  } catch (const std::exception& error) {
    result.evidence.message = std::string("harness error in the case process: ") + error.what();
  }
  const std::string text = to_json(result).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t count = write(result_fd, text.data() + written, text.size() - written);
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) return 3;
    written += static_cast<std::size_t>(count);
  }
  close(result_fd);
  return 0;
}

void compare_with_peers(std::vector<CaseResult>& results, const std::map<std::string, std::string>& models) {
  struct Rated {
    CaseResult* result;
    double rate;
  };
  std::map<std::pair<std::string, std::string>, std::vector<Rated>> groups;  // (case, model) -> results
  for (CaseResult& result : results) {
    if (!result.case_id.starts_with("stress.compute.") ||
        (result.outcome != Outcome::pass && result.outcome != Outcome::warn))
      continue;
    const auto model = models.find(result.device_id);
    if (model == models.end()) continue;
    for (const Measurement& measurement : result.evidence.measurements)
      if (measurement.name == "rate" && measurement.value > 0)
        groups[{result.case_id, model->second}].push_back({&result, measurement.value});
  }
  for (auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    std::vector<double> rates;
    for (const Rated& member : members) rates.push_back(member.rate);
    std::sort(rates.begin(), rates.end());
    const std::size_t middle = rates.size() / 2;
    const double median = rates.size() % 2 == 1 ? rates[middle] : (rates[middle - 1] + rates[middle]) / 2;
    for (Rated& member : members) {
      if (member.rate >= (1 - peer_rate_margin) * median) continue;
      CaseResult& result = *member.result;
      result.outcome = Outcome::fail;
      char text[256];
      std::snprintf(text, sizeof(text),
                    "%.4g TFLOP/s is %.0f%% below the median %.4g TFLOP/s of the %zu %s devices on this host (the "
                    "margin is %.0f%%)",
                    member.rate, 100 * (1 - member.rate / median), median, members.size(), key.second.c_str(),
                    100 * peer_rate_margin);
      result.evidence.message += (result.evidence.message.empty() ? "" : "\n") + std::string(text);
      result.evidence.measurements.push_back(
          {"peer median rate", median, "TFLOP/s", median, median * peer_rate_margin, ">=", ""});
    }
  }
}

std::vector<CaseResult> evaluate_requirements(const Profile& profile, const Registry& registry,
                                              const std::vector<Device>& devices,
                                              const std::vector<CaseResult>& results) {
  std::vector<CaseResult> evaluated;
  for (const auto& requirement : profile.requirements) {
    std::set<std::string> implemented;
    for (const auto& pattern : requirement.any_of)
      for (const Case* test_case : registry.matching(pattern)) implemented.insert(test_case->id);
    std::string patterns;
    for (const auto& pattern : requirement.any_of) patterns += (patterns.empty() ? "" : ", ") + pattern;
    for (const auto& device : devices) {
      const std::string id = "requirement." + requirement.name;
      const std::string what = "requirement '" + requirement.name + "'" +
                               (requirement.description.empty() ? "" : " (" + requirement.description + ")");
      if (implemented.empty()) {
        evaluated.push_back(decided_result(id, device, "requirement", Outcome::skipped,
                                           "not implemented in this build: no registered case matches " + patterns +
                                               " for " + what));
        continue;
      }
      std::vector<const CaseResult*> relevant;
      for (const auto& result : results)
        if (result.device_id == device.id() && implemented.count(result.case_id) != 0) relevant.push_back(&result);
      const auto passed = std::find_if(relevant.begin(), relevant.end(), [](const CaseResult* r) {
        return r->outcome == Outcome::pass || r->outcome == Outcome::warn || r->outcome == Outcome::xpass;
      });
      if (passed != relevant.end()) {
        evaluated.push_back(decided_result(id, device, "requirement", Outcome::pass,
                                           what + " met by " + (*passed)->case_id));
        continue;
      }
      std::string seen;
      bool waived = false, any_evidence = false, failed = false, measured = false;
      for (const CaseResult* r : relevant) {
        seen += (seen.empty() ? "" : ", ") + r->case_id + " " + std::string(to_string(r->outcome));
        waived |= r->outcome == Outcome::xfail;
        failed |= is_failure(r->outcome) || r->outcome == Outcome::xfail;
        measured |= r->outcome == Outcome::measured;
        any_evidence |= is_evidence(r->outcome) || r->outcome == Outcome::unsupported;
      }
      // Measured without a floor is no pass: the requirement stays unjudged.
      if (measured && !failed) {
        evaluated.push_back(decided_result(id, device, "requirement", Outcome::measured,
                                           what + " not judged: its cases were measured, but the profile sets no "
                                                  "floor for this device model (" + seen + ")"));
        continue;
      }
      if (!any_evidence) {
        evaluated.push_back(decided_result(id, device, "requirement", Outcome::skipped,
                                           what + ": no evidence; " +
                                               (relevant.empty() ? "none of its cases ran (tier or filter)" : seen)));
        continue;
      }
      evaluated.push_back(decided_result(id, device, "requirement", waived ? Outcome::xfail : Outcome::fail,
                                         what + " not met: none of its cases passed (" + seen + ")"));
    }
  }
  return evaluated;
}

std::size_t record_probes(ProbeCache& cache, const std::vector<CaseResult>& results, const std::vector<Device>& devices) {
  std::size_t recorded = 0;
  for (const auto& result : results) {
    if (!result.probe || !result.capability) continue;
    const Outcome outcome = result.original_outcome.value_or(result.outcome);
    const bool present = outcome == Outcome::pass || outcome == Outcome::warn;
    // Only what ran and decided: not-claimed, skipped and harness errors prove nothing.
    if (!present && !is_failure(outcome)) continue;
    const auto device = std::find_if(devices.begin(), devices.end(), [&](const Device& d) { return d.id() == result.device_id; });
    if (device == devices.end()) continue;
    std::string evidence = std::string(to_string(outcome)) + ": " + result.evidence.message;
    if (evidence.size() > 500) evidence.resize(500);
    cache.record(device->info(), {result.capability->key, present, evidence, result.case_id, utc_timestamp_now()});
    ++recorded;
  }
  return recorded;
}

}  // namespace hal::conformance
