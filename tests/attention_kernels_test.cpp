// Tests of the host attention kernels (backends/host/attention).
//
// Every implementation (math f32, flash on each instruction-set path this CPU
// has) is compared with math_*_f64, which reads the same inputs and
// accumulates in double. A value passes when
//   |actual - expected| <= tolerance.absolute * scale + tolerance.relative * |expected|
// with scale = the largest |expected| of that tensor (at least 1e-30), so an
// error is judged against the tensor's magnitude, not against values that
// happen to be near zero. Per dtype:
//   f32:  absolute 2e-5, relative 1e-5 (f32 accumulation over <= 256 dims / 131 keys)
//   f16:  absolute 1e-3, relative 1e-3 (outputs rounded to 11 bits: ~4.9e-4)
//   bf16: absolute 1.6e-2, relative 1.6e-2 (outputs rounded to 8 bits: ~3.9e-3)
// The f64 reference is itself checked against central finite differences.
//
// Built twice: attention_kernels_openmp_test (HAL_TEST_ON_OPENMP_TEAM) loads
// the system's OpenMP runtime before any test, as PyTorch does in a process,
// so every kernel above also runs on the main thread's OpenMP team (a team
// of 3, the pools' size in these tests) instead of the pool's workers.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "attention/attention_kernels.hpp"

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention/attention_common.hpp"
#include "attention/thread_pool.hpp"
#include "dtype_codes.hpp"

using namespace hal::host;
using namespace hal::abi;  // the f16 and bf16 conversions the kernels use

namespace {

#if defined(HAL_TEST_ON_OPENMP_TEAM)
// The system's OpenMP runtime, loaded before the first parallel_for looks for
// one, with a team of 3 for the main thread.
struct OpenMp {
  int (*thread_num)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
};
const OpenMp openmp = [] {
  void* library = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    std::fprintf(stderr, "attention_kernels_openmp_test: cannot load libgomp.so.1 (Debian's libgomp1): %s\n",
                 dlerror());
    std::exit(1);
  }
  OpenMp found{reinterpret_cast<int (*)()>(dlsym(library, "omp_get_thread_num")),
               reinterpret_cast<void (*)(int)>(dlsym(library, "omp_set_num_threads"))};
  found.set_num_threads(3);
  return found;
}();
#endif

// ---- tensors ---------------------------------------------------------------

// Memory order of a test tensor; the kernels only see the strides.
enum class Layout {
  bhsd,        // contiguous [batch, heads, seq, dim]
  bshd,        // contiguous [batch, seq, heads, dim]
  padded,      // BHSD inside a larger tensor: padding after dim and after seq
  dim_strided  // [batch, heads, dim, seq]: dim is the slow axis
};

struct Shape {
  std::int64_t batch, heads, seq, dim;
};

hal_tensor_strides_v1 strides_for(Layout layout, Shape s) {
  switch (layout) {
    case Layout::bhsd: return {s.heads * s.seq * s.dim, s.seq * s.dim, s.dim, 1};
    case Layout::bshd: return {s.seq * s.heads * s.dim, s.dim, s.heads * s.dim, 1};
    case Layout::padded: {
      const std::int64_t row = s.dim + 3;
      const std::int64_t head = (s.seq + 2) * row;
      return {s.heads * head + 5, head, row, 1};
    }
    case Layout::dim_strided: return {s.heads * s.seq * s.dim, s.seq * s.dim, 1, s.seq};
  }
  return {};
}

std::int64_t span(const hal_tensor_strides_v1& st, Shape s) {
  return (s.batch - 1) * st.batch + (s.heads - 1) * st.head + (s.seq - 1) * st.seq + (s.dim - 1) * st.dim + 1;
}

std::size_t element_bytes(hal_dtype dtype) { return dtype == HAL_DTYPE_F32 ? 4 : 2; }

struct Tensor {
  hal_dtype dtype;
  Shape shape;
  hal_tensor_strides_v1 strides;
  std::vector<unsigned char> bytes;

  Tensor(hal_dtype type, Shape s, Layout layout)
      : dtype(type), shape(s), strides(strides_for(layout, s)),
        bytes(static_cast<std::size_t>(span(strides, s)) * element_bytes(type), 0xff) {}  // NaN-ish padding

  void* data() { return bytes.data(); }
  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d) const {
    return element_offset(strides, b, h, i, d);
  }
  double get(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d) const {
    return load_as_float(dtype, bytes.data(), offset(b, h, i, d));
  }
  void set(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t d, float value) {
    store_float(dtype, bytes.data(), offset(b, h, i, d), value);
  }
  void fill_random(std::mt19937& random, float low = -1.0f, float high = 1.0f) {
    std::uniform_real_distribution<float> uniform(low, high);
    for (std::int64_t b = 0; b < shape.batch; ++b)
      for (std::int64_t h = 0; h < shape.heads; ++h)
        for (std::int64_t i = 0; i < shape.seq; ++i)
          for (std::int64_t d = 0; d < shape.dim; ++d) set(b, h, i, d, uniform(random));
  }
  // Contiguous BHSD doubles, the layout of the f64 reference.
  std::vector<double> to_doubles() const {
    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(shape.batch * shape.heads * shape.seq * shape.dim));
    for (std::int64_t b = 0; b < shape.batch; ++b)
      for (std::int64_t h = 0; h < shape.heads; ++h)
        for (std::int64_t i = 0; i < shape.seq; ++i)
          for (std::int64_t d = 0; d < shape.dim; ++d) out.push_back(get(b, h, i, d));
    return out;
  }
};

// ---- comparison ------------------------------------------------------------

struct Tolerance {
  double absolute;
  double relative;
};

Tolerance tolerance_for(hal_dtype dtype) {
  switch (dtype) {
    case HAL_DTYPE_F16: return {1e-3, 1e-3};
    case HAL_DTYPE_BF16: return {1.6e-2, 1.6e-2};
    default: return {2e-5, 1e-5};
  }
}

