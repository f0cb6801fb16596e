// Collectives: stores in process, communicators across processes over loopback.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "hal/collectives.hpp"
#include "hal/hal.hpp"
#include "device_test_support.hpp"
#include "launch.hpp"
#include "scoped_environment.hpp"
#include "scratch_directory.hpp"
#include "store_protocol.hpp"

using hal::testing::launch_ranks;
using hal::testing::ScopedEnvironment;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::string temporary_directory() {
  char name[] = "/tmp/hal-store-XXXXXX";
  REQUIRE(::mkdtemp(name) != nullptr);
  return name;
}

// Gloo unless `environment` names another engine (it is applied later).
std::vector<hal::testing::RankOutcome> run_worker(int ranks, std::vector<std::string> arguments,
                                                  std::vector<std::pair<std::string, std::string>> environment = {}) {
  arguments.insert(arguments.begin(), HAL_COLLECTIVES_WORKER);
  environment.insert(environment.begin(), {"HAL_COLL_ENGINE", "gloo"});
  environment.emplace_back("HAL_BACKEND_PATH", HAL_PLUGIN_DIR);
  environment.emplace_back("HAL_BACKENDS", "host");
  return launch_ranks(ranks, arguments, environment, 50s);
}

void check_all_passed(const std::vector<hal::testing::RankOutcome>& outcomes) {
  bool all = true;
  for (const auto& outcome : outcomes) all = all && outcome.passed();
  CHECK_MESSAGE(all, hal::testing::describe(outcomes));
}

// Exercises a store from two threads: set/get, a get that waits, add, and a timeout.
void check_store(hal::Store& writer, hal::Store& reader, const std::string& counter = "counter") {
  writer.set("plain", std::string("a\0b", 3));
  CHECK(reader.get("plain", 1s) == std::string("a\0b", 3));
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    writer.set("late/key with spaces", "value");
  });
  CHECK(reader.get("late/key with spaces", 5s) == "value");
  late.join();
  CHECK(writer.add(counter, 2) == 2);
  CHECK(reader.add(counter, 5) == 7);
  CHECK(reader.get(counter, 1s) == "7");
  const auto start = std::chrono::steady_clock::now();
  try {
    reader.get("never-set", 200ms);
    FAIL("get of a missing key returned");
  } catch (const hal::Error& error) {
    CHECK(error.code() == hal::StatusCode::timeout);
    CHECK(contains(error.what(), "never-set"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 3s);
  reader.wait({"plain", counter}, 1s);
}

}  // namespace

TEST_CASE("FileStore: set, get, waiting get, add, timeout") {
  const std::string directory = temporary_directory();
  hal::FileStore writer(directory), reader(directory);
  check_store(writer, reader);
  std::filesystem::remove_all(directory);
}

TEST_CASE("TcpStore: rank 0 serves, clients set, get, wait and add") {
  hal::TcpStoreOptions server_options;
  server_options.is_server = true;
  hal::TcpStore server(server_options);
  hal::TcpStoreOptions client_options;
  client_options.port = server.port();
  hal::TcpStore client(client_options);
  check_store(server, client);
  check_store(client, server, "second counter");
}

