#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "hal/topology.hpp"
#include "scoped_environment.hpp"

namespace {

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  return CPU_COUNT(&set);
}

int online_cpu_count() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

void check_every_cpu_in_exactly_one_numa_node(const hal::Topology& topology) {
  if (topology.numa_nodes.empty()) return;
  int cpus_seen = 0;
  for (const hal::NumaNode& node : topology.numa_nodes) {
    for (int cpu : node.cpus.cpus) {
      int owners = 0;
      for (const hal::NumaNode& other : topology.numa_nodes) owners += other.cpus.contains(cpu) ? 1 : 0;
      CHECK_MESSAGE(owners == 1, "cpu ", cpu, " is in ", owners, " NUMA nodes");
      CHECK(topology.numa_node_of_cpu(cpu) == node.os_index);
      ++cpus_seen;
    }
  }
  CHECK(cpus_seen == topology.processing_unit_count);
}

hal::PciDevice pci_device(std::string bus_id, std::uint16_t vendor_id) {
  hal::PciDevice device;
  device.bus_id = std::move(bus_id);
  device.vendor_id = vendor_id;
  return device;
}

}  // namespace

TEST_CASE("CpuSet::to_string compresses consecutive CPUs into ranges") {
  CHECK(hal::CpuSet{}.to_string() == "");
  CHECK(hal::CpuSet{{5}}.to_string() == "5");
  CHECK(hal::CpuSet{{0, 1}}.to_string() == "0-1");
  CHECK(hal::CpuSet{{0, 1, 2, 3, 8, 10, 11}}.to_string() == "0-3,8,10-11");
  CHECK(hal::CpuSet{{1, 3, 5}}.to_string() == "1,3,5");
  CHECK(hal::CpuSet{{0, 2, 3, 4, 100}}.to_string() == "0,2-4,100");
  // Unordered or repeated input still prints the set, not the list.
  CHECK(hal::CpuSet{{3, 1, 2, 2}}.to_string() == "1-3");
}

TEST_CASE("the loaded CPU counts agree with the operating system") {
  hal::Topology topology = hal::Topology::load();
  INFO("hwloc error: ", topology.error);
  REQUIRE(topology.error.empty());
  // hwloc reports the CPUs the process is allowed to use (cgroup cpuset),
  // which lies between its affinity mask and all online CPUs.
  CHECK(topology.processing_unit_count >= affinity_cpu_count());
  CHECK(topology.processing_unit_count <= online_cpu_count());
  CHECK(topology.processing_unit_count <= static_cast<int>(std::thread::hardware_concurrency()));
  CHECK(topology.core_count >= 1);
  CHECK(topology.core_count <= topology.processing_unit_count);
  int cores_in_packages = 0;
  for (const hal::Package& package : topology.packages) cores_in_packages += package.core_count;
  if (!topology.packages.empty()) CHECK(cores_in_packages == topology.core_count);
  check_every_cpu_in_exactly_one_numa_node(topology);
  CHECK_FALSE(topology.pci_loaded);
  CHECK(topology.pci_devices.empty());
}

TEST_CASE("a synthetic two-socket machine is described exactly") {
  hal::testing::ScopedEnvironment synthetic{{"HWLOC_SYNTHETIC", "pack:2 numa:1 core:2 pu:2"}};
  hal::Topology topology = hal::Topology::load();
  REQUIRE(topology.error.empty());
  CHECK(topology.processing_unit_count == 8);
  CHECK(topology.core_count == 4);
  REQUIRE(topology.packages.size() == 2);
  CHECK(topology.packages[0].core_count == 2);
  CHECK(topology.packages[0].cpus.to_string() == "0-3");
  CHECK(topology.packages[1].cpus.to_string() == "4-7");
  REQUIRE(topology.numa_nodes.size() == 2);
  CHECK(topology.numa_node_of_cpu(5) == topology.numa_nodes[1].os_index);
  CHECK(topology.numa_node_of_cpu(8) == -1);
  check_every_cpu_in_exactly_one_numa_node(topology);
}

