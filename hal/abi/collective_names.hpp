// What the collectives engines of every backend say about an operation: the
// names of kinds and reductions, and the "rank 1: all_reduce #12 (...)" that
// starts each of their error messages (dtype names: dtype_codes.hpp).
#pragma once

#include <string>
#include <string_view>

#include "hal/backend_abi.h"

namespace hal::abi {

std::string kind_name(hal_collective_kind kind);
std::string reduce_op_name(hal_reduce_op op);
// "rank 1: all_reduce #12 (4096 x f32, timeout 300000 ms)", the start of every error.
std::string describe_operation(int rank, const hal_collective_op_v1& operation);
// A backend option of the communicator config, or "" when absent.
std::string option_value(const hal_communicator_config_v1& config, std::string_view key);

}  // namespace hal::abi
