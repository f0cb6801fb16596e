// TcpStore: rank 0 serves a key-value map over TCP; every rank is a client.
// The wire format is in store_protocol.hpp. The server bounds what one
// connection may make it hold (a key, a value up to max_value_bytes, the
// answers it has not read). With a token set it answers nothing on a
// connection that has not presented it, and such a connection may make it
// hold a token request only: anything else is refused on its header, before
// its body is read, and the connection is closed after auth_timeout.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "hal/collectives.hpp"
#include "loaded_backend.hpp"
#include "store_protocol.hpp"

namespace hal {

namespace {

using Clock = std::chrono::steady_clock;
using detail::store_add;
using detail::store_found;
using detail::store_get;
using detail::store_refused;
using detail::store_set;
using detail::store_timed_out;
using detail::store_token;

// Connections beyond this are closed as they come (each costs a descriptor).
constexpr std::size_t max_connections = 4096;

// Before a connection has presented the token, a token request is all it may
// send, and the server holds at most its header and a key of this many bytes
// (or the token's size, if the token is longer).
constexpr std::size_t unauthenticated_key_bytes = 4096;
constexpr std::size_t request_header_bytes = 1 + sizeof(std::uint32_t);  // op, key size

const char* const needs_token = "this store needs the job's token first; set HAL_STORE_TOKEN as rank 0 has it";
const char* const wrong_token = "the token presented is not this job's (HAL_STORE_TOKEN differs from rank 0's)";

// Compares without stopping at the first difference, so the time taken does
// not tell a guesser how much of the token was right.
bool same_token(std::string_view presented, std::string_view token) {
  if (token.empty()) return presented.empty();
  unsigned char difference = presented.size() == token.size() ? 0 : 1;
  for (std::size_t i = 0; i < presented.size(); ++i)
    difference |= static_cast<unsigned char>(presented[i] ^ token[i % token.size()]);
  return difference == 0;
}

std::string errno_text() { return std::strerror(errno); }

// "address:port" of a connected socket's peer, for the log.
std::string peer_of(int fd) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), length, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown peer";
  return std::string(host) + ":" + service;
}

template <typename T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~FileDescriptor() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head != nullptr) ::freeaddrinfo(head);
  }
};

void resolve(const std::string& host, std::uint16_t port, bool passive, AddressList& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  const int status = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &out.head);
  if (status != 0)
    throw Error(StatusCode::invalid_argument, "TcpStore: cannot resolve host '" + host + "': " +
                                                  ::gai_strerror(status) + "; check MASTER_ADDR");
}

}  // namespace

// ---- server ----------------------------------------------------------------

struct TcpStore::Server {
  struct Connection {
    FileDescriptor fd;
    std::string input, output;
    // A get waiting for its key.
    bool waiting = false;
    std::string waiting_key;
    Clock::time_point waiting_deadline;
    bool authenticated = false;       // presented the token (or none is needed)
    Clock::time_point auth_deadline;  // closed then if not authenticated
    bool closing = false;             // refused: closed once its answer is sent
  };

  const std::string token;  // empty: any client may ask
  const std::uint64_t max_value_bytes;
  const std::chrono::milliseconds auth_timeout;
  // The longest key an unauthenticated connection may announce, and so the
  // most input kept for it.
  const std::size_t unauthenticated_key_limit;
  const std::size_t unauthenticated_input_limit;
  // Answers a client has not read, at most: two values and a key (saturated,
  // for limits near 2^64).
  const std::uint64_t unread_limit;
  FileDescriptor listener;
  FileDescriptor wake_read, wake_write;  // a pipe that interrupts poll() for shutdown
  std::uint16_t port = 0;
  std::map<std::string, std::string, std::less<>> values;
  std::vector<Connection> connections;
  // Logged the first time, then counted and reported when the server stops,
  // so that a port scanner or a flood of connections cannot fill the log.
  std::uint64_t unauthenticated_refusals = 0;
  std::uint64_t connections_over_limit = 0;
  std::thread thread;

