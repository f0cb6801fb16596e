// Attention through the public API: results against a plain reference, and
// the explainable choice of implementation under every order source.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <unistd.h>

#include "hal/conformance/attention_reference.hpp"
#include "hal/hal.hpp"
#include "loaded_backend.hpp"  // detail::Access, for a device that carries only information
#include "scoped_environment.hpp"

using hal::AttentionImplementation;
using hal::testing::ScopedEnvironment;

namespace {

// A probe cache no one writes: verdicts in the user's own cache (from running
// halconform) would otherwise outrank declarations and quirks here.
std::string absent_probe_cache() {
  return (std::filesystem::temp_directory_path() / ("hal-attention-tests-" + std::to_string(getpid()) + "-no-probes.json"))
      .string();
}

// Clears every variable that steers attention, so tests start alike.
ScopedEnvironment clean_attention_environment() {
  return ScopedEnvironment{{"HAL_ATTN_BACKENDS", std::nullopt}, {"NVTE_FLASH_ATTN", std::nullopt},
                           {"NVTE_FUSED_ATTN", std::nullopt},   {"NVTE_UNFUSED_ATTN", std::nullopt},
                           {"HAL_ATTN_STRICT", std::nullopt},   {"HAL_ATTN_DEBUG", std::nullopt},
                           {"HAL_CAPABILITY_OVERRIDES", std::nullopt}, {"HAL_PROBE_CACHE", absent_probe_cache()}};
}

// A runtime of its own for each call: the runtime reads the environment
// once, when it is made, so a test that sets variables asks after setting them.
hal::Device host_device() {
  ScopedEnvironment environment{{"HAL_BACKENDS", "host"}};
  hal::RuntimeOptions options;
  options.config = hal::Config{};
  return hal::Runtime::create(options).device("host:0");
}

hal::AttentionParams small_params() {
  return {.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 5, .seq_kv = 7, .head_dim_qk = 8, .causal = true,
          .alignment = hal::MaskAlignment::bottom_right, .return_lse = true};
}

// Contiguous BSHD values in the logical [batch][heads][seq][dim] order of the
// conformance suite's double-precision reference.
std::vector<double> bshd_to_logical(const std::vector<float>& values, std::int64_t batch, std::int64_t seq,
                                    std::int64_t heads, std::int64_t dim) {
  std::vector<double> logical;
  logical.reserve(values.size());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t s = 0; s < seq; ++s)
        for (std::int64_t d = 0; d < dim; ++d) logical.push_back(values[((b * seq + s) * heads + h) * dim + d]);
  return logical;
}

struct Problem {
  hal::Device device = host_device();  // with the environment as it is when the problem is made
  hal::AttentionParams params;
  std::vector<float> q, k, v;
  hal::Buffer q_buffer, k_buffer, v_buffer, o_buffer, lse_buffer;

