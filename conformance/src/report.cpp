// Roll-up, the JSON report (hal.conformance/1), JUnit XML and writing files.
#include "hal/conformance/report.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <nlohmann/json.hpp>

#include "text.hpp"

namespace hal::conformance {
namespace {

using nlohmann::json;

std::string xml_escape(std::string_view raw) { return detail::escape_markup(raw, detail::Markup::xml); }

std::string evidence_text(const CaseResult& result) {
  std::ostringstream text;
  text << result.evidence.message << '\n';
  if (result.capability)
    text << "capability " << result.capability->key << ": " << (result.capability->claimed ? "claimed" : "not claimed")
         << " (" << result.capability->source << ")\n";
  for (const auto& m : result.evidence.measurements) {
    text << m.name << " = " << m.value << (m.unit.empty() ? "" : " " + m.unit);
    if (m.expected) text << " (expected " << m.comparison << " " << *m.expected << ")";
    if (m.tolerance) text << " tolerance " << *m.tolerance;
    text << '\n';
  }
  if (result.waiver)
    text << "waiver " << result.waiver->pattern << (result.waiver->expired ? " (expired " : " (expires ")
         << result.waiver->expires << "): " << result.waiver->reason << " " << result.waiver->tracking << '\n';
  if (!result.evidence.log.empty()) text << "--- case process log (tail) ---\n" << result.evidence.log << '\n';
  return text.str();
}

// Invalid UTF-8 (a crashing process may print anything) becomes U+FFFD.
std::string dump(const json& value) { return value.dump(2, ' ', false, json::error_handler_t::replace); }

}  // namespace

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return "pass";
    case Verdict::fail: return "fail";
    case Verdict::error: return "error";
    case Verdict::inconclusive: return "inconclusive";
  }
  return "error";
}

Verdict roll_up(const std::vector<CaseResult>& results) {
  bool failed = false, harness_error = false, evidence = false;
  for (const auto& result : results) {
    failed |= is_failure(result.outcome);
    harness_error |= result.outcome == Outcome::error;
    evidence |= is_evidence(result.outcome);
  }
  if (failed) return Verdict::fail;
  if (harness_error) return Verdict::error;
  if (!evidence) return Verdict::inconclusive;
  return Verdict::pass;
}

int exit_code(Verdict verdict) {
  switch (verdict) {
    case Verdict::pass: return 0;
    case Verdict::fail:
    case Verdict::inconclusive: return 1;
    case Verdict::error: return 2;
  }
  return 2;
}

std::string unjudged_summary(const RunReport& report) {
  const std::size_t measured = report.counts().at(Outcome::measured);
  return measured == 0 ? "" : std::to_string(measured) + " measured, not judged";
}

std::map<Outcome, std::size_t> RunReport::counts() const {
  std::map<Outcome, std::size_t> counts;
  for (const Outcome outcome : all_outcomes()) counts[outcome] = 0;
  for (const auto& result : results) ++counts[result.outcome];
  return counts;
}

json report_to_json(const RunReport& report) {
  json counts = json::object();
  for (const auto& [outcome, count] : report.counts()) counts[std::string(to_string(outcome))] = count;
  json backends = json::array();
  for (const auto& b : report.backends)
    backends.push_back({{"name", b.name}, {"state", b.state}, {"path", b.path}, {"version", b.version}, {"reason", b.reason}});
  json devices = json::array();
  for (const auto& d : report.devices) {
    json axes = json::object(), capabilities = json::object();
    for (const auto& [axis, value] : d.version_axes) axes[axis] = value;
    for (const auto& [key, value] : d.capabilities) capabilities[key] = value;
    devices.push_back({{"id", d.id}, {"backend", d.backend}, {"name", d.name}, {"vendor", d.vendor}, {"uuid", d.uuid},
                       {"type", d.type}, {"pci_bus_id", d.pci_bus_id}, {"total_memory", d.total_memory},
                       {"version_axes", axes}, {"capabilities", capabilities}});
  }
  json results = json::array();
  for (const auto& result : report.results) results.push_back(to_json(result));
  json expired = json::array();
  for (const auto& w : report.expired_waivers)
    expired.push_back({{"cases", w.cases}, {"device", w.device}, {"reason", w.reason}, {"tracking", w.tracking},
                       {"expires", w.expires}, {"origin", w.origin}});
  json libraries = json::array();
  for (const auto& l : report.manifest.libraries) {
    json library = {{"role", l.role}, {"path", l.path}, {"size", l.size}, {"sha256", l.sha256}};
    if (!l.problem.empty()) library["problem"] = l.problem;
    libraries.push_back(library);
  }
  json environment = json::object();
  for (const auto& [name, value] : report.manifest.environment) environment[name] = value;
  const Verdict verdict = report.verdict();
  return {{"schema", report_schema},
          {"hal_version", report.hal_version},
          {"profile", {{"name", report.profile}, {"source", report.profile_source}}},
          {"command_line", report.command_line},
          {"started_at", report.started_at},
          {"finished_at", report.finished_at},
          {"duration_seconds", report.duration_seconds},
          {"jobs", report.jobs},
          {"seed", report.seed},
          {"level", report.level},
          {"verdict", to_string(verdict)},
          {"unjudged", report.counts().at(Outcome::measured)},
          {"exit_code", exit_code(verdict)},
          {"counts", counts},
          {"backends", backends},
          {"devices", devices},
          {"results", results},
          {"waivers", {{"file", report.waiver_file}, {"expired", expired}}},
          {"notes", report.notes},
          {"manifest",
           {{"host",
             {{"hostname", report.manifest.hostname},
              {"os", report.manifest.os},
              {"kernel", report.manifest.kernel},
              {"machine", report.manifest.machine},
              {"cpu", report.manifest.cpu}}},
            {"hal_version", report.manifest.hal_version},
            {"libraries", libraries},
            {"environment", environment},
            {"probe_cache", report.manifest.probe_cache_path}}}};
}