  explicit Server(const TcpStoreOptions& options)
      : token(options.token),
        max_value_bytes(options.max_value_bytes),
        auth_timeout(options.auth_timeout),
        unauthenticated_key_limit(std::max(options.token.size(), unauthenticated_key_bytes)),
        unauthenticated_input_limit(request_header_bytes + unauthenticated_key_limit),
        unread_limit(max_value_bytes > (UINT64_MAX - detail::store_max_key_bytes) / 2
                         ? UINT64_MAX
                         : 2 * max_value_bytes + detail::store_max_key_bytes) {
    const std::string& host = options.host;
    const std::uint16_t requested_port = options.port;
    AddressList addresses;
    resolve(host, requested_port, true, addresses);
    std::string last_error = "no address";
    for (addrinfo* address = addresses.head; address != nullptr; address = address->ai_next) {
      FileDescriptor fd(::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol));
      if (fd.get() < 0) {
        last_error = errno_text();
        continue;
      }
      const int on = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (::bind(fd.get(), address->ai_addr, address->ai_addrlen) != 0 || ::listen(fd.get(), 1024) != 0) {
        last_error = errno_text();
        continue;
      }
      listener = std::move(fd);
      break;
    }
    if (listener.get() < 0)
      throw Error(StatusCode::invalid_argument, "TcpStore: rank 0 cannot listen on " + host + ":" +
                                                    std::to_string(requested_port) + ": " + last_error +
                                                    "; pick a free port on an address of this host (MASTER_PORT, or HAL_STORE_PORT to leave "
                                                    "MASTER_PORT to another store)");
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &length);
    port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(StatusCode::internal, "TcpStore: cannot create a pipe: " + errno_text());
    wake_read = FileDescriptor(pipe_fds[0]);
    wake_write = FileDescriptor(pipe_fds[1]);
    ::fcntl(listener.get(), F_SETFL, O_NONBLOCK);
    thread = std::thread([this] { serve(); });
  }

  ~Server() {
    const char byte = 0;
    [[maybe_unused]] const auto written = ::write(wake_write.get(), &byte, 1);
    thread.join();
    if (unauthenticated_refusals > 1)
      detail::log_message(HAL_LOG_WARNING, "TcpStore on port " + std::to_string(port) + ": refused " +
                                               std::to_string(unauthenticated_refusals) +
                                               " connections in all that had not presented the job's token");
    if (connections_over_limit > 1)
      detail::log_message(HAL_LOG_WARNING, "TcpStore on port " + std::to_string(port) + ": closed " +
                                               std::to_string(connections_over_limit) +
                                               " connections in all over the limit of " +
                                               std::to_string(max_connections) + " open at once");
  }

  // Why a connection that has not presented the token is refused, decided
  // from the first bytes of its request so that no body is read: a request
  // other than the token, or a token longer than this store's can be.
  // Empty: nothing to refuse yet (bytes that are no request at all are left
  // to the parser, which names them).
  std::string unauthenticated_refusal(std::string_view input) const {
    if (input.empty()) return {};
    const auto op = static_cast<std::uint8_t>(input[0]);
    if (op == store_set || op == store_get || op == store_add) return needs_token;
    if (op != store_token || input.size() < request_header_bytes) return {};
    std::uint32_t key_size;
    std::memcpy(&key_size, input.data() + 1, sizeof(key_size));
    return key_size > unauthenticated_key_limit ? wrong_token : std::string();
  }

  // Answers the complete requests at the front of the connection's input.
  void handle_requests(Connection& connection) {
    while (!connection.closing) {
      if (!connection.authenticated) {
        if (const std::string why = unauthenticated_refusal(connection.input); !why.empty())
          return refuse_unauthenticated(connection, why);
      }
      detail::StoreRequest request;
      std::string why;
      const detail::StoreParse parsed = detail::parse_store_request(connection.input, max_value_bytes, request, why);
      if (parsed == detail::StoreParse::need_more) return;
      if (parsed == detail::StoreParse::refused)
        return connection.authenticated ? refuse(connection, why) : refuse_unauthenticated(connection, why);
      if (!connection.authenticated) {
        // unauthenticated_refusal() let only a token request through.
        if (!same_token(request.key, token)) return refuse_unauthenticated(connection, wrong_token);
        connection.authenticated = true;
      }
      const std::string key(request.key);
      if (request.op == store_token) {
        connection.output += static_cast<char>(store_found);
      } else if (request.op == store_set) {
        values[key] = request.value;
        connection.output += static_cast<char>(store_found);
        wake_waiters(key);
      } else if (request.op == store_add) {
        // Kept as decimal text, as FileStore keeps counters, so get() reads the same on both.
        std::int64_t value = 0;
        if (const auto it = values.find(key); it != values.end())
          std::from_chars(it->second.data(), it->second.data() + it->second.size(), value);
        value += request.argument;
        values[key] = std::to_string(value);
        connection.output += static_cast<char>(store_found);
        append(connection.output, value);
        wake_waiters(key);
      } else if (const auto it = values.find(key); it != values.end()) {
        answer_found(connection, it->second);
      } else {
        connection.waiting = true;
        connection.waiting_key = key;
        connection.waiting_deadline =
            Clock::now() + std::chrono::milliseconds(std::max<std::int64_t>(request.argument, 0));
      }
      connection.input.erase(0, request.size);
    }
  }

  // Says why, then closes the connection once that is sent; nothing more is read from it.
  static void refuse(Connection& connection, const std::string& why) {
    connection.output += static_cast<char>(store_refused);
    append(connection.output, static_cast<std::uint32_t>(why.size()));
    connection.output += why;
    connection.input.clear();
    connection.waiting = false;
    connection.closing = true;
  }

  // A refusal of a connection without the token: the first is logged with
  // its peer and reason, the others only counted.
  void refuse_unauthenticated(Connection& connection, const std::string& why) {
    if (unauthenticated_refusals++ == 0)
      detail::log_message(HAL_LOG_WARNING, "TcpStore on port " + std::to_string(port) + ": refused a connection from " +
                                               peer_of(connection.fd.get()) +
                                               " that had not presented the job's token: " + why +
                                               "; further refusals are counted, not logged, until the store stops");
    refuse(connection, why);
  }

  static void answer_found(Connection& connection, const std::string& value) {
    connection.output += static_cast<char>(store_found);
    append(connection.output, static_cast<std::uint64_t>(value.size()));
    connection.output += value;
  }

  void wake_waiters(const std::string& key) {
    for (Connection& connection : connections)
      if (connection.waiting && connection.waiting_key == key) {
        connection.waiting = false;
        answer_found(connection, values[key]);
      }
  }

  void serve() {
    char scratch[65536];
    for (;;) {
      std::vector<pollfd> fds{{wake_read.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}};
      auto next_deadline = Clock::now() + std::chrono::seconds(1);
      for (const Connection& connection : connections) {
        fds.push_back({connection.fd.get(),
                       static_cast<short>((connection.closing ? 0 : POLLIN) | (connection.output.empty() ? 0 : POLLOUT)),
                       0});
        if (connection.waiting) next_deadline = std::min(next_deadline, connection.waiting_deadline);
        if (!connection.authenticated) next_deadline = std::min(next_deadline, connection.auth_deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline - Clock::now()).count();
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(wait, 0) + 1)) < 0 && errno != EINTR)
        return;
      if (fds[0].revents != 0) return;  // shutdown
      if (fds[1].revents & POLLIN)
        for (;;) {
          const int client = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (client < 0) break;
          if (connections.size() >= max_connections) {
            if (connections_over_limit++ == 0)
              detail::log_message(HAL_LOG_WARNING,
                                  "TcpStore on port " + std::to_string(port) + ": " + std::to_string(max_connections) +
                                      " connections are open, the most it keeps; closing new ones (" + peer_of(client) +
                                      " first) as they come, counted, not logged, until the store stops");
            ::close(client);
            continue;
          }
          const int on = 1;
          ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
          Connection connection;
          connection.fd = FileDescriptor(client);
          connection.authenticated = token.empty();
          connection.auth_deadline = Clock::now() + auth_timeout;
          connections.push_back(std::move(connection));
        }
      // connections may have grown: fds holds the older ones only, in order.
      std::vector<bool> closed(connections.size(), false);
      for (std::size_t i = 0; i + 2 < fds.size(); ++i) {
        Connection& connection = connections[i];
        const short events = fds[i + 2].revents;
        if (events & (POLLIN | POLLHUP | POLLERR)) {
          // Without the token, no more than a token request is kept; the
          // header checks refuse a connection before it gets this far.
          const std::size_t room =
              connection.authenticated || connection.closing
                  ? sizeof(scratch)
                  : std::min(sizeof(scratch), unauthenticated_input_limit -
                                                  std::min(connection.input.size(), unauthenticated_input_limit));
          if (room == 0) {
            refuse_unauthenticated(connection, needs_token);
            continue;
          }
          const ssize_t got = ::recv(connection.fd.get(), scratch, room, 0);
          if (got > 0) {
            if (!connection.closing) connection.input.append(scratch, static_cast<std::size_t>(got));
            handle_requests(connection);
          } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
            closed[i] = true;
          }
        }
      }
      const auto now = Clock::now();
      for (std::size_t i = 0; i < connections.size(); ++i) {
        Connection& connection = connections[i];
        if (!connection.authenticated && now >= connection.auth_deadline) {
          if (connection.closing)  // refused, and its answer still not taken
            closed[i] = true;
          else
            refuse_unauthenticated(connection, "no token within " + std::to_string(auth_timeout.count()) +
                                                   " ms of connecting; " + needs_token);
        }
        if (connection.waiting && now >= connection.waiting_deadline) {
          connection.waiting = false;
          connection.output += static_cast<char>(store_timed_out);
        }
        // A client that asks and never reads: its answers are not kept without bound.
        if (connection.output.size() > unread_limit) closed[i] = true;
        while (!closed[i] && !connection.output.empty()) {
          const ssize_t sent = ::send(connection.fd.get(), connection.output.data(), connection.output.size(),
                                      MSG_NOSIGNAL);
          if (sent > 0) {
            connection.output.erase(0, static_cast<std::size_t>(sent));
          } else {
            if (errno != EAGAIN && errno != EINTR) closed[i] = true;
            break;
          }
        }
        if (connection.closing && connection.output.empty()) closed[i] = true;
      }
      for (std::size_t i = connections.size(); i-- > 0;)
        if (closed[i]) connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
};

