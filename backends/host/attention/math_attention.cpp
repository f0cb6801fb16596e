// The math (reference) implementation: per (batch, head) it materializes the
// seq_q x seq_kv scores, so it is simple to read and O(seq^2) in memory.
// One template serves f32 accumulation (math_*) and f64 (math_*_f64).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_common.hpp"
#include "attention/attention_internal.hpp"

namespace hal::host {
namespace {

// A tensor of the attention problem: data, element type, strides.
struct TensorRef {
  const void* data;
  hal_dtype dtype;
  hal_tensor_strides_v1 strides;
};

struct MutableTensorRef {
  void* data;
  hal_dtype dtype;
  hal_tensor_strides_v1 strides;
};

hal_tensor_strides_v1 contiguous_strides(std::int64_t heads, std::int64_t seq, std::int64_t dim) {
  return hal_tensor_strides_v1{heads * seq * dim, seq * dim, dim, 1};
}

// Workspace of one call, in accumulator elements. The same numbers drive
// the allocation and math_workspace_bytes, so the two cannot drift apart.
struct MathWorkspace {
  std::int64_t scores;      // forward: scores / probabilities; backward: P
  std::int64_t score_grads; // backward: dS
  std::int64_t queries;     // Q rows, then dO rows
  std::int64_t keys;        // K rows, K transposed, V rows, V transposed
  std::int64_t key_grads;   // dK and dV accumulators
  std::int64_t total() const { return scores + score_grads + queries + keys + key_grads; }
};

MathWorkspace math_workspace(const hal_attention_params_v1& p, bool backward) {
  const std::int64_t score_count = p.seq_q * p.seq_kv;
  if (!backward) {
    return {score_count, 0, p.seq_q * p.head_dim_qk, p.seq_kv * (p.head_dim_qk + p.head_dim_v), 0};
  }
  return {score_count, score_count, p.seq_q * (p.head_dim_qk + p.head_dim_v),
          2 * p.seq_kv * (p.head_dim_qk + p.head_dim_v), p.seq_kv * (p.head_dim_qk + p.head_dim_v)};
}

// Copies rows [0, rows) x dims [0, dims) of one (batch, head) into `out`,
// row-major (out[row * dims + dim]) or transposed (out[dim * rows + row]).
template <typename Acc>
void pack_head(const TensorRef& tensor, std::int64_t batch, std::int64_t head, std::int64_t rows,
               std::int64_t dims, Acc* out, bool transposed) {
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t dim = 0; dim < dims; ++dim) {
      const Acc value = static_cast<Acc>(
          load_as_double(tensor.dtype, tensor.data, element_offset(tensor.strides, batch, head, row, dim)));
      out[transposed ? dim * rows + row : row * dims + dim] = value;
    }
  }
}

// Scaled scores of query row `query_row` (dims long) against keys [first, last]
// given K transposed (dims x seq_kv): vectorizes over keys, no reduction.
template <typename Acc>
void score_row(const Acc* query_row, const Acc* keys_transposed, std::int64_t dims, std::int64_t seq_kv,
               KeyRange range, Acc scale, Acc* scores) {
  for (std::int64_t key = range.first; key <= range.last; ++key) scores[key] = 0;
  for (std::int64_t dim = 0; dim < dims; ++dim) {
    const Acc query_value = query_row[dim];
    const Acc* key_values = keys_transposed + dim * seq_kv;
    for (std::int64_t key = range.first; key <= range.last; ++key) scores[key] += query_value * key_values[key];
  }
  for (std::int64_t key = range.first; key <= range.last; ++key) scores[key] *= scale;
}

// Turns scores[first..last] into probabilities; returns the log-sum-exp.
template <typename Acc>
Acc softmax_row(KeyRange range, Acc* scores) {
  Acc row_max = -std::numeric_limits<Acc>::infinity();
  for (std::int64_t key = range.first; key <= range.last; ++key) row_max = std::max(row_max, scores[key]);
  Acc sum = 0;
  for (std::int64_t key = range.first; key <= range.last; ++key) {
    scores[key] = std::exp(scores[key] - row_max);
    sum += scores[key];
  }
  for (std::int64_t key = range.first; key <= range.last; ++key) scores[key] /= sum;
  return row_max + std::log(sum);
}

