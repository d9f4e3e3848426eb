// Fused SGD (momentum, Nesterov, weight decay) and AdamW steps over a whole arena, with the
// CPU reference's arithmetic in the same order (bit-identical with --fmad=false).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {
void LaunchSgdStep(cudaStream_t s, size_t n, float* w, const float* grad, float* buf, float lr, float momentum,
                   float weight_decay, bool nesterov, bool first_step);
// step_size = lr / (1 - beta1^t) and bc2_sqrt = sqrt(1 - beta2^t), computed on the host in
// double as the CPU backend does.
void LaunchAdamWStep(cudaStream_t s, size_t n, float* w, const float* grad, float* m, float* v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float step_size, float bc2_sqrt);
}  // namespace shoal::cuda