void check_close(const std::string& what, const std::vector<double>& actual, const std::vector<double>& expected,
                 Tolerance tolerance) {
  REQUIRE(actual.size() == expected.size());
  double scale = 1e-30;
  for (double value : expected) scale = std::max(scale, std::abs(value));
  std::size_t failures = 0;
  std::size_t first_failure = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]);
    const double allowed = tolerance.absolute * scale + tolerance.relative * std::abs(expected[i]);
    worst = std::max(worst, error / scale);
    if (!(error <= allowed)) {  // also catches NaN
      if (failures == 0) first_failure = i;
      ++failures;
    }
  }
  INFO(what << ": " << failures << " of " << actual.size() << " values out of tolerance; worst error / scale = "
            << worst << "; first at flat index " << first_failure << ": actual " << actual[first_failure]
            << " expected " << expected[first_failure]);
  CHECK(failures == 0);
}

void check_lse(const std::string& what, const std::vector<float>& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  std::size_t failures = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isinf(expected[i])) {
      failures += !(std::isinf(actual[i]) && actual[i] < 0);
    } else {
      failures += !(std::abs(actual[i] - expected[i]) <= 1e-5 * std::max(1.0, std::abs(expected[i])));
    }
  }
  INFO(what << ": " << failures << " LSE values differ");
  CHECK(failures == 0);
}

// ---- problems --------------------------------------------------------------

struct Problem {
  std::int64_t batch = 1, heads_q = 2, heads_kv = 2, seq_q = 37, seq_kv = 37, dim_qk = 64, dim_v = 64;
  hal_dtype dtype = HAL_DTYPE_F32;
  bool causal = false;
  hal_mask_alignment alignment = HAL_MASK_TOP_LEFT;
  std::int64_t window_left = -1, window_right = -1;
  Layout q_layout = Layout::bhsd, k_layout = Layout::bhsd, v_layout = Layout::bhsd, o_layout = Layout::bhsd;
  Layout grad_layout = Layout::bhsd;
  std::vector<std::int32_t> key_ranges = {};  // [batch][seq_q][begin, end); empty: none
};

// Inputs, outputs and params of one problem.
struct Case {
  hal_attention_params_v1 params{};
  Tensor q, k, v, o, grad_o, grad_q, grad_k, grad_v;
  std::vector<float> lse;
  std::vector<std::int32_t> key_ranges;

  const std::int32_t* ranges() const { return key_ranges.empty() ? nullptr : key_ranges.data(); }

  explicit Case(const Problem& p, unsigned seed = 7)
      : q(p.dtype, {p.batch, p.heads_q, p.seq_q, p.dim_qk}, p.q_layout),
        k(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.dim_qk}, p.k_layout),
        v(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.dim_v}, p.v_layout),
        o(p.dtype, {p.batch, p.heads_q, p.seq_q, p.dim_v}, p.o_layout),
        grad_o(p.dtype, {p.batch, p.heads_q, p.seq_q, p.dim_v}, p.grad_layout),
        grad_q(p.dtype, {p.batch, p.heads_q, p.seq_q, p.dim_qk}, p.grad_layout),
        grad_k(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.dim_qk}, p.grad_layout),
        grad_v(p.dtype, {p.batch, p.heads_kv, p.seq_kv, p.dim_v}, p.grad_layout),
        lse(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q), 0.0f),
        key_ranges(p.key_ranges) {
    params.struct_size = sizeof(params);
    params.batch = p.batch;
    params.heads_q = p.heads_q;
    params.heads_kv = p.heads_kv;
    params.seq_q = p.seq_q;
    params.seq_kv = p.seq_kv;
    params.head_dim_qk = p.dim_qk;
    params.head_dim_v = p.dim_v;
    params.dtype = p.dtype;
    params.causal = p.causal ? 1 : 0;
    params.alignment = p.alignment;
    params.window_left = p.window_left;
    params.window_right = p.window_right;
    // Larger than 1/sqrt(d) so that the softmax is far from uniform.
    params.softmax_scale = 2.0f / std::sqrt(static_cast<float>(p.dim_qk));
    params.return_lse = 1;
    params.key_ranges = key_ranges.empty() ? 0 : 1;
    params.q_strides = q.strides;
    params.k_strides = k.strides;
    params.v_strides = v.strides;
    params.o_strides = o.strides;
    params.grad_o_strides = grad_o.strides;
    params.grad_q_strides = grad_q.strides;
    params.grad_k_strides = grad_k.strides;
    params.grad_v_strides = grad_v.strides;
    std::mt19937 random(seed);
    q.fill_random(random);
    k.fill_random(random);
    v.fill_random(random);
    grad_o.fill_random(random);
  }
};

struct Reference {
  std::vector<double> o, lse, grad_q, grad_k, grad_v;
};

Reference reference_for(Case& c, ThreadPool& pool) {
  const hal_attention_params_v1& p = c.params;
  Reference r;
  r.o.resize(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q * p.head_dim_v));
  r.lse.resize(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q));
  r.grad_q.resize(static_cast<std::size_t>(p.batch * p.heads_q * p.seq_q * p.head_dim_qk));
  r.grad_k.resize(static_cast<std::size_t>(p.batch * p.heads_kv * p.seq_kv * p.head_dim_qk));
  r.grad_v.resize(static_cast<std::size_t>(p.batch * p.heads_kv * p.seq_kv * p.head_dim_v));
  math_forward_f64(p, c.q.data(), c.k.data(), c.v.data(), r.o.data(), r.lse.data(), pool, c.ranges());
  math_backward_f64(p, c.q.data(), c.k.data(), c.v.data(), c.grad_o.data(), r.grad_q.data(), r.grad_k.data(),
                    r.grad_v.data(), pool, c.ranges());
  return r;
}

// An implementation under test: math f32 or flash on one path.
struct Implementation {
  std::string name;
  bool flash;
  FlashIsa isa;
  FlashForwardTiling tiling = FlashForwardTiling::automatic;
};

