// Causal softmax over attention scores, forward and backward (Backend::CausalSoftmax): row i
// of each [n, n] matrix is softmax(scale * x[i, 0..i]) and 0 after; the backward pass gives
// dx = scale * p * (dp - sum_j p_j dp_j). One block per row; the row's max and sums are
// reduced in double, as in the CPU reference, so the two agree to rounding.
#pragma once
#include <cuda_runtime.h>

namespace shoal::cuda {
void LaunchCausalSoftmax(cudaStream_t s, int mats, int n, float scale, float* x);
void LaunchCausalSoftmaxBackward(cudaStream_t s, int mats, int n, float scale, const float* p, const float* dp,
                                 float* dx);
}  // namespace shoal::cuda