  explicit Problem(const hal::AttentionParams& p) : params(p) {
    std::mt19937 generator(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto random = [&](std::int64_t count) {
      std::vector<float> values(static_cast<std::size_t>(count));
      for (auto& value : values) value = uniform(generator);
      return values;
    };
    q = random(p.batch * p.seq_q * p.heads_q * p.head_dim_qk);
    k = random(p.batch * p.seq_kv * p.heads_kv * p.head_dim_qk);
    v = random(p.batch * p.seq_kv * p.heads_kv * p.head_dim_qk);
    q_buffer = upload(device, q);
    k_buffer = upload(device, k);
    v_buffer = upload(device, v);
    o_buffer = device.allocate(q.size() * sizeof(float));
    lse_buffer = device.allocate(static_cast<std::uint64_t>(p.batch * p.heads_q * p.seq_q) * sizeof(float));
  }
  static hal::Buffer upload(const hal::Device& device, const std::vector<float>& values) {
    hal::Buffer buffer = device.allocate(values.size() * sizeof(float));
    buffer.write(0, values.data(), values.size() * sizeof(float));
    return buffer;
  }
  hal::AttentionDecision run(const hal::AttentionOptions& options = {}) const {
    const hal::Stream stream = device.create_stream();
    const hal::AttentionDecision decision =
        hal::attention_forward(stream, params, {q_buffer}, {k_buffer}, {v_buffer}, {o_buffer}, {lse_buffer}, options);
    stream.synchronize();
    return decision;
  }
  std::vector<float> output() const {
    std::vector<float> values(q.size());
    o_buffer.read(0, values.data(), values.size() * sizeof(float));
    return values;
  }
};

const hal::AttentionCandidate& candidate(const hal::AttentionDecision& decision, AttentionImplementation which) {
  return decision.candidates.at(static_cast<std::size_t>(which));
}

bool mentions(const std::vector<std::string>& reasons, std::string_view part) {
  for (const auto& reason : reasons)
    if (reason.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("attention forward through the API matches the reference for every host implementation") {
  auto environment = clean_attention_environment();
  const Problem problem(small_params());
  const hal::AttentionParams& p = problem.params;
  const hal::conformance::AttentionForwardReference expected = hal::conformance::attention_reference_forward(
      p, bshd_to_logical(problem.q, p.batch, p.seq_q, p.heads_q, p.head_dim_qk),
      bshd_to_logical(problem.k, p.batch, p.seq_kv, p.heads_kv, p.head_dim_qk),
      bshd_to_logical(problem.v, p.batch, p.seq_kv, p.heads_kv, p.head_dim_qk));
  for (auto implementation : {AttentionImplementation::flash, AttentionImplementation::math}) {
    CAPTURE(hal::to_string(implementation));
    const hal::AttentionDecision decision = problem.run({{implementation}});
    CHECK(decision.chosen == implementation);
    CHECK(decision.order_source == "per-call choice");
    const std::vector<float> output = problem.output();
    const auto comparison = hal::conformance::compare_to_reference(
        bshd_to_logical(output, p.batch, p.seq_q, p.heads_q, p.head_dim_qk), expected.o,
        hal::conformance::attention_tolerance(hal::DType::f32));
    INFO(comparison.describe("O", hal::conformance::attention_tolerance(hal::DType::f32)));
    CHECK(comparison.ok());
  }
}

TEST_CASE("a small call keeps stream order: it waits behind queued work and runs at once on an idle stream") {
  auto environment = clean_attention_environment();
  const Problem problem(small_params());  // a few kFLOP: small enough to run on the enqueuing thread
  const hal::Stream stream = problem.device.create_stream();
  const std::vector<float> zeros(problem.q.size(), 0.0f);
  problem.o_buffer.write(0, zeros.data(), zeros.size() * sizeof(float));
  auto forward = [&] {
    hal::attention_forward(stream, problem.params, {problem.q_buffer}, {problem.k_buffer}, {problem.v_buffer},
                           {problem.o_buffer}, {problem.lse_buffer}, {{AttentionImplementation::flash}});
  };
  // The worker is held in a host callback: the attention queued behind it must not run first.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  stream.enqueue_host_callback([released](const hal::Status&) { released.wait(); });
  forward();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(problem.output() == zeros);
  release.set_value();
  stream.synchronize();
  const std::vector<float> first = problem.output();
  CHECK(first != zeros);
  // On the idle stream it has run by the time the call returns, with the same result.
  problem.o_buffer.write(0, zeros.data(), zeros.size() * sizeof(float));
  forward();
  CHECK(problem.output() == first);
  stream.synchronize();
}

TEST_CASE("the built-in order picks flash on the host and says why fused is out") {
  auto environment = clean_attention_environment();
  const hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params());
  REQUIRE(decision.found);
  CHECK(decision.chosen == AttentionImplementation::flash);
  CHECK(decision.order_source == "built-in order");
  CHECK_FALSE(decision.fell_back);  // the host never offered fused: no fallback
  const auto& fused = candidate(decision, AttentionImplementation::fused);
  CHECK_FALSE(fused.eligible);
  CHECK(mentions(fused.reasons, "capability attention.fused is false (declared by the host backend"));
  CHECK(candidate(decision, AttentionImplementation::math).eligible);
  CHECK(candidate(decision, AttentionImplementation::math).workspace_bytes > 0);
  const std::string table = decision.to_string();
  CHECK(table.find("flash  CHOSEN") != std::string::npos);
  CHECK(table.find("(built-in order)") != std::string::npos);
}

TEST_CASE("HAL_ATTN_BACKENDS sets the order and rejects unknown names") {
  auto environment = clean_attention_environment();
  environment.set("HAL_ATTN_BACKENDS", "math,flash");
  hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params());
  CHECK(decision.chosen == AttentionImplementation::math);
  CHECK(decision.order_source == "HAL_ATTN_BACKENDS=math,flash");
  CHECK_FALSE(candidate(decision, AttentionImplementation::fused).in_order);
  environment.set("HAL_ATTN_BACKENDS", "flash,turbo");
  CHECK_THROWS_WITH_AS(hal::explain_attention(host_device(), small_params()), doctest::Contains("turbo"),
                       hal::Error);
}

TEST_CASE("the per-call choice outranks the environment") {
  auto environment = clean_attention_environment();
  environment.set("HAL_ATTN_BACKENDS", "math");
  const hal::AttentionDecision decision =
      hal::explain_attention(host_device(), small_params(), false, {{AttentionImplementation::flash}});
  CHECK(decision.chosen == AttentionImplementation::flash);
  CHECK(decision.order_source == "per-call choice");
}

TEST_CASE("TransformerEngine's NVTE variables are honoured as aliases") {
  auto environment = clean_attention_environment();
  SUBCASE("NVTE_FLASH_ATTN=0 leaves fused and math") {
    environment.set("NVTE_FLASH_ATTN", "0");
    const hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params());
    CHECK(decision.chosen == AttentionImplementation::math);
    CHECK(decision.order_source == "NVTE_FLASH_ATTN=0");
    CHECK_FALSE(candidate(decision, AttentionImplementation::flash).in_order);
  }
  SUBCASE("every implementation switched off: the error names each candidate's reason") {
    environment.set("NVTE_FLASH_ATTN", "0");
    environment.set("NVTE_UNFUSED_ATTN", "0");
    const Problem problem(small_params());
    try {
      problem.run();
      FAIL("expected an error");
    } catch (const hal::Error& error) {
      CHECK(error.code() == hal::StatusCode::unsupported);
      const std::string message = error.what();
      CHECK(message.find("fused: capability attention.fused is false") != std::string::npos);
      CHECK(message.find("flash: not in the order") != std::string::npos);
      CHECK(message.find("math: not in the order") != std::string::npos);
    }
  }
  SUBCASE("values other than 0 and 1 are rejected") {
    environment.set("NVTE_FUSED_ATTN", "yes");
    CHECK_THROWS_WITH_AS(hal::explain_attention(host_device(), small_params()),
                         doctest::Contains("NVTE_FUSED_ATTN=yes is not allowed"), hal::Error);
  }
}

