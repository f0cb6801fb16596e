// halinfo as users run it: exit codes, and the JSON document field by field.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "command_output.hpp"
#include "hal/hal.hpp"

namespace {

using hal::testing::CommandResult;

// stdout only: halinfo logs to stderr.
CommandResult run_halinfo(const std::string& arguments, const std::string& environment = "") {
  return hal::testing::run_command(environment + " " + HALINFO_PATH + " " + arguments + " 2>/dev/null");
}

// With stderr, for usage errors.
CommandResult run_halinfo_with_errors(const std::string& arguments) {
  return hal::testing::run_command(std::string(HALINFO_PATH) + " " + arguments + " 2>&1");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

const std::string fixture_root = std::string("HAL_HOST_TELEMETRY_ROOT=") + HAL_TEST_DATA_DIR + "/host_telemetry";

nlohmann::json parse(const CommandResult& result) {
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.output);
}

}  // namespace

TEST_CASE("halinfo --json describes the host backend and device field by field") {
  const nlohmann::json document = parse(run_halinfo("--json"));
  CHECK(document["schema"] == "hal.info/2");
  CHECK(document["hal_version"].is_string());
  REQUIRE(document["backends"].is_array());
  const auto host = std::find_if(document["backends"].begin(), document["backends"].end(),
                                 [](const nlohmann::json& backend) { return backend["name"] == "host"; });
  REQUIRE(host != document["backends"].end());
  CHECK((*host)["state"] == "loaded");
  CHECK((*host)["abi_version"] == 2);
  CHECK((*host)["device_count"] >= 1);
  CHECK((*host)["path"].get<std::string>().ends_with("libhal_backend_host.so"));
  for (const auto& name : {"cuda", "ppu", "rocm"}) {
    CAPTURE(name);
    const auto backend = std::find_if(document["backends"].begin(), document["backends"].end(),
                                      [&](const nlohmann::json& entry) { return entry["name"] == name; });
    REQUIRE(backend != document["backends"].end());
    CHECK((*backend)["state"].is_string());
    if ((*backend)["state"] != "loaded") CHECK_FALSE((*backend)["reason"].get<std::string>().empty());
  }

  REQUIRE(document["devices"].is_array());
  const nlohmann::json& device = document["devices"][0];
  CHECK(device["id"] == "host:0");
  CHECK(device["backend"] == "host");
  CHECK(device["index"] == 0);
  CHECK(device["type"] == "cpu");
  CHECK_FALSE(device["name"].get<std::string>().empty());
  CHECK_FALSE(device["vendor"].get<std::string>().empty());
  CHECK(device["uuid"].get<std::string>().starts_with("host-"));
  CHECK(device["pci_bus_id"] == "");
  CHECK(device["numa_node"].is_number_integer());
  CHECK(device["total_memory_bytes"].get<std::uint64_t>() > 0);
  CHECK(device["free_memory_bytes"].get<std::uint64_t>() <= device["total_memory_bytes"].get<std::uint64_t>());
  CHECK(device["compute_units"].get<unsigned>() >= 1);
  CHECK(device["clock_mhz"].is_number_unsigned());
  CHECK(device["memory_clock_mhz"].is_number_unsigned());
  CHECK(device["versions"]["backend"] == document["hal_version"]);
  CHECK(device["versions"]["kernel"].is_string());
  CHECK(device["capabilities"]["memory.managed"]["value"] == true);
  CHECK(device["capabilities"]["collectives"]["value"].is_boolean());
}

TEST_CASE("halinfo selects a device and rejects what is not there") {
  const nlohmann::json one = parse(run_halinfo("--json --device host:0"));
  REQUIRE(one["devices"].size() == 1);
  CHECK(one["devices"][0]["id"] == "host:0");
  const nlohmann::json by_uuid = parse(run_halinfo("--json --device " + one["devices"][0]["uuid"].get<std::string>()));
  CHECK(by_uuid["devices"][0]["id"] == "host:0");
  CHECK(run_halinfo("--device cuda:9").exit_code == 2);
  CHECK(run_halinfo("--no-such-flag").exit_code == 2);
  CHECK(run_halinfo("--require lots").exit_code == 2);
}