std::string report_to_junit(const RunReport& report) {
  std::ostringstream xml;
  const auto counts = report.counts();
  auto count = [&](std::initializer_list<Outcome> outcomes) {
    std::size_t total = 0;
    for (const Outcome outcome : outcomes) total += counts.at(outcome);
    return total;
  };
  xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml << "<testsuites name=\"hal conformance (" << xml_escape(report.profile) << ")\" tests=\"" << report.results.size()
      << "\" failures=\"" << count({Outcome::fail, Outcome::crash, Outcome::timeout}) << "\" errors=\""
      << count({Outcome::error}) << "\" skipped=\"" << count({Outcome::skipped, Outcome::unsupported, Outcome::xfail})
      << "\" time=\"" << report.duration_seconds << "\">\n";
  std::vector<std::string> device_ids;
  for (const auto& device : report.devices) device_ids.push_back(device.id);
  for (const auto& result : report.results)
    if (std::find(device_ids.begin(), device_ids.end(), result.device_id) == device_ids.end())
      device_ids.push_back(result.device_id);
  for (const auto& device_id : device_ids) {
    std::vector<const CaseResult*> results;
    double seconds = 0;
    std::size_t failures = 0, errors = 0, skipped = 0;
    for (const auto& result : report.results) {
      if (result.device_id != device_id) continue;
      results.push_back(&result);
      seconds += result.duration_ms / 1000;
      failures += is_failure(result.outcome);
      errors += result.outcome == Outcome::error;
      skipped += result.outcome == Outcome::skipped || result.outcome == Outcome::unsupported ||
                 result.outcome == Outcome::xfail;
    }
    std::string name = device_id;
    for (const auto& device : report.devices)
      if (device.id == device_id) name += " (" + device.name + ")";
    xml << "  <testsuite name=\"" << xml_escape(name) << "\" tests=\"" << results.size() << "\" failures=\"" << failures
        << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\" time=\"" << seconds << "\">\n";
    for (const CaseResult* result : results) {
      const std::string outcome(to_string(result->outcome));
      const std::string message = outcome + ": " + result->evidence.message.substr(0, result->evidence.message.find('\n'));
      xml << "    <testcase classname=\"" << xml_escape(device_id) << "\" name=\"" << xml_escape(result->case_id)
          << "\" time=\"" << result->duration_ms / 1000 << "\">\n";
      if (is_failure(result->outcome))
        xml << "      <failure type=\"" << outcome << "\" message=\"" << xml_escape(message) << "\">"
            << xml_escape(evidence_text(*result)) << "</failure>\n";
      else if (result->outcome == Outcome::error)
        xml << "      <error type=\"ERROR\" message=\"" << xml_escape(message) << "\">"
            << xml_escape(evidence_text(*result)) << "</error>\n";
      else if (result->outcome == Outcome::skipped || result->outcome == Outcome::unsupported ||
               result->outcome == Outcome::xfail)
        xml << "      <skipped message=\"" << xml_escape(message) << "\"/>\n";
      xml << "      <system-out>" << xml_escape(outcome + "\n" + evidence_text(*result)) << "</system-out>\n";
      xml << "    </testcase>\n";
    }
    xml << "  </testsuite>\n";
  }
  xml << "</testsuites>\n";
  return xml.str();
}

WrittenReports write_reports(const RunReport& report, const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error)
    throw std::runtime_error("cannot create the report directory " + directory.string() + ": " + error.message());
  WrittenReports written{directory / "conformance.json", directory / "conformance.junit.xml",
                         directory / "conformance.html"};
  auto write = [](const std::filesystem::path& path, const std::string& text) {
    std::ofstream file(path, std::ios::trunc | std::ios::binary);
    file << text;
    if (!file) throw std::runtime_error("cannot write " + path.string() + "; check the --report-dir permissions");
  };
  write(written.json, dump(report_to_json(report)) + "\n");
  write(written.junit, report_to_junit(report));
  write(written.html, report_to_html(report));
  return written;
}

}  // namespace hal::conformance
