#include "activation.cuh"
#include "check.cuh"

namespace shoal::cuda {
namespace {
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__global__ void Relu(size_t n, const float* x, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void ReluBackward(size_t n, const float* x, const float* dy, float* dx) {
  SHOAL_GRID_LOOP(i, n) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}
__global__ void Gelu(size_t n, const float* x, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * kInvSqrt2));
}
__global__ void GeluBackward(size_t n, const float* x, const float* dy, float* dx) {
  SHOAL_GRID_LOOP(i, n) {
    const float cdf = 0.5f * (1.0f + erff(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}
__global__ void GeluWithDerivative(size_t n, const float* x, float* y, float* dydx) {
  SHOAL_GRID_LOOP(i, n) {
    const float xi = x[i];  // dydx may alias x
    const float e = erff(xi * kInvSqrt2);
    const float cdf = 0.5f * (1.0f + e);
    const float pdf = kInvSqrt2Pi * expf(-0.5f * xi * xi);
    y[i] = 0.5f * xi * (1.0f + e);
    dydx[i] = cdf + xi * pdf;
  }
}
}  // namespace

void LaunchRelu(cudaStream_t s, size_t n, const float* x, float* y) {
  if (n == 0) return;
  Relu<<<GridFor(n), 256, 0, s>>>(n, x, y);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchReluBackward(cudaStream_t s, size_t n, const float* x, const float* dy, float* dx) {
  if (n == 0) return;
  ReluBackward<<<GridFor(n), 256, 0, s>>>(n, x, dy, dx);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchGelu(cudaStream_t s, size_t n, const float* x, float* y) {
  if (n == 0) return;
  Gelu<<<GridFor(n), 256, 0, s>>>(n, x, y);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchGeluBackward(cudaStream_t s, size_t n, const float* x, const float* dy, float* dx) {
  if (n == 0) return;
  GeluBackward<<<GridFor(n), 256, 0, s>>>(n, x, dy, dx);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchGeluWithDerivative(cudaStream_t s, size_t n, const float* x, float* y, float* dydx) {
  if (n == 0) return;
  GeluWithDerivative<<<GridFor(n), 256, 0, s>>>(n, x, y, dydx);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
