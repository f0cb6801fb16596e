// halconform as operators and CI run it: exit codes, reports, the probe cache,
// waivers, and fake backends that crash, hang, overclaim or compute wrong results.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "command_output.hpp"
#include "memtest_report.hpp"

namespace fs = std::filesystem;

namespace {

struct Run {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  fs::path directory;  // holds the reports and the probe cache
  nlohmann::json report;

  std::string outcome(const std::string& case_id, const std::string& device) const {
    for (const auto& result : report["results"])
      if (result["case"] == case_id && result["device"] == device) return result["outcome"];
    return "missing";
  }
};

fs::path fresh_directory() {
  static int counter = 0;
  const fs::path path = fs::temp_directory_path() / ("halconform-test-" + std::to_string(getpid()) + "-" +
                                                     std::to_string(counter++));
  fs::remove_all(path);
  fs::create_directories(path);
  return path;
}

// Runs halconform with its probe cache and reports in a fresh directory.
Run halconform(const std::string& arguments, const std::string& environment = "HAL_BACKENDS=host") {
  Run run;
  run.directory = fresh_directory();
  // A subcommand (calibrate) must come first, before the options added here.
  const bool subcommand = arguments.rfind("calibrate", 0) == 0;
  const std::string command = "env HAL_PROBE_CACHE=" + (run.directory / "probes.json").string() + " " + environment +
                              " " + HALCONFORM_PATH + (subcommand ? " calibrate" : "") + " --report-dir " +
                              (run.directory / "report").string() + " " +
                              (subcommand ? arguments.substr(9) : arguments) + " 2>&1";
  const hal::testing::CommandResult result = hal::testing::run_command(command);
  run.output = result.output;
  run.exit_code = result.exit_code;
  const fs::path json = run.directory / "report" / "conformance.json";
  if (fs::exists(json)) {
    std::ifstream file(json);
    run.report = nlohmann::json::parse(file);
  }
  return run;
}

nlohmann::json probe_cache(const Run& run) {
  std::ifstream file(run.directory / "probes.json");
  REQUIRE(file.good());
  return nlohmann::json::parse(file);
}

// The probe record of a capability for the device whose uuid is given.
nlohmann::json probe_record(const nlohmann::json& cache, const std::string& uuid, const std::string& capability) {
  for (const auto& [key, device] : cache["devices"].items())
    if (device["uuid"] == uuid && device["capabilities"].contains(capability)) return device["capabilities"][capability];
  return nullptr;
}

const std::string fakes_environment = std::string("HAL_BACKEND_PATH=") + HAL_FAKE_BACKEND_DIR +
                                      " HAL_BACKENDS=fake_crash,fake_hang,fake_overclaim,fake_bitflip";

}  // namespace

TEST_CASE("the smoke profile passes on the host backend and writes all three reports") {
  const Run run = halconform("--jobs 2");
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  REQUIRE(run.report.is_object());
  CHECK(run.report["schema"] == "hal.conformance/1");
  CHECK(run.report["verdict"] == "pass");
  CHECK(run.report["profile"]["name"] == "smoke");
  CHECK(run.report["counts"]["PASS"].get<int>() >= 15);
  CHECK(run.report["counts"]["FAIL"] == 0);
  CHECK(fs::exists(run.directory / "report" / "conformance.junit.xml"));
  CHECK(fs::exists(run.directory / "report" / "conformance.html"));
  CHECK(run.output.find("conformance.html") != std::string::npos);
  bool hashed_libhal = false;
  for (const auto& library : run.report["manifest"]["libraries"])
    hashed_libhal |= library["role"] == "libhal" && library["sha256"].get<std::string>().size() == 64;
  CHECK(hashed_libhal);
  CHECK(run.report["manifest"]["environment"]["HAL_BACKENDS"] == "host");
  // Probes ran, so the cache now says what the host verifiably has.
  const std::string uuid = run.report["devices"][0]["uuid"];
  const auto managed = probe_record(probe_cache(run), uuid, "memory.managed");
  REQUIRE(managed.is_object());
  CHECK(managed["present"] == true);
  CHECK(managed["case"] == "api.memory.managed");
}