std::vector<Implementation> implementations() {
  std::vector<Implementation> list{{"math", false, FlashIsa::scalar}};
  for (FlashIsa isa : hal::host::kFlashIsas) {
    if (flash_isa_supported(isa)) {
      // automatic takes the decode tiling where a group's rows fit one tile
      list.push_back({std::string("flash/") + flash_isa_name(isa), true, isa});
      list.push_back({std::string("flash/") + flash_isa_name(isa) + "/query_blocks", true, isa,
                      FlashForwardTiling::query_blocks});
    } else {
      MESSAGE("flash/" << std::string(flash_isa_name(isa)) << " is not supported by this CPU: not tested");
    }
  }
  return list;
}

void run_forward(const Implementation& impl, Case& c, ThreadPool& pool) {
  if (impl.flash) {
    flash_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.lse.data(), pool, impl.isa, impl.tiling,
                  c.ranges());
  } else {
    math_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.lse.data(), pool, c.ranges());
  }
}

void run_backward(const Implementation& impl, Case& c, ThreadPool& pool) {
  if (impl.flash) {
    flash_backward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.grad_o.data(), c.lse.data(),
                   c.grad_q.data(), c.grad_k.data(), c.grad_v.data(), pool, impl.isa, c.ranges());
  } else {
    math_backward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.grad_o.data(), c.lse.data(),
                  c.grad_q.data(), c.grad_k.data(), c.grad_v.data(), pool, c.ranges());
  }
}

// Forward and backward of every implementation against the f64 reference.
void check_problem(const Problem& problem, unsigned threads = 2) {
  ThreadPool pool(threads);
  Case reference_case(problem);
  const Reference expected = reference_for(reference_case, pool);
  const Tolerance tolerance = tolerance_for(problem.dtype);
  for (const Implementation& impl : implementations()) {
    Case c(problem);
    run_forward(impl, c, pool);
    check_close(impl.name + " O", c.o.to_doubles(), expected.o, tolerance);
    check_lse(impl.name + " LSE", c.lse, expected.lse);
    run_backward(impl, c, pool);
    check_close(impl.name + " dQ", c.grad_q.to_doubles(), expected.grad_q, tolerance);
    check_close(impl.name + " dK", c.grad_k.to_doubles(), expected.grad_k, tolerance);
    check_close(impl.name + " dV", c.grad_v.to_doubles(), expected.grad_v, tolerance);
  }
}


// ---- key ranges ----------------------------------------------------------------

// Random [begin, end) per query, some empty, some reaching past either end
// (the kernels clamp), in no order.
std::vector<std::int32_t> random_key_ranges(const Problem& p, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<std::int32_t> position(-3, static_cast<std::int32_t>(p.seq_kv) + 3);
  std::vector<std::int32_t> ranges;
  for (std::int64_t i = 0; i < p.batch * p.seq_q; ++i) {
    std::int32_t a = position(random), b = position(random);
    if (i % 5 != 4 && a > b) std::swap(a, b);  // every fifth may be empty (begin >= end)
    ranges.push_back(a);
    ranges.push_back(b);
  }
  return ranges;
}

// One sequence inside a batch row: positions [first, first + length) for
// queries and keys alike, causal within itself.
struct Segment {
  std::int64_t batch, first, length;
};

// Causal key ranges for the segments of a square problem (query i of a
// segment sees the segment's keys up to i); queries of no segment see no key.
std::vector<std::int32_t> segment_key_ranges(const Problem& p, const std::vector<Segment>& segments) {
  std::vector<std::int32_t> ranges(static_cast<std::size_t>(p.batch * p.seq_q * 2), 0);
  for (const Segment& segment : segments)
    for (std::int64_t i = segment.first; i < segment.first + segment.length; ++i) {
      ranges[static_cast<std::size_t>((segment.batch * p.seq_q + i) * 2)] = static_cast<std::int32_t>(segment.first);
      ranges[static_cast<std::size_t>((segment.batch * p.seq_q + i) * 2 + 1)] = static_cast<std::int32_t>(i + 1);
    }
  return ranges;
}

// Padding and packing, checked against what they mean: each segment of a
// problem with segment key ranges gives, forward and backward, what the same
// sequence gives run alone (causal, no ranges), through the f64 reference.
// Queries outside every segment get O = 0, LSE = -inf and no gradient; keys
// outside get zero gradients.
void check_segments(Problem problem, const std::vector<Segment>& segments) {
  problem.key_ranges = segment_key_ranges(problem, segments);
  ThreadPool pool(2);
  const Tolerance tolerance = tolerance_for(problem.dtype);
  for (const Implementation& impl : implementations()) {
    Case c(problem);
    run_forward(impl, c, pool);
    run_backward(impl, c, pool);
    std::vector<bool> covered(static_cast<std::size_t>(problem.batch * problem.seq_q), false);
    for (const Segment& segment : segments) {
      CAPTURE(segment.batch);
      CAPTURE(segment.first);
      Problem alone = problem;
      alone.batch = 1;
      alone.seq_q = alone.seq_kv = segment.length;
      alone.causal = true;
      alone.key_ranges.clear();
      Case single(alone);
      auto copy = [&](const Tensor& from, Tensor& to) {
        for (std::int64_t h = 0; h < to.shape.heads; ++h)
          for (std::int64_t i = 0; i < segment.length; ++i)
            for (std::int64_t d = 0; d < to.shape.dim; ++d)
              to.set(0, h, i, d, static_cast<float>(from.get(segment.batch, h, segment.first + i, d)));
      };
      copy(c.q, single.q);
      copy(c.k, single.k);
      copy(c.v, single.v);
      copy(c.grad_o, single.grad_o);
      const Reference expected = reference_for(single, pool);
      auto slice = [&](const Tensor& tensor) {
        std::vector<double> values;
        for (std::int64_t h = 0; h < tensor.shape.heads; ++h)
          for (std::int64_t i = 0; i < segment.length; ++i)
            for (std::int64_t d = 0; d < tensor.shape.dim; ++d)
              values.push_back(tensor.get(segment.batch, h, segment.first + i, d));
        return values;
      };
      std::vector<float> lse;
      for (std::int64_t h = 0; h < problem.heads_q; ++h)
        for (std::int64_t i = 0; i < segment.length; ++i)
          lse.push_back(c.lse[static_cast<std::size_t>((segment.batch * problem.heads_q + h) * problem.seq_q +
                                                       segment.first + i)]);
      check_close(impl.name + " O", slice(c.o), expected.o, tolerance);
      check_lse(impl.name + " LSE", lse, expected.lse);
      check_close(impl.name + " dQ", slice(c.grad_q), expected.grad_q, tolerance);
      check_close(impl.name + " dK", slice(c.grad_k), expected.grad_k, tolerance);
      check_close(impl.name + " dV", slice(c.grad_v), expected.grad_v, tolerance);
      for (std::int64_t i = 0; i < segment.length; ++i)
        covered[static_cast<std::size_t>(segment.batch * problem.seq_q + segment.first + i)] = true;
    }
    std::size_t wrong = 0;
    for (std::int64_t b = 0; b < problem.batch; ++b)
      for (std::int64_t i = 0; i < problem.seq_q; ++i) {
        if (covered[static_cast<std::size_t>(b * problem.seq_q + i)]) continue;
        for (std::int64_t h = 0; h < problem.heads_q; ++h) {
          const float row_lse = c.lse[static_cast<std::size_t>((b * problem.heads_q + h) * problem.seq_q + i)];
          wrong += !(std::isinf(row_lse) && row_lse < 0);
          for (std::int64_t d = 0; d < problem.dim_v; ++d) wrong += c.o.get(b, h, i, d) != 0.0;
          for (std::int64_t d = 0; d < problem.dim_qk; ++d) wrong += c.grad_q.get(b, h, i, d) != 0.0;
        }
        for (std::int64_t h = 0; h < problem.heads_kv; ++h) {
          for (std::int64_t d = 0; d < problem.dim_qk; ++d) wrong += c.grad_k.get(b, h, i, d) != 0.0;
          for (std::int64_t d = 0; d < problem.dim_v; ++d) wrong += c.grad_v.get(b, h, i, d) != 0.0;
        }
      }
    INFO(impl.name << ": " << wrong << " values of padding positions are not zero (or LSE not -inf)");
    CHECK(wrong == 0);
  }
}

}  // namespace

