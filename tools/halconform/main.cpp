// halconform: qualifies this machine's devices against a conformance profile.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>

#include "hal/conformance/case.hpp"
#include "hal/conformance/fleet.hpp"
#include "hal/conformance/profile.hpp"
#include "hal/conformance/report.hpp"
#include "hal/conformance/runner.hpp"
#include "hal/conformance/waiver.hpp"
#include "hal/hal.hpp"
#include "hal/probe_cache.hpp"

#ifndef HAL_VERSION_STRING
#define HAL_VERSION_STRING "unknown"
#endif

namespace {

namespace conf = hal::conformance;

constexpr int exit_harness_error = 2;

const char* const usage = R"(usage: halconform [options]
       halconform calibrate [--fraction F] [--output FILE] [options]
       halconform diff [--tolerance T] BEFORE.json AFTER.json

Qualifies every available device (or those chosen) against a profile and
writes conformance.json, conformance.junit.xml and conformance.html.

  calibrate             measure this (known-good) machine's performance tier
                        without floors and write a profile fragment with a
                        floor at F (default 0.8) of each measured value, per
                        device model and driver, to FILE (default
                        REPORT_DIR/calibrated.toml); exit 1 if a case failed
  diff                  compare two reports: outcome changes and measurements
                        that moved by more than T (default 0.1 = 10%); exit 1
                        when something regressed, 2 on unreadable reports

  --profile NAME|FILE   profile to qualify against (default: smoke); names are
                        looked up in $HAL_PROFILE_PATH, share/hal/profiles
  --backend NAME        only devices of these backends (repeat or comma-separate)
  --device ID           only these devices: host:0, a UUID or a PCI bus id (repeatable)
  --tier LIST           only these tiers, replacing the profile's: identity, api,
                        numerics, performance, stress (comma-separated)
  --filter GLOB         only cases whose id matches (repeatable; * and ?)
  --level LEVEL         quick (under a minute), standard (about 5 min), extended
                        (about 30 min) or burn-in (the soak runs --duration):
                        tiers, sizes, soak time and memory test coverage
  --duration SECONDS    how long burn-in soaks (default 3600)
  --list                list the cases, their estimated time and whether this
                        run would select them
  --report-dir DIR      where the reports go (default: halconform-report)
  --waivers FILE        TOML waivers: known failures become XFAIL until they expire
  --jobs N              cases to run at once, each in its own process (default 1)
  --timeout SECONDS     per-case time limit; the case is killed after it
                        (default: the profile's, 60 s in the shipped profiles)
  --seed N              seed of every random input (default 1), recorded in
                        every result: the same seed reproduces a run's data
  --probe-only          run only the probe cases and refresh the probe cache
  --version             print the version
  --help                this text

Exit status: 0 the run passed; 1 a case failed, crashed or timed out, or the
run gathered no evidence (everything skipped or unsupported); 2 harness error
(bad arguments, a profile or waiver file that does not parse, a case the
harness could not run). With --probe-only: 0 when the probes ran and the cache
was written, 2 otherwise.
)";

struct Options {
  std::string profile = "smoke";
  std::vector<std::string> backends, devices, filters;
  std::optional<std::vector<conf::Tier>> tiers;
  bool list = false, probe_only = false;
  std::string report_dir = "halconform-report";
  std::string waivers;
  int jobs = 1;
  std::optional<double> timeout;
  std::uint64_t seed = 1;
  std::optional<conf::Level> level;
  std::optional<double> duration;
  bool calibrate = false;
  double fraction = 0.8;
  std::string calibration_output;
  // Hidden: the case process.
  std::string run_case, case_device, case_settings = "{}";
  int result_fd = -1;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');)
    if (!part.empty()) parts.push_back(part);
  return parts;
}

double parse_number(const std::string& option, const std::string& text, double minimum) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value >= minimum) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(option + " '" + text + "' is not a number >= " + std::to_string(static_cast<int>(minimum)));
}

