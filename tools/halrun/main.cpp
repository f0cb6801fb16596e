// halrun: starts N local ranks of a command with the torchrun-style
// environment (one node or several, as torchrun's --nnodes/--node-rank),
// prefixes their output with the rank, forwards SIGINT/SIGTERM, when one rank
// fails stops the others and says which rank and why, and never leaves ranks
// (or their shared-memory segments) behind when it is killed itself.
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "environment.hpp"
#include "shm_names.hpp"

namespace {

constexpr int exit_usage = 2;
volatile std::sig_atomic_t received_signal = 0;

void remember_signal(int signal) { received_signal = signal; }

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: halrun -n N [--nnodes M --node-rank R --master-addr ADDR] [--master-port PORT] [--]\n"
               "              COMMAND [ARGS...]\n\n"
               "Starts N ranks of COMMAND on this machine (-n is also --nproc-per-node). Each gets RANK,\n"
               "WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT as\n"
               "torchrun sets them. On M nodes, run halrun once on each with its --node-rank (0..M-1), the\n"
               "same --master-addr (an address of node 0) and the same --master-port: node R's ranks are\n"
               "R*N .. R*N+N-1 of M*N. On one node MASTER_ADDR is 127.0.0.1 and the port a free one\n"
               "unless given, and halrun draws HAL_STORE_TOKEN (the store answers only this job's ranks)\n"
               "unless it is set; across nodes, export the same HAL_STORE_TOKEN on every node for that.\n"
               "Output lines are prefixed with \"[RANK] \". SIGINT and SIGTERM are passed on\n"
               "to every rank. When a rank exits non-zero or is killed, the others are stopped and halrun\n"
               "exits non-zero naming it. If halrun itself is killed, its ranks and their process groups\n"
               "are killed too. Shared-memory segments the job left in HAL_SHM_DIR (/dev/shm) are removed.\n");
}

// Removes the shared-memory segments of this job (named from its token) that
// are still there: the ranks unlink theirs once every rank has mapped it, so
// only a job that died while setting one up leaves any.
void remove_shm_segments() {
  const char* token = hal::abi::environment("HAL_STORE_TOKEN");
  if (token == nullptr) return;
  const std::string directory = hal::abi::shm_directory();
  const std::string prefix = hal::abi::shm_job_prefix(token);
  DIR* listing = ::opendir(directory.c_str());
  if (listing == nullptr) return;
  while (const dirent* entry = ::readdir(listing))
    if (std::string_view(entry->d_name).starts_with(prefix)) ::unlinkat(::dirfd(listing), entry->d_name, 0);
  ::closedir(listing);
}

// Started before the ranks, in halrun's process group: it reads each rank's
// pid from `commands` and, when the pipe closes without the word that all
// ranks were reaped (halrun was killed, even by SIGKILL), kills every rank's
// process group. PR_SET_PDEATHSIG on each rank covers a rank that left its group.
[[noreturn]] void guard_ranks(int commands) {
  ::signal(SIGINT, SIG_IGN);  // a terminal's Ctrl-C is halrun's to pass on
  ::signal(SIGTERM, SIG_IGN);
  std::vector<pid_t> groups;
  for (;;) {
    pid_t pid = 0;
    const ssize_t got = ::read(commands, &pid, sizeof(pid));
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(pid))) break;
    if (pid == 0) ::_exit(0);  // halrun reaped every rank
    groups.push_back(pid);
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  remove_shm_segments();
  ::_exit(0);
}

// 128 random bits in hex: the job's store token (HAL_STORE_TOKEN), so only
// its ranks can use the store rank 0 serves.
std::string random_token() {
  unsigned char bytes[16];
  std::size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      std::fprintf(stderr, "halrun: cannot draw a store token: %s\n", std::strerror(errno));
      std::exit(1);
    }
    filled += static_cast<std::size_t>(got);
  }
  std::string token;
  for (unsigned char byte : bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    token += digits[byte >> 4];
    token += digits[byte & 15];
  }
  return token;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::fprintf(stderr, "halrun: cannot find a free port: %s; pass --master-port\n", std::strerror(errno));
    std::exit(1);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

bool parse_int(std::string_view text, int minimum, int maximum, int& value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value >= minimum && value <= maximum;
}

// One output stream of one rank: bytes until a newline, then a prefixed line.
struct OutputStream {
  int fd = -1;
  std::FILE* destination = nullptr;
  std::string pending;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  OutputStream out, err;
};