TEST_CASE("fake backends: crash, hang, overclaim and wrong results are recorded and the run completes") {
  const Run run = halconform("--timeout 2 --jobs 4", fakes_environment);
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  REQUIRE(run.report.is_object());
  CHECK(run.report["verdict"] == "fail");
  CHECK(run.report["devices"].size() == 4);
  CHECK(run.outcome("api.memory.fill_patterns", "fake_crash:0") == "CRASH");
  CHECK(run.outcome("api.stream.in_order", "fake_hang:0") == "TIMEOUT");
  CHECK(run.outcome("api.memory.managed", "fake_overclaim:0") == "FAIL");
  CHECK(run.outcome("api.memory.copy_roundtrip", "fake_bitflip:0") == "FAIL");
  // Attention and collectives on the same faults: wrong bf16 data is out of
  // tolerance; a rank that crashes or returns wrong data fails its case, and
  // a hanging rank is ended with its case (ranks die with their supervisor).
  CHECK(run.outcome("numerics.attention.flash.forward.bf16", "fake_bitflip:0") == "FAIL");
  CHECK(run.outcome("numerics.attention.flash.forward.bf16", "fake_crash:0") == "CRASH");
  CHECK(run.outcome("numerics.attention.flash.forward.bf16", "fake_overclaim:0") == "PASS");
  CHECK(run.outcome("numerics.collectives.all_gather", "fake_bitflip:0") == "FAIL");
  CHECK(run.outcome("numerics.collectives.all_reduce", "fake_crash:0") == "FAIL");
  CHECK(run.outcome("numerics.collectives.all_reduce", "fake_hang:0") == "TIMEOUT");
  CHECK(run.outcome("numerics.collectives.all_reduce", "fake_overclaim:0") == "PASS");
  for (const auto& result : run.report["results"])
    if (result["case"] == "numerics.collectives.all_reduce" && result["device"] == "fake_crash:0")
      CHECK(result["evidence"]["message"].get<std::string>().find("rank 0: CRASH") != std::string::npos);
  // What each fake does not break still passes: the run went on past each fault.
  for (const char* device : {"fake_crash:0", "fake_hang:0", "fake_overclaim:0", "fake_bitflip:0"}) {
    CAPTURE(device);
    CHECK(run.outcome("identity.device.info_complete", device) == "PASS");
    CHECK(run.outcome("api.memory.allocate_free", device) == "PASS");
  }
  for (const auto& result : run.report["results"]) {
    if (result["outcome"] == "CRASH") {
      CHECK(result["evidence"]["message"].get<std::string>().find("SIGSEGV") != std::string::npos);
    }
    if (result["outcome"] == "TIMEOUT") {
      CHECK(result["evidence"]["message"].get<std::string>().find("killed") != std::string::npos);
    }
  }
  // The overclaimed capability is cached as verified absent, with the evidence.
  const auto managed = probe_record(probe_cache(run), "fake-fake_overclaim-0", "memory.managed");
  REQUIRE(managed.is_object());
  CHECK(managed["present"] == false);
  CHECK(managed["evidence"].get<std::string>().find("not implemented by the fake_overclaim") != std::string::npos);
}

