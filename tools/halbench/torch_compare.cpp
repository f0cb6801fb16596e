#include "torch_compare.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

extern char** environ;

namespace halbench {
namespace {

std::string find_script(const std::optional<std::string>& script) {
  namespace fs = std::filesystem;
  if (script) {
    if (!fs::is_regular_file(*script)) throw std::runtime_error("--torch-script: there is no file '" + *script + "'");
    return *script;
  }
  std::vector<fs::path> candidates{fs::path(HALBENCH_SOURCE_DIR) / "torch_sdpa.py"};
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(executable.parent_path().parent_path() / "share" / "hal" / "torch_sdpa.py");
  std::string tried;
  for (const fs::path& candidate : candidates) {
    if (fs::is_regular_file(candidate)) return candidate.string();
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  throw std::runtime_error("cannot find torch_sdpa.py (looked at " + tried + "); give its path with --torch-script");
}

std::string join(const std::vector<std::int64_t>& values) {
  std::string text;
  for (const std::int64_t value : values) text += (text.empty() ? "" : ",") + std::to_string(value);
  return text;
}

// This process's environment with `overrides` set (each replacing a value
// of the same name), as NAME=value strings.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (std::none_of(overrides.begin(), overrides.end(), [&](const auto& o) { return o.first == name; }))
      result.emplace_back(text);
  }
  for (const auto& [name, value] : overrides) result.push_back(name + "=" + value);
  return result;
}

// Runs argv with stdout captured and `environment` set on top of ours;
// stderr goes to ours so torch's own messages stay visible. Returns the
// exit status and the output.
std::pair<int, std::string> run_capturing_stdout(const std::vector<std::string>& argv,
                                                 const std::vector<std::pair<std::string, std::string>>& environment) {
  int pipe_ends[2];
  if (pipe(pipe_ends) != 0) throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  std::vector<char*> raw;
  for (const std::string& argument : argv) raw.push_back(const_cast<char*>(argument.c_str()));
  raw.push_back(nullptr);
  std::vector<std::string> variables = environment_with(environment);
  std::vector<char*> raw_variables;
  for (std::string& variable : variables) raw_variables.push_back(variable.data());
  raw_variables.push_back(nullptr);
  std::fflush(stdout);
  pid_t child = 0;
  const int spawn_error = posix_spawnp(&child, raw[0], &actions, nullptr, raw.data(), raw_variables.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_ends[1]);
  if (spawn_error != 0) {
    close(pipe_ends[0]);
    throw std::runtime_error("cannot run '" + argv[0] + "': " + std::strerror(spawn_error) +
                             " (choose the interpreter with --python)");
  }
  std::string output;
  char chunk[4096];
  for (;;) {
    const ssize_t got = read(pipe_ends[0], chunk, sizeof(chunk));
    if (got > 0) {
      output.append(chunk, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  close(pipe_ends[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return {exit_code, std::move(output)};
}

}  // namespace

TorchResults run_torch_sdpa(const TorchRequest& request, const std::string& python,
                            const std::optional<std::string>& script) {
  std::vector<std::string> argv{python,       find_script(script),
                                "--seq",      join(request.seqs),
                                "--batch",    std::to_string(request.batch),
                                "--heads-q",  std::to_string(request.heads_q),
                                "--heads-kv", std::to_string(request.heads_kv),
                                "--head-dim", std::to_string(request.head_dim),
                                "--dtype",    request.dtype,
                                "--threads",  std::to_string(request.threads),
                                "--json"};
  if (!request.seq_qs.empty()) {
    argv.push_back("--seq-q");
    argv.push_back(join(request.seq_qs));
  }
  if (request.causal) argv.push_back("--causal");
  if (request.backward) argv.push_back("--backward");
  if (request.iterations) {
    argv.push_back("--iters");
    argv.push_back(std::to_string(*request.iterations));
  }
  const auto [exit_code, output] = run_capturing_stdout(argv, request.environment);
  if (exit_code != 0)
    throw std::runtime_error("torch_sdpa.py (" + argv[1] + ") failed with exit status " + std::to_string(exit_code));

  TorchResults results;
  try {
    results.document = Json::parse(output);
    // Without torch, its version is null.
    const Json& environment = results.document.at("environment");
    if (environment.contains("torch_version") && environment["torch_version"].is_string())
      results.version = environment["torch_version"].get<std::string>();
    results.threads = environment.value("threads", 0);
    if (environment.contains("cpu_capability") && environment["cpu_capability"].is_string())
      results.cpu_capability = environment["cpu_capability"].get<std::string>();
    for (const Json& row : results.document.at("results")) {
      const auto seq = row.at("seq").get<std::int64_t>();
      results.rows.push_back({seq, row.value("seq_q", seq), row.at("direction").get<std::string>(),
                              row.at("ms_per_call").get<double>(), row.value("cpu_share", 0.0),
                              row.value("cpu_seconds_per_call", 0.0), row.value("note", "")});
    }
    if (results.rows.empty()) {
      const Json& skipped = results.document.at("skipped");
      results.reason = skipped.empty() ? "it measured nothing" : skipped.front().value("reason", "no reason given");
    }
  } catch (const Json::exception& error) {
    throw std::runtime_error("torch_sdpa.py printed output that is not its JSON document: " +
                             std::string(error.what()));
  }
  return results;
}

}  // namespace halbench