// out[0..dims) = sum over keys of probabilities[key] * values[key * dims ...].
template <typename Acc>
void weighted_value_sum(const Acc* probabilities, const Acc* values, std::int64_t dims, KeyRange range,
                        Acc* out) {
  for (std::int64_t dim = 0; dim < dims; ++dim) out[dim] = 0;
  for (std::int64_t key = range.first; key <= range.last; ++key) {
    const Acc weight = probabilities[key];
    const Acc* value_row = values + key * dims;
    for (std::int64_t dim = 0; dim < dims; ++dim) out[dim] += weight * value_row[dim];
  }
}

template <typename Acc>
void forward_impl(const hal_attention_params_v1& p, const std::int32_t* key_ranges, TensorRef q, TensorRef k,
                  TensorRef v, MutableTensorRef o, void* lse, hal_dtype lse_dtype, ThreadPool& pool) {
  const MathWorkspace sizes = math_workspace(p, false);
  AlignedBuffer<Acc> workspace(static_cast<std::size_t>(sizes.total()));
  Acc* scores = workspace.data();
  Acc* queries = scores + sizes.scores;
  Acc* keys_transposed = queries + sizes.queries;
  Acc* values = keys_transposed + p.head_dim_qk * p.seq_kv;
  const std::int64_t group_size = p.heads_q / p.heads_kv;
  const Acc scale = static_cast<Acc>(p.softmax_scale);

  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    for (std::int64_t head = 0; head < p.heads_q; ++head) {
      const std::int64_t kv_head = head / group_size;
      pack_head(q, batch, head, p.seq_q, p.head_dim_qk, queries, false);
      pack_head(k, batch, kv_head, p.seq_kv, p.head_dim_qk, keys_transposed, true);
      pack_head(v, batch, kv_head, p.seq_kv, p.head_dim_v, values, false);
      pool.parallel_for(p.seq_q, [&](std::int64_t begin, std::int64_t end) {
        std::vector<Acc> output_row(static_cast<std::size_t>(p.head_dim_v));
        for (std::int64_t query = begin; query < end; ++query) {
          const KeyRange range = visible_keys(p, key_ranges, batch, query);
          Acc log_sum_exp = -std::numeric_limits<Acc>::infinity();
          if (range.first > range.last) {
            std::fill(output_row.begin(), output_row.end(), Acc{0});
          } else {
            Acc* row_scores = scores + query * p.seq_kv;
            score_row(queries + query * p.head_dim_qk, keys_transposed, p.head_dim_qk, p.seq_kv, range, scale,
                      row_scores);
            log_sum_exp = softmax_row(range, row_scores);
            weighted_value_sum(row_scores, values, p.head_dim_v, range, output_row.data());
          }
          for (std::int64_t dim = 0; dim < p.head_dim_v; ++dim) {
            store_double(o.dtype, o.data, element_offset(o.strides, batch, head, query, dim), output_row[dim]);
          }
          if (lse != nullptr) {
            store_double(lse_dtype, lse, (batch * p.heads_q + head) * p.seq_q + query, log_sum_exp);
          }
        }
      });
    }
  }
}