// ---- conversions -------------------------------------------------------------

TEST_CASE("f16 conversion round-trips every value and rounds ties to even") {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float value = f16_bits_to_float(half);
    const bool is_nan = (half & 0x7c00u) == 0x7c00u && (half & 0x3ffu) != 0;
    if (is_nan) {
      REQUIRE(std::isnan(value));
      REQUIRE(std::isnan(f16_bits_to_float(float_to_f16_bits(value))));
      continue;
    }
    REQUIRE(float_to_f16_bits(value) == half);
    // The midpoint to the next value up (same sign) rounds to the even one.
    const auto next = static_cast<std::uint16_t>(half + 1);
    if ((half & 0x7fffu) < 0x7c00u && (next & 0x7fffu) <= 0x7c00u) {
      const double next_value = (next & 0x7fffu) == 0x7c00u ? std::copysign(65536.0, value) : f16_bits_to_float(next);
      const auto midpoint = static_cast<float>((static_cast<double>(value) + next_value) / 2);
      const std::uint16_t even = (half & 1u) == 0 ? half : next;
      REQUIRE(float_to_f16_bits(midpoint) == even);
    }
  }
  CHECK(float_to_f16_bits(1e6f) == 0x7c00u);
  CHECK(float_to_f16_bits(-std::numeric_limits<float>::infinity()) == 0xfc00u);
  CHECK(float_to_f16_bits(1e-9f) == 0x0000u);
  CHECK(float_to_f16_bits(-1e-9f) == 0x8000u);
  CHECK(f16_bits_to_float(0x0001u) == std::ldexp(1.0f, -24));
}

TEST_CASE("bf16 conversion round-trips, rounds ties to even and keeps NaN") {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto bf16 = static_cast<std::uint16_t>(bits);
    const float value = bf16_bits_to_float(bf16);
    if (std::isnan(value)) {
      REQUIRE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(value))));
      continue;
    }
    REQUIRE(float_to_bf16_bits(value) == bf16);
    const std::uint32_t value_bits = static_cast<std::uint32_t>(bf16) << 16;
    if ((bf16 & 0x7fffu) < 0x7f80u) {
      const float midpoint = float_from_bits(value_bits | 0x8000u);  // halfway to the next bf16
      const std::uint16_t even = (bf16 & 1u) == 0 ? bf16 : static_cast<std::uint16_t>(bf16 + 1);
      REQUIRE(float_to_bf16_bits(midpoint) == even);
      REQUIRE(float_to_bf16_bits(float_from_bits(value_bits | 0x8001u)) == static_cast<std::uint16_t>(bf16 + 1));
    }
  }
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(float_from_bits(0x7f800001u)))));  // signalling NaN stays NaN
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80u);               // rounds up to inf
}

// ---- thread pool -------------------------------------------------------------

TEST_CASE("thread pool covers every index once, on distinct workers, and rethrows") {
  ThreadPool pool(3);
  CHECK(pool.thread_count() == 3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for_with_worker(1000, [&](int worker, std::int64_t begin, std::int64_t end) {
    CHECK(worker >= 0);
    CHECK(worker < 3);
    for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));

  std::atomic<std::int64_t> nested_total{0};
  pool.parallel_for(8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      pool.parallel_for(10, [&](std::int64_t b, std::int64_t e) { nested_total += e - b; });
    }
  });
  CHECK(nested_total.load() == 80);

  CHECK_THROWS_AS(pool.parallel_for(100,
                                    [](std::int64_t begin, std::int64_t) {
                                      if (begin == 0) throw std::runtime_error("chunk failed");
                                    }),
                  std::runtime_error);
  pool.parallel_for(0, [](std::int64_t, std::int64_t) { FAIL("no chunk for an empty range"); });
  ThreadPool single(1);
  std::int64_t covered = 0;
  single.parallel_for(5, [&](std::int64_t begin, std::int64_t end) { covered += end - begin; });
  CHECK(covered == 5);
}

