// The conformance library: result model, registry, profiles, waivers, plan,
// requirements, probe cache, report formats, and every built-in case body run
// in-process on the host device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "hal/conformance/case.hpp"
#include "hal/conformance/profile.hpp"
#include "hal/conformance/report.hpp"
#include "hal/conformance/runner.hpp"
#include "hal/conformance/waiver.hpp"
#include "hal/hal.hpp"
#include "hal/capabilities.hpp"
#include "hal/probe_cache.hpp"
#include "loaded_backend.hpp"  // detail::Access, for devices that carry only information
#include "scoped_environment.hpp"

namespace conf = hal::conformance;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed afterwards.
struct TemporaryDirectory {
  fs::path path;
  TemporaryDirectory() {
    path = fs::temp_directory_path() / ("hal-conformance-test-" + std::to_string(getpid()) + "-" +
                                        std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TemporaryDirectory() {
    std::error_code error;
    fs::remove_all(path, error);
  }
  static int& counter() {
    static int value = 0;
    return value;
  }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

hal::DeviceInfo fake_info(std::string backend, std::string name, std::vector<hal::Capability> capabilities = {}) {
  hal::DeviceInfo info;
  info.backend = std::move(backend);
  info.index = 0;
  info.name = std::move(name);
  info.vendor = "Acme";
  info.uuid = "uuid-" + info.name;
  info.version_axes = {{"backend", "1.0"}, {"driver", "550.1"}};
  info.capabilities = std::move(capabilities);
  return info;
}

// A Device carrying only information: enough for planning and waivers.
hal::Device info_only_device(hal::DeviceInfo info) {
  const std::uint32_t index = info.index;
  return hal::detail::Access::device(nullptr, index, std::move(info));
}

conf::CaseResult result(const std::string& id, const std::string& device, conf::Outcome outcome) {
  conf::CaseResult r;
  r.case_id = id;
  r.device_id = device;
  r.tier = id.substr(0, id.find('.'));
  r.outcome = outcome;
  r.evidence.message = "message of " + id;
  return r;
}

}  // namespace

TEST_CASE("glob patterns match case ids") {
  CHECK(conf::glob_match("*", "api.memory.copy"));
  CHECK(conf::glob_match("api.*", "api.memory.copy"));
  CHECK(conf::glob_match("api.*.copy", "api.memory.copy"));
  CHECK(conf::glob_match("a?i.*", "api.x"));
  CHECK(conf::glob_match("*bf16*", "numerics.attention.flash.forward.bf16"));
  CHECK_FALSE(conf::glob_match("api.*", "numerics.api.x"));
  CHECK_FALSE(conf::glob_match("api.memory", "api.memory.copy"));
  CHECK_FALSE(conf::glob_match("", "x"));
  CHECK(conf::glob_match("", ""));
}

TEST_CASE("tiers and outcomes parse by name and reject others naming the allowed ones") {
  CHECK(conf::parse_tier("numerics") == conf::Tier::numerics);
  CHECK(conf::parse_outcome("XPASS") == conf::Outcome::xpass);
  try {
    conf::parse_tier("speed");
    FAIL("no throw");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()).find("'speed'") != std::string::npos);
    CHECK(std::string(error.what()).find("performance") != std::string::npos);
  }
}

TEST_CASE("roll-up: failures fail, harness errors are errors, no evidence is not a pass") {
  using O = conf::Outcome;
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::pass), result("api.a.c", "d:0", O::unsupported)}) ==
        conf::Verdict::pass);
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::pass), result("api.a.c", "d:0", O::crash)}) == conf::Verdict::fail);
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::timeout), result("api.a.c", "d:0", O::error)}) ==
        conf::Verdict::fail);
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::pass), result("api.a.c", "d:0", O::error)}) == conf::Verdict::error);
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::skipped), result("api.a.c", "d:0", O::unsupported)}) ==
        conf::Verdict::inconclusive);
  CHECK(conf::roll_up({}) == conf::Verdict::inconclusive);
  CHECK(conf::roll_up({result("api.a.b", "d:0", O::xfail)}) == conf::Verdict::pass);
  CHECK(conf::exit_code(conf::Verdict::pass) == 0);
  CHECK(conf::exit_code(conf::Verdict::fail) == 1);
  CHECK(conf::exit_code(conf::Verdict::inconclusive) == 1);
  CHECK(conf::exit_code(conf::Verdict::error) == 2);
}