TEST_CASE("a user override removes flash; math is a fallback, and strict mode refuses it") {
  auto environment = clean_attention_environment();
  environment.set("HAL_CAPABILITY_OVERRIDES", "attention.flash=false");
  const hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params());
  CHECK(decision.chosen == AttentionImplementation::math);
  CHECK(decision.fell_back);
  CHECK(mentions(candidate(decision, AttentionImplementation::flash).reasons,
                 "override by HAL_CAPABILITY_OVERRIDES"));
  CHECK(decision.to_string().find("CHOSEN (fallback)") != std::string::npos);

  const Problem problem(small_params());
  CHECK(problem.run().chosen == AttentionImplementation::math);  // warns once, runs
  hal::AttentionOptions strict;
  strict.strict = true;
  CHECK_THROWS_WITH_AS(problem.run(strict), doctest::Contains("strict mode is on (AttentionOptions::strict)"),
                       hal::Error);
  environment.set("HAL_ATTN_STRICT", "1");
  const Problem strict_problem(small_params());
  CHECK_THROWS_WITH_AS(strict_problem.run(), doctest::Contains("strict mode is on (HAL_ATTN_STRICT=1)"), hal::Error);
  hal::AttentionOptions lenient;
  lenient.strict = false;  // the call's option outranks the environment
  CHECK(strict_problem.run(lenient).chosen == AttentionImplementation::math);
}

