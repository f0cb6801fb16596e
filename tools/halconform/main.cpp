// halconform: qualifies this machine's devices against a conformance profile.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "hal/conformance/case.hpp"
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

Qualifies every available device (or those chosen) against a profile and
writes conformance.json, conformance.junit.xml and conformance.html.

  --profile NAME|FILE   profile to qualify against (default: smoke); names are
                        looked up in $HAL_PROFILE_PATH, share/hal/profiles
  --backend NAME        only devices of these backends (repeat or comma-separate)
  --device ID           only these devices: host:0, a UUID or a PCI bus id (repeatable)
  --tier LIST           only these tiers, replacing the profile's: identity, api,
                        numerics, performance, stress (comma-separated)
  --filter GLOB         only cases whose id matches (repeatable; * and ?)
  --list                list the cases and whether this run would select them
  --report-dir DIR      where the reports go (default: halconform-report)
  --waivers FILE        TOML waivers: known failures become XFAIL until they expire
  --jobs N              cases to run at once, each in its own process (default 1)
  --timeout SECONDS     per-case time limit; the case is killed after it
                        (default: the profile's, 60 s in the shipped profiles)
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

Options parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
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

void list_cases(const conf::Profile& profile, const Options& options) {
  const conf::Registry& registry = conf::builtin_registry();
  std::printf("%-46s %-12s %-22s %s\n", "case", "tier", "capability", "selected by this run");
  for (const auto& test_case : registry.cases()) {
    conf::Profile narrowed = profile;
    if (options.tiers) narrowed.tiers = *options.tiers;
    bool selected = options.probe_only ? test_case.probe : narrowed.selects(test_case);
    if (!options.filters.empty())
      selected = selected && std::any_of(options.filters.begin(), options.filters.end(),
                                         [&](const std::string& filter) { return conf::glob_match(filter, test_case.id); });
    std::printf("%-46s %-12s %-22s %s%s\n", test_case.id.c_str(), std::string(conf::to_string(test_case.tier)).c_str(),
                test_case.capability.empty() ? "-" : test_case.capability.c_str(), selected ? "yes" : "no",
                test_case.probe ? " (probe)" : "");
  }
  for (const auto& pattern : profile.cases)
    if (registry.matching(pattern).empty())
      std::printf("%-46s %-12s %-22s %s\n", pattern.c_str(), "-", "-", "not implemented in this build");
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
  const conf::Profile profile = conf::find_profile(options.profile);
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
  plan_options.filters = options.filters;
  plan_options.probes_only = options.probe_only;
  plan_options.timeout_seconds = options.timeout;
  const conf::Plan plan = conf::make_plan(registry, profile, devices, plan_options);
  std::fprintf(stderr, "halconform: profile %s, %zu device(s), %zu case(s) to run, %zu decided without running, %d job(s)\n",
               profile.name.c_str(), devices.size(), plan.to_run.size(), plan.decided.size(), options.jobs);

  conf::RunnerOptions runner_options;
  runner_options.case_command = {executable_path(argv[0])};
  runner_options.jobs = options.jobs;
  runner_options.on_progress = ProgressPrinter();
  std::vector<conf::CaseResult> results = conf::run_cases(plan.to_run, runner_options);
  results.insert(results.end(), plan.decided.begin(), plan.decided.end());

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
  std::printf("halconform: %s: %s in %.1f s\n", std::string(conf::to_string(verdict)).c_str(),
              counts.empty() ? "no results" : counts.c_str(), report.duration_seconds);
  std::printf("reports: %s\n         %s\n         %s\n", written.html.c_str(), written.json.c_str(),
              written.junit.c_str());
  if (options.probe_only) {
    const bool harness_fault = verdict == conf::Verdict::error;
    std::printf("probe cache: %s (%zu capabilities verified)\n", cache_path.c_str(), recorded);
    return cache_written && !harness_fault ? 0 : exit_harness_error;
  }
  return conf::exit_code(verdict);
}

}  // namespace

int main(int argc, char** argv) {
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