TEST_CASE("the registry rejects malformed, mistiered, duplicate and body-less cases") {
  conf::Registry registry;
  auto body = [](conf::CaseContext&) {};
  registry.add({"api.area.name", conf::Tier::api, "", "", false, 0, body});
  CHECK_THROWS_AS(registry.add({"api.area.name", conf::Tier::api, "", "", false, 0, body}), std::invalid_argument);
  CHECK_THROWS_AS(registry.add({"numerics.area.x", conf::Tier::api, "", "", false, 0, body}), std::invalid_argument);
  CHECK_THROWS_AS(registry.add({"api.Area.x", conf::Tier::api, "", "", false, 0, body}), std::invalid_argument);
  CHECK_THROWS_AS(registry.add({"api.x", conf::Tier::api, "", "", false, 0, body}), std::invalid_argument);
  CHECK_THROWS_AS(registry.add({"api.area.probe", conf::Tier::api, "", "", true, 0, body}), std::invalid_argument);
  CHECK_THROWS_AS(registry.add({"api.area.nobody", conf::Tier::api, "", "", false, 0, {}}), std::invalid_argument);
  CHECK(registry.cases().size() == 1);
  CHECK(registry.matching("api.*").size() == 1);

  // The built-in registry is consistent and has every tier this build covers.
  const conf::Registry& builtin = conf::builtin_registry();
  for (const conf::Tier tier : conf::all_tiers())
    CHECK(std::any_of(builtin.cases().begin(), builtin.cases().end(), [&](auto& c) { return c.tier == tier; }));
}

TEST_CASE("a case result survives its JSON form") {
  conf::CaseResult original = result("performance.memory.bandwidth_fill", "host:0", conf::Outcome::xfail);
  original.original_outcome = conf::Outcome::fail;
  original.capability = conf::CapabilityClaim{"memory.managed", true, "declaration", "note"};
  original.waiver = conf::WaiverReference{"performance.*", "slow", "https://t/1", "2030-01-01", false};
  original.evidence.measurements.push_back({"peak", 3.5, "GB/s", 4.0, 0.1, ">="});
  original.evidence.series.push_back({"fill", "bytes", "GB/s", {{4096, 1.0}, {16384, 2.0}}});
  original.evidence.log = "log text";
  original.duration_ms = 12.5;
  original.probe = true;
  const conf::CaseResult copy = conf::case_result_from_json(conf::to_json(original));
  CHECK(conf::to_json(copy) == conf::to_json(original));
}

