#include "mpi_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace hal::shims::mpi {
namespace {

std::string resolved_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0')
    return map->l_name;
  return fallback;
}

// Resolves every symbol hal needs; returns the names that are missing.
std::string resolve(void* handle, Library& library) {
  std::string missing;
  const auto function = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(dlsym(handle, name));
    if (slot == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  const auto object = [&](void*& slot, const char* name) {
    slot = dlsym(handle, name);
    if (slot == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  function(library.Initialized, "MPI_Initialized");
  function(library.Finalized, "MPI_Finalized");
  function(library.Init_thread, "MPI_Init_thread");
  function(library.Query_thread, "MPI_Query_thread");
  function(library.Finalize, "MPI_Finalize");
  function(library.Abort, "MPI_Abort");
  function(library.Comm_rank, "MPI_Comm_rank");
  function(library.Comm_size, "MPI_Comm_size");
  function(library.Comm_group, "MPI_Comm_group");
  function(library.Group_incl, "MPI_Group_incl");
  function(library.Group_free, "MPI_Group_free");
  function(library.Comm_create_group, "MPI_Comm_create_group");
  function(library.Comm_split, "MPI_Comm_split");
  function(library.Comm_free, "MPI_Comm_free");
  function(library.Comm_set_errhandler, "MPI_Comm_set_errhandler");
  function(library.Error_string, "MPI_Error_string");
  function(library.Get_library_version, "MPI_Get_library_version");
  function(library.Op_create, "MPI_Op_create");
  function(library.Op_free, "MPI_Op_free");
  function(library.Allreduce, "MPI_Allreduce");
  function(library.Reduce, "MPI_Reduce");
  function(library.Bcast, "MPI_Bcast");
  function(library.Allgather, "MPI_Allgather");
  function(library.Reduce_scatter_block, "MPI_Reduce_scatter_block");
  function(library.Alltoall, "MPI_Alltoall");
  function(library.Gather, "MPI_Gather");
  function(library.Scatter, "MPI_Scatter");
  function(library.Barrier, "MPI_Barrier");
  function(library.Isend, "MPI_Isend");
  function(library.Irecv, "MPI_Irecv");
  function(library.Waitall, "MPI_Waitall");
  object(library.comm_world, "ompi_mpi_comm_world");
  object(library.byte, "ompi_mpi_byte");
  object(library.float32, "ompi_mpi_float");
  object(library.float64, "ompi_mpi_double");
  object(library.int8, "ompi_mpi_int8_t");
  object(library.uint8, "ompi_mpi_uint8_t");
  object(library.uint16, "ompi_mpi_uint16_t");
  object(library.int32, "ompi_mpi_int32_t");
  object(library.int64, "ompi_mpi_int64_t");
  object(library.sum, "ompi_mpi_op_sum");
  object(library.prod, "ompi_mpi_op_prod");
  object(library.min, "ompi_mpi_op_min");
  object(library.max, "ompi_mpi_op_max");
  object(library.errors_return, "ompi_mpi_errors_return");
  return missing;
}

LoadResult load_once() {
  std::vector<std::string> candidates;
  if (const char* explicit_file = std::getenv("HAL_MPI_LIBRARY"); explicit_file != nullptr && *explicit_file != '\0')
    candidates.emplace_back(explicit_file);  // the user chose: nothing else is searched
  else
    candidates = {"libmpi.so.40", "libmpi.so"};
  std::string tried;
  for (const std::string& candidate : candidates) {
    dlerror();
    // GLOBAL: OpenMPI's components (mca_*.so), which it opens itself, find
    // libmpi's symbols through the global scope. NODELETE: MPI keeps threads
    // and exit handlers that must not outlive its code.
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
    if (handle == nullptr) {
      const char* error = dlerror();
      tried += (tried.empty() ? "" : "; ") + candidate + ": " + (error != nullptr ? error : "dlopen failed");
      continue;
    }
    static Library library;  // one per process, like MPI itself
    library.path = resolved_path(handle, candidate);
    if (dlsym(handle, "ompi_mpi_comm_world") == nullptr) {
      tried += (tried.empty() ? "" : "; ") + library.path +
               ": not OpenMPI (no ompi_mpi_comm_world); hal's MPI shim targets OpenMPI's ABI";
      continue;
    }
    if (const std::string missing = resolve(handle, library); !missing.empty()) {
      tried += (tried.empty() ? "" : "; ") + library.path + ": lacks " + missing + " (MPI-3 is needed)";
      continue;
    }
    char version[max_library_version_string] = "";
    int length = 0;
    if (library.Get_library_version(version, &length) == success) {
      library.version.assign(version, static_cast<std::size_t>(std::max(length, 0)));
      library.version = library.version.substr(0, library.version.find_first_of(",\n"));
    }
    return {&library, {}};
  }
  return {nullptr, "libmpi could not be loaded; tried " + tried +
                       ". Install OpenMPI (Debian: openmpi-bin libopenmpi-dev) or set HAL_MPI_LIBRARY to its "
                       "libmpi.so"};
}

std::mutex session_mutex;
std::weak_ptr<Session> current_session;  // process-wide, as MPI_Init is

}  // namespace

std::string Library::error_text(int code) const {
  char text[max_error_string] = "";
  int length = 0;
  if (Error_string == nullptr || Error_string(code, text, &length) != success)
    return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(std::max(length, 0))) + " (code " + std::to_string(code) + ")";
}

const LoadResult& load() {
  static const LoadResult result = load_once();
  return result;
}

std::shared_ptr<Session> Session::acquire() {
  const LoadResult& loaded = load();
  if (loaded.library == nullptr) throw std::runtime_error(loaded.error);
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
