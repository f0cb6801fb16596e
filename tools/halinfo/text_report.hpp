// halinfo's text output for people.
#pragma once

#include <ostream>
#include <vector>

#include "hal/hal.hpp"

namespace halinfo {

void print_summary(const hal::Runtime& runtime, const std::vector<hal::Device>& devices, bool verbose,
                   std::ostream& out);
// Devices with their NUMA node and local CPUs, beside the machine's packages and nodes.
void print_topology(const hal::Runtime& runtime, const std::vector<hal::Device>& devices, bool json,
                    std::ostream& out);

}  // namespace halinfo