TEST_CASE("waivers turn a known failure into XFAIL, flag a stale one as XPASS and ignore an expired one") {
  const fs::path waivers = fresh_directory() / "waivers.toml";
  std::ofstream(waivers) << R"(
[[waiver]]
cases = "api.memory.copy_roundtrip"
device = "Fake fake_bitflip*"
reason = "copies flip a bit"
tracking = "https://tracker.example/7"
expires = 2099-01-01

[[waiver]]
cases = "api.memory.allocate_free"
device = "fake_bitflip"
reason = "was broken once"
tracking = "https://tracker.example/8"
expires = 2099-01-01

[[waiver]]
cases = "api.memory.fill_patterns"
reason = "old"
tracking = "https://tracker.example/9"
expires = 2001-01-01
)";
  const Run run = halconform("--waivers " + waivers.string() +
                                 " --filter api.memory.copy_roundtrip --filter api.memory.allocate_free"
                                 " --filter api.memory.fill_patterns",
                             std::string("HAL_BACKEND_PATH=") + HAL_FAKE_BACKEND_DIR + " HAL_BACKENDS=fake_bitflip");
  CAPTURE(run.output);
  REQUIRE(run.report.is_object());
  CHECK(run.outcome("api.memory.copy_roundtrip", "fake_bitflip:0") == "XFAIL");
  CHECK(run.outcome("api.memory.allocate_free", "fake_bitflip:0") == "XPASS");
  CHECK(run.outcome("api.memory.fill_patterns", "fake_bitflip:0") == "FAIL");  // expired waiver
  CHECK(run.report["waivers"]["expired"].size() == 1);
  CHECK(run.output.find("expired on 2001-01-01") != std::string::npos);
  CHECK(run.exit_code == 1);
}

TEST_CASE("--probe-only runs only probes and refreshes the cache") {
  const Run run = halconform("--probe-only");
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  for (const auto& result : run.report["results"]) CHECK(result["probe"] == true);
  CHECK(run.report["results"].size() >= 3);
  const auto cache = probe_cache(run);
  CHECK(cache["schema"] == "hal.probes/1");
  CHECK(probe_record(cache, run.report["devices"][0]["uuid"], "events.timing")["present"] == true);
}

TEST_CASE("bad input is a harness error naming the bad value; no evidence is not a pass") {
  CHECK(halconform("--tier speed").exit_code == 2);
  CHECK(halconform("--tier speed").output.find("unknown tier 'speed'") != std::string::npos);
  const Run profile = halconform("--profile nope");
  CHECK(profile.exit_code == 2);
  CHECK(profile.output.find("available: ") != std::string::npos);
  CHECK(halconform("--jobs zero").exit_code == 2);
  CHECK(halconform("--device cuda:7").exit_code == 2);
  CHECK(halconform("--bogus").output.find("unknown argument '--bogus'") != std::string::npos);
  const Run nothing = halconform("--filter 'nothing.matches.*'");
  CHECK(nothing.exit_code == 1);
  CHECK(nothing.report["verdict"] == "inconclusive");
  const fs::path profile_file = fresh_directory() / "future.toml";
  std::ofstream(profile_file) << "name = \"future\"\ncases = [\"api.*\", \"numerics.tensor_cores.*\"]\n";
  const Run listed = halconform("--list --profile " + profile_file.string());
  CHECK(listed.exit_code == 0);
  CHECK(listed.output.find("api.memory.copy_roundtrip") != std::string::npos);
  CHECK(listed.output.find("numerics.tensor_cores.*") != std::string::npos);
  CHECK(listed.output.find("not implemented in this build") != std::string::npos);
}

// Runs a command with the probe cache of a run; returns its stdout.
std::string output_of(const Run& run, const std::string& command) {
  const std::string line = "env HAL_BACKENDS=host HAL_PROBE_CACHE=" + (run.directory / "probes.json").string() + " " +
                           command;
  const hal::testing::CommandResult result = hal::testing::run_command(line);
  CHECK(result.exit_code == 0);
  return result.output;
}