TEST_CASE("halinfo --require counts accelerators only") {
  const nlohmann::json document = parse(run_halinfo("--json"));
  int accelerators = 0;
  for (const auto& device : document["devices"]) accelerators += device["type"] != "cpu";
  CHECK(run_halinfo("--require " + std::to_string(accelerators)).exit_code == 0);
  CHECK(run_halinfo("--require " + std::to_string(accelerators + 1)).exit_code == 1);
  CHECK(run_halinfo("--require 0").exit_code == 0);
}

TEST_CASE("halinfo survives broken backends and reports them") {
  const CommandResult result = run_halinfo("--json", std::string("HAL_BACKEND_PATH=") + HAL_BROKEN_PLUGIN_DIR);
  const nlohmann::json document = parse(result);
  int broken = 0;
  for (const auto& backend : document["backends"])
    if (backend["name"].get<std::string>().starts_with("broken_")) {
      ++broken;
      CHECK(backend["state"] != "loaded");
      CHECK_FALSE(backend["reason"].get<std::string>().empty());
    }
  CHECK(broken >= 7);
  CHECK(document["devices"][0]["id"] == "host:0");
}

TEST_CASE("halinfo topo places each device") {
  const nlohmann::json document = parse(run_halinfo("topo --json"));
  CHECK(document["schema"] == "hal.topo/1");
  CHECK(document["processing_unit_count"].get<int>() >= 1);
  REQUIRE_FALSE(document["devices"].empty());
  CHECK(document["devices"][0]["id"] == "host:0");
  CHECK_FALSE(document["devices"][0]["local_cpus"].get<std::string>().empty());
}

TEST_CASE("halinfo --json gives each device a telemetry object: every field a value or a reason") {
  const nlohmann::json document = parse(run_halinfo("--json --device host:0"));
  const nlohmann::json& telemetry = document["devices"][0]["telemetry"];
  CHECK(telemetry["source"] == "sysfs /");
  CHECK(telemetry["health"].is_string());
  CHECK(telemetry["problems"].is_array());
  std::size_t fields = 0;
  for (const char* group : {"temperature", "power", "clocks", "utilization", "clock_events", "ecc", "retired_pages",
                            "row_remapping", "pcie", "interconnect"}) {
    CAPTURE(group);
    REQUIRE(telemetry[group].is_object());
    for (const auto& [name, field] : telemetry[group].items()) {
      CAPTURE(name);
      ++fields;
      if (field.contains("value")) {
        CHECK_FALSE(field.contains("reason"));
      } else {
        CHECK(field["reason"].is_string());
        CHECK(field["reason"] != "not reported by this backend");  // the host fills every field
        CHECK(field["detail"].is_string());
      }
    }
  }
  CHECK(fields == 38);
  CHECK(telemetry["pcie"]["width"]["reason"] == "not supported");
}

TEST_CASE("halinfo health shows what is wrong first and exits 1 on a critical problem") {
  const CommandResult result = run_halinfo("health --device host:0", fixture_root);
  CHECK(result.exit_code == 1);
  const std::vector<std::string> lines = lines_of(result.output);
  REQUIRE(lines.size() > 4);
  CHECK(lines[0].starts_with("host:0  1 uncorrected ECC error since the driver loaded  ("));
  CHECK(lines[1] == "  problems");
  CHECK(lines[2].find("critical  1 uncorrected ECC error") != std::string::npos);
  CHECK(result.output.find("temperature.core_celsius            54.0 C") != std::string::npos);
  CHECK(result.output.find("temperature.hotspot_celsius         not supported: CPUs have no separate hotspot sensor") !=
        std::string::npos);
  // --json: one line per device, the same problems and exit status.
  const CommandResult json = run_halinfo("health --device host:0 --json", fixture_root);
  CHECK(json.exit_code == 1);
  const nlohmann::json line = nlohmann::json::parse(lines_of(json.output).at(0));
  CHECK(line["id"] == "host:0");
  CHECK(line["telemetry"]["health"] == "1 uncorrected ECC error since the driver loaded");
  CHECK(line["telemetry"]["problems"][0]["severity"] == "critical");
  CHECK(line["telemetry"]["temperature"]["core_celsius"]["value"] == 54.0);
  // The default summary says the same in one word per device.
  CHECK(run_halinfo("", fixture_root).output.find("; health: 1 uncorrected ECC error since the driver loaded") !=
        std::string::npos);
}

