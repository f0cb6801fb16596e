// libmpi resolved at run time, for OpenMPI's ABI (see README.md for MPICH).
#pragma once

#include <memory>
#include <string>

#include "vendor_library.hpp"

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

// What hal resolves, as symbol_table.hpp lists it: the functions, then
// OpenMPI's predefined handles, which are the addresses of its global objects.
#define HAL_MPI_SYMBOLS(X)                                                                                             \
  X(Initialized, int (*)(int*), required, "MPI_Initialized")                                                           \
  X(Finalized, int (*)(int*), required, "MPI_Finalized")                                                               \
  X(Init_thread, int (*)(int*, char***, int, int*), required, "MPI_Init_thread")                                       \
  X(Query_thread, int (*)(int*), required, "MPI_Query_thread")                                                         \
  X(Finalize, int (*)(), required, "MPI_Finalize")                                                                     \
  X(Abort, int (*)(Comm, int), required, "MPI_Abort")                                                                  \
  X(Comm_rank, int (*)(Comm, int*), required, "MPI_Comm_rank")                                                         \
  X(Comm_size, int (*)(Comm, int*), required, "MPI_Comm_size")                                                         \
  X(Comm_group, int (*)(Comm, Group*), required, "MPI_Comm_group")                                                     \
  X(Group_incl, int (*)(Group, int, const int*, Group*), required, "MPI_Group_incl")                                   \
  X(Group_free, int (*)(Group*), required, "MPI_Group_free")                                                           \
  X(Comm_create_group, int (*)(Comm, Group, int, Comm*), required, "MPI_Comm_create_group")                            \
  X(Comm_split, int (*)(Comm, int, int, Comm*), required, "MPI_Comm_split")                                            \
  X(Comm_free, int (*)(Comm*), required, "MPI_Comm_free")                                                              \
  X(Comm_set_errhandler, int (*)(Comm, Errhandler), required, "MPI_Comm_set_errhandler")                               \
  X(Error_string, int (*)(int, char*, int*), required, "MPI_Error_string")                                             \
  X(Get_library_version, int (*)(char*, int*), required, "MPI_Get_library_version")                                    \
  X(Op_create, int (*)(UserFunction*, int, Op*), required, "MPI_Op_create")                                            \
  X(Op_free, int (*)(Op*), required, "MPI_Op_free")                                                                    \
  X(Allreduce, int (*)(const void*, void*, int, Datatype, Op, Comm), required, "MPI_Allreduce")                        \
  X(Reduce, int (*)(const void*, void*, int, Datatype, Op, int, Comm), required, "MPI_Reduce")                         \
  X(Bcast, int (*)(void*, int, Datatype, int, Comm), required, "MPI_Bcast")                                            \
  X(Allgather, int (*)(const void*, int, Datatype, void*, int, Datatype, Comm), required, "MPI_Allgather")             \
  X(Reduce_scatter_block, int (*)(const void*, void*, int, Datatype, Op, Comm), required, "MPI_Reduce_scatter_block")  \
  X(Alltoall, int (*)(const void*, int, Datatype, void*, int, Datatype, Comm), required, "MPI_Alltoall")               \
  X(Gather, int (*)(const void*, int, Datatype, void*, int, Datatype, int, Comm), required, "MPI_Gather")              \
  X(Scatter, int (*)(const void*, int, Datatype, void*, int, Datatype, int, Comm), required, "MPI_Scatter")            \
  X(Barrier, int (*)(Comm), required, "MPI_Barrier")                                                                   \
  X(Isend, int (*)(const void*, int, Datatype, int, int, Comm, Request*), required, "MPI_Isend")                       \
  X(Irecv, int (*)(void*, int, Datatype, int, int, Comm, Request*), required, "MPI_Irecv")                             \
  /* statuses: nullptr is MPI_STATUSES_IGNORE */                                                                       \
  X(Waitall, int (*)(int, Request*, void* statuses), required, "MPI_Waitall")                                          \
  X(comm_world, Comm, required, "ompi_mpi_comm_world")                                                                 \
  X(byte, Datatype, required, "ompi_mpi_byte")                                                                         \
  X(float32, Datatype, required, "ompi_mpi_float")                                                                     \
  X(float64, Datatype, required, "ompi_mpi_double")                                                                    \
  X(int8, Datatype, required, "ompi_mpi_int8_t")                                                                       \
  X(uint8, Datatype, required, "ompi_mpi_uint8_t")                                                                     \
  X(uint16, Datatype, required, "ompi_mpi_uint16_t")                                                                   \
  X(int32, Datatype, required, "ompi_mpi_int32_t")                                                                     \
  X(int64, Datatype, required, "ompi_mpi_int64_t")                                                                     \
  X(sum, Op, required, "ompi_mpi_op_sum")                                                                              \
  X(prod, Op, required, "ompi_mpi_op_prod")                                                                            \
  X(min, Op, required, "ompi_mpi_op_min")                                                                              \
  X(max, Op, required, "ompi_mpi_op_max")                                                                              \
  X(errors_return, Errhandler, required, "ompi_mpi_errors_return")

class Library : public VendorLibrary {
 public:
  HAL_SYMBOL_FIELDS(HAL_MPI_SYMBOLS)

  // First line of MPI_Get_library_version.
  const std::string& version() const { return version_; }
  // "MPI_ERR_TRUNCATE: message truncated (code 15)".
  std::string error_text(int code) const;

 private:
  friend const LoadResult<Library>& load();
  static LoadResult<Library> open();
  std::string version_;
};

// The file load() opens instead of searching libmpi.so.40, then libmpi.so:
// the host backend's `mpi_library` option (HAL_MPI_LIBRARY sets it); "" to
// search. It counts until the first load(), which holds for the process.
void use_library_file(std::string path);

// Opens libmpi once per process: MPI is process-wide state (one MPI_Init per
// process), so every user in the process shares one library and one answer.
// No library: the message says why, with every path tried. Never throws.
const LoadResult<Library>& load();

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