TEST_CASE("shipped profiles load; unknown keys and bad values name file and line") {
  for (const char* name : {"smoke", "inference", "llm-training"}) {
    CAPTURE(name);
    const conf::Profile profile = conf::load_profile(fs::path(HAL_PROFILE_DIR) / (std::string(name) + ".toml"));
    CHECK(profile.name == name);
    CHECK_FALSE(profile.tiers.empty());
  }
  const conf::Profile training = conf::load_profile(fs::path(HAL_PROFILE_DIR) / "llm-training.toml");
  CHECK(training.requirements.size() >= 5);

  TemporaryDirectory directory;
  const auto typo = directory.write("typo.toml", "name = \"x\"\ntiers = [\"api\"]\nquik = true\n");
  try {
    conf::load_profile(typo);
    FAIL("no throw");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()).find("typo.toml:3") != std::string::npos);
    CHECK(std::string(error.what()).find("'quik'") != std::string::npos);
  }
  const auto bad_tier = directory.write("tier.toml", "tiers = [\"api\", \"speed\"]\n");
  CHECK_THROWS_WITH_AS(conf::load_profile(bad_tier), doctest::Contains("unknown tier 'speed'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(conf::find_profile("no-such-profile"), doctest::Contains("smoke"), std::invalid_argument);
}

TEST_CASE("thresholds apply per device model, later matches overriding earlier ones") {
  TemporaryDirectory directory;
  const auto path = directory.write("p.toml", R"(
tiers = ["performance"]
[[thresholds]]
[thresholds.values]
"bandwidth.fill.min_gbps" = 1.0
"bandwidth.host_to_device.min_gbps" = 2.0
[[thresholds]]
vendor = "Acme"
name = "*X200*"
[thresholds.values]
"bandwidth.fill.min_gbps" = 100.0
[thresholds.minimum_versions]
driver = "550"
)");
  const conf::Profile profile = conf::load_profile(path);
  const conf::CaseSettings big = profile.settings_for(fake_info("gpu", "Acme X200 SXM"));
  CHECK(big.thresholds.at("bandwidth.fill.min_gbps") == 100.0);
  CHECK(big.thresholds.at("bandwidth.host_to_device.min_gbps") == 2.0);
  CHECK(big.minimum_versions.at("driver") == "550");
  const conf::CaseSettings small = profile.settings_for(fake_info("gpu", "Acme X100"));
  CHECK(small.thresholds.at("bandwidth.fill.min_gbps") == 1.0);
  CHECK(small.minimum_versions.empty());
}

TEST_CASE("waivers: live ones turn failures into XFAIL and passes into XPASS; expired ones stop applying") {
  TemporaryDirectory directory;
  const auto path = directory.write("waivers.toml", R"(
[[waiver]]
cases = "api.memory.*"
device = "Acme*"
reason = "driver bug"
tracking = "https://tracker/1"
expires = 2030-12-31

[[waiver]]
cases = "api.stream.*"
reason = "old bug"
tracking = "https://tracker/2"
expires = "2020-01-01"
)");
  const auto waivers = conf::load_waivers(path);
  REQUIRE(waivers.size() == 2);
  CHECK(waivers[0].expires == "2030-12-31");
  CHECK(waivers[0].device == "Acme*");
  CHECK(waivers[1].device == "*");
  CHECK(waivers[0].origin.find("waivers.toml:2") != std::string::npos);

  const std::vector<hal::DeviceInfo> devices = {fake_info("gpu", "Acme X1")};
  std::vector<conf::CaseResult> results = {result("api.memory.copy", "gpu:0", conf::Outcome::fail),
                                           result("api.memory.fill", "gpu:0", conf::Outcome::pass),
                                           result("api.stream.order", "gpu:0", conf::Outcome::crash),
                                           result("api.event.x", "gpu:0", conf::Outcome::fail)};
  const auto expired = conf::apply_waivers(results, waivers, devices, "2025-06-01");
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].tracking == "https://tracker/2");
  CHECK(results[0].outcome == conf::Outcome::xfail);
  CHECK(results[0].original_outcome == conf::Outcome::fail);
  CHECK(results[0].waiver->reason == "driver bug");
  CHECK(results[1].outcome == conf::Outcome::xpass);
  CHECK(results[1].evidence.message.find("remove the waiver") != std::string::npos);
  CHECK(results[2].outcome == conf::Outcome::crash);  // expired: still a failure
  REQUIRE(results[2].waiver.has_value());
  CHECK(results[2].waiver->expired);
  CHECK(results[2].evidence.message.find("expired on 2020-01-01") != std::string::npos);
  CHECK(results[3].outcome == conf::Outcome::fail);
  CHECK_FALSE(results[3].waiver.has_value());
  CHECK(conf::roll_up(results) == conf::Verdict::fail);

  // The day a waiver expires it still applies; the day after it does not.
  std::vector<conf::CaseResult> on_the_day = {result("api.memory.copy", "gpu:0", conf::Outcome::fail)};
  conf::apply_waivers(on_the_day, waivers, devices, "2030-12-31");
  CHECK(on_the_day[0].outcome == conf::Outcome::xfail);
  std::vector<conf::CaseResult> after = {result("api.memory.copy", "gpu:0", conf::Outcome::fail)};
  conf::apply_waivers(after, waivers, devices, "2031-01-01");
  CHECK(after[0].outcome == conf::Outcome::fail);

  const auto incomplete = directory.write("bad.toml", "[[waiver]]\ncases = \"x\"\nreason = \"r\"\nexpires = 2030-01-01\n");
  CHECK_THROWS_WITH_AS(conf::load_waivers(incomplete), doctest::Contains("tracking"), std::invalid_argument);
  const auto bad_date = directory.write("date.toml", "[[waiver]]\ncases = \"x\"\nreason = \"r\"\ntracking = \"t\"\nexpires = \"soon\"\n");
  CHECK_THROWS_WITH_AS(conf::load_waivers(bad_date), doctest::Contains("'soon'"), std::invalid_argument);
}