template <typename Acc>
void backward_impl(const hal_attention_params_v1& p, const std::int32_t* key_ranges, TensorRef q, TensorRef k,
                   TensorRef v, TensorRef grad_o, MutableTensorRef grad_q, MutableTensorRef grad_k,
                   MutableTensorRef grad_v, ThreadPool& pool) {
  const MathWorkspace sizes = math_workspace(p, true);
  AlignedBuffer<Acc> workspace(static_cast<std::size_t>(sizes.total()));
  const std::int64_t dqk = p.head_dim_qk;
  const std::int64_t dv = p.head_dim_v;
  Acc* probabilities = workspace.data();
  Acc* score_grads = probabilities + sizes.scores;
  Acc* queries = score_grads + sizes.score_grads;
  Acc* output_grads = queries + p.seq_q * dqk;
  Acc* keys = output_grads + p.seq_q * dv;
  Acc* keys_transposed = keys + p.seq_kv * dqk;
  Acc* values = keys_transposed + p.seq_kv * dqk;
  Acc* values_transposed = values + p.seq_kv * dv;
  Acc* key_grads = values_transposed + p.seq_kv * dv;
  Acc* value_grads = key_grads + p.seq_kv * dqk;
  const std::int64_t group_size = p.heads_q / p.heads_kv;
  const Acc scale = static_cast<Acc>(p.softmax_scale);

  for (std::int64_t batch = 0; batch < p.batch; ++batch) {
    for (std::int64_t kv_head = 0; kv_head < p.heads_kv; ++kv_head) {
      pack_head(k, batch, kv_head, p.seq_kv, dqk, keys, false);
      pack_head(k, batch, kv_head, p.seq_kv, dqk, keys_transposed, true);
      pack_head(v, batch, kv_head, p.seq_kv, dv, values, false);
      pack_head(v, batch, kv_head, p.seq_kv, dv, values_transposed, true);
      std::fill(key_grads, key_grads + p.seq_kv * (dqk + dv), Acc{0});

      // GQA: the query heads sharing this kv head all add into its dK, dV.
      for (std::int64_t head = kv_head * group_size; head < (kv_head + 1) * group_size; ++head) {
        pack_head(q, batch, head, p.seq_q, dqk, queries, false);
        pack_head(grad_o, batch, head, p.seq_q, dv, output_grads, false);

        // Per query row: P, dS = P * (dP - rowsum(dO * O)), dQ = scale * dS K.
        pool.parallel_for(p.seq_q, [&](std::int64_t begin, std::int64_t end) {
          std::vector<Acc> row(static_cast<std::size_t>(std::max(dqk, dv)));
          for (std::int64_t query = begin; query < end; ++query) {
            const KeyRange range = visible_keys(p, key_ranges, batch, query);
            Acc* row_probabilities = probabilities + query * p.seq_kv;
            Acc* row_score_grads = score_grads + query * p.seq_kv;
            std::fill(row_probabilities, row_probabilities + p.seq_kv, Acc{0});
            std::fill(row_score_grads, row_score_grads + p.seq_kv, Acc{0});
            const Acc* query_output_grad = output_grads + query * dv;
            if (range.first <= range.last) {
              score_row(queries + query * dqk, keys_transposed, dqk, p.seq_kv, range, scale, row_probabilities);
              softmax_row(range, row_probabilities);
              weighted_value_sum(row_probabilities, values, dv, range, row.data());  // O of this row
              Acc output_dot_grad = 0;
              for (std::int64_t dim = 0; dim < dv; ++dim) output_dot_grad += row[dim] * query_output_grad[dim];
              // dP row = dO_row . V^T, vectorized over keys like score_row.
              score_row(query_output_grad, values_transposed, dv, p.seq_kv, range, Acc{1}, row_score_grads);
              for (std::int64_t key = range.first; key <= range.last; ++key) {
                row_score_grads[key] = row_probabilities[key] * (row_score_grads[key] - output_dot_grad);
              }
              weighted_value_sum(row_score_grads, keys, dqk, range, row.data());
            } else {
              std::fill(row.begin(), row.end(), Acc{0});
            }
            for (std::int64_t dim = 0; dim < dqk; ++dim) {
              store_double(grad_q.dtype, grad_q.data, element_offset(grad_q.strides, batch, head, query, dim),
                           scale * row[dim]);
            }
          }
        });

        // Per key row: dK += dS^T Q (scaled at the end), dV += P^T dO.
        pool.parallel_for(p.seq_kv, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t key = begin; key < end; ++key) {
            Acc* key_grad = key_grads + key * dqk;
            Acc* value_grad = value_grads + key * dv;
            for (std::int64_t query = 0; query < p.seq_q; ++query) {
              const Acc score_grad = score_grads[query * p.seq_kv + key];
              const Acc probability = probabilities[query * p.seq_kv + key];
              if (probability == 0 && score_grad == 0) continue;  // masked
              for (std::int64_t dim = 0; dim < dqk; ++dim) key_grad[dim] += score_grad * queries[query * dqk + dim];
              for (std::int64_t dim = 0; dim < dv; ++dim) {
                value_grad[dim] += probability * output_grads[query * dv + dim];
              }
            }
          }
        });
      }

      for (std::int64_t key = 0; key < p.seq_kv; ++key) {
        for (std::int64_t dim = 0; dim < dqk; ++dim) {
          store_double(grad_k.dtype, grad_k.data, element_offset(grad_k.strides, batch, kv_head, key, dim),
                       scale * key_grads[key * dqk + dim]);
        }
        for (std::int64_t dim = 0; dim < dv; ++dim) {
          store_double(grad_v.dtype, grad_v.data, element_offset(grad_v.strides, batch, kv_head, key, dim),
                       value_grads[key * dv + dim]);
        }
      }
    }
  }
}