TEST_CASE("the flash attention probe is cached and cited by attention selection in a later process") {
  const Run run = halconform("--probe-only");
  CAPTURE(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(run.outcome("numerics.attention.flash.probe", "host:0") == "PASS");
  CHECK(run.outcome("numerics.attention.fused.probe", "host:0") == "UNSUPPORTED");  // not claimed: nothing cached
  const auto cache = probe_cache(run);
  const std::string uuid = run.report["devices"][0]["uuid"];
  const auto flash = probe_record(cache, uuid, "attention.flash");
  REQUIRE(flash.is_object());
  CHECK(flash["present"] == true);
  CHECK(flash["case"] == "numerics.attention.flash.probe");
  CHECK(probe_record(cache, uuid, "attention.fused").is_null());

  const std::string text = output_of(run, std::string(HALINFO_PATH) + " attention --json --shape b=1,hq=8,hkv=2,sq=256,d=128 --dtype bf16");
  const nlohmann::json explained = nlohmann::json::parse(text);
  REQUIRE(explained["devices"].size() == 1);
  const auto& device = explained["devices"][0];
  CHECK(device["id"] == "host:0");
  CHECK(device["chosen"] == "flash");
  const auto& candidate = device["candidates"][1];
  REQUIRE(candidate["implementation"] == "flash");
  CHECK(candidate["eligible"] == true);
  CHECK(candidate["capability"]["decided_by"] == "probe");
  const auto& layers = candidate["capability"]["layers"];
  REQUIRE(layers.size() == 2);
  CHECK(layers[0]["layer"] == "declared");
  CHECK(layers[1]["layer"] == "probe");
  CHECK(layers[1]["value"] == "true");
  CHECK(layers[1]["source"].get<std::string>().find("numerics.attention.flash.probe") != std::string::npos);
  CHECK(layers[1]["source"].get<std::string>().find((run.directory / "probes.json").string()) != std::string::npos);
  // Fused was never probed: its layers end with the declaration.
  CHECK(device["candidates"][0]["capability"]["decided_by"] == "declared");
}

// ---- checks that can fail ---------------------------------------------------

std::string fake(const std::string& mode) {
  return std::string("HAL_BACKEND_PATH=") + HAL_FAKE_BACKEND_DIR + " HAL_BACKENDS=fake_" + mode;
}

const nlohmann::json& result_of(const Run& run, const std::string& case_id, const std::string& device) {
  for (const auto& result : run.report["results"])
    if (result["case"] == case_id && result["device"] == device) return result;
  FAIL("no result for " << case_id << " on " << device);
  static const nlohmann::json none;
  return none;
}

std::string message_of(const Run& run, const std::string& case_id, const std::string& device) {
  return result_of(run, case_id, device)["evidence"]["message"];
}

TEST_CASE("a timer that reads zero is an ERROR naming it in every timed case, not a pass") {
  const Run run = halconform("--tier api,performance --filter api.event.timing --filter '*bandwidth_fill' "
                             "--filter '*flash.forward_rate' --filter '*bandwidth_host_to_device'",
                             fake("zerotime"));
  CAPTURE(run.output);
  CHECK(run.exit_code == 2);
  for (const char* id : {"api.event.timing", "performance.memory.bandwidth_fill",
                         "performance.memory.bandwidth_host_to_device", "performance.attention.flash.forward_rate"}) {
    CAPTURE(id);
    CHECK(run.outcome(id, "fake_zerotime:0") == "ERROR");
    CHECK(message_of(run, id, "fake_zerotime:0").find("the timer read 0") != std::string::npos);
  }
}

TEST_CASE("stream cases run on a backend that does not declare streams, and fail what it breaks") {
  const Run run = halconform("--filter 'api.stream.*'", fake("nostreams"));
  CAPTURE(run.output);
  CHECK(run.outcome("api.stream.in_order", "fake_nostreams:0") == "PASS");
  CHECK(run.outcome("api.stream.host_callback", "fake_nostreams:0") == "FAIL");
  CHECK(message_of(run, "api.stream.host_callback", "fake_nostreams:0").find("ran 0 times") != std::string::npos);
  CHECK(run.exit_code == 1);
}

TEST_CASE("performance cases check their output: attention and all_reduce that compute nothing fail") {
  const Run run = halconform("--tier performance --filter '*flash.forward_rate' --filter '*all_reduce_bus_bandwidth'",
                             fake("lazy"));
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.outcome("performance.attention.flash.forward_rate", "fake_lazy:0") == "FAIL");
  CHECK(message_of(run, "performance.attention.flash.forward_rate", "fake_lazy:0").find("wrong result") !=
        std::string::npos);
  CHECK(run.outcome("performance.collectives.all_reduce_bus_bandwidth", "fake_lazy:0") == "FAIL");
  CHECK(message_of(run, "performance.collectives.all_reduce_bus_bandwidth", "fake_lazy:0").find("wrong sum") !=
        std::string::npos);
  // As nccl-tests counts them: the wrong elements of every size, summed over the ranks.
  CHECK(message_of(run, "performance.collectives.all_reduce_bus_bandwidth", "fake_lazy:0").find("#wrong ") !=
        std::string::npos);
}

