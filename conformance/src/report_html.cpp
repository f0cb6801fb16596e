// The HTML report: one self-contained file for a person. Verdict first, then
// per-device tables, failures with evidence, bandwidth curves as inline SVG,
// and the environment manifest.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hal/conformance/report.hpp"
#include "text.hpp"

namespace hal::conformance {
namespace {

std::string escape(std::string_view raw) { return detail::escape_markup(raw, detail::Markup::html); }

std::string outcome_class(Outcome outcome) {
  std::string name(to_string(outcome));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return "o-" + name;
}

std::string number(double value, int precision = 2) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(precision) << value;
  return text.str();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string size_label(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 3) bytes /= 1024, ++unit;
  return number(bytes, bytes < 10 && std::floor(bytes) != bytes ? 1 : 0) + " " + units[unit];
}

// One chart of every bytes-vs-rate series of a device: x is log2 of the size.
std::string bandwidth_chart(const std::vector<const Series*>& series) {
  constexpr double width = 640, height = 300, left = 60, right = 150, top = 16, bottom = 40;
  constexpr const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"};
  double min_x = INFINITY, max_x = 0, max_y = 0;
  for (const Series* s : series)
    for (const auto& [x, y] : s->points) {
      if (x <= 0) continue;
      min_x = std::min(min_x, std::log2(x));
      max_x = std::max(max_x, std::log2(x));
      max_y = std::max(max_y, y);
    }
  if (!(max_x > min_x) || max_y <= 0) return "";
  max_y *= 1.1;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto px = [&](double x) { return left + (std::log2(x) - min_x) / (max_x - min_x) * plot_w; };
  auto py = [&](double y) { return top + plot_h - y / max_y * plot_h; };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" role=\"img\" class=\"chart\">";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
      << "\" fill=\"#fafafa\" stroke=\"#999\"/>";
  for (int i = 0; i <= 4; ++i) {  // y grid
    const double y = max_y * i / 4;
    svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
        << "\" stroke=\"#ddd\"/><text x=\"" << left - 6 << "\" y=\"" << py(y) + 4
        << "\" text-anchor=\"end\" font-size=\"11\">" << number(y, y < 10 ? 1 : 0) << "</text>";
  }
  for (double e = std::ceil(min_x); e <= max_x; e += 2)  // x ticks every factor of 4
    svg << "<text x=\"" << px(std::exp2(e)) << "\" y=\"" << top + plot_h + 16
        << "\" text-anchor=\"middle\" font-size=\"11\">" << size_label(std::exp2(e)) << "</text>";
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 4
      << "\" text-anchor=\"middle\" font-size=\"12\">transfer size</text>";
  svg << "<text x=\"14\" y=\"" << top + plot_h / 2 << "\" font-size=\"12\" transform=\"rotate(-90 14 "
      << top + plot_h / 2 << ")\" text-anchor=\"middle\">" << escape(series.front()->y_unit) << "</text>";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* color = colors[i % std::size(colors)];
    svg << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
    for (const auto& [x, y] : series[i]->points)
      if (x > 0) svg << number(px(x), 1) << "," << number(py(y), 1) << " ";
    svg << "\"/>";
    for (const auto& [x, y] : series[i]->points)
      if (x > 0)
        svg << "<circle cx=\"" << number(px(x), 1) << "\" cy=\"" << number(py(y), 1) << "\" r=\"3\" fill=\"" << color
            << "\"><title>" << escape(series[i]->name) << " " << size_label(x) << ": " << number(y) << " "
            << escape(series[i]->y_unit) << "</title></circle>";
    const double legend_y = top + 14 + 18 * static_cast<double>(i);
    svg << "<line x1=\"" << left + plot_w + 10 << "\" x2=\"" << left + plot_w + 30 << "\" y1=\"" << legend_y - 4
        << "\" y2=\"" << legend_y - 4 << "\" stroke=\"" << color << "\" stroke-width=\"2\"/><text x=\""
        << left + plot_w + 34 << "\" y=\"" << legend_y << "\" font-size=\"11\">" << escape(series[i]->name)
        << "</text>";
  }
  svg << "</svg>";
  return svg.str();
}

