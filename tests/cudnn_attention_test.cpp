// cuDNN's fused attention (backends/cuda/cudnn_attention.cpp) driven directly,
// on the fake driver and the fake cuDNN of tests/fakes: what makes it
// ineligible and how it says so. Nothing here runs a kernel; what cuDNN
// computes is checked on a GPU (docs/backends/cuda.md).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <cudnn.h>
#include <dlfcn.h>
#include <unistd.h>

#include "cuda_backend.hpp"
#include "attention.hpp"
#include "cudnn_attention.hpp"
#include "scoped_environment.hpp"

using hal::testing::ScopedEnvironment;
namespace shims = hal::shims;

namespace {

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// The CUDA backend's context on the fake driver, with cuDNN loaded from
// `cudnn_path` and NVRTC from `nvrtc_path` as the plugin would with its
// cudnn and nvrtc options set (HAL_CUDNN, HAL_NVRTC): only those paths.
struct FakeCudaContext {
  hal::cuda::Context context;
  explicit FakeCudaContext(const std::string& cudnn_path, const std::string& nvrtc_path = HAL_FAKE_NVRTC_PATH) {
    shims::LoadResult<shims::CudaDriver> driver = shims::CudaDriver::load(HAL_FAKE_CUDA_DRIVER_PATH);
    REQUIRE_MESSAGE(driver.library, driver.message);
    context.driver = std::move(driver.library);
    shims::LoadResult<shims::Cudnn> cudnn = shims::Cudnn::load({cudnn_path, "HAL_CUDNN"});
    context.cudnn = std::move(cudnn.library);
    context.cudnn_status = context.cudnn ? "loaded " + context.cudnn->path() : cudnn.message;
    // The cuda plugin's profile, as far as discovery needs it.
    context.profile.backend = "cuda";
    context.profile.runtime_compiler = {nvrtc_path, "HAL_NVRTC"};
    context.profile.identify = [](const hal::cuda::Context&, hal::cuda::CudaDevice& device) { device.vendor = "NVIDIA"; };
    hal::cuda::load_runtime_compiler(context);
    hal::cuda::create_attention(context);  // discovery declares the attention capabilities through it
    REQUIRE(hal::cuda::discover_devices(context) == HAL_OK);
  }
};

hal_tensor_strides_v1 bshd_strides(std::int64_t heads, std::int64_t seq, std::int64_t dim) {
  (void)seq;
  return {seq * heads * dim, dim, heads * dim, 1};
}

// f16, b=1, 4 query heads over 2 key/value heads, 128 x 128, d = 64, causal.
hal_attention_params_v1 typical_params() {
  hal_attention_params_v1 params{};
  params.struct_size = sizeof(params);
  params.batch = 1;
  params.heads_q = 4;
  params.heads_kv = 2;
  params.seq_q = params.seq_kv = 128;
  params.head_dim_qk = params.head_dim_v = 64;
  params.dtype = HAL_DTYPE_F16;
  params.causal = 1;
  params.alignment = HAL_MASK_TOP_LEFT;
  params.window_left = params.window_right = -1;
  params.softmax_scale = 1.0f / std::sqrt(64.0f);
  params.return_lse = 1;
  params.q_strides = params.o_strides = params.grad_o_strides = params.grad_q_strides = bshd_strides(4, 128, 64);
  params.k_strides = params.v_strides = params.grad_k_strides = params.grad_v_strides = bshd_strides(2, 128, 64);
  return params;
}

std::string last_error_message() {
  hal_error_info_v1 info{};
  info.struct_size = sizeof(info);
  hal::backend::read_last_error(&info);
  return info.message != nullptr ? info.message : "";
}

}  // namespace

