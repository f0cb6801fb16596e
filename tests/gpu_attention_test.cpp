// Attention on a GPU backend (CUDA or ROCm, chosen at compile time) against
// the fake vendor library: no kernel image loads there, so these tests check
// what the engine says and refuses, through the public API, halinfo and the
// plugin's C table. Numerics need a real GPU: gpu_attention_numerics_test.cpp.
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <sys/wait.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hal/capabilities.hpp"
#include "hal/hal.hpp"
#include "abi.hpp"
#include "command_output.hpp"
#include "scoped_environment.hpp"

using hal::testing::ScopedEnvironment;

namespace {

#if HAL_TEST_BACKEND_CUDA
constexpr const char* backend_name = "cuda";
constexpr const char* vendor_variable = "HAL_CUDA_DRIVER";
constexpr const char* vendor_option = "driver";
constexpr const char* vendor_library = HAL_FAKE_CUDA_DRIVER_PATH;
constexpr const char* kernels_error =
    HAL_TEST_CUDA_KERNELS_BUILT ? "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU" : "built without nvcc";
#else
constexpr const char* backend_name = "rocm";
constexpr const char* vendor_variable = "HAL_HIP_RUNTIME";
constexpr const char* vendor_option = "runtime";
constexpr const char* vendor_library = HAL_FAKE_HIP_RUNTIME_PATH;
constexpr const char* kernels_error = HAL_TEST_ROCM_KERNELS_BUILT ? "hipModuleLoadData failed" : "built without hipcc";
#endif
constexpr const char* missing_cublas = "/nonexistent/cublas/libcublas.so.13";

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::string device_id() { return std::string(backend_name) + ":0"; }

// The GPU backend on its fake, cuBLAS pointed at a path that does not exist
// so the result does not depend on the machine's toolkit.
ScopedEnvironment fake_environment() {
  return ScopedEnvironment{{vendor_variable, vendor_library},
                           {"HAL_BACKENDS", std::string("host,") + backend_name},
                           {"HAL_CUBLAS", missing_cublas},
                           {"HAL_CUDNN", "/nonexistent/libcudnn.so.9"},
                           {"HAL_NCCL", "/nonexistent/libnccl.so.2"},
                           {"HAL_CAPABILITY_OVERRIDES", std::nullopt},
                           {"HAL_ATTN_BACKENDS", std::nullopt},
                           {"HAL_ATTN_STRICT", std::nullopt}};
}

hal::RuntimeOptions options_without_config() {
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  return options;
}

hal::AttentionParams small_params() {
  return {.batch = 1, .heads_q = 4, .heads_kv = 2, .seq_q = 16, .head_dim_qk = 64, .dtype = hal::DType::f16,
          .causal = true};
}

const hal::AttentionCandidate& candidate(const hal::AttentionDecision& decision,
                                         hal::AttentionImplementation implementation) {
  for (const auto& each : decision.candidates)
    if (each.implementation == implementation) return each;
  FAIL("no candidate");
  return decision.candidates.front();
}

std::string joined(const std::vector<std::string>& reasons) {
  std::string text;
  for (const auto& reason : reasons) text += reason + "\n";
  return text;
}

// The plugin's C table, opened directly: what libhal would never let
// through (an ineligible implementation, null pointers) reaches it here.
class Plugin {
 public:
  Plugin() {
    library_ = dlopen(HAL_TEST_GPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(library_ != nullptr, dlerror());
    auto query = reinterpret_cast<const hal_backend_v1* (*)(std::uint32_t)>(dlsym(library_, HAL_BACKEND_ENTRY_SYMBOL));
    const bool exported = query != nullptr;  // doctest cannot print a function pointer
    REQUIRE_MESSAGE(exported, "the plugin exports no " HAL_BACKEND_ENTRY_SYMBOL);
    table_ = query(HAL_BACKEND_ABI_VERSION);
    const bool served = table_ != nullptr;
    REQUIRE(served);
    // The options libhal would deliver under fake_environment() (the rocm
    // plugin takes only its runtime and ignores the others).
    const hal_key_value_v1 options[] = {{vendor_option, vendor_library},
                                        {"cublas", missing_cublas},
                                        {"cudnn", "/nonexistent/libcudnn.so.9"},
                                        {"nccl", "/nonexistent/libnccl.so.2"}};
    const char* const sources[] = {vendor_variable, "HAL_CUBLAS", "HAL_CUDNN", "HAL_NCCL"};
    hal_backend_init_v1 init{};
    init.struct_size = sizeof(init);
    init.abi_version = HAL_BACKEND_ABI_VERSION;
    init.options = options;
    init.option_count = std::size(options);
    init.option_sources = sources;
    REQUIRE_MESSAGE(table_->initialize(&init, &context_) == HAL_OK, last_error());
  }
  ~Plugin() {
    if (context_ != nullptr) table_->shutdown(context_);
    if (library_ != nullptr) dlclose(library_);
  }
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const hal_backend_v1& table() const { return *table_; }
  const hal_attention_v3& attention() const {
    REQUIRE(table_->attention != nullptr);
    return *table_->attention;
  }
  hal_backend_context* context() const { return context_; }
  std::string last_error() const {
    hal_error_info_v1 info{};
    info.struct_size = sizeof(info);
    table_->get_last_error(&info);
    return info.message != nullptr ? info.message : "";
  }
  std::string supports(hal_attention_implementation implementation, const hal_attention_params_v1& params,
                       bool backward = false) const {
    std::array<char, 4096> reasons{};
    REQUIRE(attention().supports(context_, 0, implementation, &params, backward ? 1 : 0, reasons.data(),
                                 reasons.size()) == HAL_OK);
    return reasons.data();
  }

 private:
  void* library_ = nullptr;
  const hal_backend_v1* table_ = nullptr;
  hal_backend_context* context_ = nullptr;
};

// Contiguous [batch, head, seq, dim] strides of the params' tensors.
hal_attention_params_v1 abi_params() { return hal::detail::to_abi(small_params()); }

using hal::testing::CommandResult;

CommandResult run_halinfo(const std::string& arguments) {
  return hal::testing::run_command(std::string(HALINFO_PATH) + " " + arguments + " 2>&1");
}

}  // namespace

TEST_SUITE("gpu attention") {
  TEST_CASE("the declared attention capabilities say why each implementation cannot run") {
    ScopedEnvironment environment = fake_environment();
    const hal::Runtime runtime = hal::Runtime::create(options_without_config());
    const hal::Device device = runtime.device(device_id());
    const hal::DeviceInfo& info = device.info();
    for (const char* key : {"attention.flash", "attention.math", "attention.fused"}) {
      CAPTURE(key);
      const hal::Capability* capability = info.find_capability(key);
      REQUIRE(capability != nullptr);
      CHECK_FALSE(capability->note.empty());
    }
    CHECK_FALSE(device.supports("attention.fused"));
    // The kernels load on first use (not at discovery), so a failed load is a
    // reason of every kernel-based implementation from then on.
    const hal::AttentionDecision decision = hal::explain_attention(device, small_params(), true);
    CHECK_FALSE(decision.found);
    CHECK(contains(joined(candidate(decision, hal::AttentionImplementation::flash).reasons), kernels_error));

    const std::string fused = info.find_capability("attention.fused")->note;
    CHECK(contains(fused, "not available ("));
#if HAL_TEST_BACKEND_CUDA
    // cuBLAS is searched only where it was told to be, and the path is cited.
    const std::string math = info.find_capability("attention.math")->note;
    CHECK(contains(math, "math needs cuBLAS"));
    CHECK(contains(math, missing_cublas));
    CHECK(contains(math, "HAL_CUBLAS"));
    CHECK(contains(fused, "cuDNN"));
#else
    CHECK(contains(fused, "no fused attention library"));
#endif
  }

  TEST_CASE("with nothing eligible, selection says so and names every reason") {
    ScopedEnvironment environment = fake_environment();
    const hal::Runtime runtime = hal::Runtime::create(options_without_config());
    const hal::Device device = runtime.device(device_id());
    const hal::AttentionDecision decision = hal::explain_attention(device, small_params());
    CHECK_FALSE(decision.found);
    CHECK(contains(joined(candidate(decision, hal::AttentionImplementation::flash).reasons), kernels_error));
    CHECK(contains(joined(candidate(decision, hal::AttentionImplementation::fused).reasons), "not available"));

    hal::Stream stream = device.create_stream();
    hal::Buffer buffer = device.allocate(1 << 20);
    try {
      hal::attention_forward(stream, small_params(), {buffer, 0}, {buffer, 0}, {buffer, 0}, {buffer, 0});
      FAIL("attention ran on a device with no usable kernels");
    } catch (const hal::Error& error) {
      CHECK(error.code() == hal::StatusCode::unsupported);
      CHECK(contains(error.what(), "no attention implementation can run"));
      CHECK(contains(error.what(), kernels_error));
    }
  }

  TEST_CASE("overriding the capabilities reaches the backend's own reasons") {
    ScopedEnvironment environment = fake_environment();
    environment.set("HAL_CAPABILITY_OVERRIDES", "attention.flash=true,attention.math=true");
    const hal::Runtime runtime = hal::Runtime::create(options_without_config());
    const hal::Device device = runtime.device(device_id());
    const hal::AttentionDecision decision = hal::explain_attention(device, small_params(), true);
    CHECK_FALSE(decision.found);
    const std::string flash = joined(candidate(decision, hal::AttentionImplementation::flash).reasons);
    const std::string math = joined(candidate(decision, hal::AttentionImplementation::math).reasons);
    CHECK(contains(flash, "no usable kernels on this device"));
    CHECK(contains(flash, kernels_error));
    CHECK(contains(math, kernels_error));
#if HAL_TEST_BACKEND_CUDA
    CHECK(contains(math, missing_cublas));
#endif
    // A head dimension that is not contiguous is a reason of its own.
    hal::AttentionParams strided = small_params();
    strided.q_strides = hal::TensorStrides{16 * 4 * 128, 128, 4 * 128, 2};
    const hal::AttentionDecision strided_decision = hal::explain_attention(device, strided);
    CHECK(contains(joined(candidate(strided_decision, hal::AttentionImplementation::math).reasons),
                   "q has dim stride 2"));
  }

  TEST_CASE("supports() gives each implementation's reasons in the plugin's words") {
    ScopedEnvironment environment = fake_environment();
    Plugin plugin;
    CHECK(plugin.attention().struct_size == sizeof(hal_attention_v3));
    const hal_attention_params_v1 params = abi_params();
    const std::string flash = plugin.supports(HAL_ATTENTION_FLASH, params);
    CHECK(contains(flash, kernels_error));
    const std::string math = plugin.supports(HAL_ATTENTION_MATH, params, true);
    CHECK(contains(math, kernels_error));
#if HAL_TEST_BACKEND_CUDA
    CHECK(contains(math, "math needs cuBLAS"));
    CHECK(contains(math, missing_cublas));
#endif
    CHECK(contains(plugin.supports(HAL_ATTENTION_FUSED, params), "not available ("));
    CHECK(contains(plugin.supports(static_cast<hal_attention_implementation>(7), params),
                   "unknown attention implementation 7"));

    hal_attention_params_v1 bad = params;
    bad.dtype = HAL_DTYPE_F64;
    bad.heads_kv = 3;
    bad.k_strides.dim = 4;
    const std::string reasons = plugin.supports(HAL_ATTENTION_MATH, bad);
    CHECK(contains(reasons, "k has dim stride 4"));
    // libhal checked the call (hal/abi/attention_contract.hpp): the plugin names only its own limits.
    CHECK_FALSE(contains(reasons, "dtype"));
    CHECK_FALSE(contains(reasons, "heads_kv"));
    bad = params;
    bad.seq_q = std::int64_t{1} << 33;
    CHECK(contains(plugin.supports(HAL_ATTENTION_FLASH, bad), "seq_q 8589934592 exceeds the kernels' 32-bit limit"));
    // The flash plan's own why_not is passed on.
    bad = params;
    bad.head_dim_qk = bad.head_dim_v = 300;
    bad.q_strides = {4 * 16 * 300, 16 * 300, 300, 1};
    CHECK(contains(plugin.supports(HAL_ATTENTION_FLASH, bad, true), "head_dim_qk 300"));
  }

  TEST_CASE("bad calls to the attention table are errors, never crashes") {
    ScopedEnvironment environment = fake_environment();
    Plugin plugin;
    const hal_attention_v3& attention = plugin.attention();
    const hal_attention_params_v1 params = abi_params();
    std::array<char, 256> reasons{};
    CHECK(attention.supports(plugin.context(), 0, HAL_ATTENTION_MATH, nullptr, 0, reasons.data(), reasons.size()) ==
          HAL_ERROR_INVALID_ARGUMENT);
    CHECK(attention.supports(plugin.context(), 9, HAL_ATTENTION_MATH, &params, 0, reasons.data(), reasons.size()) ==
          HAL_ERROR_INVALID_ARGUMENT);
    CHECK(contains(plugin.last_error(), "device 9 does not exist"));
    std::uint64_t bytes = 1;
    CHECK(attention.workspace_size(plugin.context(), 0, HAL_ATTENTION_MATH, &params, 0, &bytes) ==
          HAL_ERROR_UNSUPPORTED);
    CHECK(bytes == 0);
    CHECK(contains(plugin.last_error(), kernels_error));
    const hal_tensor_ref_v1 none[9] = {};
    hal_attention_call_v1 call{sizeof(hal_attention_call_v1), HAL_ATTENTION_MATH, &params, none, 5, {}, 0};
    CHECK(attention.forward(nullptr, &call) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(attention.backward(nullptr, nullptr) == HAL_ERROR_INVALID_ARGUMENT);

    // A real stream and buffers: the ineligible implementation refuses before touching them.
    const hal_backend_v1& table = plugin.table();
    hal_stream* stream = nullptr;
    REQUIRE(table.stream_create(plugin.context(), 0, &stream) == HAL_OK);
    hal_buffer* buffer = nullptr;
    REQUIRE(table.buffer_allocate(plugin.context(), 0, HAL_MEMORY_DEVICE, 1 << 20, 256, &buffer) == HAL_OK);
    const hal_tensor_ref_v1 tensor{buffer, 0};
    const hal_tensor_ref_v1 forward_tensors[] = {tensor, tensor, tensor, tensor, {}};
    const hal_tensor_ref_v1 backward_tensors[] = {tensor, tensor, tensor, tensor, tensor,
                                                  tensor, tensor, tensor, tensor};
    for (hal_attention_implementation implementation : {HAL_ATTENTION_FLASH, HAL_ATTENTION_MATH, HAL_ATTENTION_FUSED}) {
      CAPTURE(implementation);
      call = {sizeof(hal_attention_call_v1), implementation, &params, forward_tensors, 5, {}, 0};
      CHECK(attention.forward(stream, &call) == HAL_ERROR_UNSUPPORTED);
      CHECK(contains(plugin.last_error(), "attention forward cannot run these params"));
      call = {sizeof(hal_attention_call_v1), implementation, &params, backward_tensors, 9, {}, 0};
      CHECK(attention.backward(stream, &call) == HAL_ERROR_UNSUPPORTED);
      CHECK(contains(plugin.last_error(), "attention backward cannot run these params"));
    }
    CHECK(contains(plugin.last_error(), "not available ("));
    // In a caller's workspace the same checks hold, and the tensor count is the params'.
    call = {sizeof(hal_attention_call_v1), HAL_ATTENTION_MATH, &params, forward_tensors, 3, tensor, 1 << 20};
    CHECK(attention.forward(stream, &call) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(contains(plugin.last_error(), "attention forward takes 5 tensors, not 3"));
    call.tensor_count = 5;
    CHECK(attention.forward(stream, &call) == HAL_ERROR_UNSUPPORTED);
    CHECK(contains(plugin.last_error(), "attention forward cannot run these params"));
    CHECK(table.stream_synchronize(stream) == HAL_OK);
    CHECK(table.buffer_free(buffer) == HAL_OK);
    CHECK(table.stream_destroy(stream) == HAL_OK);
  }

#ifdef HALINFO_PATH
  TEST_CASE("halinfo attention prints the reasons and falls back to the host") {
    ScopedEnvironment environment = fake_environment();
    environment.set("HAL_CONFIG", "");
    const CommandResult result = run_halinfo("attention --shape b=1,hq=4,hkv=2,sq=16,d=64 --dtype f16 --causal");
    CAPTURE(result.output);
    CHECK(result.exit_code == 0);
    CHECK(contains(result.output, device_id()));
    CHECK(contains(result.output, kernels_error));
    CHECK(contains(result.output, "not available ("));
    CHECK(contains(result.output, "nothing eligible"));
    // The host device in the same run still chooses an implementation.
    CHECK(contains(result.output, "CHOSEN"));

    const CommandResult bad = run_halinfo("attention --shape b=1,hq=3,hkv=2,sq=16,d=64");
    CHECK(bad.exit_code != 0);
    CHECK(contains(bad.output, "heads"));
    CHECK(contains(bad.output, "3"));
  }
#endif
}
