// The halbench subcommands. Each takes the arguments after its name and
// returns the process exit status; bad flags are thrown as UsageError.
#pragma once

#include <span>
#include <string_view>

namespace halbench {

int run_mem(std::span<const std::string_view> arguments);
int run_dispatch(std::span<const std::string_view> arguments);
int run_attn(std::span<const std::string_view> arguments);
int run_coll(std::span<const std::string_view> arguments);
int run_telemetry(std::span<const std::string_view> arguments);

}  // namespace halbench