// ---- validation --------------------------------------------------------------

// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnvironment() {
    if (saved_) {
      setenv(name_.c_str(), saved_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

#if defined(HAL_TEST_ON_OPENMP_TEAM)
TEST_CASE(
    "with an OpenMP runtime loaded, parallel work runs on the calling thread's team; a pool-only thread keeps the "
    "pool") {
  ThreadPool pool(2);
  REQUIRE(pool.uses_openmp_team());
  CHECK(pool.thread_count() == 3);  // the team's size, not the pool's
  // Each body waits until a second thread has entered one, so more than one
  // thread takes part; every body runs on the team thread its index names.
  std::atomic<int> entered{0};
  std::atomic<int> mismatched{0};
  std::vector<std::atomic<int>> hits(64);
  pool.parallel_for_with_worker(64, [&](int worker, std::int64_t begin, std::int64_t end) {
    if (worker != openmp.thread_num()) mismatched++;
    entered++;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (entered.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  CHECK(mismatched.load() == 0);
  CHECK(entered.load() >= 2);
  CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));
  CHECK_THROWS_AS(pool.parallel_for(100,
                                    [](std::int64_t begin, std::int64_t) {
                                      if (begin == 0) throw std::runtime_error("chunk failed");
                                    }),
                  std::runtime_error);

  // The same backward on the team and on a pool of the same size from a
  // pool-only thread: the same chunks, so the same bits.
  const Problem p{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 150, .seq_kv = 150, .causal = true};
  ThreadPool three(3);
  Case on_team(p), on_pool(p);
  const auto run = [&](Case& c) {
    flash_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.lse.data(), three);
    flash_backward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.grad_o.data(), c.lse.data(),
                   c.grad_q.data(), c.grad_k.data(), c.grad_v.data(), three);
  };
  run(on_team);
  bool pool_only_used_team = true;
  std::thread pool_only([&] {
    ThreadPool::use_pool_on_this_thread();
    pool_only_used_team = three.uses_openmp_team() || three.thread_count() != 3;
    run(on_pool);
  });
  pool_only.join();
  CHECK_FALSE(pool_only_used_team);
  CHECK(on_team.o.bytes == on_pool.o.bytes);
  CHECK(on_team.grad_q.bytes == on_pool.grad_q.bytes);
  CHECK(on_team.grad_k.bytes == on_pool.grad_k.bytes);
  CHECK(on_team.grad_v.bytes == on_pool.grad_v.bytes);
}
#endif

TEST_CASE("default thread count: explicit settings, the affinity mask, ranks sharing the machine") {
  configure_thread_count(0, "");
  ScopedEnvironment no_omp("OMP_NUM_THREADS", nullptr);
  ScopedEnvironment no_local("LOCAL_WORLD_SIZE", nullptr);
  ScopedEnvironment no_ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr);
  ScopedEnvironment no_slurm("SLURM_NTASKS_PER_NODE", nullptr);
  const unsigned online = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t saved_mask;
  REQUIRE(sched_getaffinity(0, sizeof(saved_mask), &saved_mask) == 0);
  const unsigned allowed = static_cast<unsigned>(CPU_COUNT(&saved_mask));
  CHECK(default_thread_count().threads == allowed);
  {
    ScopedEnvironment omp("OMP_NUM_THREADS", "3");
    CHECK(default_thread_count().threads == 3);
    configure_thread_count(5, "HAL_HOST_THREADS=5");  // the plugin's option wins over OMP_NUM_THREADS
    const ThreadCount count = default_thread_count();
    CHECK(count.threads == 5);
    CHECK(count.reason == "HAL_HOST_THREADS=5");
    configure_thread_count(0, "");  // cleared: OMP_NUM_THREADS again
    CHECK(default_thread_count().threads == 3);
  }
  if (allowed == online && online >= 2) {
    ScopedEnvironment ranks("LOCAL_WORLD_SIZE", "2");
    const ThreadCount count = default_thread_count();
    CHECK(count.threads == online / 2);
    CHECK(count.reason.find("LOCAL_WORLD_SIZE=2") != std::string::npos);
    ScopedEnvironment more_ranks("LOCAL_WORLD_SIZE", std::to_string(online * 4).c_str());
    CHECK(default_thread_count().threads == 1);  // never zero
  }
  if (online >= 2) {
    // A launcher that binds each rank to its CPUs: the mask already says the share.
    cpu_set_t one;
    CPU_ZERO(&one);
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &saved_mask)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
    ScopedEnvironment ranks("LOCAL_WORLD_SIZE", "2");
    const ThreadCount count = default_thread_count();
    CHECK(sched_setaffinity(0, sizeof(saved_mask), &saved_mask) == 0);
    CHECK(count.threads == 1);
    CHECK(count.reason.find("affinity") != std::string::npos);
  } else {
    MESSAGE("one CPU: the affinity-mask case is not tested");
  }
}

