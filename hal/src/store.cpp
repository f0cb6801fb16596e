// Rendezvous stores: the base class, the file store, and the launcher's environment.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "hal/collectives.hpp"
#include "loaded_backend.hpp"
#include "environment.hpp"

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
  // A leading '.' is escaped: a name is never hidden, "." or "..".
  if (key.empty()) return "%";
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || c == '_' || c == '-' || (c == '.' && !name.empty())) {
      name += c;
    } else {
      name += '%';
      name += hex[byte >> 4];
      name += hex[byte & 15];
    }
  }
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

using abi::environment_value;

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
  const auto rank_text = environment_value(rank_name);
  const auto size_text = environment_value(size_name);
  if (!rank_text && !size_text) return std::nullopt;
  if (!rank_text || !size_text)
    throw Error(StatusCode::invalid_argument, std::string(rank_text ? size_name : rank_name) + " is not set but " +
                                                  (rank_text ? rank_name : size_name) +
                                                  " is; a launcher sets both");
  LauncherRanks ranks;
  ranks.world_size = static_cast<int>(parse_integer(size_name, *size_text, 1, 1 << 24));
  ranks.rank = static_cast<int>(parse_integer(rank_name, *rank_text, 0, ranks.world_size - 1));
  if (const auto local = environment_value(local_name)) {
    ranks.local_rank = static_cast<int>(parse_integer(local_name, *local, 0, 1 << 24));
    ranks.local_rank_set = true;
  }
  return ranks;
}

}  // namespace