TEST_CASE("the plan: unclaimed capabilities are UNSUPPORTED citing their source; unimplemented patterns are SKIPPED") {
  conf::Registry registry;
  auto body = [](conf::CaseContext&) {};
  registry.add({"api.memory.managed", conf::Tier::api, "", "memory.managed", true, 0, body});
  registry.add({"api.memory.copy", conf::Tier::api, "", "", false, 0, body});
  registry.add({"stress.memory.soak", conf::Tier::stress, "", "", false, 0, body});
  conf::Profile profile;
  profile.name = "test";
  profile.tiers = {conf::Tier::api};
  profile.cases = {"api.*", "api.attention.*"};
  profile.timeout_seconds = 7;

  hal::DeviceInfo declared_false = fake_info("gpu", "A", {{"memory.managed", false, "no UVM on this SKU"}});
  const std::vector<hal::Device> devices = {info_only_device(fake_info("gpu", "undeclared")),
                                            info_only_device(declared_false)};
  const conf::Plan plan = conf::make_plan(registry, profile, devices, {});
  CHECK(plan.to_run.size() == 2);  // api.memory.copy on both
  for (const auto& planned : plan.to_run) CHECK(planned.timeout_seconds == 7);
  int unsupported = 0, not_implemented = 0;
  for (const auto& decided : plan.decided) {
    if (decided.outcome == conf::Outcome::unsupported) {
      ++unsupported;
      REQUIRE(decided.capability.has_value());
      CHECK(decided.capability->key == "memory.managed");
      CHECK((decided.capability->source == "none" || decided.capability->source == "declaration"));
      if (decided.capability->source == "declaration")
        CHECK(decided.evidence.message.find("no UVM on this SKU") != std::string::npos);
    } else {
      CHECK(decided.outcome == conf::Outcome::skipped);
      CHECK(decided.case_id == "api.attention.*");
      CHECK(decided.evidence.message.find("not implemented in this build") != std::string::npos);
      ++not_implemented;
    }
  }
  CHECK(unsupported == 2);
  CHECK(not_implemented == 2);

  conf::PlanOptions stress_only;
  stress_only.tiers = std::vector<conf::Tier>{conf::Tier::stress};
  stress_only.timeout_seconds = 3;
  conf::Profile every_case = profile;
  every_case.cases = {"*"};
  const conf::Plan soak = conf::make_plan(registry, every_case, {devices[0]}, stress_only);
  REQUIRE(soak.to_run.size() == 1);
  CHECK(soak.to_run[0].timeout_seconds == doctest::Approx(3 + profile.stress_seconds));

  conf::PlanOptions probes;
  probes.probes_only = true;
  hal::DeviceInfo claims = fake_info("gpu", "B", {{"memory.managed", true, ""}});
  const conf::Plan probe_plan = conf::make_plan(registry, profile, {info_only_device(claims)}, probes);
  REQUIRE(probe_plan.to_run.size() == 1);
  CHECK(probe_plan.to_run[0].test_case->id == "api.memory.managed");
  CHECK(probe_plan.decided.empty());
}

