// The SIMT emulator itself: barriers order shared-memory traffic, warp
// collectives exchange what the hardware would, and misuse is reported.
#include <doctest/doctest.h>

#include "simt.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace {

__device__ float bf16_to_float(std::uint32_t bits) { return __int_as_float(static_cast<int>(bits << 16)); }

// Small integers are exact in bf16: the upper 16 bits of their f32 pattern.
std::uint32_t bf16_of(int value) { return static_cast<std::uint32_t>(__float_as_int(static_cast<float>(value))) >> 16; }

__global__ void reverse_through_shared(const int* input, int* output) {
  __shared__ int staged[64];
  staged[threadIdx.x] = input[threadIdx.x];
  __syncthreads();
  output[threadIdx.x] = staged[blockDim.x - 1 - threadIdx.x];
}

__global__ void barrier_in_one_branch(int* output) {
  if (threadIdx.x % 2 == 0) {
    output[threadIdx.x] = 2;
    __syncthreads();
  } else {
    __syncthreads();
    output[threadIdx.x] = 3;
  }
}

__global__ void early_return_before_barrier(int* output) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  output[threadIdx.x] = 1;
}

}  // namespace

TEST_CASE("simt: blocks see their own shared memory and indices, barriers order it") {
  std::vector<int> input(64), output(64, -1);
  for (int i = 0; i < 64; ++i) input[i] = i * 7;
  CHECK(hal_simt::launch([&] { reverse_through_shared(input.data(), output.data()); }, dim3(1), dim3(64), 0).empty());
  for (int i = 0; i < 64; ++i) CHECK(output[i] == input[63 - i]);

  std::vector<int> seen(2 * 3 * 4, 0);
  const std::string error = hal_simt::launch(
      [&] {
        if (threadIdx.x == 0) seen[(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] += 1;
      },
      dim3(2, 3, 4), dim3(8), 0);
  CHECK(error.empty());
  for (int count : seen) CHECK(count == 1);
}

TEST_CASE("simt: divergent or partial barriers are errors") {
  std::vector<int> output(64, 0);
  CHECK(hal_simt::launch([&] { barrier_in_one_branch(output.data()); }, dim3(1), dim3(64), 0) ==
        "threads of one block wait at different __syncthreads");
  CHECK(hal_simt::launch([&] { early_return_before_barrier(output.data()); }, dim3(1), dim3(8), 0) ==
        "__syncthreads reached by 7 of 8 threads (the others returned)");
  CHECK(hal_simt::launch([] {}, dim3(1), dim3(2048), 0).find("2048 threads") != std::string::npos);
}

TEST_CASE("simt: warp shuffles exchange within a warp") {
  std::vector<float> output(64, 0.0f);
  const std::string error = hal_simt::launch(
      [&] {
        const float mine = static_cast<float>(threadIdx.x);
        const float once = __shfl_xor_sync(0xffffffffu, mine, 1);
        output[threadIdx.x] = __shfl_xor_sync(0xffffffffu, once, 16);  // two collectives in a row
      },
      dim3(1), dim3(64), 0);
  CHECK(error.empty());
  for (unsigned t = 0; t < 64; ++t) CHECK(output[t] == static_cast<float>(t ^ 1u ^ 16u));

  CHECK(hal_simt::launch(
            [&] {
              if (threadIdx.x != 5) output[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
            },
            dim3(1), dim3(32), 0)
            .find("warp collective") != std::string::npos);
}

TEST_CASE("simt: mma_m16n8k16 multiplies with the PTX fragment layout") {
  int a[16][16], b[16][8];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) a[r][k] = (r * 3 + k * 5) % 7 - 3;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) b[k][n] = (k * 2 + n * 3) % 5 - 2;
  std::vector<float> d(16 * 8, 0.0f);
  const std::string error = hal_simt::launch(
      [&] {
        const int lane = static_cast<int>(threadIdx.x);
        const int group = lane / 4, t = lane % 4;
        auto pair = [](int low, int high) { return bf16_of(low) | (bf16_of(high) << 16); };
        const std::uint32_t a_fragment[4] = {pair(a[group][2 * t], a[group][2 * t + 1]),
                                             pair(a[group + 8][2 * t], a[group + 8][2 * t + 1]),
                                             pair(a[group][2 * t + 8], a[group][2 * t + 9]),
                                             pair(a[group + 8][2 * t + 8], a[group + 8][2 * t + 9])};
        const std::uint32_t b_fragment[2] = {pair(b[2 * t][group], b[2 * t + 1][group]),
                                             pair(b[2 * t + 8][group], b[2 * t + 9][group])};
        float c[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        hal_simt::mma_m16n8k16(c, a_fragment, b_fragment, bf16_to_float);
        d[group * 8 + 2 * t] = c[0];
        d[group * 8 + 2 * t + 1] = c[1];
        d[(group + 8) * 8 + 2 * t] = c[2];
        d[(group + 8) * 8 + 2 * t + 1] = c[3];
      },
      dim3(1), dim3(32), 0);
  REQUIRE(error.empty());
  for (int r = 0; r < 16; ++r) {
    for (int n = 0; n < 8; ++n) {
      int want = 1;
      for (int k = 0; k < 16; ++k) want += a[r][k] * b[k][n];
      CHECK(d[r * 8 + n] == static_cast<float>(want));
    }
  }
}
