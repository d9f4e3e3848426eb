// y += alpha * x, x *= alpha, and the elementwise product.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {
void LaunchAxpy(cudaStream_t s, size_t n, float alpha, const float* x, float* y);
void LaunchScale(cudaStream_t s, size_t n, float alpha, float* x);
// out = a * b elementwise (out may alias a or b).
void LaunchMultiply(cudaStream_t s, size_t n, const float* a, const float* b, float* out);
}  // namespace shoal::cuda
