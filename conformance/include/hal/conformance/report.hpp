// A run's report: verdict, devices, results, environment manifest; written as
// JSON (schema hal.conformance/1), JUnit XML and one self-contained HTML file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hal/conformance/model.hpp"
#include "hal/conformance/waiver.hpp"
#include "hal/runtime.hpp"

namespace hal::conformance {

inline constexpr const char* report_schema = "hal.conformance/1";

// pass: evidence and no failure. fail: any FAIL, CRASH or TIMEOUT.
// error: the harness failed (ERROR results) and nothing failed.
// inconclusive: no result says anything about a device (all skipped or
// unsupported, or no device): not a pass.
enum class Verdict { pass, fail, error, inconclusive };
std::string_view to_string(Verdict verdict);
Verdict roll_up(const std::vector<CaseResult>& results);
// 0 pass; 1 fail or inconclusive; 2 harness error.
int exit_code(Verdict verdict);

struct RunReport;
// "3 measured, not judged" when results came out MEASURED (no floor in the
// profile for the device model), else empty: shown beside the verdict.
std::string unjudged_summary(const RunReport& report);

struct LibraryFile {
  std::string role;  // "executable", "libhal", "backend host", "loaded"
  std::string path;
  std::uint64_t size = 0;
  std::string sha256;  // lowercase hex; empty with `problem` set when unreadable
  std::string problem;
};

struct Manifest {
  std::string hostname, os, kernel, machine, cpu;
  std::string hal_version;
  std::vector<LibraryFile> libraries;
  std::vector<std::pair<std::string, std::string>> environment;  // behaviour-changing variables only
  std::string probe_cache_path;
};

// Collects the manifest of this process: host, kernel, hal version, the
// executable, libhal, every loaded backend plugin and every other shared
// library mapped into the process (vendor libraries included), each with its
// SHA-256, and the environment variables that change behaviour.
Manifest collect_manifest(const Runtime& runtime, const std::string& hal_version);
// SHA-256 of a file as lowercase hex; throws std::runtime_error when unreadable.
std::string sha256_file(const std::filesystem::path& path);
// Whether an environment variable changes what hal or a vendor library does
// (HAL_*, NVTE_*, CUDA_*, NCCL_*, HIP_*, ROCR_*, ...).
bool is_behaviour_variable(std::string_view name);

struct DeviceRecord {
  std::string id, backend, name, vendor, uuid, type, pci_bus_id;
  std::uint64_t total_memory = 0;
  std::vector<std::pair<std::string, std::string>> version_axes;
  std::vector<std::pair<std::string, std::string>> capabilities;  // key -> value as text
};
DeviceRecord describe_device(const Device& device);

struct BackendRecord {
  std::string name, state, path, version, reason;
};

struct RunReport {
  std::string hal_version;
  std::string profile, profile_source;
  std::vector<std::string> command_line;
  std::string started_at, finished_at;
  double duration_seconds = 0;
  int jobs = 1;
  std::uint64_t seed = 1;
  std::string level;  // --level, empty without one
  std::vector<BackendRecord> backends;
  std::vector<DeviceRecord> devices;
  std::vector<CaseResult> results;
  std::vector<Waiver> expired_waivers;
  std::string waiver_file;
  std::vector<std::string> notes;  // harness messages for the reader (probe cache written, ...)
  Manifest manifest;

  Verdict verdict() const { return roll_up(results); }
  std::map<Outcome, std::size_t> counts() const;
};

nlohmann::json report_to_json(const RunReport& report);
std::string report_to_junit(const RunReport& report);
std::string report_to_html(const RunReport& report);

struct WrittenReports {
  std::filesystem::path json, junit, html;
};
// Writes conformance.json, conformance.junit.xml and conformance.html into
// directory (created when missing). Throws std::runtime_error naming the path.
WrittenReports write_reports(const RunReport& report, const std::filesystem::path& directory);

}  // namespace hal::conformance