TEST_CASE("requirements: met by any passing case, failed when none passes, skipped when not implemented") {
  conf::Registry registry;
  auto body = [](conf::CaseContext&) {};
  registry.add({"numerics.attention.fused.bf16", conf::Tier::numerics, "", "", false, 0, body});
  registry.add({"numerics.attention.flash.bf16", conf::Tier::numerics, "", "", false, 0, body});
  conf::Profile profile;
  profile.requirements = {{"attention", "", {"numerics.attention.fused.*", "numerics.attention.flash.*"}},
                          {"all_reduce", "", {"numerics.collectives.all_reduce*"}}};
  const std::vector<hal::Device> devices = {info_only_device(fake_info("gpu", "A"))};
  auto outcome_of = [](const std::vector<conf::CaseResult>& results, const std::string& id) {
    for (const auto& r : results)
      if (r.case_id == id) return r.outcome;
    FAIL("no result for " << id);
    return conf::Outcome::error;
  };
  const auto met = conf::evaluate_requirements(
      profile, registry, devices,
      {result("numerics.attention.fused.bf16", "gpu:0", conf::Outcome::unsupported),
       result("numerics.attention.flash.bf16", "gpu:0", conf::Outcome::pass)});
  CHECK(outcome_of(met, "requirement.attention") == conf::Outcome::pass);
  CHECK(outcome_of(met, "requirement.all_reduce") == conf::Outcome::skipped);
  const auto unmet = conf::evaluate_requirements(
      profile, registry, devices,
      {result("numerics.attention.fused.bf16", "gpu:0", conf::Outcome::unsupported),
       result("numerics.attention.flash.bf16", "gpu:0", conf::Outcome::fail)});
  CHECK(outcome_of(unmet, "requirement.attention") == conf::Outcome::fail);
  const auto nothing_ran = conf::evaluate_requirements(profile, registry, devices, {});
  CHECK(outcome_of(nothing_ran, "requirement.attention") == conf::Outcome::skipped);
}

TEST_CASE("probe cache: written, read back, keyed by UUID and every version axis, merged on save") {
  TemporaryDirectory directory;
  const fs::path path = directory.path / "nested" / "probes.json";
  hal::testing::ScopedEnvironment environment{{"HAL_PROBE_CACHE", path.string()}};
  CHECK(hal::ProbeCache::default_path() == path);

  const hal::DeviceInfo device = fake_info("gpu", "A");
  hal::ProbeCache cache;
  cache.record(device, {"attention.fused", false, "FAIL: max error 0.5 > 0.01", "numerics.attention.fused.bf16", ""});
  cache.save(path);

  const hal::ProbeCache loaded = hal::ProbeCache::load(path);
  const auto record = loaded.find(device, "attention.fused");
  REQUIRE(record.has_value());
  CHECK_FALSE(record->present);
  CHECK(record->case_id == "numerics.attention.fused.bf16");
  CHECK(record->timestamp.size() == 20);  // 2025-01-31T12:00:00Z
  CHECK_FALSE(loaded.find(device, "attention.flash").has_value());

  hal::DeviceInfo updated = device;
  updated.version_axes[1].second = "560.0";  // a driver update invalidates the verdict
  CHECK_FALSE(loaded.find(updated, "attention.fused").has_value());
  hal::DeviceInfo reordered = device;
  std::reverse(reordered.version_axes.begin(), reordered.version_axes.end());
  CHECK(loaded.find(reordered, "attention.fused").has_value());

  // Another writer adds a record; both survive.
  hal::ProbeCache other;
  other.record(device, {"memory.managed", true, "PASS", "api.memory.managed", ""});
  other.save(path);
  const hal::ProbeCache merged = hal::ProbeCache::load(path);
  CHECK(merged.find(device, "attention.fused").has_value());
  CHECK(merged.find(device, "memory.managed")->present);

  std::ofstream(path) << "{ not json";
  CHECK_THROWS_WITH_AS(hal::ProbeCache::load(path), doctest::Contains("malformed"), hal::Error);
  std::string problem;
  CHECK(hal::ProbeCache::load_or_empty(path, &problem).device_count() == 0);
  CHECK(problem.find(path.string()) != std::string::npos);
  CHECK(hal::ProbeCache::load(directory.path / "missing.json").device_count() == 0);
}

