// The CUDA backend's collectives: the shared NCCL engine (backends/common)
// on the loaded NCCL-compatible library, through the driver's primary
// contexts and CUstreams.
#include "cuda_backend.hpp"

namespace hal::cuda {
namespace {

backend::NcclCollectives* engine_of(hal_backend_context* backend) { return backend->cuda.collectives.get(); }

}  // namespace

void create_collectives(hal_backend_context& backend) {
  hal_backend_v1 entry_points{};
  fill_gpu_entry_points(entry_points);
  Context& context = backend.cuda;
  context.collectives =
      backend::make_nccl_collectives(entry_points, backend, context, context.nccl.get(), context.nccl_status);
}

hal_status collectives_stream_status(const hal_stream* stream) { return backend::collectives_status_of(stream); }

void forget_collectives_stream(const hal_stream* stream) { backend::forget_collectives_of(stream); }

extern const hal_collectives_v2 collectives_table = backend::nccl_collectives_table<&engine_of>();

}  // namespace hal::cuda
