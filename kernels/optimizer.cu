#include "check.cuh"
#include "optimizer.cuh"

namespace shoal::cuda {
namespace {
__global__ void Sgd(size_t n, float* w, const float* grad, float* buf, float lr, float momentum, float wd,
                    bool nesterov, bool first_step) {
  SHOAL_GRID_LOOP(i, n) {
    float g = grad[i];
    if (wd != 0.0f) g += wd * w[i];
    if (momentum != 0.0f) {
      buf[i] = first_step ? g : momentum * buf[i] + g;
      g = nesterov ? g + momentum * buf[i] : buf[i];
    }
    w[i] -= lr * g;
  }
}
__global__ void AdamW(size_t n, float* w, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
                      float eps, float wd, float step_size, float bc2_sqrt) {
  SHOAL_GRID_LOOP(i, n) {
    w[i] *= 1.0f - lr * wd;
    m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
    const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * m[i] / denom;
  }
}
}  // namespace

void LaunchSgdStep(cudaStream_t s, size_t n, float* w, const float* grad, float* buf, float lr, float momentum,
                   float weight_decay, bool nesterov, bool first_step) {
  if (n == 0) return;
  Sgd<<<GridFor(n), 256, 0, s>>>(n, w, grad, buf, lr, momentum, weight_decay, nesterov, first_step);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchAdamWStep(cudaStream_t s, size_t n, float* w, const float* grad, float* m, float* v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, float step_size, float bc2_sqrt) {
  if (n == 0) return;
  AdamW<<<GridFor(n), 256, 0, s>>>(n, w, grad, m, v, lr, beta1, beta2, eps, weight_decay, step_size, bc2_sqrt);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
