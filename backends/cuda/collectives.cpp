// The CUDA backend's collectives: the shared NCCL engine (backends/common)
// on the loaded NCCL-compatible library, through the driver's primary
// contexts and CUstreams.
#include "cuda_backend.hpp"

namespace hal::cuda {
namespace {

class CudaCollectivesPort final : public backend::GpuCollectivesPort {
 public:
  CudaCollectivesPort(const hal_backend_v1& entry_points, hal_backend_context& backend)
      : GpuCollectivesPort(entry_points, &backend), context_(backend.cuda) {}
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }
  std::string device_name(std::uint32_t device) const override { return context_.device_id(device); }
  hal_status make_current(std::uint32_t device) const override { return context_.make_current(device); }
  void* native_stream(const hal_stream* stream) const override { return stream->handle; }
  std::uint32_t stream_device(const hal_stream* stream) const override { return stream->device; }

 private:
  const Context& context_;
};

backend::NcclCollectives* engine_of(hal_backend_context* backend) { return backend->cuda.collectives.get(); }

}  // namespace

void create_collectives(hal_backend_context& backend) {
  hal_backend_v1 entry_points{};
  fill_gpu_entry_points(entry_points);
  Context& context = backend.cuda;
  context.collectives = std::make_unique<backend::NcclCollectives>(
      std::make_unique<CudaCollectivesPort>(entry_points, backend), context.nccl.get(), context.nccl_status);
}

hal_status collectives_stream_status(const hal_stream* stream) {
  const Context& context = *stream->context;
  return context.collectives ? context.collectives->stream_status(stream) : succeed();
}

void forget_collectives_stream(const hal_stream* stream) {
  if (stream->context->collectives) stream->context->collectives->forget_stream(stream);
}

extern const hal_collectives_v2 collectives_table = backend::nccl_collectives_table<&engine_of>();

}  // namespace hal::cuda
