// Rendezvous stores: the base class, the file store, and the launcher's environment.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "hal/collectives.hpp"
#include "loaded_backend.hpp"

namespace hal {

Store::~Store() = default;

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    get(key, std::max(left, std::chrono::milliseconds(0)));
  }
}

// ---- FileStore ----------------------------------------------------------

namespace {

std::string system_error_text(int error) { return std::strerror(error); }

// Keys may hold any byte; file names get the safe ones and %XX for the rest.
std::string file_name_of(std::string_view key) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string name;
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '_' || c == '-' || c == '.') {
      name += c;
    } else {
      name += '%';
      name += hex[byte >> 4];
      name += hex[byte & 15];
    }
  }
  if (name.empty() || name[0] == '.') name.insert(0, "%");  // never hidden, never "." or ".."
  return name;
}

void write_file_atomically(const std::string& path, std::string_view value) {
  // Unique per writer: pid, thread and a counter.
  static std::atomic<std::uint64_t> counter{0};
  std::ostringstream temporary_name;
  temporary_name << path << ".tmp." << ::getpid() << "." << std::this_thread::get_id() << "." << counter++;
  const std::string temporary = temporary_name.str();
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      throw Error(StatusCode::internal, "FileStore: cannot create " + temporary + ": " + system_error_text(errno) +
                                            "; check that the store directory is writable");
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) throw Error(StatusCode::internal, "FileStore: cannot write " + temporary + " (disk full?)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw Error(StatusCode::internal, "FileStore: cannot rename " + temporary + " to " + path + ": " +
                                          system_error_text(errno));
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  if (directory_.empty())
    throw Error(StatusCode::invalid_argument, "FileStore: the directory is empty; pass a directory every rank can see");
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error || !std::filesystem::is_directory(directory_))
    throw Error(StatusCode::invalid_argument, "FileStore: cannot create the directory '" + directory_ +
                                                  "': " + (error ? error.message() : "not a directory"));
}

std::string FileStore::path_of(std::string_view key) const { return directory_ + "/" + file_name_of(key); }

void FileStore::set(std::string_view key, std::string_view value) { write_file_atomically(path_of(key), value); }

std::string FileStore::get(std::string_view key, std::chrono::milliseconds timeout) {
  const std::string path = path_of(key);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (auto value = read_file(path)) return std::move(*value);
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw Error(StatusCode::timeout, "FileStore: key '" + std::string(key) + "' did not appear in " + directory_ +
                                           " within " + std::to_string(timeout.count()) +
                                           " ms; did every rank start and use the same directory?");
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::int64_t FileStore::add(std::string_view key, std::int64_t delta) {
  const std::string path = path_of(key);
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0)
    throw Error(StatusCode::internal, "FileStore: cannot open the lock file " + lock_path + ": " +
                                          system_error_text(errno));
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the flock
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0)
    if (errno != EINTR)
      throw Error(StatusCode::internal, "FileStore: cannot lock " + lock_path + ": " + system_error_text(errno));
  std::int64_t value = 0;
  if (const auto text = read_file(path); text && !text->empty()) {
    const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (error != std::errc() || end != text->data() + text->size())
      throw Error(StatusCode::invalid_argument, "FileStore: key '" + std::string(key) +
                                                    "' holds a non-integer value; add() needs a counter key");
  }
  value += delta;
  write_file_atomically(path, std::to_string(value));
  return value;
}

// ---- the launcher's environment -------------------------------------------

namespace {

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

long long parse_integer(const char* name, const std::string& text, long long minimum, long long maximum) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < minimum || value > maximum)
    throw Error(StatusCode::invalid_argument, std::string(name) + "='" + text + "' is not an integer in [" +
                                                  std::to_string(minimum) + ", " + std::to_string(maximum) + "]");
  return value;
}

struct LauncherRanks {
  int rank = 0, world_size = 0, local_rank = 0;
  bool local_rank_set = false;
};

std::optional<LauncherRanks> read_ranks(const char* rank_name, const char* size_name, const char* local_name) {
  const auto rank_text = environment(rank_name);
  const auto size_text = environment(size_name);
  if (!rank_text && !size_text) return std::nullopt;
  if (!rank_text || !size_text)
    throw Error(StatusCode::invalid_argument, std::string(rank_text ? size_name : rank_name) + " is not set but " +
                                                  (rank_text ? rank_name : size_name) +
                                                  " is; a launcher sets both");
  LauncherRanks ranks;
  ranks.world_size = static_cast<int>(parse_integer(size_name, *size_text, 1, 1 << 24));
  ranks.rank = static_cast<int>(parse_integer(rank_name, *rank_text, 0, ranks.world_size - 1));
  if (const auto local = environment(local_name)) {
    ranks.local_rank = static_cast<int>(parse_integer(local_name, *local, 0, 1 << 24));
    ranks.local_rank_set = true;
  }
  return ranks;
}

}  // namespace

Store::FromEnvironment Store::from_environment(std::chrono::milliseconds connect_timeout) {
  const auto torchrun = read_ranks("RANK", "WORLD_SIZE", "LOCAL_RANK");
  const auto openmpi = read_ranks("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
  if (!torchrun && !openmpi)
    throw Error(StatusCode::invalid_argument,
                "no launcher environment: set RANK and WORLD_SIZE (as torchrun and halrun do) or run under mpirun "
                "(OMPI_COMM_WORLD_RANK/SIZE)");
  FromEnvironment result;
  // torchrun's variables win: a job started by torchrun inside an mpirun
  // allocation describes its own ranks with them.
  const LauncherRanks& chosen = torchrun ? *torchrun : *openmpi;
  result.rank = chosen.rank;
  result.world_size = chosen.world_size;
  result.local_rank = chosen.local_rank;
  result.source = torchrun ? "RANK/WORLD_SIZE" : "OMPI_COMM_WORLD_RANK/SIZE";
  if (!chosen.local_rank_set && torchrun && openmpi && openmpi->local_rank_set)
    result.local_rank = openmpi->local_rank;
  if (torchrun && openmpi && (torchrun->rank != openmpi->rank || torchrun->world_size != openmpi->world_size))
    detail::log_message(HAL_LOG_WARNING, "RANK/WORLD_SIZE (" + std::to_string(torchrun->rank) + "/" +
                                             std::to_string(torchrun->world_size) +
                                             ") differ from OMPI_COMM_WORLD_RANK/SIZE (" +
                                             std::to_string(openmpi->rank) + "/" +
                                             std::to_string(openmpi->world_size) + "); using RANK/WORLD_SIZE");

  if (const auto directory = environment("HAL_STORE_DIR")) {
    result.store = std::make_shared<FileStore>(*directory);
    result.source += ", FileStore HAL_STORE_DIR=" + *directory;
    return result;
  }
  const auto address = environment("MASTER_ADDR");
  const auto port = environment("MASTER_PORT");
  if (!address || !port)
    throw Error(StatusCode::invalid_argument,
                std::string(address ? "MASTER_PORT" : "MASTER_ADDR") +
                    " is not set: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) for the TCP store, "
                    "or HAL_STORE_DIR for a file store in a shared directory");
  TcpStoreOptions options;
  options.host = *address;
  options.port = static_cast<std::uint16_t>(parse_integer("MASTER_PORT", *port, 1, 65535));
  options.is_server = result.rank == 0;
  options.connect_timeout = connect_timeout;
  result.store = std::make_shared<TcpStore>(options);
  result.source += ", TcpStore " + *address + ":" + *port;
  return result;
}

}  // namespace hal
