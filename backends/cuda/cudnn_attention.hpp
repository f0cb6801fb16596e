// cuDNN's fused attention (the SDPA graph, forward and backward) behind
// backend::FusedAttention. Declares a factory only, so that including it does
// not pull in the cuDNN frontend.
#pragma once

#include <memory>

#include "fused_attention.hpp"

namespace hal::cuda {

struct Context;

// Fused attention on cuDNN for the context's devices; the context (its driver,
// cuDNN and devices) must outlive it. Never null: where it cannot run (cuDNN
// missing, a build without the cuDNN frontend headers) supports() says why.
std::unique_ptr<backend::FusedAttention> make_cudnn_attention(const Context& context);

}  // namespace hal::cuda
