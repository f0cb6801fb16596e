// A vendor library's fused attention (cuDNN's SDPA graph on CUDA), seen by
// the shared GPU attention engine as one more implementation next to the
// kernels' flash and the math path. The vendor backend owns the library; the
// engine asks it what it supports and runs it.
#pragma once

#include <cstdint>
#include <string>

#include "hal/backend_abi.h"

namespace hal::backend {

// Device addresses of one call's tensors, already offset; 0 when unused
// (lse when the caller does not want it).
struct AttentionAddresses {
  std::uint64_t q = 0, k = 0, v = 0, o = 0, lse = 0;
  std::uint64_t grad_o = 0, grad_q = 0, grad_k = 0, grad_v = 0;
  std::uint64_t key_ranges = 0;  // int32 [batch][seq_q][2] when the params announce them
  // The caller's scratch (hal_attention_call_v1.workspace); 0: the call allocates its own.
  std::uint64_t workspace = 0, workspace_bytes = 0;
};

class FusedAttention {
 public:
  virtual ~FusedAttention() = default;
  // Empty when the library can run at all (it is built in and loaded);
  // otherwise why not, for the capability note. Shapes are supports()'s.
  virtual std::string unavailable() const = 0;
  // Empty when the library can run params on device; otherwise the reasons,
  // one per line, in the library's own words where it gave any.
  virtual std::string supports(std::uint32_t device, const hal_attention_params_v1& params, bool backward) = 0;
  virtual hal_status workspace_size(std::uint32_t device, const hal_attention_params_v1& params, bool backward,
                                    std::uint64_t* bytes) = 0;
  // Stream-ordered; `stream` belongs to the same backend.
  virtual hal_status forward(hal_stream* stream, const hal_attention_params_v1& params,
                             const AttentionAddresses& tensors) = 0;
  virtual hal_status backward(hal_stream* stream, const hal_attention_params_v1& params,
                              const AttentionAddresses& tensors) = 0;
};

}  // namespace hal::backend