TEST_CASE("halinfo watch prints one row per device per interval as a table, CSV or JSON lines") {
  const CommandResult csv = run_halinfo("watch --device host:0 --interval 0.05 --count 3 --csv", fixture_root);
  REQUIRE(csv.exit_code == 0);
  const std::vector<std::string> rows = lines_of(csv.output);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].starts_with("time,device,temp_c,"));
  for (std::size_t row = 1; row < rows.size(); ++row) {
    CAPTURE(rows[row]);
    CHECK(rows[row].find(",host:0,54.0,") != std::string::npos);
  }
  const CommandResult json = run_halinfo("watch --device host:0 --interval 0.05 --count 2 --json", fixture_root);
  REQUIRE(json.exit_code == 0);
  const std::vector<std::string> objects = lines_of(json.output);
  REQUIRE(objects.size() == 2);
  for (const std::string& line : objects) {
    const nlohmann::json object = nlohmann::json::parse(line);
    CHECK(object["device"] == "host:0");
    CHECK(object["temperature.core_celsius"] == 54.0);
    CHECK(object["temperature.hotspot_celsius"].is_null());
    CHECK(object["time"].get<std::string>().ends_with("Z"));
  }
  const CommandResult table = run_halinfo("watch --device host:0 --interval 0.05 --count 1", fixture_root);
  CHECK(lines_of(table.output).size() == 2);
}

TEST_CASE("halinfo rejects bad watch values, naming them and what is allowed") {
  const CommandResult zero = run_halinfo_with_errors("watch --interval 0");
  CHECK(zero.exit_code == 2);
  CHECK(zero.output.find("--interval takes seconds from 0.01 to 86400 (e.g. 1 or 0.5), not '0'") != std::string::npos);
  const CommandResult count = run_halinfo_with_errors("watch --count -3");
  CHECK(count.exit_code == 2);
  CHECK(count.output.find("--count takes a whole number of intervals (1 or more), not '-3'") != std::string::npos);
  CHECK(run_halinfo_with_errors("--csv").output.find("--csv goes with the watch command") != std::string::npos);
  CHECK(run_halinfo_with_errors("watch --csv --json").exit_code == 2);
}

TEST_CASE("the default summary gives an unavailable backend one short reason; -v lists every path") {
  const CommandResult summary = run_halinfo("");
  const CommandResult verbose = run_halinfo("-v");
  REQUIRE(summary.exit_code == 0);
  CHECK(summary.output.find(". Tried: ") == std::string::npos);
  CHECK(summary.output.find("initializing the backend failed") == std::string::npos);
  // Every backend that is not loaded: its first sentence in the summary, all of it with -v.
  const nlohmann::json document = parse(run_halinfo("--json"));
  for (const auto& backend : document["backends"]) {
    if (backend["state"] == "loaded") continue;
    const std::string reason = backend["reason"];
    CAPTURE(reason);
    const std::string prefix = "initializing the backend failed in the " + backend["name"].get<std::string>() + " backend: ";
    const std::string shown = reason.starts_with(prefix) ? reason.substr(prefix.size()) : reason;
    CHECK(summary.output.find(shown.substr(0, shown.find(". "))) != std::string::npos);
    CHECK(verbose.output.find(reason) != std::string::npos);
  }
}

