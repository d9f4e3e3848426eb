// Bias forward (y[r, c] += bias[c]) and its gradient (column sums of dy).
#pragma once
#include <cuda_runtime.h>

namespace shoal::cuda {
void LaunchAddBiasRows(cudaStream_t s, int rows, int cols, const float* bias, float* y);
// out[c] = beta * out[c] + sum over r of x[r, c], summed in double in row order (deterministic).
void LaunchSumRows(cudaStream_t s, int rows, int cols, const float* x, float beta, float* out);
}  // namespace shoal::cuda