TEST_CASE("a call's capability overrides outrank the settings' and are cited") {
  auto environment = clean_attention_environment();
  environment.set("HAL_CAPABILITY_OVERRIDES", "attention.flash=false");
  hal::AttentionOptions options;
  options.capability_overrides = {"attention.flash = true", "attention.math=false"};
  const hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params(), false, options);
  CHECK(decision.chosen == AttentionImplementation::flash);
  CHECK_FALSE(candidate(decision, AttentionImplementation::math).eligible);
  CHECK(mentions(candidate(decision, AttentionImplementation::math).reasons,
                 "override by AttentionOptions::capability_overrides"));
  // Without the call's overrides the settings' stand.
  CHECK(hal::explain_attention(host_device(), small_params()).chosen == AttentionImplementation::math);
}

TEST_CASE("a quirk removes an implementation and is cited" * doctest::skip()) {
  // Run by ctest with HAL_QUIRKS_FILE=tests/data/quirks_host_without_flash.toml
  // (the quirks file is read once per process).
  auto environment = clean_attention_environment();
  const hal::AttentionDecision decision = hal::explain_attention(host_device(), small_params());
  CHECK(decision.chosen == AttentionImplementation::math);
  CHECK(decision.fell_back);
  CHECK(mentions(candidate(decision, AttentionImplementation::flash).reasons,
                 "quirk by test-host-flash-broken"));
  CHECK(mentions(candidate(decision, AttentionImplementation::flash).reasons, "flash is known broken"));
  const hal::EffectiveCapability flash = hal::effective_capability(host_device(), "attention.flash");
  REQUIRE(flash.layers.size() == 2);
  CHECK(flash.layers[0].layer == "declared");
  CHECK(flash.layers[1].layer == "quirk");
  CHECK(flash.decided_by == "quirk");
}

TEST_CASE("bad parameters and tensors are rejected with the value named") {
  auto environment = clean_attention_environment();
  hal::AttentionParams params = small_params();
  params.heads_q = 12;
  params.heads_kv = 5;
  CHECK_THROWS_WITH_AS(params.resolved(), doctest::Contains("heads_q (12) is not a multiple of heads_kv (5)"),
                       hal::Error);
  params = small_params();
  params.dtype = hal::DType::i32;
  CHECK_THROWS_WITH_AS(params.resolved(), doctest::Contains("dtype i32 is not supported"), hal::Error);
  params = small_params();
  params.o_strides = hal::TensorStrides{0, 8, 8, 1};  // batch stride 0 with batch 2: outputs overlap
  CHECK_THROWS_WITH_AS(params.resolved(), doctest::Contains("o_strides.batch is 0 but batch is 2"), hal::Error);

  Problem problem(small_params());
  problem.o_buffer = host_device().allocate(16);  // far too small for O
  CHECK_THROWS_WITH_AS(problem.run(), doctest::Contains("attention tensor o"), hal::Error);
}

TEST_CASE("borrowed addresses run as buffers do, a misaligned one is refused, and the decision is looked up") {
  auto environment = clean_attention_environment();
  const Problem problem(small_params());
  const hal::Stream stream = problem.device.create_stream();
  const std::vector<float> from_buffers = (problem.run(), problem.output());

  // The same memory by address: a framework's tensors reach the kernels without an import.
  problem.o_buffer.fill(0, problem.q.size() * sizeof(float), 0);
  auto at = [](const hal::Buffer& buffer) { return hal::TensorRef::borrowed(buffer.host_address()); };
  const hal::AttentionDecision& first = hal::attention_forward(
      stream, problem.params, at(problem.q_buffer), at(problem.k_buffer), at(problem.v_buffer), at(problem.o_buffer),
      at(problem.lse_buffer));
  stream.synchronize();
  CHECK(problem.output() == from_buffers);
  // A repeated problem is looked up: the runtime's one decision, not a new one.
  const hal::AttentionDecision& again = hal::attention_forward(
      stream, problem.params, at(problem.q_buffer), at(problem.k_buffer), at(problem.v_buffer), at(problem.o_buffer),
      at(problem.lse_buffer));
  stream.synchronize();
  CHECK(&first == &again);
  CHECK(first.chosen == AttentionImplementation::flash);

  const auto* misaligned = static_cast<const std::uint8_t*>(problem.k_buffer.host_address()) + 2;
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, problem.params, at(problem.q_buffer),
                                              hal::TensorRef::borrowed(misaligned), at(problem.v_buffer),
                                              at(problem.o_buffer), at(problem.lse_buffer)),
                       doctest::Contains("attention tensor k address"), hal::Error);
}

