// halrun: starts N local ranks of a command with the torchrun-style
// environment, prefixes their output with the rank, forwards SIGINT/SIGTERM,
// and when one rank fails stops the others and says which rank and why.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int exit_usage = 2;
volatile std::sig_atomic_t received_signal = 0;

void remember_signal(int signal) { received_signal = signal; }

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: halrun -n N [--master-port PORT] [--] COMMAND [ARGS...]\n\n"
               "Starts N ranks of COMMAND on this machine. Each gets RANK, WORLD_SIZE, LOCAL_RANK,\n"
               "LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port unless given),\n"
               "as torchrun sets them. Output lines are prefixed with \"[RANK] \". SIGINT and SIGTERM\n"
               "are passed on to every rank. When a rank exits non-zero or is killed, the others are\n"
               "stopped and halrun exits non-zero naming it.\n");
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
  int world_size = 0;
  int master_port = 0;
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
    const bool takes_value = argument == "-n" || argument == "--nproc" || argument == "--master-port";
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
    } else if (!parse_int(value, 1, 1024, world_size)) {
      std::fprintf(stderr, "halrun: -n '%s' is not a rank count in [1, 1024]\n", argv[index]);
      return exit_usage;
    }
  }
  if (world_size == 0 || index >= argc) {
    std::fprintf(stderr, "halrun: %s\n", world_size == 0 ? "-n N is required" : "no command to run");
    print_usage(stderr);
    return exit_usage;
  }
  if (master_port == 0) master_port = free_port();

  struct sigaction action {};
  action.sa_handler = remember_signal;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  std::vector<Rank> ranks(static_cast<std::size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "halrun: cannot create pipes: %s\n", std::strerror(errno));
      return 1;
    }
    const pid_t child = ::fork();
    if (child == 0) {
      ::setpgid(0, 0);  // its own group: a terminal's Ctrl-C reaches halrun, which passes it on once
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
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
    Rank& entry = ranks[static_cast<std::size_t>(rank)];
    entry.pid = child;
    entry.running = true;
    entry.out = {out_pipe[0], stdout, {}};
    entry.err = {err_pipe[0], stderr, {}};
  }

  int running = world_size;
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
    for (int r = 0; r < world_size; ++r)
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
        emit_lines(r, *stream, false);
      } else if (got == 0 || errno != EINTR) {
        emit_lines(r, *stream, true);
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
    for (int r = 0; r < world_size; ++r) {
      Rank& rank = ranks[static_cast<std::size_t>(r)];
      if (!rank.running) continue;
      int status = 0;
      if (::waitpid(rank.pid, &status, WNOHANG) != rank.pid) continue;
      rank.running = false;
      rank.status = status;
      --running;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && failed_rank < 0 && !stopping) {
        failed_rank = r;
        failed_status = status;
        std::fprintf(stderr, "halrun: rank %d %s; stopping the other ranks\n", r, describe_status(status).c_str());
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

  if (failed_rank >= 0) {
    std::fprintf(stderr, "halrun: failed: rank %d %s\n", failed_rank, describe_status(failed_status).c_str());
    return WIFEXITED(failed_status) ? WEXITSTATUS(failed_status) : 128 + WTERMSIG(failed_status);
  }
  // Stopped by a signal from outside: report the first rank that did not succeed.
  for (int r = 0; r < world_size; ++r) {
    const int status = ranks[static_cast<std::size_t>(r)].status;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::fprintf(stderr, "halrun: rank %d %s\n", r, describe_status(status).c_str());
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
  return 0;
}
