// ReLU and exact GELU (x * Phi(x), with erf), forward and backward.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {
void LaunchRelu(cudaStream_t s, size_t n, const float* x, float* y);
void LaunchReluBackward(cudaStream_t s, size_t n, const float* x, const float* dy, float* dx);
void LaunchGelu(cudaStream_t s, size_t n, const float* x, float* y);
void LaunchGeluBackward(cudaStream_t s, size_t n, const float* x, const float* dy, float* dx);
// y = Gelu(x) and dydx = Phi(x) + x phi(x) (dydx may alias x).
void LaunchGeluWithDerivative(cudaStream_t s, size_t n, const float* x, float* y, float* dydx);
}  // namespace shoal::cuda
