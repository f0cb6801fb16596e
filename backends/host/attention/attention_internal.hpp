// Helpers for the implementation units compiled for the baseline instruction
// set (not for the per-ISA kernel units, which avoid standard-library code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "attention/flash_kernels.hpp"

namespace hal::host {

// Throws std::invalid_argument listing every problem check_attention_params finds.
void require_valid_params(const hal_attention_params_v1& params, bool backward);
void require_pointer(const void* pointer, const char* name);
// Key ranges are passed exactly when params.key_ranges announces them.
void require_key_ranges(const hal_attention_params_v1& params, const std::int32_t* key_ranges);
// What every forward, and every backward, entry checks before it reads a
// tensor: the params, the key ranges and the pointers of the tensors all
// implementations read.
void require_forward_call(const hal_attention_params_v1& params, const std::int32_t* key_ranges, const void* q,
                          const void* k, const void* v, const void* o);
void require_backward_call(const hal_attention_params_v1& params, const std::int32_t* key_ranges, const void* q,
                           const void* k, const void* v, const void* grad_o, const void* grad_q, const void* grad_k,
                           const void* grad_v);

// The kernels of `isa`; throws std::invalid_argument when this CPU lacks it.
const flash::KernelTable& flash_kernel_table(FlashIsa isa);

// Uninitialized, 64-byte aligned floats or doubles: the kernels write before
// they read, and alignment keeps vector tiles on cache-line boundaries.
template <typename T>
class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t count)
      : data_(count == 0 ? nullptr
                         : static_cast<T*>(::operator new(count * sizeof(T), std::align_val_t{64}))) {}
  T* data() { return data_.get(); }

 private:
  struct Free {
    void operator()(T* pointer) const { ::operator delete(pointer, std::align_val_t{64}); }
  };
  std::unique_ptr<T, Free> data_;
};

// The calling thread's scratch of at least `count` floats, kept between its
// calls and grown when one needs more: a call then maps and faults in no
// fresh pages, which at short sequences costs more than the arithmetic.
// Past kReusedScratchFloats a call's scratch is its own (the time is the
// arithmetic's, and an idle thread should not hold that much). Valid until
// the calling thread's next attention call; not for nested use.
constexpr std::size_t kReusedScratchFloats = std::size_t{16} << 20;  // 64 MiB
class CallScratch {
 public:
  explicit CallScratch(std::size_t count);
  float* data() { return data_; }

 private:
  AlignedBuffer<float> own_{0};
  float* data_ = nullptr;
};

}  // namespace hal::host
