// Attention on a GPU (cuda:0, or the device `--device` names) through the
// public API, compared with the host backend: flash, math and fused (each where eligible), forward and
// backward, f32/f16/bf16, shapes with GQA, causal masks of both alignments
// and sliding windows. The host computes in f32 from the same rounded
// inputs, so the tolerance covers only the device's arithmetic and its
// output rounding.
//
// `--require flash,math`: each named implementation must have run at least
// one comparison, or the program fails (on the fakes, where nothing may
// silently stop running). `--device rocm:0`: another GPU than cuda:0.
// `--small`: shorter sequences with the same features, for the fakes.
//
// Exit codes: 0 every comparison ran and passed; 1 a mismatch, an error or
// a required implementation that never ran; 2 a bad argument; 77 (ctest
// SKIP_RETURN_CODE) nothing could be compared, with the reason.
// Label `gpu`: CI (no GPU) does not run it; scripts/gpu-check.sh does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dtype_codes.hpp"
#include "hal/hal.hpp"

namespace {

constexpr int skip_exit_code = 77;

float round_to(hal::DType dtype, float value);

std::vector<std::uint8_t> encode(hal::DType dtype, const std::vector<float>& values) {
  std::vector<std::uint8_t> bytes(values.size() * hal::size_in_bytes(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == hal::DType::f32) {
      std::memcpy(&bytes[i * 4], &values[i], 4);
      continue;
    }
    const std::uint16_t bits =
        dtype == hal::DType::f16 ? hal::abi::float_to_f16_bits(values[i]) : hal::abi::float_to_bf16_bits(values[i]);
    std::memcpy(&bytes[i * 2], &bits, 2);
  }
  return bytes;
}

std::vector<float> decode(hal::DType dtype, const std::vector<std::uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / hal::size_in_bytes(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == hal::DType::f32) {
      std::memcpy(&values[i], &bytes[i * 4], 4);
      continue;
    }
    std::uint16_t bits;
    std::memcpy(&bits, &bytes[i * 2], 2);
    values[i] = dtype == hal::DType::f16 ? hal::abi::f16_bits_to_float(bits) : hal::abi::bf16_bits_to_float(bits);
  }
  return values;
}

float round_to(hal::DType dtype, float value) { return decode(dtype, encode(dtype, {value}))[0]; }

// Per dtype: |got - want| <= absolute + relative * |want|.
struct Tolerance {
  double absolute, relative;
};
Tolerance tolerance_for(hal::DType dtype) {
  switch (dtype) {
    case hal::DType::f16: return {2e-3, 1e-2};
    case hal::DType::bf16: return {1.6e-2, 3e-2};
    default: return {2e-5, 1e-4};  // f32 without TF32
  }
}

struct Case {
  std::string name;
  hal::AttentionParams params;
};

// small: the same features on shorter sequences (still crossing a tile
// boundary), for the fakes, whose kernels run in the SIMT emulator.
std::vector<Case> cases(hal::DType dtype, bool small) {
  auto make = [&](const char* name, std::int64_t b, std::int64_t hq, std::int64_t hkv, std::int64_t sq,
                  std::int64_t skv, std::int64_t d, std::int64_t dv) {
    hal::AttentionParams params;
    params.batch = b, params.heads_q = hq, params.heads_kv = hkv, params.seq_q = sq, params.seq_kv = skv;
    params.head_dim_qk = d, params.head_dim_v = dv, params.dtype = dtype, params.return_lse = true;
    return Case{name, params};
  };
  std::vector<Case> all;
  if (small) {
    all.push_back(make("plain b2 h2 s40 d64", 2, 2, 2, 40, 40, 64, 64));
  } else {
    all.push_back(make("plain b2 h4 s128 d64", 2, 4, 4, 128, 128, 64, 64));
  }
  Case gqa = small ? make("gqa h4/2 causal bottom-right sq20 skv72 d128", 1, 4, 2, 20, 72, 128, 128)
                   : make("gqa h8/2 causal bottom-right sq100 skv160 d128", 1, 8, 2, 100, 160, 128, 128);
  gqa.params.causal = true;
  gqa.params.alignment = hal::MaskAlignment::bottom_right;
  all.push_back(gqa);
  Case causal = small ? make("causal top-left s40 d64", 1, 1, 1, 40, 40, 64, 64)
                      : make("causal top-left s96 d64", 1, 2, 2, 96, 96, 64, 64);
  causal.params.causal = true;
  all.push_back(causal);
  Case window = small ? make("window 16,0 mqa h2/1 s40 d64", 1, 2, 1, 40, 40, 64, 64)
                      : make("window 16,0 mqa h4/1 s80 d64", 1, 4, 1, 80, 80, 64, 64);
  window.params.window_left = 16;
  window.params.window_right = 0;
  all.push_back(window);
  return all;
}