// ---- client ----------------------------------------------------------------

struct TcpStore::Client {
  FileDescriptor fd;
  std::string where;  // "host:port" for messages
  std::mutex mutex;   // one request at a time on the connection

  Client(const std::string& host, std::uint16_t port, std::chrono::milliseconds connect_timeout)
      : where(host + ":" + std::to_string(port)) {
    const auto start = Clock::now();
    const auto deadline = start + connect_timeout;
    auto pause = std::chrono::milliseconds(10);
    std::string last_error;
    int attempts = 0;
    for (;;) {
      ++attempts;
      AddressList addresses;
      resolve(host, port, false, addresses);
      for (addrinfo* address = addresses.head; address != nullptr && fd.get() < 0; address = address->ai_next) {
        FileDescriptor candidate(::socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol));
        if (candidate.get() < 0) {
          last_error = errno_text();
          continue;
        }
        if (::connect(candidate.get(), address->ai_addr, address->ai_addrlen) == 0)
          fd = std::move(candidate);
        else
          last_error = errno_text();
      }
      if (fd.get() >= 0) break;
      const auto now = Clock::now();
      if (now >= deadline)
        throw Error(StatusCode::timeout,
                    "TcpStore: cannot reach the store at " + where + " after " + std::to_string(attempts) +
                        " attempts over " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count()) +
                        " ms (last error: " + last_error +
                        "); check that rank 0 is running and MASTER_ADDR/MASTER_PORT point at it");
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(1000));
    }
    const int on = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  }

  [[noreturn]] void lost(const std::string& what) const {
    throw Error(StatusCode::device_lost, "TcpStore: " + what + " the store at " + where +
                                             "; rank 0, which hosts it, probably exited");
  }

  void send_all(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t sent = ::send(fd.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (sent < 0 && errno == EINTR) continue;
      if (sent <= 0) lost("cannot send to (" + errno_text() + ")");
      done += static_cast<std::size_t>(sent);
    }
  }

  // Reads exactly size bytes, giving up at the deadline so a stopped server
  // cannot hang the caller.
  void receive_all(void* destination, std::size_t size, Clock::time_point deadline) {
    auto* out = static_cast<char*>(destination);
    std::size_t done = 0;
    while (done < size) {
      pollfd descriptor{fd.get(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) lost("no answer in time from");
      const int ready = ::poll(&descriptor, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;  // the deadline check above ends it
      const ssize_t got = ::recv(fd.get(), out + done, size - done, 0);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got <= 0) lost("lost the connection to");
      done += static_cast<std::size_t>(got);
    }
  }

  // The status byte of an answer; a refusal is thrown with the server's reason.
  std::uint8_t receive_status(Clock::time_point deadline) {
    std::uint8_t status;
    receive_all(&status, 1, deadline);
    if (status != store_refused) return status;
    std::uint32_t size = 0;
    receive_all(&size, sizeof(size), deadline);
    std::string why(std::min<std::uint32_t>(size, 4096), '\0');
    receive_all(why.data(), why.size(), deadline);
    throw Error(StatusCode::invalid_argument, "TcpStore: the store at " + where + " refused this rank: " + why);
  }

  static std::string request(std::uint8_t op, std::string_view key) {
    std::string bytes;
    bytes += static_cast<char>(op);
    append(bytes, static_cast<std::uint32_t>(key.size()));
    bytes += key;
    return bytes;
  }
};