TEST_CASE("every built-in api, identity and numerics case passes in-process on the host device") {
  const hal::Runtime runtime = hal::Runtime::create();
  const auto device = runtime.find_device("host:0");
  REQUIRE(device.has_value());
  conf::CaseSettings settings;
  settings.quick = true;
  settings.stress_seconds = 0.2;
  settings.memtest_max_bytes = 16u << 20;  // the memory test's patterns over a few chunks, not 90% of the host
  for (const auto& test_case : conf::builtin_registry().cases()) {
    if (test_case.tier == conf::Tier::performance) continue;  // timing under sanitizers says nothing
    // The runner reports these UNSUPPORTED without running them (attention.fused on the host).
    if (!test_case.capability.empty() && !conf::resolve_claim(*device, test_case.capability).claimed) continue;
    CAPTURE(test_case.id);
    const conf::CaseResult outcome = conf::run_case_body(test_case, *device, settings);
    CAPTURE(outcome.evidence.message);
    CHECK(outcome.outcome == conf::Outcome::pass);
  }
}

TEST_CASE("an attention probe of an implementation that cannot run fails and names the reason") {
  // What a device that claims fused attention without delivering it gets.
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  const conf::Case* fused = conf::builtin_registry().find("numerics.attention.fused.probe");
  REQUIRE(fused != nullptr);
  const conf::CaseResult outcome = conf::run_case_body(*fused, device, {});
  CHECK(outcome.outcome == conf::Outcome::fail);
  CHECK(outcome.evidence.message.find("capability attention.fused is false") != std::string::npos);
}

TEST_CASE("a case reports FAIL for device faults, ERROR for harness faults, and profile version minimums") {
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  auto run = [&](std::function<void(conf::CaseContext&)> body) {
    return conf::run_case_body({"api.test.case", conf::Tier::api, "", "", false, 0, std::move(body)}, device, {});
  };
  CHECK(run([](conf::CaseContext& c) { c.device().allocate(16).read(8, nullptr, 64); }).outcome == conf::Outcome::fail);
  CHECK(run([](conf::CaseContext&) { throw conf::HarnessError("reference missing"); }).outcome == conf::Outcome::error);
  CHECK(run([](conf::CaseContext& c) { c.skip("needs two devices"); }).outcome == conf::Outcome::skipped);
  CHECK(run([](conf::CaseContext& c) { c.warn("slow"); }).outcome == conf::Outcome::warn);
  const std::uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 7, 4};
  const auto mismatch = run([&](conf::CaseContext& c) { c.require_equal_bytes(a, b, 4, "bytes"); });
  CHECK(mismatch.outcome == conf::Outcome::fail);
  CHECK(mismatch.evidence.message.find("offset 2") != std::string::npos);

  const conf::Case* versions = conf::builtin_registry().find("identity.device.version_axes");
  REQUIRE(versions != nullptr);
  conf::CaseSettings too_new;
  too_new.minimum_versions["backend"] = "999.0";
  CHECK(conf::run_case_body(*versions, device, too_new).outcome == conf::Outcome::fail);
  conf::CaseSettings missing_axis;
  missing_axis.minimum_versions["cudnn"] = "9.0";
  CHECK(conf::run_case_body(*versions, device, missing_axis).outcome == conf::Outcome::fail);
  conf::CaseSettings met;
  met.minimum_versions["backend"] = "0.0.1";
  CHECK(conf::run_case_body(*versions, device, met).outcome == conf::Outcome::pass);
}

