// What the collectives engines of every backend say about an operation:
// names of kinds and types, element sizes, and the "rank 1: all_reduce #12
// (...)" that starts each of their error messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "hal/backend_abi.h"

namespace hal::backend {

std::string kind_name(hal_collective_kind kind);
std::string dtype_name(hal_dtype dtype);
std::string reduce_op_name(hal_reduce_op op);
std::size_t element_size(hal_dtype dtype);  // 0 for an unknown dtype
bool is_half(hal_dtype dtype);
// "rank 1: all_reduce #12 (4096 x f32, timeout 300000 ms)", the start of every error.
std::string describe_operation(int rank, const hal_collective_op_v1& operation);
// A backend option of the communicator config, or "" when absent.
std::string option_value(const hal_communicator_config_v1& config, std::string_view key);

}  // namespace hal::backend