namespace {

// A raw TCP connection to a local store, for bytes no TcpStore client sends.
struct RawConnection {
  int fd = -1;
  explicit RawConnection(std::uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~RawConnection() {
    if (fd >= 0) ::close(fd);
  }
  void send(const std::string& bytes) const { [[maybe_unused]] auto sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  // Everything the server sends until it closes the connection (or 5 s pass).
  std::string read_until_closed() const {
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string received;
    char buffer[4096];
    for (ssize_t got; (got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) received.append(buffer, static_cast<std::size_t>(got));
    return received;
  }
};

std::string request_header(char op, std::string_view key) {
  std::string bytes(1, op);
  const auto size = static_cast<std::uint32_t>(key.size());
  bytes.append(reinterpret_cast<const char*>(&size), sizeof(size));
  bytes += key;
  return bytes;
}

template <typename T>
std::string bytes_of(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(value));
}

// A store server for a job with this token, and a client of it that presents it.
hal::TcpStoreOptions server_options_with_token(std::string token) {
  hal::TcpStoreOptions options;
  options.is_server = true;
  options.token = std::move(token);
  return options;
}
hal::TcpStoreOptions client_options_for(const hal::TcpStore& server, std::string token) {
  hal::TcpStoreOptions options;
  options.port = server.port();
  options.token = std::move(token);
  return options;
}

}  // namespace

TEST_CASE("TcpStore: with a token, only clients that present it are answered") {
  hal::TcpStoreOptions server_options = server_options_with_token("job-7f3a");
  hal::TcpStore server(server_options);
  hal::TcpStoreOptions client_options = client_options_for(server, "job-7f3a");
  hal::TcpStore client(client_options);
  check_store(server, client);

  client_options.token = "guess";
  try {
    hal::TcpStore wrong(client_options);
    FAIL("a client with the wrong token was answered");
  } catch (const hal::Error& error) {
    CHECK(error.code() == hal::StatusCode::invalid_argument);
    CHECK_MESSAGE(contains(error.what(), "HAL_STORE_TOKEN differs from rank 0's"), error.what());
  }
  client_options.token.clear();
  hal::TcpStore tokenless(client_options);  // connecting is allowed; asking is not
  try {
    tokenless.set("plain", "overwritten?");
    FAIL("a client without the token set a key");
  } catch (const hal::Error& error) {
    CHECK_MESSAGE(contains(error.what(), "needs the job's token first"), error.what());
  }
  CHECK(client.get("plain", 1s) == std::string("a\0b", 3));  // untouched
}

TEST_CASE("TcpStore: a value over the limit is refused with the limit named, and the server stays up") {
  hal::TcpStoreOptions server_options;
  server_options.is_server = true;
  server_options.max_value_bytes = 1024;
  hal::TcpStore server(server_options);
  try {
    server.set("big", std::string(1025, 'x'));
    FAIL("a value over the limit was sent");
  } catch (const hal::Error& error) {
    CHECK_MESSAGE(contains(error.what(), "1025 bytes, over the store's limit of 1024 bytes"), error.what());
  }
  // A client that announces 4 GiB is told so at once, not buffered.
  RawConnection raw(server.port());
  REQUIRE(raw.fd >= 0);
  raw.send(request_header('S', "huge") + bytes_of<std::uint64_t>(4ull << 30) + "only the start");
  const std::string answer = raw.read_until_closed();
  REQUIRE(!answer.empty());
  CHECK(static_cast<std::uint8_t>(answer[0]) == hal::detail::store_refused);
  CHECK_MESSAGE(contains(answer, "a value of 4294967296 bytes is over the store's limit of 1024 bytes"), answer);
  // A key over its limit, and a request type that does not exist, likewise.
  RawConnection long_key(server.port());
  std::string header(1, 'G');
  header += bytes_of<std::uint32_t>(hal::detail::store_max_key_bytes + 1);
  long_key.send(header);
  CHECK(contains(long_key.read_until_closed(), "over the store's limit of 1048576 bytes"));
  RawConnection unknown(server.port());
  unknown.send("POST / HTTP/1.1\r\n\r\n");  // G would be a get
  CHECK(contains(unknown.read_until_closed(), "is not one of S, G, A, T"));

  hal::TcpStoreOptions client_options;
  client_options.port = server.port();
  client_options.max_value_bytes = 1024;
  hal::TcpStore client(client_options);
  client.set("fits", std::string(1024, 'y'));
  CHECK(server.get("fits", 1s).size() == 1024);
}

namespace {

// This process's resident memory in KiB (VmRSS), or -1; the store's server
// runs in the test's process.
long resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// What the server sends until it closes the connection (recv gives 0 or an
// error), or nothing if it is still open after `limit`.
std::optional<std::string> closed_within(int fd, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string received;
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd descriptor{fd, POLLIN, 0};
    if (::poll(&descriptor, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t got = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (got > 0) {
      received.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
      return received;
    }
  }
}

}  // namespace

// Without the token a connection can make the server hold a few KiB, not a
// value: a request that is not the token is refused on its header, before
// its body arrives, while the job's clients are served as usual.
TEST_CASE("TcpStore: a client without the token is refused on the header, not buffered") {
  hal::TcpStore server(server_options_with_token("job-51c0"));
  hal::TcpStore client(client_options_for(server, "job-51c0"));
  client.set("warm", std::string(4096, 'w'));
  const long before = resident_kib();
  REQUIRE(before > 0);

  // A set announcing 64 MiB (within the value limit, so the request alone is
  // valid), then 16 MiB of its value, from a thread while the job's client works.
  constexpr std::size_t body_bytes = 16u << 20;
  RawConnection intruder(server.port());
  REQUIRE(intruder.fd >= 0);
  const timeval send_timeout{1, 0};
  ::setsockopt(intruder.fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  std::atomic<std::size_t> body_sent{0};
  std::thread sender([&] {
    intruder.send(request_header('S', "victim") + bytes_of<std::uint64_t>(64ull << 20));
    const std::string chunk(64u << 10, 'v');
    while (body_sent.load() < body_bytes) {
      const ssize_t sent = ::send(intruder.fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (sent <= 0) break;  // closed by the server, or stalled for a second
      body_sent += static_cast<std::size_t>(sent);
    }
  });
  for (int i = 0; i < 50; ++i) {
    const std::string key = "job/" + std::to_string(i);
    client.set(key, std::to_string(i * i));
    CHECK(client.get(key, 1s) == std::to_string(i * i));
  }
  const auto answer = closed_within(intruder.fd, 3s);
  sender.join();
  const long grown = resident_kib() - before;
  MESSAGE("resident memory grew by " << grown << " KiB while a client without the token sent " << body_sent.load()
                                     << " bytes of a 64 MiB value");
  CHECK_MESSAGE(answer.has_value(), "the server kept a connection that announced 64 MiB without the token");
  if (answer && !answer->empty()) {
    CHECK(static_cast<std::uint8_t>((*answer)[0]) == hal::detail::store_refused);
    CHECK_MESSAGE(contains(*answer, "needs the job's token first"), *answer);
  }
  CHECK(grown < 4096);
  try {
    client.get("victim", 10ms);
    FAIL("a client without the token set a key");
  } catch (const hal::Error& error) {
    CHECK(error.code() == hal::StatusCode::timeout);
  }

  // A token request longer than any token this store takes is refused on
  // its header too, without waiting for the megabyte it announces.
  RawConnection long_token(server.port());
  REQUIRE(long_token.fd >= 0);
  std::string header(1, 'T');
  header += bytes_of<std::uint32_t>(hal::detail::store_max_key_bytes);
  long_token.send(header + "job-");
  const auto refusal = closed_within(long_token.fd, 3s);
  REQUIRE_MESSAGE(refusal.has_value(), "the server waits for a 1 MiB token from a client without the token");
  CHECK_MESSAGE(contains(*refusal, "HAL_STORE_TOKEN differs from rank 0's"), *refusal);
  CHECK(client.get("job/7", 1s) == "49");

  // A token longer than the few KiB kept for a token request is still taken.
  const std::string long_secret(20000, 't');
  hal::TcpStore long_server(server_options_with_token(long_secret));
  hal::TcpStore long_client(client_options_for(long_server, long_secret));
  long_client.set("key", "value");
  CHECK(long_server.get("key", 1s) == "value");
}

// A connection that does not present the token within auth_timeout is
// closed; the job's clients, which wait in get() for as long as they need,
// are not.
TEST_CASE("TcpStore: a connection that does not present the token in time is closed") {
  hal::TcpStoreOptions server_options = server_options_with_token("job-51c0");
  server_options.auth_timeout = 300ms;
  hal::TcpStore server(server_options);
  hal::TcpStore client(client_options_for(server, "job-51c0"));

  const auto start = std::chrono::steady_clock::now();
  RawConnection silent(server.port()), slow(server.port());
  REQUIRE(silent.fd >= 0);
  REQUIRE(slow.fd >= 0);
  slow.send(request_header('T', "job-51c0").substr(0, 3));  // a token request that stops short
  const auto silent_answer = closed_within(silent.fd, 5s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE_MESSAGE(silent_answer.has_value(), "a silent connection without the token was kept past auth_timeout");
  CHECK_MESSAGE(contains(*silent_answer, "no token within 300 ms"), *silent_answer);
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 4s);
  CHECK_MESSAGE(closed_within(slow.fd, 2s).has_value(), "a connection stalled in its token request was kept");

  // The client presented its token: idle for longer than the deadline, and
  // waiting in get() for longer still, it is answered.
  std::thread late([&] {
    std::this_thread::sleep_for(800ms);
    server.set("late", "value");
  });
  CHECK(client.get("late", 5s) == "value");
  late.join();
  client.set("after", "1");
  CHECK(server.get("after", 1s) == "1");
}

// The parser never reads past its input, never takes more than it was
// given, and refuses what is over a limit, whatever the bytes.
TEST_CASE("TcpStore: the request parser on random and cut-off input") {
  std::mt19937_64 random(20261202);
  const std::string valid = request_header('S', "key") + bytes_of<std::uint64_t>(5) + "value" +
                            request_header('G', "key") + bytes_of<std::int64_t>(100) +
                            request_header('A', "n") + bytes_of<std::int64_t>(-3) + request_header('T', "token");
  int complete = 0, need_more = 0, refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string input;
    if (round % 3 == 0) {
      input = valid.substr(0, random() % (valid.size() + 1));  // every prefix of good requests
    } else {
      input.resize(random() % 64);
      for (char& byte : input) byte = static_cast<char>(random());
      if (round % 3 == 1 && !input.empty()) input[0] = "SGAT"[random() % 4];  // a known type, random rest
    }
    hal::detail::StoreRequest request;
    std::string why;
    switch (hal::detail::parse_store_request(input, 1 << 16, request, why)) {
      case hal::detail::StoreParse::complete:
        ++complete;
        REQUIRE(request.size <= input.size());
        REQUIRE(request.key.data() >= input.data());
        REQUIRE(request.key.data() + request.key.size() <= input.data() + request.size);
        REQUIRE(request.value.size() <= (1u << 16));
        break;
      case hal::detail::StoreParse::need_more: ++need_more; break;
      case hal::detail::StoreParse::refused:
        ++refused;
        REQUIRE(!why.empty());
        break;
    }
  }
  CHECK(complete > 1000);
  CHECK(need_more > 1000);
  CHECK(refused > 1000);
  hal::detail::StoreRequest request;
  std::string why;
  REQUIRE(hal::detail::parse_store_request(valid, 1 << 16, request, why) == hal::detail::StoreParse::complete);
  CHECK(request.op == 'S');
  CHECK(request.key == "key");
  CHECK(request.value == "value");

  // Under the largest limit, a value of 2^64 - 1 bytes is one that has not
  // arrived yet; the request's end must not wrap around (found by
  // tests/fuzz/store_request_fuzzer: set-value-size-wraps-past-2-64).
  const std::string wrapping = request_header('S', "") + bytes_of<std::uint64_t>(UINT64_MAX) + "x";
  CHECK(hal::detail::parse_store_request(wrapping, UINT64_MAX, request, why) == hal::detail::StoreParse::need_more);
}

// Random and malformed connections against a live store while four ranks
// run rounds of add-and-wait on it: the job finishes with the right counts
// and the store answers a new client afterwards.
TEST_CASE("TcpStore: a job completes while the store takes random and malformed requests") {
  hal::TcpStoreOptions server_options;
  server_options.is_server = true;
  server_options.max_value_bytes = 1 << 20;
  hal::TcpStore server(server_options);
  constexpr int ranks = 4, rounds = 40;
  std::atomic<bool> job_done{false};
  std::atomic<int> fuzz_connections{0};
  std::thread fuzzer([&] {
    std::mt19937_64 random(7);
    while (!job_done.load()) {
      RawConnection raw(server.port());
      if (raw.fd < 0) continue;
      std::string bytes;
      switch (random() % 5) {
        case 0: bytes.resize(random() % 4096); for (char& b : bytes) b = static_cast<char>(random()); break;
        case 1: bytes = request_header('S', "victim") + bytes_of<std::uint64_t>(~0ull); break;  // endless value
        case 2: bytes = request_header('G', "round/1/rank/0").substr(0, random() % 8); break;  // cut short
        case 3: bytes = request_header('A', std::string(random() % 300, 'k')) + "\x01"; break;  // partial argument
        default: bytes = request_header('S', "junk/" + std::to_string(random() % 50)) + bytes_of<std::uint64_t>(3) + "abc"; break;
      }
      raw.send(bytes);
      ++fuzz_connections;
    }
  });
  std::vector<std::thread> workers;
  std::atomic<int> wrong{0};
  for (int rank = 0; rank < ranks; ++rank)
    workers.emplace_back([&, rank] {
      hal::TcpStoreOptions options;
      options.port = server.port();
      hal::TcpStore client(options);
      for (int round = 0; round < rounds; ++round) {
        const std::string prefix = "round/" + std::to_string(round);
        client.add(prefix + "/arrived", 1);
        client.set(prefix + "/rank/" + std::to_string(rank), std::to_string(rank * round));
        for (int peer = 0; peer < ranks; ++peer)
          if (client.get(prefix + "/rank/" + std::to_string(peer), 20s) != std::to_string(peer * round)) ++wrong;
      }
    });
  for (auto& worker : workers) worker.join();
  job_done = true;
  fuzzer.join();
  CHECK(wrong.load() == 0);
  for (int round = 0; round < rounds; ++round) CHECK(server.get("round/" + std::to_string(round) + "/arrived", 1s) == "4");
  CHECK(fuzz_connections.load() > 10);
  MESSAGE(fuzz_connections.load() << " random or malformed connections during the job");
  hal::TcpStoreOptions late_options;
  late_options.port = server.port();
  hal::TcpStore late(late_options);
  CHECK(late.add("after", 1) == 1);
}

TEST_CASE("TcpStore: an unreachable store is a clear error after the deadline") {
  hal::TcpStoreOptions options;
  options.port = static_cast<std::uint16_t>(hal::testing::free_tcp_port());
  options.connect_timeout = 700ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    hal::TcpStore store(options);
    FAIL("connected to a port nobody listens on");
  } catch (const hal::Error& error) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    CHECK(error.code() == hal::StatusCode::timeout);
    CHECK(contains(error.what(), "127.0.0.1:" + std::to_string(options.port)));
    CHECK(contains(error.what(), "MASTER_ADDR"));
    CHECK(elapsed >= 700ms);
    CHECK(elapsed < 3s);
  }
}

TEST_CASE("Store::from_environment: torchrun variables win over OpenMPI's") {
  const std::string directory = temporary_directory();
  {
    ScopedEnvironment environment{{"RANK", "1"},
                                  {"WORLD_SIZE", "4"},
                                  {"LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_RANK", "3"},
                                  {"OMPI_COMM_WORLD_SIZE", "8"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                  {"HAL_STORE_DIR", directory}};
    const auto found = hal::Store::from_environment();
    CHECK(found.rank == 1);
    CHECK(found.world_size == 4);
    CHECK(found.local_rank == 1);
    CHECK(contains(found.source, "RANK/WORLD_SIZE"));
    CHECK(dynamic_cast<hal::FileStore*>(found.store.get()) != nullptr);
  }
  {
    ScopedEnvironment environment{{"RANK", std::nullopt},
                                  {"WORLD_SIZE", std::nullopt},
                                  {"LOCAL_RANK", std::nullopt},
                                  {"OMPI_COMM_WORLD_RANK", "2"},
                                  {"OMPI_COMM_WORLD_SIZE", "3"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                  {"HAL_STORE_DIR", directory}};
    const auto found = hal::Store::from_environment();
    CHECK(found.rank == 2);
    CHECK(found.world_size == 3);
    CHECK(contains(found.source, "OMPI_COMM_WORLD"));
  }
  {
    ScopedEnvironment environment{{"RANK", "5"}, {"WORLD_SIZE", "4"}, {"HAL_STORE_DIR", directory}};
    CHECK_THROWS_WITH_AS(hal::Store::from_environment(), doctest::Contains("RANK='5'"), hal::Error);
  }
  {
    ScopedEnvironment environment{{"RANK", "0"},          {"WORLD_SIZE", "1"},   {"HAL_STORE_DIR", std::nullopt},
                                  {"MASTER_ADDR", std::nullopt}, {"MASTER_PORT", "1234"}};
    CHECK_THROWS_WITH_AS(hal::Store::from_environment(), doctest::Contains("MASTER_ADDR is not set"), hal::Error);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("Store::from_environment: under torchrun's agent store hal meets one port up, or on HAL_STORE_PORT") {
  // A world of one: rank 0 hosts the TcpStore and connects to itself.
  const auto free_port = [] {
    hal::TcpStoreOptions options;
    options.is_server = true;
    return hal::TcpStore(options).port();  // closed again at once
  };
  const std::string agent_port = std::to_string(free_port() - 1);
  {
    ScopedEnvironment environment{{"RANK", "0"},        {"WORLD_SIZE", "1"},         {"HAL_STORE_DIR", std::nullopt},
                                  {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", agent_port},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"HAL_STORE_PORT", std::nullopt}};
    const auto found = hal::Store::from_environment(5s);
    auto* tcp = dynamic_cast<hal::TcpStore*>(found.store.get());
    REQUIRE(tcp != nullptr);
    CHECK(tcp->port() == std::stoi(agent_port) + 1);
    CHECK(contains(found.source, "torchrun's agent store serves MASTER_PORT"));
  }
  const std::uint16_t chosen = free_port();
  {
    ScopedEnvironment environment{{"RANK", "0"},        {"WORLD_SIZE", "1"},         {"HAL_STORE_DIR", std::nullopt},
                                  {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", agent_port},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"HAL_STORE_PORT", std::to_string(chosen)}};
    const auto found = hal::Store::from_environment(5s);
    CHECK(dynamic_cast<hal::TcpStore&>(*found.store).port() == chosen);
    CHECK(contains(found.source, "HAL_STORE_PORT"));
  }
  {
    ScopedEnvironment environment{{"RANK", "0"},        {"WORLD_SIZE", "1"},         {"HAL_STORE_DIR", std::nullopt},
                                  {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", agent_port},
                                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"HAL_STORE_PORT", "70000"}};
    CHECK_THROWS_WITH_AS(hal::Store::from_environment(5s), doctest::Contains("HAL_STORE_PORT='70000'"), hal::Error);
  }
}

TEST_CASE("Communicator: bad arguments fail on the calling rank before anything is sent") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR}, {"HAL_BACKENDS", "host"}};
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  REQUIRE(device.supports("collectives"));
  const std::string directory = temporary_directory();
  auto store = std::make_shared<hal::FileStore>(directory);
  hal::Communicator comm = hal::Communicator::create(device, 0, 1, store);
  hal::Stream stream = device.create_stream();
  hal::Buffer small = device.allocate(16);
  using hal::DType;
  using hal::ReduceOp;

  CHECK_THROWS_WITH_AS(comm.broadcast(small, small, 4, DType::f32, 1, stream),
                       doctest::Contains("root 1 is outside the communicator's ranks [0, 1)"), hal::Error);
  CHECK_THROWS_WITH_AS(comm.all_reduce(small, small, 5, DType::f32, ReduceOp::sum, stream),
                       doctest::Contains("rank 0: all_reduce #"), hal::Error);
  CHECK_THROWS_WITH_AS(comm.all_reduce(small, small, std::uint64_t{1} << 62, DType::f64, ReduceOp::sum, stream),
                       doctest::Contains("overflows"), hal::Error);
  CHECK_THROWS_WITH_AS(comm.send(small, 1, DType::f32, 0, stream), doctest::Contains("peer 0 is this rank"),
                       hal::Error);
  CHECK_THROWS_WITH_AS(comm.all_reduce(hal::Buffer(), small, 1, DType::f32, ReduceOp::sum, stream),
                       doctest::Contains("send buffer is empty"), hal::Error);
  CHECK_THROWS_WITH_AS(hal::Communicator::create(device, 2, 2, store), doctest::Contains("rank must be in [0, 2)"),
                       hal::Error);
  CHECK_THROWS_WITH_AS(hal::require_dtype("f17"), doctest::Contains("use one of f32, f16, bf16, f64"), hal::Error);
  // Groups take point-to-point operations only.
  comm.group_start();
  CHECK_THROWS_WITH_AS(comm.barrier(stream), doctest::Contains("only send and recv can be grouped"), hal::Error);
  comm.group_cancel();

  // A world of one still runs every operation.
  const float values[4] = {1, 2, 3, 4};
  small.write(0, values, sizeof(values));
  comm.all_reduce(small, small, 4, DType::f32, ReduceOp::avg, stream);
  comm.barrier(stream);
  stream.synchronize();
  float result[4] = {};
  small.read(0, result, sizeof(result));
  CHECK(result[3] == 4.0f);
  CHECK(comm.async_error().is_ok());
  comm.destroy();
  CHECK(!comm.valid());
  std::filesystem::remove_all(directory);
}

// The stream's error rules hold for collectives whether the stream's thread
// or a synchronizing thread runs them: a failed operation's error comes out
// of the next synchronize, once, and later work (but not host callbacks) is
// skipped until then.
TEST_CASE("a collective that fails on its stream: later work is skipped and synchronize reports it once") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR}, {"HAL_BACKENDS", "host"},
                                {"HAL_COLL_ENGINE", "gloo"}};
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  const std::string directory = temporary_directory();
  hal::Communicator comm = hal::Communicator::create(device, 0, 1, std::make_shared<hal::FileStore>(directory));
  comm.abort();
  hal::Buffer buffer = device.allocate(16);
  const auto* bytes = static_cast<const std::uint8_t*>(buffer.host_address());
  for (const bool stream_thread_busy : {false, true}) {
    CAPTURE(stream_thread_busy);
    hal::Stream stream = device.create_stream();
    hal::testing::StreamGate gate;
    if (stream_thread_busy) gate.block(stream);
    std::optional<hal::StatusCode> seen_by_callback;
    stream.fill(buffer, 0, 16, 0x11);
    comm.all_reduce(buffer, buffer, 4, hal::DType::f32, hal::ReduceOp::sum, stream);
    stream.fill(buffer, 0, 16, 0x22);
    stream.enqueue_host_callback([&](const hal::Status& status) { seen_by_callback = status.code(); });
    gate.open();
    CHECK_THROWS_WITH_AS(stream.synchronize(), doctest::Contains("aborted"), hal::Error);
    CHECK(bytes[0] == 0x11);
    CHECK(seen_by_callback == hal::StatusCode::aborted);
    CHECK_NOTHROW(stream.synchronize());
    stream.fill(buffer, 0, 16, 0x33);
    CHECK_NOTHROW(stream.synchronize());
    CHECK(bytes[15] == 0x33);
  }
  comm.destroy();
  std::filesystem::remove_all(directory);
}

TEST_CASE("the collectives.timeout_seconds setting is a communicator's default timeout") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR}, {"HAL_BACKENDS", "host"},
                                {"HAL_COLL_ENGINE", "gloo"}};
  hal::RuntimeOptions options;
  options.config = hal::Config::parse("[collectives]\ntimeout_seconds = 0.5\n", "hal.toml");
  const hal::Runtime runtime = hal::Runtime::create(options);
  const std::string directory = temporary_directory();
  // Rank 0 of 2, and rank 1 never comes: creation fails after the setting's 0.5 s, not the 300 s default.
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(hal::Communicator::create(runtime.device("host:0"), 0, 2, std::make_shared<hal::FileStore>(directory)),
                  hal::Error);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed >= 500ms);
  CHECK(elapsed < 20s);
  std::filesystem::remove_all(directory);
}

