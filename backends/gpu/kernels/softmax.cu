// Row softmax, f32: the math attention path's normalization step, written
// once for CUDA and HIP (only __global__, __shared__, __syncthreads and
// built-in indices; no vendor intrinsics).
//
// One block per row; the block size is a power of two, at most 1024.
// out[row, j] = exp(in[row, j] - max_row) / sum_k exp(in[row, k] - max_row)

#define HAL_SOFTMAX_MAX_THREADS 1024

extern "C" __global__ void hal_softmax_rows_f32(const float* input, float* output, int rows, int columns) {
  __shared__ float partial[HAL_SOFTMAX_MAX_THREADS];
  const int row = blockIdx.x;
  if (row >= rows) return;
  const float* in = input + static_cast<long long>(row) * columns;
  float* out = output + static_cast<long long>(row) * columns;
  const int thread = threadIdx.x;
  const int threads = blockDim.x;

  // Subtracting the row maximum keeps exp() from overflowing.
  float local_max = -INFINITY;
  for (int j = thread; j < columns; j += threads) local_max = fmaxf(local_max, in[j]);
  partial[thread] = local_max;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (thread < stride) partial[thread] = fmaxf(partial[thread], partial[thread + stride]);
    __syncthreads();
  }
  const float row_max = partial[0];
  __syncthreads();

  float local_sum = 0.0f;
  for (int j = thread; j < columns; j += threads) local_sum += expf(in[j] - row_max);
  partial[thread] = local_sum;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (thread < stride) partial[thread] += partial[thread + stride];
    __syncthreads();
  }
  // A row of -inf has no maximum to subtract: it becomes zeros, not NaN.
  const float scale = row_max == -INFINITY ? 0.0f : 1.0f / partial[0];
  for (int j = thread; j < columns; j += threads) out[j] = row_max == -INFINITY ? 0.0f : expf(in[j] - row_max) * scale;
}
