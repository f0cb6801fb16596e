#include "torch_compare.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
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

std::vector<std::string> script_arguments(const TorchRequest& request, const std::string& python,
                                          const std::string& script) {
  std::vector<std::string> argv{python,       script,
                                "--seq",      join(request.seqs),
                                "--batch",    std::to_string(request.batch),
                                "--heads-q",  std::to_string(request.heads_q),
                                "--heads-kv", std::to_string(request.heads_kv),
                                "--head-dim", std::to_string(request.head_dim),
                                "--dtype",    request.dtype,
                                "--threads",  std::to_string(request.threads),
                                "--serve"};
  if (!request.seq_qs.empty()) {
    argv.push_back("--seq-q");
    argv.push_back(join(request.seq_qs));
  }
  if (request.causal) argv.push_back("--causal");
  if (request.backward) argv.push_back("--backward");
  return argv;
}

}  // namespace

TorchPeer::TorchPeer(const TorchRequest& request, const std::string& python, const std::optional<std::string>& script)
    : script_(find_script(script)) {
  std::vector<std::pair<std::string, std::string>> environment = request.environment;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) environment.emplace_back("OMP_WAIT_POLICY", "PASSIVE");
  const std::vector<std::string> argv = script_arguments(request, python, script_);
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0) throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    throw std::runtime_error(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // stderr stays ours, so torch's own messages stay visible.
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  for (const int end : {to_child[0], to_child[1], from_child[0], from_child[1]})
    posix_spawn_file_actions_addclose(&actions, end);
  std::vector<char*> raw;
  for (const std::string& argument : argv) raw.push_back(const_cast<char*>(argument.c_str()));
  raw.push_back(nullptr);
  std::vector<std::string> variables = environment_with(environment);
  std::vector<char*> raw_variables;
  for (std::string& variable : variables) raw_variables.push_back(variable.data());
  raw_variables.push_back(nullptr);
  std::fflush(stdout);
  // A script that dies makes writes to its pipe fail (EPIPE, reported by
  // call()) instead of killing halbench.
  std::signal(SIGPIPE, SIG_IGN);
  const int spawn_error = posix_spawnp(&child_, raw[0], &actions, nullptr, raw.data(), raw_variables.data());
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (spawn_error != 0) {
    close(to_child[1]);
    close(from_child[0]);
    child_ = -1;
    throw std::runtime_error("cannot run '" + argv[0] + "': " + std::strerror(spawn_error) +
                             " (choose the interpreter with --python)");
  }
  to_child_ = fdopen(to_child[1], "w");
  from_child_ = fdopen(from_child[0], "r");
  try {
    const std::string header = read_line();
    document_ = Json::parse(header);
    if (!document_.contains("cases")) {
      const Json& skipped = document_.at("skipped");
      reason_ = skipped.empty() ? "it measured nothing" : skipped.front().value("reason", "no reason given");
    }
  } catch (const Json::exception& error) {
    stop();
    throw std::runtime_error("torch_sdpa.py (" + script_ +
                             ") printed a first line that is not its JSON document: " + std::string(error.what()));
  } catch (...) {
    stop();
    throw;
  }
}

TorchPeer::~TorchPeer() { stop(); }

void TorchPeer::stop() {
  if (to_child_ != nullptr) {
    std::fputs("quit\n", to_child_);
    std::fclose(to_child_);
    to_child_ = nullptr;
  }
  if (from_child_ != nullptr) {
    std::fclose(from_child_);
    from_child_ = nullptr;
  }
  int status = 0;
  if (child_ > 0)
    while (waitpid(child_, &status, 0) < 0 && errno == EINTR) {
    }
  child_ = -1;
}

std::string TorchPeer::read_line() {
  std::string line;
  char chunk[4096];
  while (from_child_ != nullptr && std::fgets(chunk, sizeof(chunk), from_child_) != nullptr) {
    line += chunk;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      return line;
    }
  }
  throw std::runtime_error("torch_sdpa.py (" + script_ + ") stopped answering (it exited; its messages are above)");
}

std::string TorchPeer::version() const {
  const Json& environment = document_.at("environment");
  return environment.contains("torch_version") && environment["torch_version"].is_string()
             ? environment["torch_version"].get<std::string>()
             : "";
}

std::string TorchPeer::cpu_capability() const {
  const Json& environment = document_.at("environment");
  return environment.contains("cpu_capability") && environment["cpu_capability"].is_string()
             ? environment["cpu_capability"].get<std::string>()
             : "";
}

int TorchPeer::threads() const { return document_.at("environment").value("threads", 0); }

std::optional<std::size_t> TorchPeer::find_case(std::int64_t seq_q, std::int64_t seq_kv,
                                                std::string_view direction) const {
  if (!document_.contains("cases")) return std::nullopt;
  const Json& cases = document_["cases"];
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (cases[i].at("seq_q").get<std::int64_t>() == seq_q && cases[i].at("seq").get<std::int64_t>() == seq_kv &&
        cases[i].at("direction").get<std::string>() == direction)
      return i;
  return std::nullopt;
}

std::string TorchPeer::note(std::size_t case_index) const {
  return document_.at("cases").at(case_index).value("note", "");
}

TorchCall TorchPeer::call(std::size_t case_index) {
  if (to_child_ == nullptr || std::fprintf(to_child_, "%zu\n", case_index) < 0 || std::fflush(to_child_) != 0)
    throw std::runtime_error("torch_sdpa.py (" + script_ +
                             ") stopped reading requests (it exited; its messages are above)");
  const std::string answer = read_line();
  TorchCall call{};
  char rest = 0;
  if (std::sscanf(answer.c_str(), "%lf %lf %c", &call.wall_seconds, &call.cpu_seconds, &rest) != 2)
    throw std::runtime_error("torch_sdpa.py answered '" + answer + "' to case " + std::to_string(case_index) +
                             "; expected '<wall seconds> <CPU seconds>'");
  return call;
}

}  // namespace halbench