TEST_CASE("a backend that does not declare attention.borrowed_addresses gets none: the call says so") {
  auto environment = clean_attention_environment();
  const Problem problem(small_params());
  // The device as its backend would describe it without the capability.
  hal::DeviceInfo info = problem.device.info();
  std::erase_if(info.capabilities, [](const hal::Capability& c) { return c.key == "attention.borrowed_addresses"; });
  const hal::Device without =
      hal::detail::Access::device(hal::detail::Access::backend(problem.device), problem.device.index(), info);
  const hal::Stream stream = without.create_stream();
  const auto* q = problem.q_buffer.host_address();
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, problem.params, hal::TensorRef::borrowed(q),
                                              hal::TensorRef::borrowed(q), hal::TensorRef::borrowed(q),
                                              {problem.o_buffer}, {problem.lse_buffer}),
                       doctest::Contains("does not take them (no capability attention.borrowed_addresses)"),
                       hal::Error);
}

TEST_CASE("key ranges: a left-padded row equals its sequence run alone, and mismatched or refused ranges say why") {
  auto environment = clean_attention_environment();
  // Row 0 of batch 2 padded on the left by 2 of 7 positions, row 1 not padded: causal within each.
  hal::AttentionParams padded{.batch = 2, .heads_q = 2, .heads_kv = 1, .seq_q = 7, .seq_kv = 7, .head_dim_qk = 8,
                              .causal = true, .return_lse = true, .key_ranges = true};
  const Problem problem(padded);
  std::vector<std::int32_t> ranges;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int32_t i = 0; i < 7; ++i) {
      const std::int32_t first = b == 0 ? 2 : 0;
      ranges.insert(ranges.end(), {i < first ? 0 : first, i < first ? 0 : 7});
    }
  hal::Buffer range_buffer = problem.device.allocate(ranges.size() * sizeof(std::int32_t));
  range_buffer.write(0, ranges.data(), ranges.size() * sizeof(std::int32_t));
  hal::AttentionOptions options;
  options.key_ranges = {range_buffer};
  for (AttentionImplementation implementation : {AttentionImplementation::flash, AttentionImplementation::math}) {
    CAPTURE(hal::to_string(implementation));
    options.implementations = {implementation};
    CHECK(problem.run(options).chosen == implementation);
    const std::vector<float> out = problem.output();
    // The same positions run alone: row 0's last 5, causal, with no ranges.
    hal::AttentionParams alone = padded;
    alone.batch = 1;
    alone.seq_q = alone.seq_kv = 5;
    alone.key_ranges = false;
    Problem single(alone);
    auto slice = [&](const std::vector<float>& from, std::int64_t heads) {  // BSHD row 0, positions 2..6
      std::vector<float> values;
      for (std::int64_t s = 2; s < 7; ++s)
        for (std::int64_t h = 0; h < heads; ++h)
          for (std::int64_t d = 0; d < 8; ++d) values.push_back(from[static_cast<std::size_t>((s * heads + h) * 8 + d)]);
      return values;
    };
    single.q = slice(problem.q, 2);
    single.k = slice(problem.k, 1);
    single.v = slice(problem.v, 1);
    single.q_buffer.write(0, single.q.data(), single.q.size() * sizeof(float));
    single.k_buffer.write(0, single.k.data(), single.k.size() * sizeof(float));
    single.v_buffer.write(0, single.v.data(), single.v.size() * sizeof(float));
    hal::AttentionOptions plain;
    plain.implementations = {implementation};
    single.run(plain);
    const std::vector<float> expected = single.output();
    const std::vector<float> got = slice(out, 2);
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-5));
    for (std::size_t i = 0; i < 2 * 2 * 8; ++i) CHECK(out[i] == 0.0f);  // the padding queries see no key
  }

  const hal::Stream stream = problem.device.create_stream();
  hal::AttentionParams unannounced = padded;
  unannounced.key_ranges = false;
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, unannounced, {problem.q_buffer}, {problem.k_buffer},
                                              {problem.v_buffer}, {problem.o_buffer}, {problem.lse_buffer}, options),
                       doctest::Contains("AttentionParams::key_ranges is false"), hal::Error);
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, padded, {problem.q_buffer}, {problem.k_buffer},
                                              {problem.v_buffer}, {problem.o_buffer}, {problem.lse_buffer}),
                       doctest::Contains("AttentionOptions::key_ranges is empty"), hal::Error);
  hal::AttentionOptions short_ranges;
  short_ranges.key_ranges = {problem.device.allocate(8)};
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, padded, {problem.q_buffer}, {problem.k_buffer},
                                              {problem.v_buffer}, {problem.o_buffer}, {problem.lse_buffer},
                                              short_ranges),
                       doctest::Contains("attention tensor key_ranges"), hal::Error);
  // An override takes them away: every implementation says so, and the call is refused.
  hal::AttentionOptions overridden;
  overridden.capability_overrides = {"attention.key_ranges=false"};
  const hal::AttentionDecision decision = hal::explain_attention(problem.device, padded, false, overridden);
  CHECK_FALSE(decision.found);
  CHECK(mentions(candidate(decision, AttentionImplementation::flash).reasons, "attention.key_ranges"));
  CHECK(hal::AttentionParams{.key_ranges = true}.describe().find("key_ranges") != std::string::npos);
}