TEST_CASE("every operation x type x in/out-of-place on 2, 3 and 4 ranks") {
  for (const int ranks : {2, 3, 4}) {
    CAPTURE(ranks);
    check_all_passed(run_worker(ranks, {"ops"}));
  }
}

TEST_CASE("split and point-to-point groups") {
  check_all_passed(run_worker(4, {"split"}));
  check_all_passed(run_worker(3, {"split"}));
  check_all_passed(run_worker(2, {"p2p"}));
  check_all_passed(run_worker(3, {"p2p"}));
}

TEST_CASE("a rank killed mid-operation: the others fail naming it within the timeout") {
  const int victim = 2;
  const auto outcomes = run_worker(3, {"kill", std::to_string(victim)});
  CHECK_MESSAGE(outcomes[victim].signal == SIGKILL, hal::testing::describe(outcomes));
  for (int rank = 0; rank < 3; ++rank)
    if (rank != victim) CHECK_MESSAGE(outcomes[rank].passed(), hal::testing::describe(outcomes));
}

TEST_CASE("HAL_COLL_CHECK=1: mismatched counts are an error on every rank") {
  check_all_passed(run_worker(3, {"mismatch"}, {{"HAL_COLL_CHECK", "1"}}));
}

TEST_CASE("abort from another thread ends a blocked operation promptly") {
  check_all_passed(run_worker(2, {"abort"}));
}

