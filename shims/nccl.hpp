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
#include <memory>
#include <string>
#include <vector>

#include "vendor_library.hpp"

namespace hal::shims {

struct NcclUniqueId {
  char internal[128];
};
struct NcclCommunicatorTag;
using NcclCommunicator = NcclCommunicatorTag*;
using NcclResult = int;       // ncclResult_t: 0 = ncclSuccess, 7 = ncclInProgress
using NcclDataType = int;     // ncclDataType_t
using NcclReduction = int;    // ncclRedOp_t
using NcclStream = void*;     // cudaStream_t / hipStream_t: a pointer either way

// ncclResult_t values the callers act on.
constexpr NcclResult nccl_success = 0;
constexpr NcclResult nccl_invalid_argument = 4;
constexpr NcclResult nccl_in_progress = 7;

// ncclConfig_t as NCCL 2.14 defined it, the first release with
// ncclCommInitRankConfig. Later releases append fields and read only
// `size` bytes of a caller's config, so this prefix stays valid.
struct NcclConfig {
  std::size_t size = sizeof(NcclConfig);
  unsigned int magic = 0xcafebeef;
  unsigned int version = 21400;  // NCCL_VERSION(2, 14, 0)
  int blocking = undefined;
  int cga_cluster_size = undefined;
  int min_ctas = undefined;
  int max_ctas = undefined;
  const char* net_name = nullptr;
  int split_share = undefined;
  static constexpr int undefined = -2147483647 - 1;  // NCCL_CONFIG_UNDEF_INT
};

struct NcclApi {
  NcclResult (*GetVersion)(int* version) = nullptr;
  NcclResult (*GetUniqueId)(NcclUniqueId* id) = nullptr;
  NcclResult (*CommInitRank)(NcclCommunicator* communicator, int ranks, NcclUniqueId id, int rank) = nullptr;
  NcclResult (*CommDestroy)(NcclCommunicator communicator) = nullptr;
  NcclResult (*CommAbort)(NcclCommunicator communicator) = nullptr;
  NcclResult (*CommGetAsyncError)(NcclCommunicator communicator, NcclResult* async_error) = nullptr;
  NcclResult (*CommCount)(NcclCommunicator communicator, int* count) = nullptr;
  NcclResult (*CommUserRank)(NcclCommunicator communicator, int* rank) = nullptr;
  const char* (*GetErrorString)(NcclResult result) = nullptr;
  NcclResult (*AllReduce)(const void* send, void* receive, std::size_t count, NcclDataType type, NcclReduction op,
                          NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*Broadcast)(const void* send, void* receive, std::size_t count, NcclDataType type, int root,
                          NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*Reduce)(const void* send, void* receive, std::size_t count, NcclDataType type, NcclReduction op,
                       int root, NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*AllGather)(const void* send, void* receive, std::size_t send_count, NcclDataType type,
                          NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*ReduceScatter)(const void* send, void* receive, std::size_t receive_count, NcclDataType type,
                              NcclReduction op, NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*Send)(const void* send, std::size_t count, NcclDataType type, int peer, NcclCommunicator communicator,
                     NcclStream stream) = nullptr;
  NcclResult (*Recv)(void* receive, std::size_t count, NcclDataType type, int peer, NcclCommunicator communicator,
                     NcclStream stream) = nullptr;
  NcclResult (*GroupStart)() = nullptr;
  NcclResult (*GroupEnd)() = nullptr;
  // Optional: not in every implementation or release.
  NcclResult (*AllToAll)(const void* send, void* receive, std::size_t count, NcclDataType type,
                         NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*CommFinalize)(NcclCommunicator communicator) = nullptr;
  const char* (*GetLastError)(NcclCommunicator communicator) = nullptr;
  // NCCL 2.14+: lets init be non-blocking, so a missing peer can time out.
  NcclResult (*CommInitRankConfig)(NcclCommunicator* communicator, int ranks, NcclUniqueId id, int rank,
                                   NcclConfig* config) = nullptr;
  // NCCL 2.28+.
  NcclResult (*Gather)(const void* send, void* receive, std::size_t count, NcclDataType type, int root,
                       NcclCommunicator communicator, NcclStream stream) = nullptr;
  NcclResult (*Scatter)(const void* send, void* receive, std::size_t count, NcclDataType type, int root,
                        NcclCommunicator communicator, NcclStream stream) = nullptr;
};

// The symbol table, for any library that speaks the NCCL API.
std::vector<SymbolSpec> nccl_symbols(NcclApi& api);

class Nccl {
 public:
  struct LoadResult {
    std::unique_ptr<Nccl> library;  // null when unusable
    std::string message;
  };
  // NVIDIA's defaults: libnccl.so.2, HAL_NCCL, the `nccl` backend option.
  static LibraryRequest nvidia_request(const std::string& configured_path);
  // AMD's: librccl.so.1, HAL_RCCL, the `rccl` backend option, then
  // $ROCM_PATH/lib and /opt/rocm/lib.
  static LibraryRequest amd_request(const std::string& configured_path);
  // Any NCCL-compatible library: RCCL (librccl.so.1), ACCL, pccl.
  static LoadResult load(const LibraryRequest& request);

  const NcclApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  // What the request called it: "NCCL (libnccl.so.2)", "RCCL (librccl.so.1)".
  const std::string& display_name() const { return display_name_; }
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  // "2.28.9"
  std::string version() const;
  // ncclGetVersion's number: 2.9 and later major*10000 + minor*100 + patch, before major*1000.
  static std::string format_version(int encoded);

 private:
  SharedLibrary library_;
  NcclApi api_;
  std::vector<std::string> missing_optional_;
  std::string display_name_;
};

}  // namespace hal::shims
