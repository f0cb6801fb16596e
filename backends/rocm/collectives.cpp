// The ROCm backend's collectives: the shared NCCL engine (backends/common)
// on the loaded RCCL, through HIP's per-thread current device and hipStreams.
#include "rocm_backend.hpp"

namespace hal::rocm {
namespace {

class RocmCollectivesPort final : public backend::GpuCollectivesPort {
 public:
  RocmCollectivesPort(const hal_backend_v1& entry_points, hal_backend_context& backend)
      : GpuCollectivesPort(entry_points, &backend), context_(backend.rocm) {}
  std::uint32_t device_count() const override { return static_cast<std::uint32_t>(context_.devices.size()); }
  std::string device_name(std::uint32_t device) const override { return "rocm:" + std::to_string(device); }
  hal_status make_current(std::uint32_t device) const override { return context_.make_current(device); }
  void* native_stream(const hal_stream* stream) const override { return stream->handle; }
  std::uint32_t stream_device(const hal_stream* stream) const override { return stream->device; }

 private:
  const Context& context_;
};

backend::NcclCollectives* engine_of(hal_backend_context* backend) { return backend->rocm.collectives.get(); }

}  // namespace

void create_collectives(hal_backend_context& backend) {
  hal_backend_v1 entry_points{};
  fill_gpu_entry_points(entry_points);
  Context& context = backend.rocm;
  context.collectives = std::make_unique<backend::NcclCollectives>(
      std::make_unique<RocmCollectivesPort>(entry_points, backend), context.rccl.get(), context.rccl_status);
}

hal_status collectives_stream_status(const hal_stream* stream) {
  const Context& context = *stream->context;
  return context.collectives ? context.collectives->stream_status(stream) : succeed();
}

void forget_collectives_stream(const hal_stream* stream) {
  if (stream->context->collectives) stream->context->collectives->forget_stream(stream);
}

extern const hal_collectives_v2 collectives_table = backend::nccl_collectives_table<&engine_of>();

}  // namespace hal::rocm