TEST_CASE("attention_problems names each problem with its value") {
  Problem problem;
  Case c(problem);
  CHECK(attention_problems(c.params, false).empty());
  CHECK(attention_problems(c.params, true).empty());

  auto has = [](const std::vector<std::string>& problems, const std::string& text) {
    return std::any_of(problems.begin(), problems.end(),
                       [&](const std::string& p) { return p.find(text) != std::string::npos; });
  };
  hal_attention_params_v1 bad = c.params;
  bad.heads_q = 12;
  bad.heads_kv = 5;
  bad.dtype = HAL_DTYPE_I32;
  bad.window_left = -3;
  bad.seq_kv = 0;
  auto problems = attention_problems(bad, false);
  CHECK(has(problems, "heads_q (12) is not a multiple of heads_kv (5)"));
  CHECK(has(problems, "dtype i32 is not supported: use f32, f16 or bf16"));
  CHECK(has(problems, "window_left (-3)"));
  CHECK(has(problems, "seq_kv (0) must be positive"));

  bad = c.params;
  bad.k_strides.seq = -64;
  bad.v_strides.dim = 0;
  bad.grad_q_strides.head = -1;
  problems = attention_problems(bad, false);
  CHECK(has(problems, "k_strides.seq (-64) is negative"));
  CHECK(has(problems, "v_strides.dim is 0 but head_dim_v is 64"));
  CHECK_FALSE(has(problems, "grad_q"));  // gradients are only checked for backward
  CHECK(has(attention_problems(bad, true), "grad_q_strides.head (-1) is negative"));

  bad = c.params;
  bad.batch = 1;
  bad.q_strides.batch = 0;  // extent 1: any stride, zero included, is fine
  CHECK(attention_problems(bad, false).empty());

  bad = c.params;
  // As C code could: these values are outside the C++ enums' range.
  const int bad_dtype = 42;
  const int bad_alignment = 3;
  static_assert(sizeof(bad.dtype) == sizeof(int) && sizeof(bad.alignment) == sizeof(int));
  std::memcpy(&bad.dtype, &bad_dtype, sizeof(int));
  std::memcpy(&bad.alignment, &bad_alignment, sizeof(int));
  bad.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  problems = attention_problems(bad, false);
  CHECK(has(problems, "dtype (42) is not a hal_dtype"));
  CHECK(has(problems, "alignment (3)"));
  CHECK(has(problems, "softmax_scale (nan) must be finite"));

  bad = c.params;
  bad.struct_size = 8;
  CHECK(has(attention_problems(bad, false), "struct_size (8) is smaller"));

  ThreadPool pool(1);
  bad = c.params;
  bad.heads_kv = 3;
  try {
    flash_forward(bad, c.q.data(), c.k.data(), c.v.data(), c.o.data(), nullptr, pool);
    FAIL("flash_forward accepted heads_kv = 3");
  } catch (const std::invalid_argument& error) {
    CHECK(std::string(error.what()).find("heads_q (2) is not a multiple of heads_kv (3)") != std::string::npos);
  }
  CHECK_THROWS_AS(math_forward(c.params, nullptr, c.k.data(), c.v.data(), c.o.data(), nullptr, pool),
                  std::invalid_argument);
  CHECK_THROWS_AS(flash_backward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.grad_o.data(), nullptr,
                                 c.grad_q.data(), c.grad_k.data(), c.grad_v.data(), pool),
                  std::invalid_argument);
}

// ---- instruction-set selection ----------------------------------------------

TEST_CASE("the isa limit lowers the flash path, never above what the CPU has") {
  limit_flash_isa(std::nullopt);
  const FlashIsa best = flash_selected_isa();
  CHECK(flash_isa_supported(best));
  CHECK(parse_flash_isa("scalar") == FlashIsa::scalar);
  CHECK(parse_flash_isa("avx2") == FlashIsa::avx2);
  CHECK(parse_flash_isa("avx512") == FlashIsa::avx512);
  CHECK(parse_flash_isa("avx512bf16") == FlashIsa::avx512bf16);
  CHECK(parse_flash_isa("amx") == FlashIsa::amx);
  CHECK_FALSE(parse_flash_isa("sse9").has_value());
  limit_flash_isa(FlashIsa::scalar);
  CHECK(std::string(flash_isa_name()) == "scalar");
  limit_flash_isa(FlashIsa::avx512);
  CHECK(flash_selected_isa() == std::min(best, FlashIsa::avx512));
  limit_flash_isa(FlashIsa::avx512bf16);
  CHECK(flash_selected_isa() == std::min(best, FlashIsa::avx512bf16));
  limit_flash_isa(FlashIsa::amx);
  CHECK(flash_selected_isa() == best);
  limit_flash_isa(std::nullopt);
  CHECK(flash_selected_isa() == best);
}

// ---- numerics ------------------------------------------------------------------

TEST_CASE("multi-head, no mask, batch 2, seq 37 (not a tile multiple)") { check_problem({.batch = 2}); }

TEST_CASE("GQA with one kv head (MQA), causal, seq 131, head dim 80") {
  check_problem({.heads_q = 4, .heads_kv = 1, .seq_q = 131, .seq_kv = 131, .dim_qk = 80, .dim_v = 80, .causal = true});
}

TEST_CASE("GQA with two kv heads, causal bottom-right, seq_q < seq_kv, head dim 128") {
  check_problem({.heads_q = 4, .heads_kv = 2, .seq_q = 37, .seq_kv = 131, .dim_qk = 128, .dim_v = 128, .causal = true,
                 .alignment = HAL_MASK_BOTTOM_RIGHT});
}

TEST_CASE("causal top-left with seq_q < seq_kv") { check_problem({.seq_q = 37, .seq_kv = 100, .causal = true}); }

TEST_CASE("causal with seq_q > seq_kv: bottom-right leaves fully masked rows (O = 0, LSE = -inf)") {
  Problem p{.seq_q = 131, .seq_kv = 37, .causal = true, .alignment = HAL_MASK_BOTTOM_RIGHT};
  check_problem(p);
  Case c(p);
  ThreadPool pool(2);
  flash_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), c.lse.data(), pool);
  CHECK(std::isinf(c.lse[0]));
  CHECK(c.lse[0] < 0);
  CHECK(c.o.get(0, 0, 0, 0) == 0.0);
  CHECK(std::isfinite(c.lse[static_cast<std::size_t>(p.seq_q - 1)]));

  p.alignment = HAL_MASK_TOP_LEFT;
  check_problem(p);
}

TEST_CASE("decode: one query against 131 keys, causal bottom-right") {
  check_problem({.heads_q = 4, .heads_kv = 2, .seq_q = 1, .seq_kv = 131, .dim_qk = 128, .dim_v = 128, .causal = true,
                 .alignment = HAL_MASK_BOTTOM_RIGHT});
}