void evidence_block(std::ostringstream& html, const CaseResult& result) {
  html << "<div class=\"evidence\"><h4><span class=\"badge " << outcome_class(result.outcome) << "\">"
       << to_string(result.outcome) << "</span> " << escape(result.case_id) << " on " << escape(result.device_id)
       << "</h4><pre>" << escape(result.evidence.message) << "</pre>";
  if (result.capability)
    html << "<p>capability <code>" << escape(result.capability->key) << "</code>: "
         << (result.capability->claimed ? "claimed" : "not claimed") << " by " << escape(result.capability->source)
         << "</p>";
  if (!result.evidence.measurements.empty()) {
    html << "<table><tr><th>measurement</th><th>value</th><th>expected</th><th>tolerance</th></tr>";
    for (const auto& m : result.evidence.measurements)
      html << "<tr><td>" << escape(m.name) << "</td><td>" << number(m.value, 4) << " " << escape(m.unit) << "</td><td>"
           << (m.expected ? escape(m.comparison) + " " + number(*m.expected, 4) : "") << "</td><td>"
           << (m.tolerance ? number(*m.tolerance, 6) : "") << "</td></tr>";
    html << "</table>";
  }
  if (result.waiver)
    html << "<p>waiver <code>" << escape(result.waiver->pattern) << "</code> "
         << (result.waiver->expired ? "expired on " : "expires ") << escape(result.waiver->expires) << ": "
         << escape(result.waiver->reason) << " (" << escape(result.waiver->tracking) << ")</p>";
  if (!result.evidence.log.empty())
    html << "<details><summary>case process log (tail)</summary><pre>" << escape(result.evidence.log)
         << "</pre></details>";
  html << "</div>";
}

}  // namespace