TEST_CASE("without a floor a measurement is MEASURED, meets no requirement and shows beside the verdict") {
  const fs::path profile = fresh_directory() / "floorless.toml";
  std::ofstream(profile) << "name = \"floorless\"\ntiers = [\"performance\"]\ncases = [\"*bandwidth_fill\"]\n"
                            "[[requirement]]\nname = \"fill\"\nany_of = [\"*bandwidth_fill\"]\n";
  const Run run = halconform("--seed 7 --profile " + profile.string());
  CAPTURE(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.outcome("performance.memory.bandwidth_fill", "host:0") == "MEASURED");
  CHECK(run.outcome("requirement.fill", "host:0") == "MEASURED");
  CHECK(run.report["unjudged"] == 2);
  CHECK(run.output.find("pass (2 measured, not judged)") != std::string::npos);
  const auto& result = result_of(run, "performance.memory.bandwidth_fill", "host:0");
  CHECK(result["seed"] == 7);
  CHECK(run.report["seed"] == 7);
  bool mean = false, spread = false;
  for (const auto& m : result["evidence"]["measurements"]) {
    mean |= m["name"] == "bandwidth" && m["threshold"] == "bandwidth.fill.min_gbps" && m["value"].get<double>() > 0;
    spread |= m["name"] == "bandwidth_runs" && m["value"] == 3;
  }
  CHECK(mean);
  CHECK(spread);
  CHECK(halconform("--seed -3").output.find("--seed '-3' is not a whole number") != std::string::npos);
}

// ---- the memory test ----------------------------------------------------------

TEST_CASE("the memory test passes on host:0 and catches stuck bits at exactly the faulty offsets") {
  const Run host = halconform("--level quick --filter stress.memory.memtest");
  CAPTURE(host.output);
  CHECK(host.exit_code == 0);
  CHECK(host.outcome("stress.memory.memtest", "host:0") == "PASS");
  // The host backend offers the memory test sub-table: its stream worker runs the elements.
  CHECK(message_of(host, "stress.memory.memtest", "host:0").find("22 passes run by the device (the host backend's memory test)") !=
        std::string::npos);

  const Run bad = halconform("--level quick --filter stress.memory.memtest", fake("badmemory"));
  CAPTURE(bad.output);
  CHECK(bad.exit_code == 1);
  const auto& result = result_of(bad, "stress.memory.memtest", "fake_badmemory:0");
  CHECK(result["outcome"] == "FAIL");
  double chunk = 0, tested = 0;
  for (const auto& m : result["evidence"]["measurements"]) {
    if (m["name"] == "chunk_bytes") chunk = m["value"];
    if (m["name"] == "tested_bytes") tested = m["value"];
  }
  REQUIRE(chunk > 0);
  CHECK(tested == 64.0 * (1 << 20));  // the quick level's cap
  // The fake's stuck bits sit at 0x12345 (bit 3 reads 1) and 0x80006 (bit 6 reads 0) of every buffer.
  const std::string message = result["evidence"]["message"];
  CAPTURE(message);
  CHECK(hal::testing::memtest_failing_offsets(message) ==
        hal::testing::offsets_in_every_chunk(static_cast<std::uint64_t>(chunk), static_cast<std::uint64_t>(tested),
                                             {0x12345, 0x80006}));
  // The plugin offers no device memory test: the patterns crossed the bus.
  CHECK(message.find("through the host (fills, uploads and read-backs)") != std::string::npos);
  CHECK(message.find("bits 0x8 read 1 where 0 was written") != std::string::npos);
  CHECK(message.find("bits 0x40 read 0 where 1 was written") != std::string::npos);
  CHECK(message.find("march C-") != std::string::npos);
  CHECK(message.find("walking ones bit 6") != std::string::npos);  // bit 6 stuck at 0 fails only its own lane
}