TEST_SUITE("cudnn attention") {
  TEST_CASE("without cuDNN the fused implementation is not eligible and names every path tried") {
    FakeCudaContext fake("/nonexistent/cudnn/libcudnn.so.9");
    REQUIRE_FALSE(fake.context.cudnn);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    const std::string reason = fused->supports(0, typical_params(), false);
#if HAL_TEST_CUDNN_FRONTEND_BUILT
    CHECK(contains(reason, "cuDNN is not loaded"));
    CHECK(contains(reason, "/nonexistent/cudnn/libcudnn.so.9"));
    CHECK(contains(reason, "HAL_CUDNN"));
#else
    CHECK(contains(reason, "built without the cuDNN frontend headers"));
#endif
    CHECK(fused->supports(0, typical_params(), true) == reason.substr(0, reason.size()));
    std::uint64_t bytes = 0;
    CHECK(fused->workspace_size(0, typical_params(), false, &bytes) == HAL_ERROR_UNSUPPORTED);
    CHECK(contains(last_error_message(), reason.substr(0, 40)));
  }

#if HAL_TEST_CUDNN_FRONTEND_BUILT
  TEST_CASE("without NVRTC, which cuDNN compiles its SDPA engines with, fused is not eligible and says why") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH, "/nonexistent/nvrtc/libnvrtc.so.13");
    REQUIRE(fake.context.cudnn);
    CHECK_FALSE(fake.context.nvrtc);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    const std::string reason = fused->supports(0, typical_params(), false);
    CHECK(contains(reason, "NVRTC is not loaded"));
    CHECK(contains(reason, "/nonexistent/nvrtc/libnvrtc.so.13"));
    CHECK(contains(reason, "HAL_NVRTC"));
    CHECK(fused->unavailable() == reason);
  }

  TEST_CASE("NVRTC is looked for as the CUDA release cuDNN was built for names it, and reported") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    REQUIRE_MESSAGE(fake.context.nvrtc, fake.context.nvrtc_status);
    CHECK(fake.context.nvrtc_status == "loaded " + fake.context.nvrtc->path());
    CHECK(fake.context.nvrtc->version() == "13.0");
    CHECK(hal::cuda::make_cudnn_attention(fake.context)->unavailable().empty());
    // The fake cuDNN says it was built for CUDA 13 (cudnnGetCudartVersion 13000): libnvrtc.so.13 first.
    CHECK(shims::Nvrtc::nvidia_request("", 13).sonames.front() == "libnvrtc.so.13");
    CHECK(shims::Nvrtc::nvidia_request("", 12).sonames.front() == "libnvrtc.so.12");
    CHECK(shims::Nvrtc::nvidia_request("", 0).sonames.size() == 2);
    // No cuDNN: NVRTC is not looked for, and says so.
    FakeCudaContext without("/nonexistent/cudnn/libcudnn.so.9");
    CHECK_FALSE(without.context.nvrtc);
    CHECK(without.context.nvrtc_status == "not looked for: cuDNN is not loaded");
  }

  TEST_CASE("a graph cuDNN cannot build is ineligible with cuDNN's own message and version, asked once per shape") {
    ScopedEnvironment environment{{"HAL_FAKE_CUDNN_VERSION", "9.8.0"},
                                  {"HAL_FAKE_CUDNN_REJECT", "no engine for this SDPA graph (fake)"}};
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    REQUIRE_MESSAGE(fake.context.cudnn, fake.context.cudnn_status);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    const hal_attention_params_v1 params = typical_params();
    for (const bool backward : {false, true}) {
      CAPTURE(backward);
      const std::string reason = fused->supports(0, params, backward);
      CHECK(contains(reason, "cuDNN 9.8.0"));
      CHECK(contains(reason, HAL_FAKE_CUDNN_PATH));
      CHECK(contains(reason, "no engine for this SDPA graph (fake)"));
      CHECK(contains(reason, "CUDNN_STATUS_NOT_SUPPORTED"));
    }
    // The answer is kept per (device, shape): cuDNN is not asked again.
    environment.set("HAL_FAKE_CUDNN_REJECT", "a second answer");
    CHECK(contains(fused->supports(0, params, false), "no engine for this SDPA graph (fake)"));
    hal_attention_params_v1 longer = params;
    longer.seq_kv = 256;
    longer.k_strides = longer.v_strides = bshd_strides(2, 256, 64);
    CHECK(contains(fused->supports(0, longer, false), "a second answer"));
    std::uint64_t bytes = 0;
    CHECK(fused->workspace_size(0, params, false, &bytes) == HAL_ERROR_UNSUPPORTED);
    CHECK(contains(last_error_message(), "no engine for this SDPA graph (fake)"));
  }

  TEST_CASE("graphs are built with the device's context current, from a thread that has none") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    REQUIRE_MESSAGE(fake.context.cudnn, fake.context.cudnn_status);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    std::string reason;
    std::thread([&] { reason = fused->supports(0, typical_params(), false); }).join();  // a new thread: no context
    CAPTURE(reason);
    CHECK(contains(reason, "the fake cuDNN has no engine for any graph"));  // cuDNN's answer, not a missing context
    CHECK_FALSE(contains(reason, "no CUDA context is current"));
  }

  TEST_CASE("a failure that may pass is asked again; cuDNN's answer for a graph is kept") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    REQUIRE_MESSAGE(fake.context.cudnn, fake.context.cudnn_status);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    const hal_attention_params_v1 params = typical_params();
    {
      ScopedEnvironment out_of_memory{{"HAL_FAKE_CUDNN_CREATE_FAIL", "1"}};
      CHECK(contains(fused->supports(0, params, false), "cudnnCreate failed on cuda:0"));
    }
    CHECK(contains(fused->supports(0, params, false), "the fake cuDNN has no engine for any graph"));
  }

  TEST_CASE("what cuDNN's SDPA never takes is said without building a graph") {
    ScopedEnvironment environment{{"HAL_FAKE_CUDNN_REJECT", "the graph was built"}};
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);

    hal_attention_params_v1 f32 = typical_params();
    f32.dtype = HAL_DTYPE_F32;
    const std::string f32_reason = fused->supports(0, f32, false);
    CHECK(contains(f32_reason, "dtype f32"));
    CHECK_FALSE(contains(f32_reason, "the graph was built"));

    hal_attention_params_v1 odd_head = typical_params();
    odd_head.head_dim_qk = odd_head.head_dim_v = 60;
    CHECK(contains(fused->supports(0, odd_head, false), "head_dim_qk (60) is not a multiple of 8"));

    hal_attention_params_v1 strided = typical_params();
    strided.grad_k_strides.dim = 2;
    CHECK(fused->supports(0, strided, false) != fused->supports(0, strided, true));
    CHECK(contains(fused->supports(0, strided, true), "grad_k has head-dimension stride 2"));

    CHECK(contains(fused->supports(7, typical_params(), false), "device index 7 is out of range"));
  }

  TEST_CASE("cuDNN's version decides what the frontend accepts") {
    ScopedEnvironment environment{{"HAL_FAKE_CUDNN_VERSION", "9.5.0"},
                                  {"HAL_FAKE_CUDNN_REJECT", "the graph reached cuDNN"}};
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    // A sliding window with bottom-right alignment over unequal lengths needs cuDNN 9.6.
    hal_attention_params_v1 windowed = typical_params();
    windowed.alignment = HAL_MASK_BOTTOM_RIGHT;
    windowed.window_left = 32;
    windowed.seq_q = 64;
    windowed.q_strides = windowed.o_strides = bshd_strides(4, 64, 64);
    const std::string reason = fused->supports(0, windowed, false);
    CHECK(contains(reason, "cuDNN 9.5.0"));
    CHECK(contains(reason, "graph validation"));
    CHECK(contains(reason, "9.6.0"));
    CHECK_FALSE(contains(reason, "the graph reached cuDNN"));
    // Without the window the same shape goes on to cuDNN itself.
    windowed.window_left = -1;
    CHECK(contains(fused->supports(0, windowed, false), "the graph reached cuDNN"));
  }

  TEST_CASE("a cuDNN release the frontend knows to be broken for SDPA is named as such") {
    ScopedEnvironment environment{{"HAL_FAKE_CUDNN_VERSION", "9.10.1"}};
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    const std::string reason = fused->supports(0, typical_params(), false);
    CHECK(contains(reason, "cuDNN 9.10.1"));
    CHECK(contains(reason, "known bugs"));
  }

  TEST_CASE("one process drives one cuDNN library through the frontend, and says so for another") {
    FakeCudaContext first(HAL_FAKE_CUDNN_PATH);
    auto first_fused = hal::cuda::make_cudnn_attention(first.context);
    CHECK(contains(first_fused->supports(0, typical_params(), false), HAL_FAKE_CUDNN_PATH));

    const std::filesystem::path directory =
        std::filesystem::temp_directory_path() / ("hal-cudnn-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(directory);
    std::filesystem::copy_file(HAL_FAKE_CUDNN_PATH, directory / "libcudnn.so.9",
                               std::filesystem::copy_options::overwrite_existing);
    {
      FakeCudaContext second((directory / "libcudnn.so.9").string());
      REQUIRE(second.context.cudnn);
      const std::string reason = hal::cuda::make_cudnn_attention(second.context)->supports(0, typical_params(), false);
      CHECK(contains(reason, "already drives cuDNN at " + std::string(HAL_FAKE_CUDNN_PATH)));
      CHECK(contains(reason, (directory / "libcudnn.so.9").string()));
    }
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }

  TEST_CASE("calls that cannot run are errors, not crashes") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    hal::backend::AttentionAddresses tensors;
    CHECK(fused->forward(nullptr, typical_params(), tensors) == HAL_ERROR_INVALID_ARGUMENT);
    hal_stream stream;
    stream.context = &fake.context;
    stream.device = 0;
    CHECK(fused->forward(&stream, typical_params(), tensors) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(contains(last_error_message(), "has no device address"));
    tensors = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000, 0x8000, 0x9000};
    CHECK(fused->backward(&stream, typical_params(), tensors) == HAL_ERROR_UNSUPPORTED);
    CHECK(contains(last_error_message(), "cannot run these parameters"));
  }

  // cuDNN refuses tensors that are not 16-byte aligned at execute; the
  // runtime says how aligned a call's tensors are, and fused declines below 16.
  TEST_CASE("tensors not 16-byte aligned are declined before cuDNN is asked, and refused at the call") {
    ScopedEnvironment environment{{"HAL_FAKE_CUDNN_REJECT", "the graph reached cuDNN"}};
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    auto fused = hal::cuda::make_cudnn_attention(fake.context);
    hal_attention_params_v1 params = typical_params();
    for (std::uint32_t alignment : {2u, 8u}) {
      params.address_alignment = alignment;
      const std::string reason = fused->supports(0, params, false);
      CHECK_MESSAGE(contains(reason, "only " + std::to_string(alignment) + "-byte aligned"), reason);
      CHECK_FALSE(contains(reason, "the graph reached cuDNN"));
    }
    for (std::uint32_t alignment : {0u, 16u, 256u}) {  // unknown (a shape alone) or aligned: cuDNN decides
      params.address_alignment = alignment;
      CHECK(contains(fused->supports(0, params, false), "the graph reached cuDNN"));
    }
    params.address_alignment = 16;
    params.struct_size = HAL_ATTENTION_PARAMS_V1_MIN_SIZE;  // a caller built before the field: nothing claimed
    params.address_alignment = 2;
    CHECK(contains(fused->supports(0, params, false), "the graph reached cuDNN"));

    hal_stream stream;
    stream.context = &fake.context;
    stream.device = 0;
    hal::backend::AttentionAddresses tensors{0x1000, 0x2008, 0x3000, 0x4000, 0x5000};
    CHECK(fused->forward(&stream, typical_params(), tensors) == HAL_ERROR_UNSUPPORTED);
    CHECK(contains(last_error_message(), "not a multiple of 16 bytes"));
  }

  TEST_CASE("the fake cuDNN refuses a variant pack with a data pointer not 16-byte aligned") {
    FakeCudaContext fake(HAL_FAKE_CUDNN_PATH);
    const hal::backend::CurrentDevice scope = fake.context.current_device(0);
    REQUIRE(static_cast<bool>(scope));
    void* library = dlopen(HAL_FAKE_CUDNN_PATH, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(library != nullptr);
    auto symbol = [&](const char* name) {
      void* found = dlsym(library, name);
      REQUIRE_MESSAGE(found != nullptr, name);
      return found;
    };
    auto create = reinterpret_cast<decltype(&cudnnCreate)>(symbol("cudnnCreate"));
    auto destroy = reinterpret_cast<decltype(&cudnnDestroy)>(symbol("cudnnDestroy"));
    auto create_descriptor =
        reinterpret_cast<decltype(&cudnnBackendCreateDescriptor)>(symbol("cudnnBackendCreateDescriptor"));
    auto destroy_descriptor =
        reinterpret_cast<decltype(&cudnnBackendDestroyDescriptor)>(symbol("cudnnBackendDestroyDescriptor"));
    auto set_attribute = reinterpret_cast<decltype(&cudnnBackendSetAttribute)>(symbol("cudnnBackendSetAttribute"));
    auto execute = reinterpret_cast<decltype(&cudnnBackendExecute)>(symbol("cudnnBackendExecute"));
    auto last_error = reinterpret_cast<decltype(&cudnnGetLastErrorString)>(symbol("cudnnGetLastErrorString"));

    cudnnHandle_t handle = nullptr;
    REQUIRE(create(&handle) == CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t plan = nullptr, pack = nullptr;
    REQUIRE(create_descriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) == CUDNN_STATUS_SUCCESS);
    REQUIRE(create_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack) == CUDNN_STATUS_SUCCESS);
    auto execute_with = [&](std::uintptr_t second) {
      void* pointers[] = {reinterpret_cast<void*>(0x10000), reinterpret_cast<void*>(second)};
      REQUIRE(set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, pointers) ==
              CUDNN_STATUS_SUCCESS);
      return execute(handle, plan, pack);
    };
    CHECK(execute_with(0x20008) == CUDNN_STATUS_BAD_PARAM);
    char message[256] = {};
    last_error(message, sizeof(message));
    CHECK_MESSAGE(contains(message, "0x20008 is not 16-byte aligned"), message);
    CHECK(execute_with(0x20010) == CUDNN_STATUS_NOT_SUPPORTED);  // aligned: past the check, and it computes nothing
    CHECK(destroy_descriptor(pack) == CUDNN_STATUS_SUCCESS);
    CHECK(destroy_descriptor(plan) == CUDNN_STATUS_SUCCESS);
    CHECK(destroy(handle) == CUDNN_STATUS_SUCCESS);
    dlclose(library);
  }