TensorRef input(const hal_attention_params_v1& p, const void* data, const hal_tensor_strides_v1& strides) {
  return TensorRef{data, p.dtype, strides};
}

}  // namespace

void math_forward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v, void* o,
                  float* lse_or_null, ThreadPool& pool, const std::int32_t* key_ranges) {
  require_forward_call(params, key_ranges, q, k, v, o);
  forward_impl<float>(params, key_ranges, input(params, q, params.q_strides), input(params, k, params.k_strides),
                      input(params, v, params.v_strides), MutableTensorRef{o, params.dtype, params.o_strides},
                      lse_or_null, HAL_DTYPE_F32, pool);
}

void math_backward(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                   const void* /*o*/, const void* grad_o, const float* /*lse*/, void* grad_q, void* grad_k,
                   void* grad_v, ThreadPool& pool, const std::int32_t* key_ranges) {
  require_backward_call(params, key_ranges, q, k, v, grad_o, grad_q, grad_k, grad_v);
  backward_impl<float>(params, key_ranges, input(params, q, params.q_strides), input(params, k, params.k_strides),
                       input(params, v, params.v_strides), input(params, grad_o, params.grad_o_strides),
                       MutableTensorRef{grad_q, params.dtype, params.grad_q_strides},
                       MutableTensorRef{grad_k, params.dtype, params.grad_k_strides},
                       MutableTensorRef{grad_v, params.dtype, params.grad_v_strides}, pool);
}

void math_forward_f64(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                      double* o, double* lse_or_null, ThreadPool& pool, const std::int32_t* key_ranges) {
  require_forward_call(params, key_ranges, q, k, v, o);
  forward_impl<double>(
      params, key_ranges, input(params, q, params.q_strides), input(params, k, params.k_strides),
      input(params, v, params.v_strides),
      MutableTensorRef{o, HAL_DTYPE_F64, contiguous_strides(params.heads_q, params.seq_q, params.head_dim_v)},
      lse_or_null, HAL_DTYPE_F64, pool);
}

void math_backward_f64(const hal_attention_params_v1& params, const void* q, const void* k, const void* v,
                       const void* grad_o, double* grad_q, double* grad_k, double* grad_v, ThreadPool& pool,
                       const std::int32_t* key_ranges) {
  require_backward_call(params, key_ranges, q, k, v, grad_o, grad_q, grad_k, grad_v);
  backward_impl<double>(
      params, key_ranges, input(params, q, params.q_strides), input(params, k, params.k_strides),
      input(params, v, params.v_strides), input(params, grad_o, params.grad_o_strides),
      MutableTensorRef{grad_q, HAL_DTYPE_F64, contiguous_strides(params.heads_q, params.seq_q, params.head_dim_qk)},
      MutableTensorRef{grad_k, HAL_DTYPE_F64, contiguous_strides(params.heads_kv, params.seq_kv, params.head_dim_qk)},
      MutableTensorRef{grad_v, HAL_DTYPE_F64, contiguous_strides(params.heads_kv, params.seq_kv, params.head_dim_v)},
      pool);
}

std::uint64_t math_workspace_bytes(const hal_attention_params_v1& params, bool backward) {
  require_valid_params(params, backward);
  return static_cast<std::uint64_t>(math_workspace(params, backward).total()) * sizeof(float);
}

}  // namespace hal::host