// ---- health: the gate around every case, the stress cases' watch -------------

TEST_CASE("the health gate fails any case under which uncorrected ECC errors rose, naming the change") {
  const Run run = halconform("--filter api.memory.copy_roundtrip --filter identity.device.info_complete", fake("eccrise"));
  CAPTURE(run.output);
  CHECK(run.exit_code == 1);
  for (const char* id : {"api.memory.copy_roundtrip", "identity.device.info_complete"}) {
    CHECK(run.outcome(id, "fake_eccrise:0") == "FAIL");
    CHECK(message_of(run, id, "fake_eccrise:0").find("health gate: 1 more uncorrected ECC error while the case ran") !=
          std::string::npos);
  }
  CHECK(halconform("--filter api.memory.copy_roundtrip").outcome("api.memory.copy_roundtrip", "host:0") == "PASS");
}

TEST_CASE("the compute and memory soaks run on host:0, watched by telemetry, and fail a device held down by heat") {
  const fs::path profile = fresh_directory() / "short_soaks.toml";
  std::ofstream(profile) << "name = \"short soaks\"\ntiers = [\"stress\"]\n"
                            "cases = [\"stress.compute.*\", \"stress.memory.soak\"]\nstress_seconds = 1.5\n";
  const Run host = halconform("--profile " + profile.string());
  CAPTURE(host.output);
  CHECK(host.exit_code == 0);
  for (const char* id : {"stress.compute.attention", "stress.memory.soak"}) {
    CHECK(host.outcome(id, "host:0") == "PASS");
    CHECK(message_of(host, id, "host:0").find("telemetry watched in") != std::string::npos);
  }
  const auto& compute = result_of(host, "stress.compute.attention", "host:0");
  double runs = 0, samples = 0;
  for (const auto& m : compute["evidence"]["measurements"]) {
    if (m["name"] == "runs") runs = m["value"];
    if (m["name"] == "telemetry samples") samples = m["value"];
  }
  CHECK(runs >= 1);
  CHECK(samples >= 2);

  const Run hot = halconform("--profile " + profile.string() + " --filter 'stress.compute.*'", fake("throttle"));
  CAPTURE(hot.output);
  CHECK(hot.exit_code == 1);
  CHECK(hot.outcome("stress.compute.attention", "fake_throttle:0") == "FAIL");
  CHECK(message_of(hot, "stress.compute.attention", "fake_throttle:0")
            .find("under load: clocks held down by hardware_thermal") != std::string::npos);
}

// ---- levels, diff, calibrate --------------------------------------------------

TEST_CASE("levels: --list estimates each case and the budget; bad levels and durations are refused") {
  const Run listed = halconform("--list --level quick");
  CAPTURE(listed.output);
  CHECK(listed.exit_code == 0);
  CHECK(listed.output.find("est. s") != std::string::npos);
  CHECK(listed.output.find("(level quick, budget 60 s)") != std::string::npos);
  CHECK(listed.output.find("stress.memory.memtest") != std::string::npos);
  const Run bad = halconform("--level fast");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("unknown level 'fast'; levels are quick, standard, extended, burn-in") != std::string::npos);
  CHECK(halconform("--level quick --duration 60").output.find("--duration is for --level burn-in") !=
        std::string::npos);
}