TEST_CASE("Slurm node lists: the first host") {
  CHECK(hal::first_host_of_slurm_nodelist("node[01-04,07]") == "node01");
  CHECK(hal::first_host_of_slurm_nodelist("node[07,01-04]") == "node07");
  CHECK(hal::first_host_of_slurm_nodelist("gpu12,gpu[1-3]") == "gpu12");
  CHECK(hal::first_host_of_slurm_nodelist("rack[2-3]-n[005-009]") == "rack2-n005");
  CHECK(hal::first_host_of_slurm_nodelist("login") == "login");
  CHECK_THROWS_WITH_AS(hal::first_host_of_slurm_nodelist("node[01-04"), doctest::Contains("unclosed '['"), hal::Error);
  CHECK_THROWS_WITH_AS(hal::first_host_of_slurm_nodelist("node[a-b]"), doctest::Contains("does not start with a number"),
                       hal::Error);
  CHECK_THROWS_WITH_AS(hal::first_host_of_slurm_nodelist(""), doctest::Contains("empty"), hal::Error);
}

TEST_CASE("Store::from_environment: srun's variables, and who wins") {
  const std::string directory = temporary_directory();
  const std::optional<std::string> unset;
  {  // srun alone: ranks from SLURM_*, the TcpStore on the first node at a port from the job and step
    ScopedEnvironment environment{{"RANK", unset},           {"WORLD_SIZE", unset},       {"LOCAL_RANK", unset},
                                  {"OMPI_COMM_WORLD_RANK", unset}, {"OMPI_COMM_WORLD_SIZE", unset},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", unset}, {"MASTER_ADDR", unset},
                                  {"MASTER_PORT", unset},    {"HAL_STORE_DIR", unset},    {"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", "1"},     {"SLURM_LOCALID", "0"},      {"SLURM_STEP_NODELIST", unset},
                                  {"SLURM_NODELIST", "localhost,node[2-3]"}, {"SLURM_JOB_ID", "4242"},
                                  {"SLURM_STEP_ID", "3"}};
    const auto found = hal::Store::from_environment(std::chrono::seconds(5));
    CHECK(found.rank == 0);
    CHECK(found.world_size == 1);
    CHECK(contains(found.source, "SLURM_PROCID/SLURM_NTASKS"));
    CHECK(contains(found.source, "TcpStore localhost:" + std::to_string(20000 + 242 * 20 + 3)));
    CHECK(contains(found.source, "first host of SLURM_NODELIST"));
    found.store->set("k", "v");
    CHECK(found.store->get("k", 1s) == "v");
  }
  {  // mpirun inside a Slurm allocation: OpenMPI's variables win over the allocation's SLURM_PROCID
    ScopedEnvironment environment{{"RANK", unset},          {"WORLD_SIZE", unset},          {"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", "8"},    {"OMPI_COMM_WORLD_RANK", "2"},  {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"HAL_STORE_DIR", directory}};
    const auto found = hal::Store::from_environment();
    CHECK(found.rank == 2);
    CHECK(found.world_size == 4);
    CHECK(contains(found.source, "OMPI_COMM_WORLD"));
  }
  {  // torchrun inside srun: RANK wins; a half-set Slurm environment does not matter then
    ScopedEnvironment environment{{"RANK", "1"},           {"WORLD_SIZE", "2"},          {"SLURM_PROCID", "5"},
                                  {"SLURM_NTASKS", unset}, {"OMPI_COMM_WORLD_RANK", unset}, {"OMPI_COMM_WORLD_SIZE", unset},
                                  {"HAL_STORE_DIR", directory}};
    const auto found = hal::Store::from_environment();
    CHECK(found.rank == 1);
    CHECK(contains(found.source, "RANK/WORLD_SIZE"));
  }
  {  // srun's variables half set, and nothing else: a clear error
    ScopedEnvironment environment{{"RANK", unset},          {"WORLD_SIZE", unset},           {"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", unset},  {"OMPI_COMM_WORLD_RANK", unset}, {"OMPI_COMM_WORLD_SIZE", unset},
                                  {"HAL_STORE_DIR", directory}};
    CHECK_THROWS_WITH_AS(hal::Store::from_environment(), doctest::Contains("SLURM_NTASKS is not set"), hal::Error);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("collectives engine: a name other than auto, gloo, mpi or shm is an error naming it") {
  ScopedEnvironment environment{{"HAL_BACKEND_PATH", HAL_PLUGIN_DIR}, {"HAL_BACKENDS", "host"},
                                {"HAL_COLL_ENGINE", "nccl"}};
  // The runtime resolves every setting when it is made.
  CHECK_THROWS_WITH_AS(hal::Runtime::create(), doctest::Contains("HAL_COLL_ENGINE='nccl'"), hal::Error);
  environment.set("HAL_COLL_ENGINE", "mpi");
  const hal::Runtime runtime = hal::Runtime::create();
  const hal::Device device = runtime.device("host:0");
  CHECK(hal::collectives_engine(device).requested_by == "HAL_COLL_ENGINE=mpi");
  hal::CommunicatorOptions options;
  options.engine = "gloo";  // the per-communicator choice wins over the variable
  const hal::CollectivesEngineChoice choice = hal::collectives_engine(device, options);
  CHECK(choice.engine == "gloo");
  CHECK(contains(choice.reason, "CommunicatorOptions::engine=gloo asks for gloo"));
  options.engine = "fast";
  const std::string directory = temporary_directory();
  CHECK_THROWS_WITH_AS(hal::Communicator::create(device, 0, 1, std::make_shared<hal::FileStore>(directory), options),
                       doctest::Contains("'fast' is not a collectives engine; use auto, gloo, mpi or shm"), hal::Error);
  std::filesystem::remove_all(directory);
}

namespace {

// A directory of one test's own on /dev/shm (tmpfs, as the default), for its segments.
struct ShmDirectory : hal::testing::ScratchDirectory {
  ShmDirectory() : ScratchDirectory("/dev/shm/hal-test-XXXXXX") {}
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path)) names.push_back(entry.path().filename());
    return names;
  }
  std::vector<std::pair<std::string, std::string>> engine_shm() const {
    return {{"HAL_COLL_ENGINE", "shm"},
            {"HAL_SHM_DIR", path},
            {"HAL_TEST_EXPECT_DESCRIPTION", "shm (HAL_COLL_ENGINE=shm asks for shm and all "}};
  }
};

}  // namespace