TEST_CASE("reports: JSON carries the schema and roll-up; JUnit and HTML escape what they quote") {
  conf::RunReport report;
  report.profile = "smoke";
  report.devices.push_back({"gpu:0", "gpu", "Acme <X1>", "Acme", "u", "gpu", "", 1, {{"driver", "1"}}, {}});
  auto failing = result("api.memory.copy", "gpu:0", conf::Outcome::fail);
  failing.evidence.message = "bytes <differ> & \"more\"";
  failing.evidence.log = std::string("raw \xff\xfe bytes \x01");
  auto curve = result("performance.memory.bandwidth_fill", "gpu:0", conf::Outcome::pass);
  curve.evidence.series.push_back({"fill", "bytes", "GB/s", {{4096, 1}, {65536, 4}, {1 << 20, 8}}});
  report.results = {failing, curve, result("api.x.y", "gpu:0", conf::Outcome::skipped)};
  const nlohmann::json json = conf::report_to_json(report);
  CHECK(json["schema"] == "hal.conformance/1");
  CHECK(json["verdict"] == "fail");
  CHECK(json["exit_code"] == 1);
  CHECK(json["counts"]["FAIL"] == 1);
  const std::string junit = conf::report_to_junit(report);
  CHECK(junit.find("bytes &lt;differ&gt; &amp; &quot;more&quot;") != std::string::npos);
  CHECK(junit.find("\xff") == std::string::npos);
  CHECK(junit.find("<failure type=\"FAIL\"") != std::string::npos);
  CHECK(junit.find("<skipped") != std::string::npos);
  const std::string html = conf::report_to_html(report);
  CHECK(html.find("Acme &lt;X1&gt;") != std::string::npos);
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("<polyline") != std::string::npos);
  CHECK(html.find("v-fail") < html.find("<h2>"));  // the verdict comes first

  TemporaryDirectory directory;
  const auto written = conf::write_reports(report, directory.path / "out");
  CHECK(fs::exists(written.json));
  CHECK(fs::exists(written.junit));
  CHECK(fs::exists(written.html));
  std::ifstream file(written.json);
  CHECK(nlohmann::json::parse(file)["results"].size() == 3);
}