TEST_CASE("diff reports outcome regressions and moved measurements; calibrate writes floors from measurements") {
  const Run good = halconform("--filter api.memory.copy_roundtrip --filter api.memory.allocate_free");
  const Run broken = halconform("--filter api.memory.copy_roundtrip --filter api.memory.allocate_free",
                                fake("bitflip"));
  REQUIRE(good.report.is_object());
  REQUIRE(broken.report.is_object());
  // Same cases on another device id: rename to compare like with like.
  nlohmann::json after = broken.report;
  for (auto& result : after["results"]) result["device"] = "host:0";
  const fs::path directory = fresh_directory();
  std::ofstream(directory / "before.json") << good.report.dump();
  std::ofstream(directory / "after.json") << after.dump();
  const auto diff = hal::testing::run_command(std::string(HALCONFORM_PATH) + " diff " + (directory / "before.json").string() +
                                              " " + (directory / "after.json").string() + " 2>&1");
  CAPTURE(diff.output);
  CHECK(diff.exit_code == 1);
  CHECK(diff.output.find("REGRESSION api.memory.copy_roundtrip on host:0: PASS -> FAIL") != std::string::npos);
  const auto same = hal::testing::run_command(std::string(HALCONFORM_PATH) + " diff " + (directory / "before.json").string() +
                                              " " + (directory / "before.json").string() + " 2>&1");
  CHECK(same.exit_code == 0);
  std::ofstream(directory / "other.json") << R"({"schema": "hal.conformance/0", "results": []})";
  const auto schema = hal::testing::run_command(std::string(HALCONFORM_PATH) + " diff " + (directory / "other.json").string() +
                                                " " + (directory / "before.json").string() + " 2>&1");
  CHECK(schema.exit_code == 2);
  CHECK(schema.output.find("has schema 'hal.conformance/0'; halconform reads hal.conformance/1") != std::string::npos);
  const auto missing = hal::testing::run_command(std::string(HALCONFORM_PATH) + " diff /nonexistent.json " +
                                                 (directory / "before.json").string() + " 2>&1");
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("cannot read report /nonexistent.json") != std::string::npos);

  const Run calibrated = halconform("calibrate --fraction 0.5 --filter '*bandwidth_fill'");
  CAPTURE(calibrated.output);
  REQUIRE(calibrated.exit_code == 0);
  double measured = 0;
  for (const auto& m : result_of(calibrated, "performance.memory.bandwidth_fill", "host:0")["evidence"]["measurements"])
    if (m["name"] == "bandwidth") measured = m["value"];
  std::ifstream file(calibrated.directory / "report" / "calibrated.toml");
  const std::string fragment((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  CAPTURE(fragment);
  const auto at = fragment.find("\"bandwidth.fill.min_gbps\" = ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(fragment.substr(at + 28)) == doctest::Approx(measured * 0.5).epsilon(0.001));
  CHECK(fragment.find("backend = \"host\"") != std::string::npos);
  // The fragment is a profile's thresholds: with it the same case is judged.
  const fs::path profile = calibrated.directory / "calibrated-profile.toml";
  std::ofstream(profile) << "name = \"calibrated\"\ntiers = [\"performance\"]\ncases = [\"*bandwidth_fill\"]\n" << fragment;
  const Run judged = halconform("--profile " + profile.string());
  CAPTURE(judged.output);
  // Judged against the floor, and above it: PASS, or WARN when a loaded machine scatters the runs.
  const std::string outcome = judged.outcome("performance.memory.bandwidth_fill", "host:0");
  CHECK((outcome == "PASS" || outcome == "WARN"));
  CHECK(halconform("calibrate --fraction 2").output.find("--fraction '2' is not in (0, 1]") != std::string::npos);
}
