// The ROCm backend's collectives: the shared NCCL engine (backends/common)
// on the loaded RCCL, through HIP's per-thread current device and hipStreams.
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

backend::NcclCollectives* engine_of(hal_backend_context* backend) { return backend->rocm.collectives.get(); }

}  // namespace

void create_collectives(hal_backend_context& backend) {
  hal_backend_v1 entry_points{};
  fill_gpu_entry_points(entry_points);
  Context& context = backend.rocm;
  context.collectives =
      backend::make_nccl_collectives(entry_points, backend, context, context.rccl.get(), context.rccl_status);
}

hal_status collectives_stream_status(const hal_stream* stream) { return backend::collectives_status_of(stream); }

void forget_collectives_stream(const hal_stream* stream) { backend::forget_collectives_of(stream); }

extern const hal_collectives_v2 collectives_table = backend::nccl_collectives_table<&engine_of>();

}  // namespace hal::rocm