void emit_lines(int rank, OutputStream& stream, bool flush_partial) {
  std::size_t start = 0;
  for (std::size_t newline; (newline = stream.pending.find('\n', start)) != std::string::npos; start = newline + 1)
    std::fprintf(stream.destination, "[%d] %.*s\n", rank, static_cast<int>(newline - start), stream.pending.data() + start);
  stream.pending.erase(0, start);
  if (flush_partial && !stream.pending.empty()) {
    std::fprintf(stream.destination, "[%d] %s\n", rank, stream.pending.c_str());
    stream.pending.clear();
  }
  std::fflush(stream.destination);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace

int main(int argc, char** argv) {
  int local_world_size = 0;
  int master_port = 0;
  int nodes = 1;
  int node_rank = 0;
  std::string master_address;
  int index = 1;
  for (; index < argc; ++index) {
    const std::string_view argument = argv[index];
    if (argument == "--") {
      ++index;
      break;
    }
    if (argument == "-h" || argument == "--help") {
      print_usage(stdout);
      return 0;
    }
    const bool takes_value = argument == "-n" || argument == "--nproc" || argument == "--nproc-per-node" ||
                             argument == "--master-port" || argument == "--nnodes" || argument == "--node-rank" ||
                             argument == "--master-addr";
    if (!takes_value) {
      if (!argument.empty() && argument[0] == '-') {
        std::fprintf(stderr, "halrun: unknown option '%s'\n", argv[index]);
        print_usage(stderr);
        return exit_usage;
      }
      break;  // the command starts here
    }
    if (index + 1 >= argc) {
      std::fprintf(stderr, "halrun: %s needs a value\n", argv[index]);
      return exit_usage;
    }
    const std::string_view value = argv[++index];
    if (argument == "--master-port") {
      if (!parse_int(value, 1, 65535, master_port)) {
        std::fprintf(stderr, "halrun: --master-port '%s' is not a port in [1, 65535]\n", argv[index]);
        return exit_usage;
      }
    } else if (argument == "--nnodes") {
      if (!parse_int(value, 1, 4096, nodes)) {
        std::fprintf(stderr, "halrun: --nnodes '%s' is not a node count in [1, 4096]\n", argv[index]);
        return exit_usage;
      }
    } else if (argument == "--node-rank") {
      if (!parse_int(value, 0, 4095, node_rank)) {
        std::fprintf(stderr, "halrun: --node-rank '%s' is not a node rank in [0, 4095]\n", argv[index]);
        return exit_usage;
      }
    } else if (argument == "--master-addr") {
      if (value.empty()) {
        std::fprintf(stderr, "halrun: --master-addr is empty; give an address or host name of node 0\n");
        return exit_usage;
      }
      master_address = value;
    } else if (!parse_int(value, 1, 1024, local_world_size)) {
      std::fprintf(stderr, "halrun: -n '%s' is not a rank count in [1, 1024]\n", argv[index]);
      return exit_usage;
    }
  }
  if (local_world_size == 0 || index >= argc) {
    std::fprintf(stderr, "halrun: %s\n", local_world_size == 0 ? "-n N is required" : "no command to run");
    print_usage(stderr);
    return exit_usage;
  }
  if (node_rank >= nodes) {
    std::fprintf(stderr, "halrun: --node-rank %d is not below --nnodes %d; nodes are numbered 0..%d\n", node_rank,
                 nodes, nodes - 1);
    return exit_usage;
  }
  if (nodes > 1 && (master_address.empty() || master_port == 0)) {
    std::fprintf(stderr, "halrun: --nnodes %d needs --master-addr and --master-port, the same on every node\n",
                 nodes);
    return exit_usage;
  }
  // On one node halrun draws the job's store token; across nodes every
  // node's halrun must pass the same one, so it comes from the environment.
  if (nodes == 1 && hal::abi::environment("HAL_STORE_TOKEN") == nullptr) ::setenv("HAL_STORE_TOKEN", random_token().c_str(), 1);
  if (master_address.empty()) master_address = "127.0.0.1";
  if (master_port == 0) master_port = free_port();
  const int world_size = nodes * local_world_size;
  const int first_rank = node_rank * local_world_size;

  int guard_pipe[2];
  if (::pipe2(guard_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "halrun: cannot create the guard's pipe: %s\n", std::strerror(errno));
    return 1;
  }
  const pid_t guard = ::fork();
  if (guard == 0) {
    ::close(guard_pipe[1]);
    guard_ranks(guard_pipe[0]);
  }
  if (guard < 0) {
    std::fprintf(stderr, "halrun: cannot start the guard that stops ranks if halrun dies: %s\n", std::strerror(errno));
    return 1;
  }
  ::close(guard_pipe[0]);
  const int guard_commands = guard_pipe[1];
  const pid_t launcher = ::getpid();

  struct sigaction action {};
  action.sa_handler = remember_signal;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  std::vector<Rank> ranks(static_cast<std::size_t>(local_world_size));
  for (int local = 0; local < local_world_size; ++local) {
    const int rank = first_rank + local;
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "halrun: cannot create pipes: %s\n", std::strerror(errno));
      return 1;
    }
    const pid_t child = ::fork();
    if (child == 0) {
      ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C reaches halrun, which passes it on once
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(128 + SIGKILL);  // halrun died before the line above
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("GROUP_RANK", std::to_string(node_rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(local_world_size).c_str(), 1);
      ::setenv("MASTER_ADDR", master_address.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      ::execvp(argv[index], argv + index);
      std::fprintf(stderr, "halrun: cannot run '%s': %s\n", argv[index], std::strerror(errno));
      ::_exit(127);
    }
    if (child < 0) {
      std::fprintf(stderr, "halrun: cannot start rank %d: %s\n", rank, std::strerror(errno));
      return 1;
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    // Also set here: the guard may kill the group before the child has made it.
    ::setpgid(child, child);
    if (::write(guard_commands, &child, sizeof(child)) != static_cast<ssize_t>(sizeof(child)))
      std::fprintf(stderr, "halrun: warning: the guard does not know rank %d (%s); it may outlive a killed halrun\n",
                   rank, std::strerror(errno));
    Rank& entry = ranks[static_cast<std::size_t>(local)];
    entry.pid = child;
    entry.running = true;
    entry.out = {out_pipe[0], stdout, {}};
    entry.err = {err_pipe[0], stderr, {}};
  }

  int running = local_world_size;
  int failed_rank = -1;
  int failed_status = 0;
  bool stopping = false;
  std::chrono::steady_clock::time_point stop_started;
  const auto stop_all = [&](int signal) {
    for (const Rank& rank : ranks)
      if (rank.running) ::kill(-rank.pid, signal);
  };
  const auto drain = [&](bool everything) {
    std::vector<pollfd> descriptors;
    std::vector<std::pair<int, OutputStream*>> owners;
    for (int r = 0; r < local_world_size; ++r)
      for (OutputStream* stream : {&ranks[static_cast<std::size_t>(r)].out, &ranks[static_cast<std::size_t>(r)].err})
        if (stream->fd >= 0) {
          descriptors.push_back({stream->fd, POLLIN, 0});
          owners.emplace_back(r, stream);
        }
    if (descriptors.empty()) return false;
    if (::poll(descriptors.data(), descriptors.size(), everything ? 0 : 50) <= 0) return false;
    char buffer[65536];
    for (std::size_t i = 0; i < descriptors.size(); ++i) {
      if (descriptors[i].revents == 0) continue;
      auto& [r, stream] = owners[i];
      const ssize_t got = ::read(stream->fd, buffer, sizeof(buffer));
      if (got > 0) {
        stream->pending.append(buffer, static_cast<std::size_t>(got));
        emit_lines(first_rank + r, *stream, false);
      } else if (got == 0 || errno != EINTR) {
        emit_lines(first_rank + r, *stream, true);
        ::close(stream->fd);
        stream->fd = -1;
      }
    }
    return true;
  };

  while (running > 0 || std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; })) {
    if (received_signal != 0) {
      const int signal = received_signal;
      received_signal = 0;
      std::fprintf(stderr, "halrun: passing signal %d (%s) on to every rank\n", signal, strsignal(signal));
      stop_all(signal);
      if (!stopping) {
        stopping = true;
        stop_started = std::chrono::steady_clock::now();
      }
    }
    drain(false);
    for (int r = 0; r < local_world_size; ++r) {
      Rank& rank = ranks[static_cast<std::size_t>(r)];
      if (!rank.running) continue;
      int status = 0;
      if (::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      rank.status = status;
      --running;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && failed_rank < 0 && !stopping) {
        failed_rank = first_rank + r;
        failed_status = status;
        std::fprintf(stderr, "halrun: rank %d %s; stopping the other ranks\n", first_rank + r,
                     describe_status(status).c_str());
        stopping = true;
        stop_started = std::chrono::steady_clock::now();
        stop_all(SIGTERM);
      }
    }
    // A rank that ignores SIGTERM gets SIGKILL after a grace period.
    if (stopping && running > 0 && std::chrono::steady_clock::now() - stop_started > std::chrono::seconds(5)) {
      stop_all(SIGKILL);
      stop_started = std::chrono::steady_clock::now();
    }
    // Grandchildren may hold a pipe open after their rank exited: stop reading then.
    if (running == 0) {
      while (drain(true)) {
      }
      break;
    }
  }

  // Every rank is reaped: the guard has nothing left to kill.
  const pid_t reaped = 0;
  if (::write(guard_commands, &reaped, sizeof(reaped)) == static_cast<ssize_t>(sizeof(reaped))) {
    ::close(guard_commands);
    ::waitpid(guard, nullptr, 0);
  }
  remove_shm_segments();

  if (failed_rank >= 0) {
    std::fprintf(stderr, "halrun: failed: rank %d %s\n", failed_rank, describe_status(failed_status).c_str());
    return WIFEXITED(failed_status) ? WEXITSTATUS(failed_status) : 128 + WTERMSIG(failed_status);
  }
  // Stopped by a signal from outside: report the first rank that did not succeed.
  for (int r = 0; r < local_world_size; ++r) {
    const int status = ranks[static_cast<std::size_t>(r)].status;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::fprintf(stderr, "halrun: rank %d %s\n", first_rank + r, describe_status(status).c_str());
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return 0;
}
