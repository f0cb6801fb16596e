// An NCCL-compatible collectives library resolved at run time. One table
// serves NCCL, ACCL-N, RCCL and ACCL-P/pccl: where their exported names
// differ, an entry lists the alternatives (RCCL's ncclAllToAll, NCCL's
// ncclAlltoAll) instead of forking the code.
//
// The types are declared here, not taken from nccl.h: each implementation
// ships its own header (RCCL's takes hipStream_t), while the ABI of these
// functions is the same in all of them — a 128-byte unique id by value, an
// opaque communicator pointer, int enums and a pointer-sized stream handle.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "vendor_library.hpp"

namespace hal::shims {

struct NcclUniqueId {
  char internal[128];
};
struct NcclCommunicatorTag;
using NcclCommunicator = NcclCommunicatorTag*;
using NcclResult = int;       // ncclResult_t
using NcclDataType = int;     // ncclDataType_t
using NcclReduction = int;    // ncclRedOp_t
using NcclStream = void*;     // cudaStream_t / hipStream_t: a pointer either way

// ncclResult_t.
constexpr NcclResult nccl_success = 0;
constexpr NcclResult nccl_unhandled_cuda_error = 1;
constexpr NcclResult nccl_system_error = 2;
constexpr NcclResult nccl_internal_error = 3;
constexpr NcclResult nccl_invalid_argument = 4;
constexpr NcclResult nccl_invalid_usage = 5;
constexpr NcclResult nccl_remote_error = 6;  // a peer is gone
constexpr NcclResult nccl_in_progress = 7;   // a non-blocking call has not taken effect yet

// ncclDataType_t.
constexpr NcclDataType nccl_int8 = 0;
constexpr NcclDataType nccl_uint8 = 1;
constexpr NcclDataType nccl_int32 = 2;
constexpr NcclDataType nccl_uint32 = 3;
constexpr NcclDataType nccl_int64 = 4;
constexpr NcclDataType nccl_uint64 = 5;
constexpr NcclDataType nccl_float16 = 6;
constexpr NcclDataType nccl_float32 = 7;
constexpr NcclDataType nccl_float64 = 8;
constexpr NcclDataType nccl_bfloat16 = 9;  // NCCL 2.10

// ncclRedOp_t (note max before min).
constexpr NcclReduction nccl_sum = 0;
constexpr NcclReduction nccl_prod = 1;
constexpr NcclReduction nccl_max = 2;
constexpr NcclReduction nccl_min = 3;
constexpr NcclReduction nccl_avg = 4;  // NCCL 2.10

// The release that added ncclBfloat16 and ncclAvg, as ncclGetVersion encodes it.
constexpr int nccl_version_with_bf16_and_avg = 21000;  // NCCL 2.10

// ncclConfig_t's constants: NCCL_CONFIG_INITIALIZER's magic, the version
// whose layout NcclConfig has (NCCL_VERSION(2, 14, 0)), NCCL_CONFIG_UNDEF_INT.
constexpr unsigned int nccl_config_magic = 0xcafebeef;
constexpr unsigned int nccl_config_version = 21400;
constexpr int nccl_config_undefined = -2147483647 - 1;

// ncclConfig_t as NCCL 2.14 defined it, the first release with
// ncclCommInitRankConfig. Later releases append fields and read only
// `size` bytes of a caller's config, so this prefix stays valid.
struct NcclConfig {
  std::size_t size = sizeof(NcclConfig);
  unsigned int magic = nccl_config_magic;
  unsigned int version = nccl_config_version;
  int blocking = nccl_config_undefined;
  int cga_cluster_size = nccl_config_undefined;
  int min_ctas = nccl_config_undefined;
  int max_ctas = nccl_config_undefined;
  const char* net_name = nullptr;
  int split_share = nccl_config_undefined;
};

// The collectives' prototypes shared by several functions: a reduction
// (AllReduce, ReduceScatter: count per rank's result), one with a root
// (Broadcast, Gather, Scatter) and an exchange (AllGather, AllToAll: count
// per rank's block).
using NcclReducing = NcclResult (*)(const void* send, void* receive, std::size_t count, NcclDataType type,
                                    NcclReduction op, NcclCommunicator communicator, NcclStream stream);
using NcclRooted = NcclResult (*)(const void* send, void* receive, std::size_t count, NcclDataType type, int root,
                                  NcclCommunicator communicator, NcclStream stream);
using NcclExchange = NcclResult (*)(const void* send, void* receive, std::size_t count, NcclDataType type,
                                    NcclCommunicator communicator, NcclStream stream);

// The functions, as symbol_table.hpp lists them: X(field, type, requirement,
// names...). Optional ones are not in every implementation or release.
#define HAL_NCCL_FUNCTIONS(X)                                                                                          \
  X(GetVersion, NcclResult (*)(int* version), required, "ncclGetVersion")                                              \
  X(GetUniqueId, NcclResult (*)(NcclUniqueId* id), required, "ncclGetUniqueId")                                        \
  X(CommInitRank, NcclResult (*)(NcclCommunicator* communicator, int ranks, NcclUniqueId id, int rank), required,      \
    "ncclCommInitRank")                                                                                                \
  X(CommDestroy, NcclResult (*)(NcclCommunicator communicator), required, "ncclCommDestroy")                           \
  X(CommAbort, NcclResult (*)(NcclCommunicator communicator), required, "ncclCommAbort")                               \
  X(CommGetAsyncError, NcclResult (*)(NcclCommunicator communicator, NcclResult* async_error), required,               \
    "ncclCommGetAsyncError")                                                                                           \
  X(CommCount, NcclResult (*)(NcclCommunicator communicator, int* count), required, "ncclCommCount")                   \
  X(CommUserRank, NcclResult (*)(NcclCommunicator communicator, int* rank), required, "ncclCommUserRank")              \
  X(GetErrorString, const char* (*)(NcclResult result), required, "ncclGetErrorString")                                \
  X(AllReduce, NcclReducing, required, "ncclAllReduce")                                                                \
  X(Broadcast, NcclRooted, required, "ncclBroadcast")                                                                  \
  X(Reduce,                                                                                                            \
    NcclResult (*)(const void* send, void* receive, std::size_t count, NcclDataType type, NcclReduction op, int root,  \
                   NcclCommunicator communicator, NcclStream stream),                                                  \
    required, "ncclReduce")                                                                                            \
  X(AllGather, NcclExchange, required, "ncclAllGather")                                                                \
  X(ReduceScatter, NcclReducing, required, "ncclReduceScatter")                                                        \
  X(Send,                                                                                                              \
    NcclResult (*)(const void* send, std::size_t count, NcclDataType type, int peer, NcclCommunicator communicator,    \
                   NcclStream stream),                                                                                 \
    required, "ncclSend")                                                                                              \
  X(Recv,                                                                                                              \
    NcclResult (*)(void* receive, std::size_t count, NcclDataType type, int peer, NcclCommunicator communicator,       \
                   NcclStream stream),                                                                                 \
    required, "ncclRecv")                                                                                              \
  X(GroupStart, NcclResult (*)(), required, "ncclGroupStart")                                                          \
  X(GroupEnd, NcclResult (*)(), required, "ncclGroupEnd")                                                              \
  /* NCCL 2.28 spells it ncclAlltoAll, RCCL ncclAllToAll; older NCCL has neither. */                                   \
  X(AllToAll, NcclExchange, optional, "ncclAlltoAll", "ncclAllToAll")                                                  \
  X(CommFinalize, NcclResult (*)(NcclCommunicator communicator), optional, "ncclCommFinalize")                         \
  X(GetLastError, const char* (*)(NcclCommunicator communicator), optional, "ncclGetLastError")                        \
  /* NCCL 2.14+: lets init be non-blocking, so a missing peer can time out. */                                         \
  X(CommInitRankConfig,                                                                                                \
    NcclResult (*)(NcclCommunicator* communicator, int ranks, NcclUniqueId id, int rank, NcclConfig* config),          \
    optional, "ncclCommInitRankConfig")                                                                                \
  /* NCCL 2.28+. */                                                                                                    \
  X(Gather, NcclRooted, optional, "ncclGather")                                                                        \
  X(Scatter, NcclRooted, optional, "ncclScatter")

struct NcclApi {
  HAL_SYMBOL_FIELDS(HAL_NCCL_FUNCTIONS)
};

class Nccl : public VendorLibrary {
 public:
  // NVIDIA's defaults: libnccl.so.2, HAL_NCCL, the `nccl` backend option.
  static LibraryRequest nvidia_request(const ConfiguredPath& configured);
  // AMD's: librccl.so.1, HAL_RCCL, the `rccl` backend option, then
  // $ROCM_PATH/lib and /opt/rocm/lib.
  static LibraryRequest amd_request(const ConfiguredPath& configured);
  // Any NCCL-compatible library: RCCL (librccl.so.1), ACCL, pccl.
  static LoadResult<Nccl> load(const LibraryRequest& request);

  const NcclApi& api() const { return api_; }
  // "2.28.9"
  std::string version() const;
  // ncclGetVersion's number: 2.9 and later major*10000 + minor*100 + patch, before major*1000.
  static std::string format_version(int encoded);

 private:
  NcclApi api_;
};

}  // namespace hal::shims