TEST_CASE("a backend that does not declare attention.key_ranges gets none: explain and the call say so") {
  auto environment = clean_attention_environment();
  hal::AttentionParams padded = small_params();
  padded.key_ranges = true;
  const Problem problem(padded);
  hal::DeviceInfo info = problem.device.info();
  std::erase_if(info.capabilities, [](const hal::Capability& c) { return c.key == "attention.key_ranges"; });
  const hal::Device without =
      hal::detail::Access::device(hal::detail::Access::backend(problem.device), problem.device.index(), info);
  const hal::AttentionDecision decision = hal::explain_attention(without, padded);
  CHECK_FALSE(decision.found);
  CHECK(mentions(candidate(decision, AttentionImplementation::math).reasons, "takes no per-query key ranges"));
  hal::AttentionOptions options;
  options.key_ranges = {problem.device.allocate(1024)};
  const hal::Stream stream = without.create_stream();
  CHECK_THROWS_WITH_AS(hal::attention_forward(stream, padded, {problem.q_buffer}, {problem.k_buffer},
                                              {problem.v_buffer}, {problem.o_buffer}, {problem.lse_buffer}, options),
                       doctest::Contains("no capability attention.key_ranges"), hal::Error);
}

TEST_CASE("the PPU's known gaps ship as data: fused attention is off on a PPU, with the reason") {
  hal::DeviceInfo ppu;
  ppu.backend = "cuda";
  ppu.name = "PPU-ZW810E";
  ppu.capabilities.push_back({"attention.fused", true, "cuDNN found"});
  // Evaluated against the real shipped data file.
  const hal::Device device = hal::detail::Access::device(nullptr, 0, ppu);
  const hal::EffectiveCapability fused = hal::effective_capability(device, "attention.fused");
  CHECK_FALSE(fused.is_true());
  CHECK(fused.decided_by == "quirk");
  CHECK(fused.layers.back().source.find("ppu-in-cuda-compat-mode-no-fused-mha") != std::string::npos);
}