// The server's answer to a get arrives by its deadline; this margin covers
// the trip and a busy server before the client calls it lost.
constexpr auto kAnswerMargin = std::chrono::seconds(10);

TcpStore::TcpStore(const TcpStoreOptions& options) : max_value_bytes_(options.max_value_bytes) {
  if (options.host.empty())
    throw Error(StatusCode::invalid_argument, "TcpStore: the host is empty; set MASTER_ADDR to rank 0's address");
  if (options.token.size() > detail::store_max_key_bytes)
    throw Error(StatusCode::invalid_argument, "TcpStore: the token is " + std::to_string(options.token.size()) +
                                                  " bytes; at most " + std::to_string(detail::store_max_key_bytes));
  if (options.is_server && options.auth_timeout.count() <= 0)
    throw Error(StatusCode::invalid_argument,
                "TcpStore: auth_timeout is " + std::to_string(options.auth_timeout.count()) +
                    " ms; it must be positive (the time a client has to present the token)");
  std::uint16_t port = options.port;
  if (options.is_server) {
    server_ = std::make_unique<Server>(options);
    port = server_->port;
  } else if (port == 0) {
    throw Error(StatusCode::invalid_argument, "TcpStore: a client needs the server's port; port 0 is only for rank 0");
  }
  client_ = std::make_unique<Client>(options.host, port, options.connect_timeout);
  if (!options.token.empty()) {
    std::lock_guard lock(client_->mutex);
    client_->send_all(Client::request(store_token, options.token));
    client_->receive_status(Clock::now() + kAnswerMargin);
  }
}