struct Tensors {
  std::vector<float> q, k, v, grad_o;  // rounded to the dtype
};

std::size_t count(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<std::size_t>(a * b * c * d);
}

Tensors random_tensors(const hal::AttentionParams& p, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto fill = [&](std::size_t n) {
    std::vector<float> values(n);
    for (auto& value : values) value = round_to(p.dtype, uniform(generator));
    return values;
  };
  const std::int64_t hkv = p.heads_kv == 0 ? p.heads_q : p.heads_kv;
  const std::int64_t skv = p.seq_kv == 0 ? p.seq_q : p.seq_kv;
  const std::int64_t dv = p.head_dim_v == 0 ? p.head_dim_qk : p.head_dim_v;
  return {fill(count(p.batch, p.heads_q, p.seq_q, p.head_dim_qk)), fill(count(p.batch, hkv, skv, p.head_dim_qk)),
          fill(count(p.batch, hkv, skv, dv)), fill(count(p.batch, p.heads_q, p.seq_q, dv))};
}

struct Outputs {
  std::vector<float> o, lse, grad_q, grad_k, grad_v;
};

// Runs forward (and backward) on the device with the given order; dtype
// tensors in, f32 values out.
Outputs run(const hal::Device& device, hal::AttentionParams params, const Tensors& inputs,
            hal::AttentionImplementation implementation, bool backward, hal::AttentionImplementation* chosen) {
  hal::Stream stream = device.create_stream();
  auto upload = [&](const std::vector<float>& values, hal::DType dtype) {
    const auto bytes = encode(dtype, values);
    hal::Buffer buffer = device.allocate(std::max<std::size_t>(bytes.size(), 4));
    stream.copy_to_device(buffer, 0, bytes.data(), bytes.size());
    stream.synchronize();
    return buffer;
  };
  auto zeros = [&](std::size_t n, hal::DType dtype) { return upload(std::vector<float>(n, 0.0f), dtype); };
  auto download = [&](const hal::Buffer& buffer, std::size_t n, hal::DType dtype) {
    std::vector<std::uint8_t> bytes(n * hal::size_in_bytes(dtype));
    stream.copy_to_host(bytes.data(), buffer, 0, bytes.size());
    stream.synchronize();
    return decode(dtype, bytes);
  };
  const hal::DType dtype = params.dtype;
  hal::Buffer q = upload(inputs.q, dtype), k = upload(inputs.k, dtype), v = upload(inputs.v, dtype);
  const std::size_t o_count = inputs.grad_o.size();
  const std::size_t lse_count = count(params.batch, params.heads_q, params.seq_q, 1);
  hal::Buffer o = zeros(o_count, dtype), lse = zeros(lse_count, hal::DType::f32);
  const hal::AttentionOptions options{{implementation}};
  *chosen = hal::attention_forward(stream, params, {q, 0}, {k, 0}, {v, 0}, {o, 0}, {lse, 0}, options).chosen;
  stream.synchronize();
  Outputs out{download(o, o_count, dtype), download(lse, lse_count, hal::DType::f32), {}, {}, {}};
  if (!backward) return out;
  hal::Buffer grad_o = upload(inputs.grad_o, dtype);
  hal::Buffer grad_q = zeros(inputs.q.size(), dtype), grad_k = zeros(inputs.k.size(), dtype),
              grad_v = zeros(inputs.v.size(), dtype);
  hal::attention_backward(stream, params, {q, 0}, {k, 0}, {v, 0}, {o, 0}, {grad_o, 0}, {lse, 0}, {grad_q, 0},
                          {grad_k, 0}, {grad_v, 0}, options);
  stream.synchronize();
  out.grad_q = download(grad_q, inputs.q.size(), dtype);
  out.grad_k = download(grad_k, inputs.k.size(), dtype);
  out.grad_v = download(grad_v, inputs.v.size(), dtype);
  return out;
}