TEST_CASE("shm engine: every operation x type x in/out-of-place on 2 ranks, and on 4 with small areas") {
  const ShmDirectory directory;
  check_all_passed(run_worker(2, {"ops"}, directory.engine_shm()));
  // 4 KiB areas: every operation takes many rounds; 4 ranks on fewer cores sleep and wake.
  auto small_areas = directory.engine_shm();
  small_areas.emplace_back("HAL_SHM_BYTES", "4K");
  check_all_passed(run_worker(4, {"ops"}, small_areas));
  check_all_passed(run_worker(3, {"split"}, small_areas));
  CHECK(directory.entries().empty());  // unlinked once every rank had mapped it
}

TEST_CASE("shm engine: a killed rank is named within the timeout, and no segment stays") {
  const ShmDirectory directory;
  const int victim = 2;
  const auto outcomes = run_worker(3, {"kill", std::to_string(victim)}, directory.engine_shm());
  CHECK_MESSAGE(outcomes[victim].signal == SIGKILL, hal::testing::describe(outcomes));
  for (int rank = 0; rank < 3; ++rank)
    if (rank != victim) CHECK_MESSAGE(outcomes[rank].passed(), hal::testing::describe(outcomes));
  CHECK(contains(outcomes[0].output, "[shm]"));
  CHECK(directory.entries().empty());
  // One that destroys its communicator and leaves is named too, at once.
  const auto left = run_worker(3, {"leave", "2"}, directory.engine_shm());
  check_all_passed(left);
  CHECK_MESSAGE(contains(left[0].output, "rank 2: the communicator was destroyed"), left[0].output);
}