std::uint64_t parse_seed(const std::string& text) {
  try {
    std::size_t used = 0;
    const unsigned long long value = std::stoull(text, &used, 0);
    if (used == text.size() && text.find('-') == std::string::npos) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--seed '" + text + "' is not a whole number in [0, 2^64)");
}

Options parse_arguments(int argc, char** argv) {
  Options options;
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "calibrate") {
    options.calibrate = true;
    first = 2;
  }
  for (int i = first; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(argument + " needs a value; see --help");
      return argv[++i];
    };
    if (argument == "--help" || argument == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else if (argument == "--version") {
      std::printf("halconform %s\n", HAL_VERSION_STRING);
      std::exit(0);
    } else if (argument == "--profile") {
      options.profile = value();
    } else if (argument == "--backend") {
      for (auto& name : split_commas(value())) options.backends.push_back(name);
    } else if (argument == "--device") {
      // After --run-case it names the one device of the case process.
      (options.run_case.empty() ? options.devices.emplace_back() : options.case_device) = value();
    } else if (argument == "--tier") {
      std::vector<conf::Tier> tiers;
      for (const auto& name : split_commas(value())) tiers.push_back(conf::parse_tier(name));
      if (tiers.empty()) throw std::invalid_argument("--tier needs at least one tier");
      options.tiers = tiers;
    } else if (argument == "--filter") {
      options.filters.push_back(value());
    } else if (argument == "--list") {
      options.list = true;
    } else if (argument == "--report-dir") {
      options.report_dir = value();
    } else if (argument == "--waivers") {
      options.waivers = value();
    } else if (argument == "--jobs" || argument == "-j") {
      options.jobs = static_cast<int>(parse_number("--jobs", value(), 1));
    } else if (argument == "--timeout") {
      options.timeout = parse_number("--timeout", value(), 1);
    } else if (argument == "--level") {
      options.level = conf::parse_level(value());
    } else if (argument == "--duration") {
      options.duration = parse_number("--duration", value(), 1);
    } else if (argument == "--fraction" && options.calibrate) {
      const std::string text = value();
      options.fraction = parse_number("--fraction", text, 0);
      if (options.fraction <= 0 || options.fraction > 1)
        throw std::invalid_argument("--fraction '" + text + "' is not in (0, 1]");
    } else if (argument == "--output" && options.calibrate) {
      options.calibration_output = value();
    } else if (argument == "--seed") {
      options.seed = parse_seed(value());
    } else if (argument == "--probe-only") {
      options.probe_only = true;
    } else if (argument == "--run-case") {
      options.run_case = value();
    } else if (argument == "--case-settings") {
      options.case_settings = value();
    } else if (argument == "--result-fd") {
      options.result_fd = static_cast<int>(parse_number("--result-fd", value(), 0));
    } else {
      throw std::invalid_argument("unknown argument '" + argument + "'; see --help");
    }
  }
  if (options.duration && options.level != conf::Level::burn_in)
    throw std::invalid_argument("--duration is for --level burn-in; the other levels have fixed soak times");
  return options;
}

std::vector<hal::Device> choose_devices(const hal::Runtime& runtime, const Options& options) {
  for (const auto& name : options.backends) {
    const hal::BackendReport* report = runtime.find_backend(name);
    if (report == nullptr || report->state != hal::BackendState::loaded) {
      std::string loaded;
      for (const auto& backend : runtime.backends())
        if (backend.state == hal::BackendState::loaded) loaded += (loaded.empty() ? "" : ", ") + backend.name;
      throw std::invalid_argument("--backend " + name + ": " +
                                  (report == nullptr ? "no such backend"
                                                     : "not loaded (" + std::string(hal::to_string(report->state)) +
                                                           ": " + report->reason + ")") +
                                  "; loaded backends: " + (loaded.empty() ? "none" : loaded));
    }
  }
  std::vector<hal::Device> chosen;
  if (!options.devices.empty()) {
    for (const auto& id : options.devices) chosen.push_back(runtime.device(id));  // throws listing the ids
  } else {
    chosen = runtime.devices();
  }
  if (!options.backends.empty())
    std::erase_if(chosen, [&](const hal::Device& device) {
      return std::find(options.backends.begin(), options.backends.end(), device.backend_name()) == options.backends.end();
    });
  return chosen;
}

std::string executable_path(const char* argv0) {
  char buffer[4096];
  const ssize_t length = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length > 0) return std::string(buffer, static_cast<std::size_t>(length));
  return argv0;
}