TEST_CASE("loading with PCI lists devices in canonical form") {
  hal::Topology topology = hal::Topology::load({.include_pci = true});
  INFO("hwloc error: ", topology.error);
  REQUIRE(topology.error.empty());
  CHECK(topology.pci_loaded);
  CHECK(topology.processing_unit_count >= 1);
  for (const hal::PciDevice& device : topology.pci_devices) {
    INFO("device ", device.bus_id);
    CHECK(hal::normalize_pci_bus_id(device.bus_id) == device.bus_id);
    CHECK(topology.find_pci(device.bus_id) == &device);
    if (device.numa_node >= 0) CHECK_FALSE(device.local_cpus.empty());
  }
}

TEST_CASE("normalize_pci_bus_id accepts the common spellings") {
  CHECK(hal::normalize_pci_bus_id("3b:00.0") == "0000:3b:00.0");
  CHECK(hal::normalize_pci_bus_id("0000:3B:00.0") == "0000:3b:00.0");
  CHECK(hal::normalize_pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0");  // CUDA's form
  CHECK(hal::normalize_pci_bus_id("10000:01:1f.7") == "10000:01:1f.7");    // Intel VMD domain
  CHECK(hal::normalize_pci_bus_id("0:3b:0.0") == "0000:3b:00.0");
  for (const char* malformed : {"", "3b", "3b:00", ":3b:00.0", "0000:3b:00.8", "0000:3b:20.0", "0000:100:00.0",
                                "zz:00.0", "a:b:3b:00.0", "3b:00.0 ", "+3b:00.0"}) {
    INFO("input '", malformed, "'");
    CHECK_FALSE(hal::normalize_pci_bus_id(malformed).has_value());
  }
}

TEST_CASE("find_pci finds a device under any spelling of its address") {
  hal::Topology topology;
  topology.pci_devices = {pci_device("0000:3b:00.0", 0x10de), pci_device("0001:af:00.0", 0x1002)};
  REQUIRE(topology.find_pci("3b:00.0") != nullptr);
  CHECK(topology.find_pci("3b:00.0")->vendor_id == 0x10de);
  CHECK(topology.find_pci("0000:3B:00.0") == &topology.pci_devices[0]);
  CHECK(topology.find_pci("00000001:AF:00.0") == &topology.pci_devices[1]);
  CHECK(topology.find_pci("af:00.0") == nullptr);  // domain 0, not 1
  CHECK(topology.find_pci("not a bus id") == nullptr);
}

TEST_CASE("numa_node_of_cpu maps CPUs to their node" * doctest::description("hand-built topology")) {
  hal::Topology topology;
  topology.numa_nodes = {
      hal::NumaNode{.os_index = 0, .memory_bytes = 1, .cpus = {{0, 1, 2, 3}}},
      hal::NumaNode{.os_index = 2, .memory_bytes = 1, .cpus = {{4, 5}}},
      hal::NumaNode{.os_index = 3, .memory_bytes = 1, .cpus = {}},  // memory only
  };
  CHECK(topology.numa_node_of_cpu(3) == 0);
  CHECK(topology.numa_node_of_cpu(4) == 2);
  CHECK(topology.numa_node_of_cpu(6) == -1);
  CHECK(topology.numa_node_of_cpu(-1) == -1);
}

// Prints load times; run with: topology_test -tc="*load time*" --no-skip
TEST_CASE("load time" * doctest::skip()) {
  for (bool include_pci : {false, true}) {
    constexpr int kRuns = 20;
    auto start = std::chrono::steady_clock::now();
    for (int run = 0; run < kRuns; ++run) {
      hal::Topology topology = hal::Topology::load({.include_pci = include_pci});
      REQUIRE(topology.error.empty());
    }
    std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    MESSAGE("include_pci=", include_pci, ": ", elapsed.count() / kRuns, " ms per load (mean of ", kRuns, ")");
  }
}
