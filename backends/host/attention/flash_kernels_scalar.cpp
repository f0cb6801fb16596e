// Flash kernels for any CPU: one float per "vector".
#include "attention/flash_kernels_impl.hpp"

#include <cstdint>

namespace hal::host::flash {
namespace {

struct VecScalar {
  using Reg = float;
  static constexpr int width = 1;
  static constexpr int tile_rows = 4;
  static constexpr int tile_vectors = 4;
  static Reg zero() { return 0.0f; }
  static Reg load(const float* source) { return *source; }
  static void store(float* destination, Reg value) { *destination = value; }
  static Reg broadcast(float value) { return value; }
  static Reg fmadd(Reg a, Reg b, Reg c) { return a * b + c; }
  static Reg add(Reg a, Reg b) { return a + b; }
  static Reg sub(Reg a, Reg b) { return a - b; }
  static Reg mul(Reg a, Reg b) { return a * b; }
  static Reg max(Reg a, Reg b) { return a > b ? a : b; }
  static Reg min(Reg a, Reg b) { return a < b ? a : b; }
  static float reduce_add(Reg value) { return value; }
  static float reduce_max(Reg value) { return value; }
  static Reg pow2_integer(Reg exponent) {
    return abi::float_from_bits(static_cast<std::uint32_t>(static_cast<std::int32_t>(exponent) + 127) << 23);
  }
  static Reg load_f16(const std::uint16_t* source) { return f16_bits_to_float(*source); }
  static Reg load_bf16(const std::uint16_t* source) { return bf16_bits_to_float(*source); }
  static void store_f16(std::uint16_t* destination, Reg value) { *destination = float_to_f16_bits(value); }
  static void store_bf16(std::uint16_t* destination, Reg value) { *destination = float_to_bf16_bits(value); }
};

}  // namespace

const KernelTable kernels_scalar = make_kernel_table<VecScalar>();

}  // namespace hal::host::flash