namespace {

// One bracket group "[01-04,07]" starting at text[open]: the first number as
// written (zero padding kept) and the position after ']'.
std::pair<std::string, std::size_t> first_of_bracket(std::string_view list, std::size_t open) {
  const std::size_t close = list.find(']', open);
  if (close == std::string_view::npos)
    throw Error(StatusCode::invalid_argument, "Slurm node list '" + std::string(list) + "' has an unclosed '['");
  const std::string_view inside = list.substr(open + 1, close - open - 1);
  const std::string_view first = inside.substr(0, inside.find_first_of(",-"));
  if (first.empty() || !std::all_of(first.begin(), first.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    throw Error(StatusCode::invalid_argument, "Slurm node list '" + std::string(list) + "': '[" + std::string(inside) +
                                                  "]' does not start with a number");
  return {std::string(first), close + 1};
}

// torchrun (torch.distributed.elastic) tells its workers that they share the
// agent's store at MASTER_ADDR:MASTER_PORT.
bool agent_store_in_use() {
  const auto value = environment_value("TORCHELASTIC_USE_AGENT_STORE");
  return value && (*value == "True" || *value == "true" || *value == "1");
}

// A port for the TcpStore that every rank of a job derives alike.
std::uint16_t derived_port(std::uint64_t job, std::uint64_t step) {
  return static_cast<std::uint16_t>(20000 + (job % 1000) * 20 + step % 20);
}

}  // namespace

std::string first_host_of_slurm_nodelist(std::string_view list) {
  if (list.empty()) throw Error(StatusCode::invalid_argument, "the Slurm node list is empty");
  std::string host;
  for (std::size_t i = 0; i < list.size();) {
    const char c = list[i];
    if (c == ',') break;  // the end of the first entry
    if (c == '[') {
      auto [number, next] = first_of_bracket(list, i);
      host += number;
      i = next;
    } else if (c == ']') {
      throw Error(StatusCode::invalid_argument, "Slurm node list '" + std::string(list) + "' has an unmatched ']'");
    } else {
      host += c;
      ++i;
    }
  }
  if (host.empty()) throw Error(StatusCode::invalid_argument, "Slurm node list '" + std::string(list) + "' starts with ','");
  return host;
}

Store::FromEnvironment Store::from_environment(std::chrono::milliseconds connect_timeout) {
  struct Launcher {
    const char* name;
    const char* variables;
    const char* rank_name;
    const char* size_name;
    const char* local_name;
    std::optional<LauncherRanks> ranks;
  };
  // Precedence: torchrun's variables describe the ranks of a job started by
  // torchrun inside an mpirun or srun allocation; mpirun inside a Slurm
  // allocation inherits the allocation's SLURM_* (SLURM_PROCID=0 in a batch
  // script), so OpenMPI's win over Slurm's.
  Launcher launchers[] = {
      {"torchrun", "RANK/WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", {}},
      {"mpirun", "OMPI_COMM_WORLD_RANK/SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK", {}},
      {"srun", "SLURM_PROCID/SLURM_NTASKS", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", {}},
  };
  bool found = false;
  for (Launcher& launcher : launchers) {
    try {
      launcher.ranks = read_ranks(launcher.rank_name, launcher.size_name, launcher.local_name);
    } catch (const Error&) {
      if (!found) throw;  // the launcher that would be used is malformed; an outranked one does not matter
    }
    found = found || launcher.ranks.has_value();
  }
  const Launcher* chosen = nullptr;
  for (const Launcher& launcher : launchers)
    if (launcher.ranks && chosen == nullptr) chosen = &launcher;
  if (chosen == nullptr)
    throw Error(StatusCode::invalid_argument,
                "no launcher environment: set RANK and WORLD_SIZE (as torchrun and halrun do), or run under mpirun "
                "(OMPI_COMM_WORLD_RANK/SIZE) or srun (SLURM_PROCID/SLURM_NTASKS)");
  FromEnvironment result;
  result.rank = chosen->ranks->rank;
  result.world_size = chosen->ranks->world_size;
  result.local_rank = chosen->ranks->local_rank;
  result.source = chosen->variables;
  bool local_rank_found = chosen->ranks->local_rank_set;
  for (const Launcher& other : launchers) {
    if (&other == chosen || !other.ranks) continue;
    if (!local_rank_found && other.ranks->local_rank_set) {
      result.local_rank = other.ranks->local_rank;
      local_rank_found = true;
    }
    if (other.ranks->rank != result.rank || other.ranks->world_size != result.world_size)
      detail::log_message(HAL_LOG_WARNING, std::string(chosen->variables) + " (" + std::to_string(result.rank) + "/" +
                                               std::to_string(result.world_size) + ") differ from " + other.variables +
                                               " (" + std::to_string(other.ranks->rank) + "/" +
                                               std::to_string(other.ranks->world_size) + "); using " +
                                               chosen->variables);
  }
  const std::string launcher = chosen->name;

  if (const auto directory = environment_value("HAL_STORE_DIR")) {
    result.store = std::make_shared<FileStore>(*directory);
    result.source += ", FileStore HAL_STORE_DIR=" + *directory;
    return result;
  }
  auto address = environment_value("MASTER_ADDR");
  auto port = environment_value("MASTER_PORT");
  std::string address_origin = "MASTER_ADDR", port_origin = "MASTER_PORT";
  if (launcher == "srun") {
    // Rank 0 runs on the first node of the step.
    if (!address) {
      const char* list_name = environment_value("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_NODELIST";
      if (const auto list = environment_value(list_name)) {
        address = first_host_of_slurm_nodelist(*list);
        address_origin = std::string("first host of ") + list_name;
      }
    }
    if (!port) {
      if (const auto job = environment_value("SLURM_JOB_ID")) {
        const auto step = environment_value("SLURM_STEP_ID");
        port = std::to_string(derived_port(static_cast<std::uint64_t>(parse_integer("SLURM_JOB_ID", *job, 0, LLONG_MAX)),
                                           step ? static_cast<std::uint64_t>(parse_integer("SLURM_STEP_ID", *step, 0, LLONG_MAX)) : 0));
        port_origin = "port from SLURM_JOB_ID/SLURM_STEP_ID";
      }
    }
  } else if (launcher == "mpirun" && !address && !port) {
    // Every rank on this node: a FileStore in the job's session directory,
    // which mpirun removes at the end, needs no port at all.
    const auto local_size = environment_value("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local_size && parse_integer("OMPI_COMM_WORLD_LOCAL_SIZE", *local_size, 1, 1 << 24) == result.world_size) {
      if (const auto session = environment_value("OMPI_MCA_orte_jobfam_session_dir")) {
        const std::string directory = *session + "/hal-store";
        result.store = std::make_shared<FileStore>(directory);
        result.source += ", FileStore in mpirun's session directory " + directory;
        return result;
      }
      if (const auto job = environment_value("PMIX_NAMESPACE")) {
        address = "127.0.0.1";
        port = std::to_string(derived_port(std::hash<std::string>{}(*job), 0));
        address_origin = "every rank on this node";
        port_origin = "port from PMIX_NAMESPACE";
      }
    }
  }
  if (const auto store_port = environment_value("HAL_STORE_PORT")) {
    port = store_port;
    port_origin = "HAL_STORE_PORT";
  } else if (launcher == "torchrun" && port && agent_store_in_use()) {
    // torchrun's agent already serves its own store on MASTER_PORT (the
    // workers are its clients), so hal's rank 0 cannot listen there.
    const auto agent_port = parse_integer("MASTER_PORT", *port, 1, 65534);
    port = std::to_string(agent_port + 1);
    port_origin = "MASTER_PORT+1: torchrun's agent store serves MASTER_PORT; HAL_STORE_PORT chooses another";
  }
  if (!address || !port)
    throw Error(StatusCode::invalid_argument,
                std::string(address ? "MASTER_PORT" : "MASTER_ADDR") +
                    " is not set: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port) for the TCP store, "
                    "or HAL_STORE_DIR for a file store in a shared directory");
  TcpStoreOptions options;
  options.host = *address;
  options.port = static_cast<std::uint16_t>(parse_integer(port_origin.c_str(), *port, 1, 65535));
  options.is_server = result.rank == 0;
  options.connect_timeout = connect_timeout;
  if (const auto token = environment_value("HAL_STORE_TOKEN")) options.token = *token;
  if (const auto limit = environment_value("HAL_STORE_MAX_VALUE_BYTES"))
    options.max_value_bytes =
        static_cast<std::uint64_t>(parse_integer("HAL_STORE_MAX_VALUE_BYTES", *limit, 1, std::int64_t{1} << 40));
  result.store = std::make_shared<TcpStore>(options);
  result.source += ", TcpStore " + *address + ":" + *port;
  if (address_origin != "MASTER_ADDR" || port_origin != "MASTER_PORT")
    result.source += " (" + address_origin + ", " + port_origin + ")";
  return result;
}

}  // namespace hal