TEST_CASE("SHA-256 of a file matches the known digest; behaviour variables are recognized") {
  TemporaryDirectory directory;
  const auto path = directory.write("abc.txt", "abc");
  CHECK(conf::sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK_THROWS_AS(conf::sha256_file(directory.path / "missing"), std::runtime_error);
  CHECK(conf::is_behaviour_variable("HAL_BACKENDS"));
  CHECK(conf::is_behaviour_variable("NVTE_FLASH_ATTN"));
  CHECK(conf::is_behaviour_variable("CUDA_VISIBLE_DEVICES"));
  CHECK_FALSE(conf::is_behaviour_variable("HOME"));
}

TEST_CASE("a probe verdict in the cache outranks the declaration in the runtime's capability layers") {
  TemporaryDirectory directory;
  const fs::path path = directory.path / "probes.json";
  hal::testing::ScopedEnvironment environment{{"HAL_PROBE_CACHE", path.string()}};
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  CHECK(hal::effective_capability(device, "memory.managed").decided_by == "declared");

  hal::ProbeCache cache;
  cache.record(device.info(), {"memory.managed", false, "FAIL: not coherent", "api.memory.managed", ""});
  cache.save(path);
  const hal::EffectiveCapability effective = hal::effective_capability(device, "memory.managed");
  CHECK(effective.decided_by == "probe");
  CHECK_FALSE(effective.is_true());
  CHECK(effective.layers.back().source.find("api.memory.managed") != std::string::npos);
  // Conformance still tests the claim: the probe layer does not decide it.
  const conf::CapabilityClaim claim = conf::resolve_claim(device, "memory.managed");
  CHECK(claim.claimed);
  CHECK(claim.source == "declaration");
}

TEST_CASE("probe cache path: HAL_PROBE_CACHE, then the config's probes.cache_dir, then XDG_CACHE_HOME") {
  TemporaryDirectory directory;
  const fs::path file = directory.path / "explicit.json";
  {
    hal::testing::ScopedEnvironment environment{{"HAL_PROBE_CACHE", file.string()}};
    CHECK(hal::ProbeCache::default_path(directory.path / "configured") == file);
  }
  hal::testing::ScopedEnvironment environment{{"HAL_PROBE_CACHE", std::nullopt},
                                              {"XDG_CACHE_HOME", (directory.path / "xdg").string()}};
  CHECK(hal::ProbeCache::default_path(directory.path / "configured") == directory.path / "configured" / "probes.json");
  CHECK(hal::ProbeCache::default_path() == directory.path / "xdg" / "hal" / "probes.json");
}

TEST_CASE("the runtime reads probe verdicts from the configured probes.cache_dir") {
  TemporaryDirectory directory;
  const fs::path cache_dir = directory.path / "site-cache";
  const fs::path config_file = directory.path / "hal.toml";
  std::ofstream(config_file) << "[probes]\ncache_dir = \"" << cache_dir.string() << "\"\n";
  hal::testing::ScopedEnvironment environment{{"HAL_PROBE_CACHE", std::nullopt},
                                              {"HAL_CONFIG", config_file.string()},
                                              {"XDG_CACHE_HOME", (directory.path / "xdg").string()}};
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  hal::ProbeCache cache;
  cache.record(device.info(), {"memory.managed", false, "FAIL: not coherent", "api.memory.managed", ""});
  cache.save(cache_dir / "probes.json");
  const hal::EffectiveCapability effective = hal::effective_capability(device, "memory.managed");
  CHECK(effective.decided_by == "probe");
  CHECK(effective.layers.back().source.find((cache_dir / "probes.json").string()) != std::string::npos);
}

TEST_CASE("stable_hash is FNV-1a 64, so a seed derived from a name is the same everywhere") {
  CHECK(conf::stable_hash("") == 0xcbf29ce484222325ull);
  CHECK(conf::stable_hash("a") == 0xaf63dc4c8601ec8cull);
  CHECK(conf::stable_hash("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("MEASURED is evidence but no pass: the run passes, a requirement on it stays MEASURED") {
  CHECK(conf::parse_outcome("MEASURED") == conf::Outcome::measured);
  CHECK(conf::is_evidence(conf::Outcome::measured));
  CHECK_FALSE(conf::is_failure(conf::Outcome::measured));
  conf::CaseResult measured;
  measured.case_id = "performance.memory.bandwidth_fill";
  measured.device_id = "host:0";
  measured.outcome = conf::Outcome::measured;
  CHECK(conf::roll_up({measured}) == conf::Verdict::pass);
}

TEST_CASE("a compute soak more than the margin slower than its peers of the same model fails, naming the figures") {
  auto soak = [](const std::string& device, double rate) {
    conf::CaseResult soaked = result("stress.compute.attention", device, conf::Outcome::pass);
    soaked.evidence.measurements.push_back({"rate", rate, "TFLOP/s", {}, {}, "", ""});
    return soaked;
  };
  std::vector<conf::CaseResult> results = {soak("cuda:0", 500), soak("cuda:1", 505), soak("cuda:2", 498),
                                     soak("cuda:3", 420), soak("cuda:4", 300)};
  const std::map<std::string, std::string> models = {{"cuda:0", "H200"}, {"cuda:1", "H200"}, {"cuda:2", "H200"},
                                                     {"cuda:3", "H200"}, {"cuda:4", "L40S"}};
  conf::compare_with_peers(results, models);
  CHECK(results[0].outcome == conf::Outcome::pass);
  CHECK(results[1].outcome == conf::Outcome::pass);
  CHECK(results[2].outcome == conf::Outcome::pass);
  CHECK(results[3].outcome == conf::Outcome::fail);  // 16% below the median 499 of the four H200s
  CHECK(results[3].evidence.message.find("420 TFLOP/s is 16% below the median 499 TFLOP/s of the 4 H200 devices") !=
        std::string::npos);
  CHECK(results[4].outcome == conf::Outcome::pass);  // the only L40S has no peer
}
