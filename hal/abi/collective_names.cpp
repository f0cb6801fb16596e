#include "collective_names.hpp"

#include <cstdint>
#include <iterator>
#include <sstream>

#include "dtype_codes.hpp"

namespace hal::abi {

std::string kind_name(hal_collective_kind kind) {
  static const char* const names[] = {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all",
                                      "gather",     "scatter",   "send",   "recv",       "barrier"};
  const auto index = static_cast<std::size_t>(kind);
  return index < std::size(names) ? names[index] : "unknown";
}

std::string reduce_op_name(hal_reduce_op op) {
  static const char* const names[] = {"sum", "prod", "min", "max", "avg"};
  const auto index = static_cast<std::size_t>(op);
  return index < std::size(names) ? names[index] : "unknown";
}

std::string describe_operation(int rank, const hal_collective_op_v1& op) {
  std::ostringstream text;
  text << "rank " << rank << ": " << kind_name(op.kind) << " #" << op.sequence;
  if (op.kind == HAL_COLLECTIVE_SEND || op.kind == HAL_COLLECTIVE_RECV)
    text << " (" << (op.kind == HAL_COLLECTIVE_SEND ? "to" : "from") << " peer rank " << op.root << ", ";
  else
    text << " (";
  text << op.count << " x " << dtype_name(op.dtype);
  if (op.root >= 0 && op.kind != HAL_COLLECTIVE_SEND && op.kind != HAL_COLLECTIVE_RECV) text << ", root " << op.root;
  text << ", timeout " << op.timeout_ms << " ms)";
  return text.str();
}

std::string option_value(const hal_communicator_config_v1& config, std::string_view key) {
  for (std::uint32_t i = 0; i < config.option_count; ++i)
    if (config.options[i].key != nullptr && key == config.options[i].key && config.options[i].value != nullptr)
      return config.options[i].value;
  return {};
}

}  // namespace hal::abi