TEST_CASE("shm engine: abort ends a blocked operation promptly; mismatched counts are named") {
  const ShmDirectory directory;
  check_all_passed(run_worker(2, {"abort"}, directory.engine_shm()));
  check_all_passed(run_worker(2, {"shm_mismatch"}, directory.engine_shm()));
}

TEST_CASE("engine auto: shm beside gloo when the ranks share a host, gloo alone when not") {
  const ShmDirectory directory;
  // send/recv go to Gloo beside it.
  check_all_passed(
      run_worker(2, {"p2p"},
                 {{"HAL_COLL_ENGINE", "auto"},
                  {"HAL_SHM_DIR", directory.path},
                  {"HAL_TEST_EXPECT_DESCRIPTION",
                   "shm (HAL_COLL_ENGINE=auto is auto and all 2 ranks share host |other operations: gloo ("}}));
  // Each rank with its own shared memory, as on two hosts.
  for (const char* rank : {"0", "1"}) std::filesystem::create_directory(directory.path + "/" + rank);
  check_all_passed(run_worker(2, {"smoke"},
                              {{"HAL_COLL_ENGINE", "auto"},
                               {"HAL_TEST_SHM_DIR_PER_RANK", directory.path},
                               {"HAL_TEST_EXPECT_DESCRIPTION",
                                "gloo (HAL_COLL_ENGINE=auto is auto|shm not used: the ranks are on more than one host: "
                                "rank 1 (on "}}));
  // Asking for shm there is an error that says why.
  const auto outcomes =
      run_worker(2, {"smoke"}, {{"HAL_COLL_ENGINE", "shm"}, {"HAL_TEST_SHM_DIR_PER_RANK", directory.path}});
  for (const auto& outcome : outcomes) {
    CHECK_MESSAGE(outcome.exit_code == 1, hal::testing::describe(outcomes));
    CHECK_MESSAGE(contains(outcome.output, "the shm engine needs every rank on one host"), outcome.output);
  }
}

