// The embedded kernels on each device: loaded and checked on first use,
// resolved by name, and launched (CudaVendor's kernel calls).
#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "vendor.hpp"

namespace hal::cuda {
namespace {

constexpr const char* image_contents = "sm_80 and sm_90 code and compute_90 PTX";

// The first attention call may come while its caller captures a graph (a
// framework capturing a step): loading and checking the kernels is hal's own
// one-time work, outside that graph. So the loading thread is in relaxed
// capture mode, where the calls a global-mode capture forbids (cuMemAlloc,
// cuMemFree) are allowed, and puts the caller's mode back after.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const shims::CudaDriverApi& api) : api_(api) { exchange(); }
  ~RelaxedCaptureMode() { exchange(); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  void exchange() {
    if (api_.cuThreadExchangeStreamCaptureMode != nullptr) api_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  const shims::CudaDriverApi& api_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// Device memory and a stream of the check's own, released on every path.
// Not the legacy stream: while a caller captures on a blocking stream, any
// use of it is refused (and breaks the capture).
struct CheckResources {
  const shims::CudaDriverApi& api;
  CUdeviceptr address = 0;
  CUstream stream = nullptr;
  ~CheckResources() {
    if (address != 0) api.cuMemFree(address);
    if (stream != nullptr) api.cuStreamDestroy(stream);
  }
};

// Runs the softmax on rows that exercise the reduction (more columns than
// threads, negative and large values) and compares with the host.
std::string verify_softmax(const Context& context, CUfunction softmax) {
  const auto& api = context.api();
  constexpr int rows = 2, columns = 100, threads = 64;
  std::vector<float> input(rows * columns), output(rows * columns, -1.0f);
  for (int i = 0; i < rows * columns; ++i) input[i] = static_cast<float>((i * 37) % 23) - 11.0f + (i / columns) * 80.0f;
  const std::size_t bytes = input.size() * sizeof(float);
  CheckResources check{api};
  CUresult result = api.cuStreamCreate(&check.stream, CU_STREAM_NON_BLOCKING);
  if (result == CUDA_SUCCESS) result = api.cuMemAlloc(&check.address, 2 * bytes);
  // Copies between device and pageable host memory return once done, Async or not.
  if (result == CUDA_SUCCESS) result = api.cuMemcpyHtoDAsync(check.address, input.data(), bytes, check.stream);
  CUdeviceptr in = check.address, out = check.address + bytes;
  int row_count = rows, column_count = columns;
  void* arguments[] = {&in, &out, &row_count, &column_count};
  if (result == CUDA_SUCCESS)
    result = api.cuLaunchKernel(softmax, rows, 1, 1, threads, 1, 1, 0, check.stream, arguments, nullptr);
  if (result == CUDA_SUCCESS) result = api.cuMemcpyDtoHAsync(output.data(), out, bytes, check.stream);
  if (result != CUDA_SUCCESS) return "running the softmax check failed: " + context.driver->describe(result);
  for (int row = 0; row < rows; ++row) {
    double maximum = -INFINITY, sum = 0.0;
    for (int j = 0; j < columns; ++j) maximum = std::max<double>(maximum, input[row * columns + j]);
    for (int j = 0; j < columns; ++j) sum += std::exp(input[row * columns + j] - maximum);
    for (int j = 0; j < columns; ++j) {
      const double expected = std::exp(input[row * columns + j] - maximum) / sum;
      const double got = output[row * columns + j];
      if (std::abs(got - expected) > 1e-6 + 1e-4 * expected)
        return "the softmax check gave " + std::to_string(got) + " at row " + std::to_string(row) + " column " +
               std::to_string(j) + " instead of " + std::to_string(expected) +
               "; the device runs the image but not correctly";
    }
  }
  return {};
}

// Loads the image on the device, runs the softmax on a small input and
// compares it with the host; fills device.kernels_* either way.
void load_kernels(const Context& context, std::uint32_t index) {
  CudaDevice& device = *context.devices[index];
  const auto image = embedded_kernel_image();
  if (std::string missing = kernels_missing(context); !missing.empty()) {
    device.kernels_status = std::move(missing);
    return;
  }
  const backend::CurrentDevice scope = context.current_device(index);
  if (!scope) {
    device.kernels_status = "the device's primary context is unusable, so no kernel image was loaded: " +
                            backend::last_error_message();
    return;
  }
  const auto& api = context.api();
  const RelaxedCaptureMode relaxed(api);
  CUresult result = api.cuModuleLoadData(&device.kernel_module, image.data());
  if (result != CUDA_SUCCESS) {
    device.kernel_module = nullptr;
    device.kernels_status = "cuModuleLoadData failed: " + context.driver->describe(result) +
                            "; the embedded image holds " + image_contents + " and none of it loads on this device";
    return;
  }
  result = api.cuModuleGetFunction(&device.softmax_rows_f32, device.kernel_module, "hal_softmax_rows_f32");
  std::string problem = result != CUDA_SUCCESS ? "cuModuleGetFunction(hal_softmax_rows_f32) failed: " +
                                                     context.driver->describe(result)
                                               : verify_softmax(context, device.softmax_rows_f32);
  if (!problem.empty()) {
    device.kernels_status = std::move(problem);
    unload_kernels(context, index);
    return;
  }
  device.kernels_usable = true;
  device.kernels_status = std::string("loaded from the embedded image (") + image_contents +
                          ") and checked: softmax matches the host";
}

}  // namespace

std::string kernels_missing(const Context& context) {
  if (embedded_kernel_image().empty())
    return "this plugin was built without nvcc, so it carries no kernel image (CMake HAL_CUDA_KERNELS)";
  if (!context.driver->has_module_api()) return "the CUDA driver lacks the module API (cuModuleLoadData, cuLaunchKernel)";
  return {};
}

bool kernels_usable(const Context& context, std::uint32_t index) {
  CudaDevice& device = *context.devices[index];
  std::call_once(device.kernels_once, [&] { load_kernels(context, index); });
  return device.kernels_usable;
}

hal_status find_kernel(const Context& context, std::uint32_t index, const char* name, CUfunction* function) {
  CudaDevice& device = *context.devices[index];
  const bool usable = kernels_usable(context, index);
  return backend::find_kernel(context.device_id(index), usable, device.kernels_status, device.kernel_functions, name,
                              "cuModuleGetFunction",
                              [&](const char* kernel, CUfunction* out) {
                                const CUresult result = context.api().cuModuleGetFunction(out, device.kernel_module, kernel);
                                return result == CUDA_SUCCESS ? std::string() : context.driver->describe(result);
                              },
                              function);
}

void unload_kernels(const Context& context, std::uint32_t index) {
  CudaDevice& device = *context.devices[index];
  device.kernel_functions.clear();
  if (device.kernel_module == nullptr) return;
  if (const backend::CurrentDevice scope = context.current_device(index)) context.api().cuModuleUnload(device.kernel_module);
  device.kernel_module = nullptr;
  device.softmax_rows_f32 = nullptr;
  device.kernels_usable = false;
}

std::string CudaVendor::kernels_missing(const Context& context, std::uint32_t) { return cuda::kernels_missing(context); }

std::string CudaVendor::kernels_unusable(const Context& context, std::uint32_t device) {
  return kernels_usable(context, device) ? std::string() : context.devices[device]->kernels_status;
}

namespace {
// cuLaunchKernel takes up to 48 KiB of dynamic shared memory without asking.
constexpr std::uint32_t default_shared_limit = 48 * 1024;
}  // namespace

hal_status CudaVendor::launch(const Context& context, hal_stream& stream, const hal_kernel_launch& launch,
                              const void* arguments) {
  const backend::CurrentDevice scope = context.current_device(stream.device);
  if (!scope) return scope.status();
  CUfunction function = nullptr;
  if (hal_status status = find_kernel(context, stream.device, launch.kernel, &function); status != HAL_OK) return status;
  const auto& api = context.api();
  if (launch.shared_bytes > default_shared_limit) {
    if (api.cuFuncSetAttribute == nullptr)
      return fail(HAL_ERROR_UNSUPPORTED, std::string(launch.kernel) + " needs " + std::to_string(launch.shared_bytes) +
                                             " bytes of shared memory and the driver lacks cuFuncSetAttribute to "
                                             "allow more than 48 KiB; update the driver");
    if (hal_status status = context.check(api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                                 static_cast<int>(launch.shared_bytes)),
                                          std::string("cuFuncSetAttribute(") + launch.kernel +
                                              ", max dynamic shared memory)");
        status != HAL_OK)
      return status;
  }
  // The kernel's one parameter is the struct `arguments` points to.
  void* parameters[] = {const_cast<void*>(arguments)};
  return context.check(api.cuLaunchKernel(function, launch.grid[0], launch.grid[1], launch.grid[2], launch.block[0],
                                          launch.block[1], launch.block[2], launch.shared_bytes, stream.handle,
                                          parameters, nullptr),
                       std::string("cuLaunchKernel(") + launch.kernel + ")");
}

}  // namespace hal::cuda