// "" when every element is within tolerance; otherwise the worst one.
std::string compare(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                    Tolerance tolerance) {
  if (got.size() != want.size()) return std::string(what) + ": sizes differ";
  double worst_excess = 0.0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;  // LSE of a query that sees no key
    const double limit = tolerance.absolute + tolerance.relative * std::abs(want[i]);
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(error <= limit) && (error - limit > worst_excess || std::isnan(error))) {
      worst_excess = std::isnan(error) ? INFINITY : error - limit;
      worst = i;
    }
  }
  if (worst_excess == 0.0) return {};
  char text[256];
  std::snprintf(text, sizeof(text), "%s[%zu] = %.6g, host %.6g (tolerance %.2g + %.2g * |host|)", what, worst,
                got[worst], want[worst], tolerance.absolute, tolerance.relative);
  return text;
}

struct Arguments {
  std::string device = "cuda:0";
  bool small = false;
  std::vector<hal::AttentionImplementation> required;
};

// The command line, or nullopt with the bad word printed.
std::optional<Arguments> parse_arguments(int argc, char** argv) {
  Arguments arguments;
  std::vector<hal::AttentionImplementation>& required = arguments.required;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--small") {
      arguments.small = true;
      continue;
    }
    if ((argument != "--require" && argument != "--device") || i + 1 == argc) {
      std::fprintf(stderr, "unknown argument '%s' (allowed: --require flash,math,fused; --device ID; --small)\n",
                   argument.c_str());
      return std::nullopt;
    }
    if (argument == "--device") {
      arguments.device = argv[++i];
      continue;
    }
    std::string list = argv[++i];
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      const std::string name = list.substr(start, end - start);
      bool known = false;
      for (auto implementation : {hal::AttentionImplementation::flash, hal::AttentionImplementation::math,
                                  hal::AttentionImplementation::fused})
        if (name == hal::to_string(implementation)) {
          required.push_back(implementation);
          known = true;
        }
      if (!known) {
        std::fprintf(stderr, "--require: unknown implementation '%s' (allowed: flash, math, fused)\n", name.c_str());
        return std::nullopt;
      }
      start = end + 1;
    }
  }
  return arguments;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Arguments> arguments = parse_arguments(argc, argv);
  if (!arguments) return 2;
  const std::string backend_name = arguments->device.substr(0, arguments->device.find(':'));
  std::optional<hal::Runtime> runtime;
  try {
    runtime.emplace(hal::Runtime::create());
  } catch (const hal::Error& error) {
    std::printf("SKIPPED: hal could not start: %s\n", error.what());
    return skip_exit_code;
  }
  const hal::BackendReport* backend = runtime->find_backend(backend_name);
  if (backend == nullptr || backend->state != hal::BackendState::loaded) {
    std::printf("SKIPPED: no usable %s device: %s\n", backend_name.c_str(),
                backend == nullptr ? ("the " + backend_name + " backend is not in this build").c_str()
                                   : backend->reason.c_str());
    return skip_exit_code;
  }
  const std::optional<hal::Device> gpu = runtime->find_device(arguments->device);
  const std::optional<hal::Device> host = runtime->find_device("host:0");
  if (!gpu || !host) {
    std::printf("SKIPPED: %s\n", !gpu ? ("the " + backend_name + " backend loaded but lists no " + arguments->device).c_str()
                                      : "no host:0 device");
    return skip_exit_code;
  }
  std::printf("device: %s (%s)\n", gpu->id().c_str(), gpu->info().name.c_str());

  int compared = 0, failed = 0;
  for (auto implementation : {hal::AttentionImplementation::flash, hal::AttentionImplementation::math,
                              hal::AttentionImplementation::fused}) {
    const char* name = hal::to_string(implementation).data();
    const int compared_before = compared;
    std::string last_refusal;
    for (hal::DType dtype : {hal::DType::f32, hal::DType::f16, hal::DType::bf16}) {
      for (const Case& test : cases(dtype, arguments->small)) {
        for (bool backward : {false, true}) {
          const std::string label = std::string(name) + " " + std::string(hal::to_string(dtype)) + " " +
                                    (backward ? "backward " : "forward ") + test.name;
          const hal::AttentionDecision decision =
              hal::explain_attention(*gpu, test.params, backward, hal::AttentionOptions{{implementation}});
          if (!decision.found) {
            std::string why = "ineligible";
            for (const auto& candidate : decision.candidates)
              if (candidate.implementation == implementation && !candidate.reasons.empty()) why = candidate.reasons.front();
            std::printf("NOT ELIGIBLE %s: %s\n", label.c_str(), why.c_str());
            last_refusal = why;
            continue;
          }
          try {
            const Tensors inputs = random_tensors(test.params, 1234u + static_cast<std::uint32_t>(compared));
            hal::AttentionImplementation ran = implementation, host_ran = implementation;
            const Outputs got = run(*gpu, test.params, inputs, implementation, backward, &ran);
            hal::AttentionParams reference_params = test.params;
            reference_params.dtype = hal::DType::f32;  // inputs already rounded: f32 is exact for them
            const Outputs want =
                run(*host, reference_params, inputs, hal::AttentionImplementation::math, backward, &host_ran);
            const Tolerance tolerance = tolerance_for(dtype);
            std::string problem = ran != implementation ? "ran " + std::string(hal::to_string(ran)) : "";
            for (const auto& [what, g, w] :
                 {std::tuple{"O", &got.o, &want.o}, std::tuple{"LSE", &got.lse, &want.lse},
                  std::tuple{"dQ", &got.grad_q, &want.grad_q}, std::tuple{"dK", &got.grad_k, &want.grad_k},
                  std::tuple{"dV", &got.grad_v, &want.grad_v}})
              if (problem.empty()) problem = compare(what, *g, *w, tolerance);
            ++compared;
            if (!problem.empty()) ++failed;
            std::printf("%s %s%s%s\n", problem.empty() ? "PASS" : "FAIL", label.c_str(), problem.empty() ? "" : ": ",
                        problem.c_str());
          } catch (const hal::Error& error) {
            ++compared;
            ++failed;
            std::printf("FAIL %s: %s\n", label.c_str(), error.what());
          }
        }
      }
    }
    if (compared == compared_before &&
        std::find(arguments->required.begin(), arguments->required.end(), implementation) !=
            arguments->required.end()) {
      std::printf("FAIL %s is required (--require) but never ran: %s\n", name, last_refusal.c_str());
      ++failed;
    }
  }
  if (compared == 0 && failed == 0) {
    std::printf("SKIPPED: no attention implementation was eligible on %s, so nothing was compared\n",
                gpu->id().c_str());
    return skip_exit_code;
  }
  std::printf("%d compared, %d failed\n", compared, failed);
  return failed == 0 ? 0 : 1;
}