TEST_CASE("decode and chunked prefill: keys split across threads, splits merged by their LSE") {
  // 4 query heads per kv head x 5 queries = 20 rows in one decode tile; 1000
  // keys in 16 blocks, split 8 ways for 2 threads, 12 for 3 and not at all for 1.
  Problem p{.heads_q = 8, .heads_kv = 2, .seq_q = 5, .seq_kv = 1000, .dim_qk = 128, .dim_v = 96, .causal = true,
            .alignment = HAL_MASK_BOTTOM_RIGHT};
  for (unsigned threads : {1u, 2u, 3u}) {
    CAPTURE(threads);
    check_problem(p, threads);
  }
  // A sliding window leaves most splits with no visible key for some rows:
  // their partials must drop out of the merge.
  p.window_left = 70;
  check_problem(p, 3);
  // Top-left: query i sees keys [0, i] only, so every split but the first sees nothing.
  p.window_left = -1;
  p.alignment = HAL_MASK_TOP_LEFT;
  check_problem(p, 2);
  // Reduced-precision inputs through the vector conversions (and, for bf16,
  // the tile units' decode), in a BSHD layout, under each mask above.
  for (hal_dtype dtype : {HAL_DTYPE_BF16, HAL_DTYPE_F16}) {
    CAPTURE(dtype);
    Problem reduced = p;
    reduced.alignment = HAL_MASK_BOTTOM_RIGHT;
    reduced.dtype = dtype;
    reduced.q_layout = reduced.k_layout = reduced.v_layout = reduced.o_layout = Layout::bshd;
    check_problem(reduced, 2);
    reduced.window_left = 70;
    check_problem(reduced, 3);
    reduced.window_left = -1;
    reduced.alignment = HAL_MASK_TOP_LEFT;
    check_problem(reduced, 2);
  }
}

TEST_CASE("decode tiles of whole tiles of rows: 4 query heads x 16 queries, bf16, full and causal") {
  // The 64 rows of a 16-query chunk of a GQA group fill 4 tiles of the bf16
  // tile units; 300 keys end inside a block.
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    check_problem({.heads_q = 8,
                   .heads_kv = 2,
                   .seq_q = 16,
                   .seq_kv = 300,
                   .dim_qk = 64,
                   .dim_v = 64,
                   .dtype = HAL_DTYPE_BF16,
                   .causal = causal,
                   .alignment = HAL_MASK_BOTTOM_RIGHT},
                  2);
  }
}

TEST_CASE("sliding window: causal with left window, and a two-sided window") {
  Problem p{.seq_q = 131, .seq_kv = 131, .causal = true, .window_left = 16};
  check_problem(p);
  p.causal = false;
  p.window_left = 9;
  p.window_right = 5;
  check_problem(p);
  // Two-sided window, top-left, more queries than keys: queries past
  // seq_kv + window_left see nothing.
  p.seq_q = 140;
  p.window_left = 3;
  p.window_right = 0;
  check_problem(p);
}

TEST_CASE("head dim 256 and different Q/K and V dims") {
  check_problem({.seq_q = 40, .seq_kv = 40, .dim_qk = 256, .dim_v = 256});
  check_problem({.seq_q = 40, .seq_kv = 40, .dim_qk = 48, .dim_v = 72, .causal = true});
}

TEST_CASE("non-contiguous layouts: BSHD, padded V, dim-strided K, gradients with their own strides") {
  check_problem({.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 37, .seq_kv = 70, .causal = true,
                 .alignment = HAL_MASK_BOTTOM_RIGHT, .q_layout = Layout::bshd, .k_layout = Layout::dim_strided,
                 .v_layout = Layout::padded, .o_layout = Layout::bshd, .grad_layout = Layout::padded});
}

TEST_CASE("f16 and bf16 inputs") {
  for (hal_dtype dtype : {HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    INFO("dtype " << (dtype == HAL_DTYPE_F16 ? "f16" : "bf16"));
    check_problem({.heads_q = 4, .heads_kv = 2, .seq_q = 70, .seq_kv = 131, .dtype = dtype, .causal = true,
                   .alignment = HAL_MASK_BOTTOM_RIGHT, .v_layout = Layout::bshd});
  }
}

TEST_CASE("many kv groups at short sequences (each thread runs whole groups), on 1, 2 and 3 threads") {
  for (unsigned threads : {1u, 2u, 3u}) {
    INFO("threads " << threads);
    check_problem({.batch = 3, .heads_q = 8, .heads_kv = 4, .seq_q = 50, .seq_kv = 50, .causal = true}, threads);
    check_problem({.batch = 3,
                   .heads_q = 8,
                   .heads_kv = 4,
                   .seq_q = 70,
                   .seq_kv = 130,
                   .dim_qk = 80,
                   .dim_v = 48,
                   .causal = true,
                   .alignment = HAL_MASK_BOTTOM_RIGHT},
                  threads);
  }
}

TEST_CASE("flash backward is deterministic for a given thread count") {
  const Problem p{.heads_q = 4, .heads_kv = 1, .seq_q = 200, .seq_kv = 200, .causal = true};
  ThreadPool pool(2);
  Case first(p), second(p);
  for (Case* c : {&first, &second}) {
    flash_forward(c->params, c->q.data(), c->k.data(), c->v.data(), c->o.data(), c->lse.data(), pool);
    flash_backward(c->params, c->q.data(), c->k.data(), c->v.data(), c->o.data(), c->grad_o.data(), c->lse.data(),
                   c->grad_q.data(), c->grad_k.data(), c->grad_v.data(), pool);
  }
  CHECK(first.grad_q.bytes == second.grad_q.bytes);
  CHECK(first.grad_k.bytes == second.grad_k.bytes);
}

TEST_CASE("f64 reference gradients match central finite differences") {
  Case c({.heads_q = 2, .heads_kv = 1, .seq_q = 5, .seq_kv = 7, .dim_qk = 4, .dim_v = 3, .causal = true,
          .alignment = HAL_MASK_BOTTOM_RIGHT, .window_left = 3});
  ThreadPool pool(1);
  const Reference analytic = reference_for(c, pool);
  const std::vector<double> grad_o = c.grad_o.to_doubles();

  // L = sum(O * dO) so that dL/dX is the backward of X.
  auto loss = [&]() {
    std::vector<double> o(analytic.o.size());
    math_forward_f64(c.params, c.q.data(), c.k.data(), c.v.data(), o.data(), nullptr, pool);
    double total = 0.0;
    for (std::size_t i = 0; i < o.size(); ++i) total += o[i] * grad_o[i];
    return total;
  };
  auto numeric_gradient = [&](Tensor& tensor) {
    std::vector<double> gradient;
    const Shape s = tensor.shape;
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t h = 0; h < s.heads; ++h)
        for (std::int64_t i = 0; i < s.seq; ++i)
          for (std::int64_t d = 0; d < s.dim; ++d) {
            const float original = static_cast<float>(tensor.get(b, h, i, d));
            const float step = 1.0f / 128;
            const float up = original + step;
            const float down = original - step;
            tensor.set(b, h, i, d, up);
            const double loss_up = loss();
            tensor.set(b, h, i, d, down);
            const double loss_down = loss();
            tensor.set(b, h, i, d, original);
            // The f32 inputs hold up and down exactly as rounded: divide by their real distance.
            gradient.push_back((loss_up - loss_down) / (static_cast<double>(up) - static_cast<double>(down)));
          }
    return gradient;
  };
  const Tolerance finite_difference{2e-4, 2e-4};  // O(step^2) truncation
  check_close("dQ vs finite differences", analytic.grad_q, numeric_gradient(c.q), finite_difference);
  check_close("dK vs finite differences", analytic.grad_k, numeric_gradient(c.k), finite_difference);
  check_close("dV vs finite differences", analytic.grad_v, numeric_gradient(c.v), finite_difference);
}

