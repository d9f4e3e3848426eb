// Layer norm over the last dimension, forward and backward (torch.nn.LayerNorm semantics).
#pragma once
#include <cuda_runtime.h>

namespace shoal::cuda {
void LaunchLayerNorm(cudaStream_t s, int rows, int cols, const float* x, const float* gamma, const float* beta,
                     float eps, float* y, float* mean, float* rstd);
void LaunchLayerNormBackward(cudaStream_t s, int rows, int cols, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, float* dx, float* dgamma,
                             float* dbeta);
}  // namespace shoal::cuda
