// hal.torch's reading of a boolean attention mask as per-query key ranges,
// in one pass over the mask's bytes (python/hal/torch/__init__.py,
// mask_key_ranges): torch's elementwise passes cost a third to a half of
// the masked attention they let hal run at seq 256-512.
#include <nanobind/stl/array.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "bindings.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace hal::python {
namespace {

using Shape4 = std::array<std::int64_t, 4>;

// A query's visible keys in a row of bool bytes: [begin, end) and how many.
struct Visible {
  std::int64_t begin = -1, end = -1, count = 0;
};

Visible strided_row(const std::uint8_t* row, std::int64_t seq_kv, std::int64_t stride) {
  Visible seen;
  for (std::int64_t k = 0; k < seq_kv; ++k) {
    if (row[k * stride] == 0) continue;
    if (seen.begin < 0) seen.begin = k;
    seen.end = k + 1;
    ++seen.count;
  }
  return seen;
}

// The same for contiguous bytes, eight at a time: the first and last visible
// key, and whether every byte between them is set (then count = end - begin).
Visible contiguous_row(const std::uint8_t* row, std::int64_t seq_kv) {
  constexpr std::uint64_t kAllSet = 0x0101010101010101ull;  // bool bytes are 0 or 1
  const auto word_at = [&](std::int64_t k) {
    std::uint64_t word;
    std::memcpy(&word, row + k, sizeof word);
    return word;
  };
  Visible seen;
  std::int64_t k = 0;
  for (; k + 8 <= seq_kv && word_at(k) == 0; k += 8) {
  }
  while (k < seq_kv && row[k] == 0) ++k;
  if (k == seq_kv) return seen;  // no visible key
  seen.begin = k;
  std::int64_t last = seq_kv;
  for (; last - 8 >= k && word_at(last - 8) == 0; last -= 8) {
  }
  while (row[last - 1] == 0) --last;
  seen.end = last;
  std::int64_t i = seen.begin;
  for (; i + 8 <= seen.end && word_at(i) == kAllSet; i += 8) {
  }
  while (i < seen.end && row[i] != 0) ++i;
  seen.count = i == seen.end ? seen.end - seen.begin : -1;  // -1: a hidden key inside
  return seen;
}

// mask: bool bytes of shape (batch, heads, seq_q, seq_kv) with element strides
// (0 for a broadcast axis); out: int32 (batch, seq_q, 2), contiguous. True when
// every head has the same pattern and each query's visible keys are one
// interval (written as [begin, end); an empty one as [0, 0)); false, with out
// partly written, otherwise.
bool bool_mask_key_ranges(std::uintptr_t mask_address, const Shape4& shape, const Shape4& strides,
                          std::uintptr_t out_address) {
  const auto* mask = reinterpret_cast<const std::uint8_t*>(mask_address);
  auto* out = reinterpret_cast<std::int32_t*>(out_address);
  const auto [batch, heads, seq_q, seq_kv] = shape;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t q = 0; q < seq_q; ++q) {
      const std::uint8_t* row = mask + b * strides[0] + q * strides[2];
      const auto [begin, end, count] = strides[3] == 1 ? contiguous_row(row, seq_kv) : strided_row(row, seq_kv, strides[3]);
      if (count != 0 && count != end - begin) return false;  // a hidden key between visible ones
      for (std::int64_t h = 1; h < heads && strides[1] != 0; ++h) {
        const std::uint8_t* other = row + h * strides[1];
        for (std::int64_t k = 0; k < seq_kv; ++k) {
          if ((other[k * strides[3]] != 0) != (k >= begin && k < end && count != 0)) return false;
        }
      }
      std::int32_t* range = out + (b * seq_q + q) * 2;
      range[0] = count == 0 ? 0 : static_cast<std::int32_t>(begin);
      range[1] = count == 0 ? 0 : static_cast<std::int32_t>(end);
    }
  }
  return true;
}

}  // namespace

void bind_masks(nb::module_& m) {
  m.def(
      "_bool_mask_key_ranges",
      [](std::uintptr_t mask, const Shape4& shape, const Shape4& strides, std::uintptr_t out) {
        nb::gil_scoped_release release;
        return bool_mask_key_ranges(mask, shape, strides, out);
      },
      "mask"_a, "shape"_a, "strides"_a, "out"_a,
      "A host boolean mask (bytes at `mask`, shape (batch, heads, seq_q, seq_kv), element strides) read as int32 key "
      "ranges into `out` (batch, seq_q, 2): False when the heads differ or a query's visible keys are not one "
      "interval.");
}

}  // namespace hal::python