TEST_CASE("shm engine: a segment larger than the directory's free space is an error naming the size, then gloo runs") {
  const ShmDirectory directory;
  const auto outcomes = run_worker(2, {"smoke"},
                                   {{"HAL_COLL_ENGINE", "shm"},
                                    {"HAL_SHM_DIR", directory.path},
                                    {"HAL_SHM_BYTES", "64T"},
                                    {"HAL_TEST_EXPECT_DESCRIPTION",
                                     "gloo (HAL_COLL_ENGINE=shm asks for shm|shm not used: rank 0: the shared-memory "
                                     "segment needs 262144.0 GiB (2 ranks x 2 areas of 65536.0 GiB) in " +
                                         directory.path + ", which has "}});
  check_all_passed(outcomes);
  CHECK_MESSAGE(contains(outcomes[0].output, "the shm engine is not used"), outcomes[0].output);
  CHECK(directory.entries().empty());
  // A size that is not one is named with what is allowed.
  const auto bad =
      run_worker(2, {"smoke"}, {{"HAL_COLL_ENGINE", "shm"}, {"HAL_SHM_DIR", directory.path}, {"HAL_SHM_BYTES", "12Q"}});
  CHECK_MESSAGE(contains(bad[0].output, "HAL_SHM_BYTES='12Q' is not a size of at least 4096 bytes"),
                hal::testing::describe(bad));
}
