#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_common.hpp"
#include "attention/attention_kernels.hpp"
#include "dtype_codes.hpp"

namespace hal::host {
namespace {

// The raw integer of an enum field filled in by C code: reading it as the C++
// enum type is undefined when the value is outside the enumerators' range.
template <typename Enum>
std::underlying_type_t<Enum> raw_value(const Enum& field) {
  std::underlying_type_t<Enum> raw;
  std::memcpy(&raw, &field, sizeof raw);
  return raw;
}

struct AxisExtents {
  std::int64_t batch, head, seq, dim;
  const char* head_name;
  const char* seq_name;
  const char* dim_name;
};

void check_strides(const char* tensor, const hal_tensor_strides_v1& strides, const AxisExtents& extents,
                   std::vector<std::string>& problems) {
  struct Axis {
    const char* name;
    std::int64_t stride;
    std::int64_t extent;
    const char* extent_name;
  };
  const Axis axes[] = {{"batch", strides.batch, extents.batch, "batch"},
                       {"head", strides.head, extents.head, extents.head_name},
                       {"seq", strides.seq, extents.seq, extents.seq_name},
                       {"dim", strides.dim, extents.dim, extents.dim_name}};
  for (const Axis& axis : axes) {
    if (axis.stride >= 0 && (axis.stride != 0 || axis.extent <= 1)) continue;  // text only for a problem
    std::ostringstream problem;
    if (axis.stride < 0) {
      problem << tensor << "_strides." << axis.name << " (" << axis.stride
              << ") is negative: strides must be positive";
    } else {
      problem << tensor << "_strides." << axis.name << " is 0 but " << axis.extent_name << " is "
              << axis.extent << ": a zero stride is only allowed on an axis of extent 1";
    }
    problems.push_back(problem.str());
  }
}

}  // namespace

std::vector<std::string> check_attention_params(const hal_attention_params_v1& params, bool backward) {
  std::vector<std::string> problems;
  auto add = [&problems](auto&&... parts) {
    std::ostringstream problem;
    (problem << ... << parts);
    problems.push_back(problem.str());
  };

  if (params.struct_size < HAL_ATTENTION_PARAMS_V1_MIN_SIZE) {
    add("struct_size (", params.struct_size, ") is smaller than hal_attention_params_v1 (",
        HAL_ATTENTION_PARAMS_V1_MIN_SIZE, " bytes)");
    return problems;  // the fields past struct_size are not there to check
  }

  const std::pair<const char*, std::int64_t> sizes[] = {
      {"batch", params.batch},           {"heads_q", params.heads_q},
      {"heads_kv", params.heads_kv},     {"seq_q", params.seq_q},
      {"seq_kv", params.seq_kv},         {"head_dim_qk", params.head_dim_qk},
      {"head_dim_v", params.head_dim_v}};
  bool sizes_positive = true;
  for (const auto& [name, value] : sizes) {
    if (value <= 0) {
      add(name, " (", value, ") must be positive");
      sizes_positive = false;
    }
  }
  if (params.heads_q > 0 && params.heads_kv > 0 && params.heads_q % params.heads_kv != 0) {
    add("heads_q (", params.heads_q, ") is not a multiple of heads_kv (", params.heads_kv, ")");
  }

  const auto dtype = raw_value(params.dtype);
  if (dtype != HAL_DTYPE_F32 && dtype != HAL_DTYPE_F16 && dtype != HAL_DTYPE_BF16) {
    const char* name = dtype >= HAL_DTYPE_F32 && dtype <= HAL_DTYPE_I64 ? abi::dtype_name(params.dtype) : nullptr;
    if (name != nullptr) {
      add("dtype ", name, " is not supported: use f32, f16 or bf16");
    } else {
      add("dtype (", static_cast<long long>(dtype), ") is not a hal_dtype: use f32, f16 or bf16");
    }
  }
  if (params.causal != 0 && params.causal != 1) add("causal (", params.causal, ") must be 0 or 1");
  const auto alignment = raw_value(params.alignment);
  if (alignment != HAL_MASK_TOP_LEFT && alignment != HAL_MASK_BOTTOM_RIGHT) {
    add("alignment (", static_cast<long long>(alignment),
        ") must be HAL_MASK_TOP_LEFT (0) or HAL_MASK_BOTTOM_RIGHT (1)");
  }
  if (params.window_left < -1) {
    add("window_left (", params.window_left, ") must be -1 (unbounded) or at least 0");
  }
  if (params.window_right < -1) {
    add("window_right (", params.window_right, ") must be -1 (unbounded) or at least 0");
  }
  if (!std::isfinite(params.softmax_scale)) {
    add("softmax_scale (", params.softmax_scale, ") must be finite");
  }
  if (params.return_lse != 0 && params.return_lse != 1) {
    add("return_lse (", params.return_lse, ") must be 0 or 1");
  }

  if (sizes_positive) {
    const AxisExtents query{params.batch, params.heads_q, params.seq_q, params.head_dim_qk,
                            "heads_q", "seq_q", "head_dim_qk"};
    const AxisExtents key{params.batch, params.heads_kv, params.seq_kv, params.head_dim_qk,
                          "heads_kv", "seq_kv", "head_dim_qk"};
    const AxisExtents value{params.batch, params.heads_kv, params.seq_kv, params.head_dim_v,
                            "heads_kv", "seq_kv", "head_dim_v"};
    const AxisExtents output{params.batch, params.heads_q, params.seq_q, params.head_dim_v,
                             "heads_q", "seq_q", "head_dim_v"};
    check_strides("q", params.q_strides, query, problems);
    check_strides("k", params.k_strides, key, problems);
    check_strides("v", params.v_strides, value, problems);
    check_strides("o", params.o_strides, output, problems);
    if (backward) {
      check_strides("grad_o", params.grad_o_strides, output, problems);
      check_strides("grad_q", params.grad_q_strides, query, problems);
      check_strides("grad_k", params.grad_k_strides, key, problems);
      check_strides("grad_v", params.grad_v_strides, value, problems);
    }
  }
  return problems;
}

double attention_flops(const hal_attention_params_v1& p, bool backward) {
  double pairs = 0.0;
  for (std::int64_t query = 0; query < p.seq_q; ++query) {
    const KeyRange range = visible_keys(p, query);
    if (range.first <= range.last) pairs += static_cast<double>(range.last - range.first + 1);
  }
  pairs *= static_cast<double>(p.batch * p.heads_q);
  const double dims = backward ? 3.0 * p.head_dim_qk + 2.0 * p.head_dim_v
                               : static_cast<double>(p.head_dim_qk + p.head_dim_v);
  return 2.0 * pairs * dims;
}

}  // namespace hal::host
