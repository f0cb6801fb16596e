// halinfo as users run it: exit codes, and the JSON document field by field.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "command_output.hpp"
#include "hal/hal.hpp"

namespace {

using hal::testing::CommandResult;

// stdout only: halinfo logs to stderr.
CommandResult run_halinfo(const std::string& arguments, const std::string& environment = "") {
  return hal::testing::run_command(environment + " " + HALINFO_PATH + " " + arguments + " 2>/dev/null");
}

nlohmann::json parse(const CommandResult& result) {
  REQUIRE(result.exit_code == 0);
  return nlohmann::json::parse(result.output);
}

}  // namespace

TEST_CASE("halinfo --json describes the host backend and device field by field") {
  const nlohmann::json document = parse(run_halinfo("--json"));
  CHECK(document["schema"] == "hal.info/1");
  CHECK(document["hal_version"].is_string());
  REQUIRE(document["backends"].is_array());
  const auto host = std::find_if(document["backends"].begin(), document["backends"].end(),
                                 [](const nlohmann::json& backend) { return backend["name"] == "host"; });
  REQUIRE(host != document["backends"].end());
  CHECK((*host)["state"] == "loaded");
  CHECK((*host)["abi_version"] == 1);
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
