// libmpi resolved at run time, for OpenMPI's ABI (see README.md for MPICH).
#pragma once

#include <memory>
#include <string>

namespace hal::shims::mpi {

// OpenMPI's handles are pointers to objects the library exports.
using Comm = void*;
using Datatype = void*;
using Op = void*;
using Request = void*;
using Group = void*;
using Errhandler = void*;
using UserFunction = void(void* input, void* input_output, int* length, Datatype* type);

// OpenMPI's values of the constants hal uses (mpi.h of 4.x and 5.x).
inline void* const in_place = reinterpret_cast<void*>(1);
constexpr int success = 0;
constexpr int thread_single = 0;
constexpr int thread_serialized = 2;
constexpr int thread_multiple = 3;
constexpr int max_error_string = 256;
constexpr int max_library_version_string = 256;

struct Library {
  std::string path;     // the file the dynamic linker opened
  std::string version;  // first line of MPI_Get_library_version

  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Query_thread)(int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Abort)(Comm, int) = nullptr;
  int (*Comm_rank)(Comm, int*) = nullptr;
  int (*Comm_size)(Comm, int*) = nullptr;
  int (*Comm_group)(Comm, Group*) = nullptr;
  int (*Group_incl)(Group, int, const int*, Group*) = nullptr;
  int (*Group_free)(Group*) = nullptr;
  int (*Comm_create_group)(Comm, Group, int, Comm*) = nullptr;
  int (*Comm_split)(Comm, int, int, Comm*) = nullptr;
  int (*Comm_free)(Comm*) = nullptr;
  int (*Comm_set_errhandler)(Comm, Errhandler) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  int (*Get_library_version)(char*, int*) = nullptr;
  int (*Op_create)(UserFunction*, int, Op*) = nullptr;
  int (*Op_free)(Op*) = nullptr;
  int (*Allreduce)(const void*, void*, int, Datatype, Op, Comm) = nullptr;
  int (*Reduce)(const void*, void*, int, Datatype, Op, int, Comm) = nullptr;
  int (*Bcast)(void*, int, Datatype, int, Comm) = nullptr;
  int (*Allgather)(const void*, int, Datatype, void*, int, Datatype, Comm) = nullptr;
  int (*Reduce_scatter_block)(const void*, void*, int, Datatype, Op, Comm) = nullptr;
  int (*Alltoall)(const void*, int, Datatype, void*, int, Datatype, Comm) = nullptr;
  int (*Gather)(const void*, int, Datatype, void*, int, Datatype, int, Comm) = nullptr;
  int (*Scatter)(const void*, int, Datatype, void*, int, Datatype, int, Comm) = nullptr;
  int (*Barrier)(Comm) = nullptr;
  int (*Isend)(const void*, int, Datatype, int, int, Comm, Request*) = nullptr;
  int (*Irecv)(void*, int, Datatype, int, int, Comm, Request*) = nullptr;
  int (*Waitall)(int, Request*, void* statuses) = nullptr;  // statuses: nullptr is MPI_STATUSES_IGNORE

  // Predefined handles: the addresses of OpenMPI's global objects.
  Comm comm_world = nullptr;
  Datatype byte = nullptr, float32 = nullptr, float64 = nullptr, int8 = nullptr, uint8 = nullptr,
           uint16 = nullptr, int32 = nullptr, int64 = nullptr;
  Op sum = nullptr, prod = nullptr, min = nullptr, max = nullptr;
  Errhandler errors_return = nullptr;

  // "MPI_ERR_TRUNCATE: message truncated (code 15)".
  std::string error_text(int code) const;
};

struct LoadResult {
  const Library* library = nullptr;  // nullptr when libmpi could not be used
  std::string error;                 // why not, with every path tried
};

// Opens libmpi once per process: MPI is process-wide state (one MPI_Init per
// process), so every user in the process shares one library and one answer.
// HAL_MPI_LIBRARY names the file to use instead of searching libmpi.so.40,
// then libmpi.so. Never throws.
const LoadResult& load();

// The process's MPI session. The first acquire() calls MPI_Init_thread asking
// for MPI_THREAD_MULTIPLE, unless the program initialized MPI itself; the
// session that initialized MPI calls MPI_Finalize when its last holder lets
// go. MPI cannot be initialized again after that in the same process.
class Session {
 public:
  // Throws std::runtime_error saying why MPI cannot be used.
  static std::shared_ptr<Session> acquire();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const Library& library() const { return library_; }
  int thread_level() const { return thread_level_; }
  bool initialized_here() const { return initialized_here_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  explicit Session(const Library& library) : library_(library) {}
  const Library& library_;
  int thread_level_ = thread_single;
  bool initialized_here_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace hal::shims::mpi