std::optional<conf::LevelPreset> level_preset(const Options& options) {
  if (!options.level) return std::nullopt;
  return conf::preset_of(*options.level, options.duration);
}

void list_cases(const conf::Profile& profile, const Options& options) {
  const conf::Registry& registry = conf::builtin_registry();
  conf::CaseSettings settings = profile.settings_for(hal::DeviceInfo{});
  const auto preset = level_preset(options);
  if (preset) conf::apply_level(settings, *preset);
  conf::Profile narrowed = profile;
  if (preset) narrowed.tiers = preset->tiers;
  if (options.tiers) narrowed.tiers = *options.tiers;
  std::printf("%-46s %-12s %-22s %8s  %s\n", "case", "tier", "capability", "est. s", "selected by this run");
  double selected_total = 0;
  for (const auto& test_case : registry.cases()) {
    bool selected = options.probe_only ? test_case.probe : narrowed.selects(test_case);
    if (!options.filters.empty())
      selected = selected && std::any_of(options.filters.begin(), options.filters.end(),
                                         [&](const std::string& filter) { return conf::glob_match(filter, test_case.id); });
    const double estimate = conf::estimated_seconds(test_case, settings);
    if (selected) selected_total += estimate;
    std::printf("%-46s %-12s %-22s %8.0f  %s%s\n", test_case.id.c_str(), std::string(conf::to_string(test_case.tier)).c_str(),
                test_case.capability.empty() ? "-" : test_case.capability.c_str(), estimate, selected ? "yes" : "no",
                test_case.probe ? " (probe)" : "");
  }
  for (const auto& pattern : profile.cases)
    if (registry.matching(pattern).empty())
      std::printf("%-46s %-12s %-22s %8s  %s\n", pattern.c_str(), "-", "-", "-", "not implemented in this build");
  std::printf("estimated %.0f s per device for the selected cases", selected_total);
  if (preset) std::printf(" (level %s, budget %.0f s)", std::string(conf::to_string(*options.level)).c_str(), preset->budget_seconds);
  std::printf("\n");
}

// A live line on a terminal; plain lines otherwise (CI logs).
class ProgressPrinter {
 public:
  ProgressPrinter() : terminal_(isatty(STDERR_FILENO) != 0) {}
  void operator()(const conf::Progress& progress) {
    if (progress.result != nullptr) {
      const conf::CaseResult& result = *progress.result;
      const bool notable = result.outcome != conf::Outcome::pass && result.outcome != conf::Outcome::unsupported;
      if (terminal_) std::fputs("\r\033[K", stderr);
      if (!terminal_ || notable)
        std::fprintf(stderr, "[%zu/%zu] %-8s %s on %s (%.0f ms)%s%s\n", progress.finished, progress.total,
                     std::string(conf::to_string(result.outcome)).c_str(), result.case_id.c_str(),
                     result.device_id.c_str(), result.duration_ms, notable ? ": " : "",
                     notable ? result.evidence.message.substr(0, result.evidence.message.find('\n')).c_str() : "");
    }
    if (terminal_) {
      std::string running = progress.running.empty() ? "" : progress.running.front();
      if (progress.running.size() > 1) running += " (+" + std::to_string(progress.running.size() - 1) + ")";
      std::fprintf(stderr, "\r\033[K[%zu/%zu] running %s", progress.finished, progress.total, running.c_str());
      if (progress.finished == progress.total) std::fputs("\r\033[K", stderr);
    }
    std::fflush(stderr);
  }

 private:
  bool terminal_;
};

