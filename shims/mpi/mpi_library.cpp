#include "mpi_library.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

namespace hal::shims::mpi {
namespace {

std::mutex session_mutex;
std::weak_ptr<Session> current_session;  // process-wide, as MPI_Init is

std::mutex library_file_mutex;
std::string library_file;  // use_library_file's choice

}  // namespace

void use_library_file(std::string path) {
  std::lock_guard lock(library_file_mutex);
  library_file = std::move(path);
}

LoadResult<Library> Library::open() {
  std::vector<std::string> candidates;
  {
    std::lock_guard lock(library_file_mutex);
    if (!library_file.empty())
      candidates.push_back(library_file);  // the user chose: nothing else is searched
    else
      candidates = {"libmpi.so.40", "libmpi.so"};
  }
  std::string tried;
  for (const std::string& candidate : candidates) {
    dlerror();
    // GLOBAL: OpenMPI's components (mca_*.so), which it opens itself, find
    // libmpi's symbols through the global scope. NODELETE: MPI keeps threads
    // and exit handlers that must not outlive its code.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (handle == nullptr) {
      const char* error = dlerror();
      append_listed(tried, candidate + ": " + (error != nullptr ? error : "dlopen failed"), "; ");
      continue;
    }
    SharedLibrary opened = SharedLibrary::from_handle(handle, candidate);
    if (opened.find("ompi_mpi_comm_world") == nullptr) {
      append_listed(tried,
                    opened.path() + ": not OpenMPI (no ompi_mpi_comm_world); hal's MPI shim targets OpenMPI's ABI",
                    "; ");
      continue;
    }
    auto library = std::unique_ptr<Library>(new Library());
    const SymbolResolution resolution =
        resolve_symbols(HAL_SYMBOL_SPECS(HAL_MPI_SYMBOLS, *library, ""),
                        [&](const SymbolSpec&, const SymbolName& name) { return opened.find(name.name.c_str()); });
    if (!resolution.complete()) {
      append_listed(tried,
                    opened.path() + ": lacks " + SymbolResolution::join(resolution.missing_required) +
                        " (MPI-3 is needed)",
                    "; ");
      continue;
    }
    char version[max_library_version_string] = "";
    int length = 0;
    if (library->Get_library_version(version, &length) == success) {
      library->version_.assign(version, static_cast<std::size_t>(std::max(length, 0)));
      library->version_ = library->version_.substr(0, library->version_.find_first_of(",\n"));
    }
    append_listed(tried, candidate + ": loaded " + opened.path(), "; ");
    library->adopt(std::move(opened), "libmpi", tried);
    return {std::move(library), {}, false};
  }
  return {nullptr,
          "libmpi could not be loaded; tried " + tried +
              ". Install OpenMPI (Debian: openmpi-bin libopenmpi-dev) or set HAL_MPI_LIBRARY to its libmpi.so",
          false};
}

std::string Library::error_text(int code) const {
  char text[max_error_string] = "";
  int length = 0;
  if (Error_string == nullptr || Error_string(code, text, &length) != success)
    return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(std::max(length, 0))) + " (code " + std::to_string(code) + ")";
}

const LoadResult<Library>& load() {
  // Never destroyed: an mpi::Session may end during static destruction, and MPI
  // is process-wide anyway.
  static const LoadResult<Library>& result = *new LoadResult<Library>(Library::open());
  return result;
}

std::shared_ptr<Session> Session::acquire() {
  const LoadResult<Library>& loaded = load();
  if (loaded.library == nullptr) throw std::runtime_error(loaded.message);
  const Library& library = *loaded.library;
  std::lock_guard lock(session_mutex);
  if (auto existing = current_session.lock()) return existing;
  int finalized = 0, initialized = 0;
  library.Finalized(&finalized);
  if (finalized != 0)
    throw std::runtime_error("MPI was already finalized in this process (by hal when its runtime shut down, or by "
                             "the program); MPI cannot be initialized twice: keep one hal::Runtime alive for the "
                             "process's whole MPI use");
  library.Initialized(&initialized);
  std::shared_ptr<Session> session(new Session(library));
  if (initialized == 0) {
    int provided = thread_single;
    const int status = library.Init_thread(nullptr, nullptr, thread_multiple, &provided);
    if (status != success)
      throw std::runtime_error("MPI_Init_thread failed: " + library.error_text(status) +
                               "; under srun, OpenMPI needs Slurm's PMIx (srun --mpi=pmix)");
    session->initialized_here_ = true;
    session->thread_level_ = provided;
  } else {
    library.Query_thread(&session->thread_level_);
  }
  library.Comm_rank(library.comm_world, &session->world_rank_);
  library.Comm_size(library.comm_world, &session->world_size_);
  current_session = session;
  return session;
}

Session::~Session() {
  int finalized = 0;
  library_.Finalized(&finalized);
  if (initialized_here_ && finalized == 0) library_.Finalize();
}

}  // namespace hal::shims::mpi