TEST_CASE("halinfo config shows every setting with its source: default, file line or variable") {
  const std::string directory = std::filesystem::temp_directory_path() / ("halinfo-config-" + std::to_string(getpid()));
  std::filesystem::create_directories(directory);
  const std::string file = directory + "/hal.toml";
  std::ofstream(file) << "[log]\nlevel = \"error\"\n\n[collectives]\ntimeout_seconds = 30\nspeed = 1\n";
  const std::string environment = "HAL_CONFIG=" + file + " HAL_ATTN_STRICT=1 HAL_LOG_LEVEL=";
  const CommandResult table = run_halinfo("config", environment);
  REQUIRE(table.exit_code == 0);
  CHECK(table.output.find("config file: " + file) != std::string::npos);
  CHECK(table.output.find("unknown key \"collectives.speed\" is ignored") != std::string::npos);
  bool strict_row = false, level_row = false, default_row = false;
  for (const std::string& line : lines_of(table.output)) {
    strict_row |= line.starts_with("attention.strict ") && line.find(" true ") != std::string::npos &&
                  line.ends_with("  HAL_ATTN_STRICT=1");
    level_row |= line.starts_with("log.level ") && line.find(" \"error\" ") != std::string::npos &&
                 line.ends_with("  " + file + ":2");
    default_row |= line.starts_with("collectives.engine ") && line.ends_with("built-in default");
  }
  CHECK(strict_row);
  CHECK(level_row);
  CHECK(default_row);

  const nlohmann::json document = parse(run_halinfo("config --json", environment));
  CHECK(document["schema"] == "hal.settings/1");
  CHECK(document["config_file"] == file);
  const auto& settings = document["settings"];
  const auto timeout = std::find_if(settings.begin(), settings.end(),
                                    [](const nlohmann::json& s) { return s["key"] == "collectives.timeout_seconds"; });
  REQUIRE(timeout != settings.end());
  CHECK((*timeout)["value"] == "30");
  CHECK((*timeout)["sources"][0]["kind"] == "config file");
  CHECK((*timeout)["sources"][0]["location"] == file + ":5");
  CHECK((*timeout)["environment_variable"].is_null());
  // A variable whose value is not allowed stops it, naming the variable.
  const CommandResult bad = run_halinfo_with_errors("config HAL_ATTN_STRICT=maybe");  // an argument, not a variable
  CHECK(bad.exit_code == 2);
  const CommandResult bad_variable =
      hal::testing::run_command("HAL_ATTN_STRICT=maybe " + std::string(HALINFO_PATH) + " config 2>&1");
  CHECK(bad_variable.exit_code == 3);
  CHECK(bad_variable.output.find("HAL_ATTN_STRICT='maybe' is not allowed") != std::string::npos);
  std::filesystem::remove_all(directory);
}

TEST_CASE("a backend's HAL_* variable is a setting: shown with its variable, delivered to the plugin, checked there") {
  const std::string environment = "HAL_HOST_ISA=sse9 HAL_HOST_THREADS=lots HAL_BACKENDS=host";
  bool isa_row = false, threads_row = false;
  for (const std::string& line : lines_of(run_halinfo("config", environment).output)) {
    isa_row |= line.starts_with("backend.host.isa ") && line.ends_with("  HAL_HOST_ISA=sse9");
    threads_row |= line.starts_with("backend.host.threads ") && line.ends_with("  HAL_HOST_THREADS=lots");
  }
  CHECK(isa_row);
  CHECK(threads_row);
  // The host plugin receives both with their source and warns, naming the variable, for each it cannot use.
  const CommandResult run = hal::testing::run_command(environment + " " + std::string(HALINFO_PATH) + " 2>&1");
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("HAL_HOST_ISA=sse9 is not an instruction set the host kernels have; use scalar, avx2, "
                        "avx512, avx512bf16 or amx") != std::string::npos);
  CHECK(run.output.find("HAL_HOST_THREADS=lots is not a whole number greater than 0") != std::string::npos);
  const CommandResult good =
      hal::testing::run_command("HAL_HOST_ISA=scalar HAL_BACKENDS=host " + std::string(HALINFO_PATH) + " 2>&1");
  CHECK(good.output.find("is not an instruction set") == std::string::npos);
}