int run(int argc, char** argv, const Options& options) {
  const auto started = std::chrono::steady_clock::now();
  const std::string started_at = hal::utc_timestamp_now();
  conf::Profile profile = conf::find_profile(options.profile);
  if (options.calibrate) {
    // Measure without floors: every measured value is what this machine does.
    for (auto& set : profile.thresholds)
      std::erase_if(set.values, [](const auto& entry) { return entry.first.find(".min_") != std::string::npos; });
  }
  if (options.list) {
    list_cases(profile, options);
    return 0;
  }
  std::vector<conf::Waiver> waivers;
  if (!options.waivers.empty()) waivers = conf::load_waivers(options.waivers);

  const hal::Runtime runtime = hal::Runtime::create();
  const std::vector<hal::Device> devices = choose_devices(runtime, options);
  const conf::Registry& registry = conf::builtin_registry();

  conf::PlanOptions plan_options;
  plan_options.tiers = options.tiers;
  if (options.calibrate && !options.tiers) plan_options.tiers = std::vector<conf::Tier>{conf::Tier::performance};
  plan_options.level = level_preset(options);
  plan_options.filters = options.filters;
  plan_options.probes_only = options.probe_only;
  plan_options.timeout_seconds = options.timeout;
  plan_options.seed = options.seed;
  const conf::Plan plan = conf::make_plan(registry, profile, devices, plan_options);
  std::fprintf(stderr, "halconform: profile %s, %zu device(s), %zu case(s) to run, %zu decided without running, %d job(s)\n",
               profile.name.c_str(), devices.size(), plan.to_run.size(), plan.decided.size(), options.jobs);
  const double estimate = conf::estimated_seconds(plan.to_run, options.jobs);
  if (plan_options.level) {
    std::fprintf(stderr, "halconform: level %s: estimated %.0f s of its %.0f s budget\n",
                 std::string(conf::to_string(*options.level)).c_str(), estimate, plan_options.level->budget_seconds);
    if (estimate > plan_options.level->budget_seconds)
      std::fprintf(stderr, "halconform: warning: the estimate exceeds the level's budget; narrow it with --filter, "
                           "--device or more --jobs\n");
  }

  conf::RunnerOptions runner_options;
  runner_options.case_command = {executable_path(argv[0])};
  runner_options.jobs = options.jobs;
  runner_options.on_progress = ProgressPrinter();
  std::vector<conf::CaseResult> results = conf::run_cases(plan.to_run, runner_options);
  results.insert(results.end(), plan.decided.begin(), plan.decided.end());
  std::map<std::string, std::string> models;
  for (const auto& device : devices) models[device.id()] = device.info().name;
  conf::compare_with_peers(results, models);

  std::vector<hal::DeviceInfo> device_infos;
  for (const auto& device : devices) device_infos.push_back(device.info());
  const std::string today = conf::utc_date_today();
  conf::RunReport report;
  report.expired_waivers = conf::apply_waivers(results, waivers, device_infos, today);
  if (!options.probe_only) {
    auto requirements = conf::evaluate_requirements(profile, registry, devices, results);
    conf::apply_waivers(requirements, waivers, device_infos, today);
    results.insert(results.end(), requirements.begin(), requirements.end());
  }

  // Probes feed the runtime: verified present/absent outranks declarations.
  const auto cache_path = hal::ProbeCache::default_path(runtime.config().probes_cache_dir);
  hal::ProbeCache cache;
  const std::size_t recorded = conf::record_probes(cache, results, devices);
  bool cache_written = recorded == 0 && !options.probe_only;
  if (recorded > 0) {
    try {
      cache.save(cache_path);
      cache_written = true;
      report.notes.push_back("probe cache " + cache_path.string() + ": " + std::to_string(recorded) +
                             " verified capabilities recorded");
    } catch (const std::exception& error) {
      report.notes.push_back(std::string("probe cache not written: ") + error.what());
      std::fprintf(stderr, "halconform: warning: %s\n", report.notes.back().c_str());
    }
  }

  report.hal_version = HAL_VERSION_STRING;
  report.profile = options.probe_only ? profile.name + " (probes only)" : profile.name;
  report.profile_source = profile.source.string();
  for (int i = 0; i < argc; ++i) report.command_line.emplace_back(argv[i]);
  report.started_at = started_at;
  report.finished_at = hal::utc_timestamp_now();
  report.duration_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.jobs = options.jobs;
  report.seed = options.seed;
  if (options.level) report.level = std::string(conf::to_string(*options.level));
  for (const auto& backend : runtime.backends())
    report.backends.push_back({backend.name, std::string(hal::to_string(backend.state)), backend.path, backend.version,
                               backend.reason});
  for (const auto& device : devices) report.devices.push_back(conf::describe_device(device));
  report.results = std::move(results);
  report.waiver_file = options.waivers;
  for (const auto& waiver : report.expired_waivers)
    std::fprintf(stderr, "halconform: waiver %s for %s expired on %s and no longer applies; renew or remove it\n",
                 waiver.origin.c_str(), waiver.cases.c_str(), waiver.expires.c_str());
  report.manifest = conf::collect_manifest(runtime, HAL_VERSION_STRING);
  const conf::WrittenReports written = conf::write_reports(report, options.report_dir);

  const conf::Verdict verdict = report.verdict();
  std::string counts;
  for (const auto& [outcome, count] : report.counts())
    if (count > 0) counts += (counts.empty() ? "" : ", ") + std::to_string(count) + " " + std::string(conf::to_string(outcome));
  const std::string unjudged = conf::unjudged_summary(report);
  std::printf("halconform: %s%s: %s in %.1f s\n", std::string(conf::to_string(verdict)).c_str(),
              unjudged.empty() ? "" : (" (" + unjudged + ")").c_str(),
              counts.empty() ? "no results" : counts.c_str(), report.duration_seconds);
  std::printf("reports: %s\n         %s\n         %s\n", written.html.c_str(), written.json.c_str(),
              written.junit.c_str());
  if (options.calibrate) {
    if (verdict != conf::Verdict::pass) {
      std::fprintf(stderr, "halconform: calibrate: the run did not pass (%s); a machine is calibrated only when it "
                           "is known good, so no floors were written\n", std::string(conf::to_string(verdict)).c_str());
      return 1;
    }
    const std::string fragment = conf::calibrated_thresholds(conf::report_to_json(report), options.fraction);
    const std::string path = options.calibration_output.empty()
                                 ? (std::filesystem::path(options.report_dir) / "calibrated.toml").string()
                                 : options.calibration_output;
    std::ofstream file(path, std::ios::trunc);
    file << fragment;
    if (!file) throw std::runtime_error("cannot write the calibrated profile fragment to " + path);
    std::printf("calibrated floors: %s\n", path.c_str());
    return 0;
  }
  if (options.probe_only) {
    const bool harness_fault = verdict == conf::Verdict::error;
    std::printf("probe cache: %s (%zu capabilities verified)\n", cache_path.c_str(), recorded);
    return cache_written && !harness_fault ? 0 : exit_harness_error;
  }
  return conf::exit_code(verdict);
}

}  // namespace

