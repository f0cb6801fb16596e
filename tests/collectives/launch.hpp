// Starts N ranks of a program on this machine with the torchrun-style
// environment and collects each one's exit status and output. Unlike halrun
// it lets the others run on when one rank dies, which the fault tests need.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hal::testing {

struct RankOutcome {
  int exit_code = -1;    // when it exited
  int signal = 0;        // when a signal ended it
  bool timed_out = false;
  std::string output;    // stdout and stderr
  bool passed() const { return exit_code == 0 && signal == 0 && !timed_out; }
};

// A port nobody listens on right now.
inline int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// In a forked child: adds `environment` to what the caller set and replaces
// the process with `command`; where that fails, says so (naming `what`) and
// exits 127.
[[noreturn]] inline void exec_child(const std::vector<std::string>& command,
                                    const std::vector<std::pair<std::string, std::string>>& environment,
                                    const char* what) {
  for (const auto& [name, value] : environment) ::setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> arguments;
  for (const std::string& argument : command) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  ::execv(arguments[0], arguments.data());
  std::perror(what);
  ::_exit(127);
}

inline std::vector<RankOutcome> launch_ranks(int world_size, const std::vector<std::string>& command,
                                             const std::vector<std::pair<std::string, std::string>>& environment,
                                             std::chrono::seconds limit) {
  const std::string port = std::to_string(free_tcp_port());
  std::vector<pid_t> children;
  std::vector<std::string> logs;
  for (int rank = 0; rank < world_size; ++rank) {
    char log_template[] = "/tmp/hal-rank-XXXXXX";
    const int log = ::mkstemp(log_template);
    logs.emplace_back(log_template);
    const pid_t child = ::fork();
    if (child == 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::unsetenv("HAL_STORE_DIR");
      exec_child(command, environment, "execv");
    }
    ::close(log);
    children.push_back(child);
  }
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(world_size));
  std::vector<bool> done(children.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::size_t remaining = children.size();
  while (remaining > 0) {
    bool reaped = false;
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (::waitpid(children[i], &status, WNOHANG) == children[i]) {
        done[i] = true;
        --remaining;
        reaped = true;
        if (WIFEXITED(status)) outcomes[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) outcomes[i].signal = WTERMSIG(status);
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < children.size(); ++i)
        if (!done[i]) {
          ::kill(children[i], SIGKILL);
          ::waitpid(children[i], nullptr, 0);
          outcomes[i].timed_out = true;
        }
      break;
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < logs.size(); ++i) {
    std::ifstream in(logs[i]);
    std::ostringstream text;
    text << in.rdbuf();
    outcomes[i].output = text.str();
    std::remove(logs[i].c_str());
  }
  return outcomes;
}

inline std::string describe(const std::vector<RankOutcome>& outcomes) {
  std::string text;
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    const RankOutcome& outcome = outcomes[rank];
    text += "--- rank " + std::to_string(rank) + ": " +
            (outcome.timed_out ? std::string("timed out")
             : outcome.signal != 0 ? "signal " + std::to_string(outcome.signal)
                                   : "exit " + std::to_string(outcome.exit_code)) +
            "\n" + outcome.output;
  }
  return text;
}

}  // namespace hal::testing