#endif
}

// Attention workspaces (allocate_scratch): stream-ordered from the device's
// memory pool where it has one, cuMemAlloc after the stream's work where not.
TEST_SUITE("attention scratch") {
  void allocate_and_release(const FakeCudaContext& fake, std::size_t bytes) {
    const hal::cuda::Context& context = fake.context;
    const hal::backend::CurrentDevice scope = context.current_device(0);
    REQUIRE(static_cast<bool>(scope));
    CUstream stream = nullptr;
    REQUIRE(context.api().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CUdeviceptr address = 0;
    REQUIRE(hal::cuda::allocate_scratch(context, 0, stream, bytes, &address, "attention workspace") == HAL_OK);
    CHECK(address != 0);
    CHECK(hal::cuda::release_scratch(context, 0, stream, address, "the attention workspace") == HAL_OK);
    CHECK(context.api().cuStreamSynchronize(stream) == CUDA_SUCCESS);
    CHECK(context.api().cuStreamDestroy(stream) == CUDA_SUCCESS);
  }

  int fake_driver_count(const char* hook) {
    void* driver = dlopen(HAL_FAKE_CUDA_DRIVER_PATH, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(driver != nullptr);
    auto count = reinterpret_cast<int (*)()>(dlsym(driver, hook));
    REQUIRE_MESSAGE(reinterpret_cast<void*>(count) != nullptr, "the fake driver lacks " << hook);
    const int value = count();
    dlclose(driver);
    return value;
  }
  int async_allocations() { return fake_driver_count("hal_fake_cuda_async_allocations"); }
  int pool_reservations() { return fake_driver_count("hal_fake_cuda_pool_reservations"); }

  TEST_CASE("stream-ordered where the device has memory pools, cuMemAlloc where it has none") {
    {
      const FakeCudaContext with_pools("/nonexistent/cudnn/libcudnn.so.9");
      REQUIRE(with_pools.context.devices[0]->memory_pools);
      const int before = async_allocations();
      allocate_and_release(with_pools, 1 << 20);
      CHECK(async_allocations() == before + 1);
    }
    ScopedEnvironment no_pools{{"HAL_FAKE_CUDA_MEMORY_POOLS", "0"}};  // as some devices and SDKs report
    const FakeCudaContext without_pools("/nonexistent/cudnn/libcudnn.so.9");
    CHECK_FALSE(without_pools.context.devices[0]->memory_pools);
    const int before = async_allocations();
    allocate_and_release(without_pools, 1 << 20);
    CHECK(async_allocations() == before);
    {
      const hal::backend::CurrentDevice scope = without_pools.context.current_device(0);
      CUdeviceptr refused = 0;  // what choosing by the symbol alone would have called
      CHECK(without_pools.context.api().cuMemAllocAsync(&refused, 64, CU_STREAM_LEGACY) == CUDA_ERROR_NOT_SUPPORTED);
    }
  }

  // A pool at the driver's default release threshold (0) gives a freed
  // workspace back at every synchronize, and the next call maps it again.
  TEST_CASE("a workspace asked for again after each synchronize is reserved once") {
    const FakeCudaContext fake("/nonexistent/cudnn/libcudnn.so.9");
    REQUIRE(fake.context.devices[0]->memory_pools);
    const int before = pool_reservations();
    for (int call = 0; call < 5; ++call) allocate_and_release(fake, 8 << 20);  // each ends in cuStreamSynchronize
    CHECK(pool_reservations() == before + 1);
    allocate_and_release(fake, 1 << 20);  // a smaller one fits the kept block
    CHECK(pool_reservations() == before + 1);
    allocate_and_release(fake, 16 << 20);  // a larger one needs more, and is kept from then on
    allocate_and_release(fake, 16 << 20);
    CHECK(pool_reservations() == before + 2);
    CHECK(fake.context.devices[0]->scratch_pool_threshold == (16u << 20));
  }
}