// halconform diff [--tolerance T] BEFORE AFTER
int diff(int argc, char** argv) {
  double tolerance = 0.1;
  std::vector<std::string> files;
  for (int i = 2; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--tolerance") {
      if (i + 1 >= argc) throw std::invalid_argument("--tolerance needs a value; see --help");
      tolerance = parse_number("--tolerance", argv[++i], 0);
    } else if (argument.rfind("--", 0) == 0) {
      throw std::invalid_argument("unknown argument '" + argument + "' for diff; it takes --tolerance T and two reports");
    } else {
      files.push_back(argument);
    }
  }
  if (files.size() != 2)
    throw std::invalid_argument("diff takes two reports (BEFORE.json AFTER.json), got " + std::to_string(files.size()));
  const auto lines = conf::diff_reports(conf::load_report(files[0]), conf::load_report(files[1]), tolerance);
  std::size_t regressions = 0;
  for (const auto& line : lines) {
    regressions += line.regression;
    std::printf("%s %s: %s\n", line.regression ? "REGRESSION" : "changed   ", line.subject.c_str(), line.change.c_str());
  }
  std::printf("halconform diff: %zu change(s), %zu regression(s) (tolerance %g%%)\n", lines.size(), regressions,
              100 * tolerance);
  return regressions == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "diff") {
    try {
      return diff(argc, argv);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "halconform diff: %s\n", error.what());
      return exit_harness_error;
    }
  }
  Options options;
  try {
    options = parse_arguments(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "halconform: %s\n", error.what());
    return exit_harness_error;
  }
  if (!options.run_case.empty()) {
    if (options.case_device.empty() || options.result_fd < 0) {
      std::fprintf(stderr, "halconform: --run-case needs --device and --result-fd\n");
      return exit_harness_error;
    }
    return conf::case_process_main(conf::builtin_registry(), options.run_case, options.case_device,
                                   options.case_settings, options.result_fd);
  }
  try {
    return run(argc, argv, options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "halconform: %s\n", error.what());
    return exit_harness_error;
  }
}