TcpStore::~TcpStore() {
  client_.reset();
  server_.reset();
}

std::uint16_t TcpStore::port() const {
  if (server_) return server_->port;
  const auto colon = client_->where.rfind(':');
  return static_cast<std::uint16_t>(std::stoi(client_->where.substr(colon + 1)));
}

void TcpStore::set(std::string_view key, std::string_view value) {
  if (value.size() > max_value_bytes_)
    throw Error(StatusCode::invalid_argument, "TcpStore: the value for key '" + std::string(key.substr(0, 200)) +
                                                  "' is " + std::to_string(value.size()) + " bytes, over the store's "
                                                  "limit of " + std::to_string(max_value_bytes_) +
                                                  " bytes (HAL_STORE_MAX_VALUE_BYTES)");
  std::string bytes = Client::request(store_set, key);
  append(bytes, static_cast<std::uint64_t>(value.size()));
  bytes += value;
  std::lock_guard lock(client_->mutex);
  client_->send_all(bytes);
  client_->receive_status(Clock::now() + kAnswerMargin);
}

std::string TcpStore::get(std::string_view key, std::chrono::milliseconds timeout) {
  std::string bytes = Client::request(store_get, key);
  append(bytes, static_cast<std::int64_t>(timeout.count()));
  std::lock_guard lock(client_->mutex);
  client_->send_all(bytes);
  const auto deadline = Clock::now() + timeout + kAnswerMargin;
  if (client_->receive_status(deadline) == store_timed_out)
    throw Error(StatusCode::timeout, "TcpStore: key '" + std::string(key) + "' was not set within " +
                                         std::to_string(timeout.count()) + " ms (store at " + client_->where +
                                         "); did every rank start and reach the same step?");
  std::uint64_t size;
  client_->receive_all(&size, sizeof(size), deadline);
  std::string value(size, '\0');
  client_->receive_all(value.data(), size, deadline);
  return value;
}

std::int64_t TcpStore::add(std::string_view key, std::int64_t delta) {
  std::string bytes = Client::request(store_add, key);
  append(bytes, delta);
  std::lock_guard lock(client_->mutex);
  client_->send_all(bytes);
  std::int64_t value;
  const auto deadline = Clock::now() + kAnswerMargin;
  client_->receive_status(deadline);
  client_->receive_all(&value, sizeof(value), deadline);
  return value;
}

}  // namespace hal