TEST_CASE("key ranges: random intervals per query, clamped, some empty, with and without a band") {
  Problem p{.batch = 2, .seq_q = 37, .seq_kv = 53};
  p.key_ranges = random_key_ranges(p, 11);
  check_problem(p);
  p.causal = true;
  p.alignment = HAL_MASK_BOTTOM_RIGHT;
  check_problem(p);
  // Decode tiling with kv splits: several query heads per kv head, few queries, many keys.
  Problem decode{.heads_q = 8, .heads_kv = 2, .seq_q = 5, .seq_kv = 1000, .dim_qk = 128, .dim_v = 96};
  decode.key_ranges = random_key_ranges(decode, 12);
  for (unsigned threads : {1u, 3u}) {
    CAPTURE(threads);
    check_problem(decode, threads);
  }
  Problem reduced{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 131, .seq_kv = 131, .dtype = HAL_DTYPE_BF16};
  reduced.q_layout = reduced.k_layout = reduced.v_layout = reduced.o_layout = Layout::bshd;
  reduced.key_ranges = random_key_ranges(reduced, 13);
  check_problem(reduced);
}

TEST_CASE("key ranges that spell the causal band give the causal answer") {
  Problem banded{.batch = 2, .seq_q = 131, .seq_kv = 131, .causal = true};
  Problem ranged{.batch = 2, .seq_q = 131, .seq_kv = 131};
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int32_t i = 0; i < 131; ++i) ranged.key_ranges.insert(ranged.key_ranges.end(), {0, i + 1});
  ThreadPool pool(2);
  Case reference_case(banded);
  const Reference expected = reference_for(reference_case, pool);
  for (const Implementation& impl : implementations()) {
    Case c(ranged);
    run_forward(impl, c, pool);
    run_backward(impl, c, pool);
    check_close(impl.name + " O", c.o.to_doubles(), expected.o, tolerance_for(ranged.dtype));
    check_close(impl.name + " dK", c.grad_k.to_doubles(), expected.grad_k, tolerance_for(ranged.dtype));
  }
}

TEST_CASE("key ranges: left- and right-padded rows and packed sequences equal each sequence run alone") {
  // Row 0 padded on the left by 9, row 1 on the right by 20, row 2 not at all.
  Problem padded{.batch = 3, .heads_q = 4, .heads_kv = 2, .seq_q = 70, .seq_kv = 70};
  check_segments(padded, {{0, 9, 61}, {1, 0, 50}, {2, 0, 70}});
  // Three documents packed into one row, then padding.
  Problem packed{.seq_q = 150, .seq_kv = 150, .dim_qk = 96, .dim_v = 96};
  check_segments(packed, {{0, 0, 40}, {0, 40, 71}, {0, 111, 30}});
  Problem reduced = padded;
  reduced.dtype = HAL_DTYPE_F16;
  reduced.q_layout = reduced.k_layout = reduced.v_layout = reduced.o_layout = reduced.grad_layout = Layout::bshd;
  check_segments(reduced, {{0, 9, 61}, {1, 0, 50}, {2, 3, 60}});
}

TEST_CASE("key ranges are required exactly when params announce them") {
  Problem p;
  Case c(p);
  ThreadPool pool(1);
  const std::vector<std::int32_t> ranges(static_cast<std::size_t>(p.seq_q * 2), 0);
  CHECK_THROWS_WITH_AS(math_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), nullptr, pool,
                                    ranges.data()),
                       doctest::Contains("params.key_ranges is 0"), std::invalid_argument);
  c.params.key_ranges = 1;
  CHECK_THROWS_WITH_AS(flash_forward(c.params, c.q.data(), c.k.data(), c.v.data(), c.o.data(), nullptr, pool,
                                     flash_selected_isa()),
                       doctest::Contains("key_ranges is null"), std::invalid_argument);
}

TEST_CASE("workspace sizes: flash grows with seq, math with seq squared") {
  Problem small_problem, large_problem;
  small_problem.seq_q = small_problem.seq_kv = 1024;
  large_problem.seq_q = large_problem.seq_kv = 4096;
  const hal_attention_params_v1 small = Case(small_problem).params;
  const hal_attention_params_v1 large = Case(large_problem).params;
  CHECK(math_workspace_bytes(large, false) > 12 * math_workspace_bytes(small, false));
  for (bool backward : {false, true}) {
    CHECK(flash_workspace_bytes(large, backward, 2) < 5 * flash_workspace_bytes(small, backward, 2));
    CHECK(flash_workspace_bytes(large, backward, 2) < math_workspace_bytes(large, backward) / 10);
  }
}
