// Runs a shell command line (the caller adds any redirection, e.g. " 2>&1")
// and captures its standard output with its exit code.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace hal::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string output;
};

inline CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = popen(command_line.c_str(), "r");
  REQUIRE_MESSAGE(pipe != nullptr, "popen failed for: " << command_line);
  std::array<char, 4096> chunk{};
  while (std::size_t read = std::fread(chunk.data(), 1, chunk.size(), pipe)) result.output.append(chunk.data(), read);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace hal::testing