std::string report_to_html(const RunReport& report) {
  const Verdict verdict = report.verdict();
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hal conformance: "
       << to_string(verdict) << " (" << escape(report.profile) << ")</title><style>"
       << "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}"
       << "table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;"
          "vertical-align:top;font-size:13px}th{background:#f0f0f0}"
       << "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;font-size:12px}"
       << ".verdict{font-size:2em;padding:.4em .8em;border-radius:6px;color:#fff;display:inline-block}"
       << ".v-pass{background:#2e7d32}.v-fail{background:#c62828}.v-error{background:#6a1b9a}.v-inconclusive{background:#"
          "757575}"
       << ".badge{padding:1px 6px;border-radius:3px;font-weight:600;font-size:12px}"
       << ".o-pass{background:#c8e6c9}.o-warn{background:#fff59d}.o-fail,.o-crash,.o-timeout{background:#ffcdd2}"
       << ".o-unsupported,.o-skipped{background:#e0e0e0}.o-xfail{background:#d1c4e9}.o-xpass{background:#ffe0b2}"
       << ".o-measured{background:#b3e5fc}"
       << ".o-error{background:#e1bee7}.evidence{border-left:4px solid #c62828;padding-left:1em;margin:1em 0}"
       << "code{font-size:12px}</style></head><body>\n";
  // Verdict first.
  html << "<h1>hal conformance</h1><div class=\"verdict v-" << to_string(verdict) << "\">"
       << (verdict == Verdict::pass           ? "PASS"
           : verdict == Verdict::fail         ? "FAIL"
           : verdict == Verdict::error        ? "HARNESS ERROR"
                                              : "INCONCLUSIVE: no evidence")
       << "</div>";
  if (const std::string unjudged = unjudged_summary(report); !unjudged.empty())
    html << " <span class=\"badge o-measured\">" << escape(unjudged) << "</span>";
  html << "<p>profile <b>" << escape(report.profile) << "</b> (" << escape(report.profile_source) << "), "
       << report.devices.size() << " device(s), " << report.results.size() << " results, "
       << number(report.duration_seconds, 1) << " s with " << report.jobs << " job(s); " << escape(report.started_at)
       << " to " << escape(report.finished_at) << ", hal " << escape(report.hal_version) << "</p><p>";
  for (const auto& [outcome, count] : report.counts())
    if (count > 0) html << "<span class=\"badge " << outcome_class(outcome) << "\">" << to_string(outcome) << " " << count << "</span> ";
  html << "</p><p><code>" << escape([&] {
    std::string line;
    for (const auto& argument : report.command_line) line += (line.empty() ? "" : " ") + argument;
    return line;
  }()) << "</code></p>";
  for (const auto& note : report.notes) html << "<p>" << escape(note) << "</p>";

  // Per-device tables.
  for (const auto& device : report.devices) {
    html << "<h2>" << escape(device.id) << ": " << escape(device.name) << "</h2><p>" << escape(device.vendor) << ", "
         << escape(device.type) << ", " << size_label(static_cast<double>(device.total_memory)) << ", uuid <code>"
         << escape(device.uuid) << "</code></p>";
    html << "<table><tr><th>case</th><th>tier</th><th>outcome</th><th>time (ms)</th><th>evidence</th></tr>";
    for (const auto& result : report.results) {
      if (result.device_id != device.id) continue;
      html << "<tr><td><code>" << escape(result.case_id) << "</code></td><td>" << escape(result.tier)
           << "</td><td><span class=\"badge " << outcome_class(result.outcome) << "\">" << to_string(result.outcome)
           << "</span></td><td>" << number(result.duration_ms, 1) << "</td><td>"
           << escape(first_line(result.evidence.message)) << "</td></tr>";
    }
    html << "</table>";
  }

  // Failures (and what else needs a person's attention) with their evidence.
  html << "<h2>Failures and findings</h2>";
  bool any_finding = false;
  for (const auto& result : report.results)
    if (is_failure(result.outcome) || result.outcome == Outcome::error || result.outcome == Outcome::xpass ||
        result.outcome == Outcome::warn || (result.waiver && result.waiver->expired)) {
      evidence_block(html, result);
      any_finding = true;
    }
  if (!any_finding) html << "<p>None.</p>";
  if (!report.expired_waivers.empty()) {
    html << "<h3>Expired waivers (no longer applied; renew or remove them)</h3><table><tr><th>cases</th><th>device</th>"
            "<th>expired</th><th>reason</th><th>tracking</th><th>where</th></tr>";
    for (const auto& w : report.expired_waivers)
      html << "<tr><td><code>" << escape(w.cases) << "</code></td><td>" << escape(w.device) << "</td><td>"
           << escape(w.expires) << "</td><td>" << escape(w.reason) << "</td><td>" << escape(w.tracking) << "</td><td>"
           << escape(w.origin) << "</td></tr>";
    html << "</table>";
  }

  // Bandwidth curves per device.
  html << "<h2>Bandwidth</h2>";
  bool any_chart = false;
  for (const auto& device : report.devices) {
    std::vector<const Series*> series;
    for (const auto& result : report.results)
      if (result.device_id == device.id)
        for (const auto& s : result.evidence.series)
          if (s.x_unit == "bytes") series.push_back(&s);
    if (series.empty()) continue;
    const std::string chart = bandwidth_chart(series);
    if (chart.empty()) continue;
    html << "<h3>" << escape(device.id) << ": " << escape(device.name) << "</h3>" << chart;
    any_chart = true;
  }
  if (!any_chart) html << "<p>No bandwidth cases ran (the performance tier is not in this profile; use --profile inference or --tier performance).</p>";

  // Environment manifest.
  const Manifest& m = report.manifest;
  html << "<h2>Environment</h2><table>"
       << "<tr><th>host</th><td>" << escape(m.hostname) << "</td></tr><tr><th>os</th><td>" << escape(m.os)
       << "</td></tr><tr><th>kernel</th><td>" << escape(m.kernel) << "</td></tr><tr><th>machine</th><td>"
       << escape(m.machine) << "</td></tr><tr><th>cpu</th><td>" << escape(m.cpu) << "</td></tr><tr><th>hal</th><td>"
       << escape(m.hal_version) << "</td></tr><tr><th>probe cache</th><td><code>" << escape(m.probe_cache_path)
       << "</code></td></tr></table>";
  html << "<h3>Backends</h3><table><tr><th>backend</th><th>state</th><th>version</th><th>path or reason</th></tr>";
  for (const auto& b : report.backends)
    html << "<tr><td>" << escape(b.name) << "</td><td>" << escape(b.state) << "</td><td>" << escape(b.version)
         << "</td><td>" << escape(b.path.empty() ? b.reason : b.path) << "</td></tr>";
  html << "</table><h3>Version axes</h3><table><tr><th>device</th><th>axis</th><th>version</th></tr>";
  for (const auto& device : report.devices)
    for (const auto& [axis, value] : device.version_axes)
      html << "<tr><td>" << escape(device.id) << "</td><td>" << escape(axis) << "</td><td>" << escape(value)
           << "</td></tr>";
  html << "</table><h3>Libraries</h3><table><tr><th>role</th><th>path</th><th>bytes</th><th>SHA-256</th></tr>";
  for (const auto& library : m.libraries)
    html << "<tr><td>" << escape(library.role) << "</td><td><code>" << escape(library.path) << "</code></td><td>"
         << library.size << "</td><td><code>" << escape(library.sha256.empty() ? library.problem : library.sha256)
         << "</code></td></tr>";
  html << "</table><h3>Environment variables that change behaviour</h3>";
  if (m.environment.empty()) {
    html << "<p>None set.</p>";
  } else {
    html << "<table><tr><th>variable</th><th>value</th></tr>";
    for (const auto& [name, value] : m.environment)
      html << "<tr><td><code>" << escape(name) << "</code></td><td><code>" << escape(value) << "</code></td></tr>";
    html << "</table>";
  }
  html << "</body></html>\n";
  return html.str();
}

}  // namespace hal::conformance
