// The public headers speak C++ only: no plugin-ABI name reaches a consumer,
// and there is one dtype vocabulary.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "hal/collectives.hpp"
#include "hal/hal.hpp"
#include "hal/probe_cache.hpp"

#ifdef HAL_BACKEND_ABI_H
#error "a public header includes hal/backend_abi.h; keep the plugin ABI behind libhal (hal/src/abi.hpp)"
#endif

TEST_CASE("parse_dtype takes hal's names and the spellings users type") {
  for (const hal::DType dtype : hal::all_dtypes) {
    CHECK(hal::parse_dtype(hal::to_string(dtype)) == dtype);
    CHECK(hal::require_dtype(hal::to_string(dtype)) == dtype);
  }
  CHECK(hal::parse_dtype("float32") == hal::DType::f32);
  CHECK(hal::parse_dtype("float") == hal::DType::f32);
  CHECK(hal::parse_dtype("half") == hal::DType::f16);
  CHECK(hal::parse_dtype("float16") == hal::DType::f16);
  CHECK(hal::parse_dtype("bfloat16") == hal::DType::bf16);
  CHECK(hal::parse_dtype("double") == hal::DType::f64);
  CHECK(hal::parse_dtype("int64") == hal::DType::i64);
  CHECK(hal::parse_dtype("uint8") == hal::DType::u8);
  CHECK_FALSE(hal::parse_dtype("f17").has_value());
  CHECK_FALSE(hal::parse_dtype("").has_value());
  CHECK_THROWS_WITH_AS(hal::require_dtype("f17"), doctest::Contains("dtype 'f17' is not known; use one of f32"),
                       hal::Error);
}

TEST_CASE("dtype sizes and kinds") {
  CHECK(hal::size_in_bytes(hal::DType::f32) == 4);
  CHECK(hal::size_in_bytes(hal::DType::bf16) == 2);
  CHECK(hal::size_in_bytes(hal::DType::f64) == 8);
  CHECK(hal::size_in_bytes(hal::DType::i8) == 1);
  CHECK(hal::is_floating_point(hal::DType::bf16));
  CHECK_FALSE(hal::is_floating_point(hal::DType::i32));
  CHECK_THROWS_WITH_AS(hal::size_in_bytes(static_cast<hal::DType>(42)), doctest::Contains("dtype code 42"), hal::Error);
}

TEST_CASE("resolved attention parameters make every default explicit") {
  const hal::AttentionParams params{.batch = 2, .heads_q = 8, .heads_kv = 2, .seq_q = 5, .head_dim_qk = 16};
  const hal::AttentionParams resolved = params.resolved();
  CHECK(resolved.seq_kv == 5);
  CHECK(resolved.head_dim_v == 16);
  REQUIRE(resolved.softmax_scale.has_value());
  CHECK(*resolved.softmax_scale == doctest::Approx(0.25));
  REQUIRE(resolved.q_strides.has_value());
  // bshd: [batch, seq, head, dim]
  CHECK(*resolved.q_strides == hal::TensorStrides{5 * 8 * 16, 16, 8 * 16, 1});
  CHECK(*resolved.k_strides == hal::TensorStrides{5 * 2 * 16, 16, 2 * 16, 1});
  CHECK(*resolved.grad_q_strides == *resolved.q_strides);
  // Resolving again changes nothing.
  CHECK(resolved.resolved().describe() == resolved.describe());
  CHECK(*resolved.resolved().v_strides == *resolved.v_strides);
}

TEST_CASE("attention FLOPs count the (query, key) pairs the mask lets through") {
  hal::AttentionParams params{.batch = 1, .heads_q = 2, .seq_q = 4, .seq_kv = 4, .head_dim_qk = 8};
  // 2 heads x 16 pairs; 2 (8 + 8) per pair forward, 2 (3 x 8 + 2 x 8) backward.
  CHECK(params.flops() == 2 * 16 * 32);
  CHECK(params.flops(true) == 2 * 16 * 80);
  params.causal = true;  // top-left: 1 + 2 + 3 + 4 keys per head
  CHECK(params.flops() == 2 * 10 * 32);
  params.window_left = 0;  // each query sees itself only
  CHECK(params.flops() == 2 * 4 * 32);
}
