// y += alpha * x and x *= alpha.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {
void LaunchAxpy(cudaStream_t s, size_t n, float alpha, const float* x, float* y);
void LaunchScale(cudaStream_t s, size_t n, float alpha, float* x);
}  // namespace shoal::cuda
