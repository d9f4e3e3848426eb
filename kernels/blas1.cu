#include "blas1.cuh"
#include "check.cuh"

namespace shoal::cuda {
namespace {
__global__ void Axpy(size_t n, float alpha, const float* x, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] += alpha * x[i];
}
__global__ void ScaleKernel(size_t n, float alpha, float* x) {
  SHOAL_GRID_LOOP(i, n) x[i] *= alpha;
}
__global__ void MultiplyKernel(size_t n, const float* a, const float* b, float* out) {
  SHOAL_GRID_LOOP(i, n) out[i] = a[i] * b[i];
}
}  // namespace

void LaunchAxpy(cudaStream_t s, size_t n, float alpha, const float* x, float* y) {
  if (n == 0) return;
  Axpy<<<GridFor(n), 256, 0, s>>>(n, alpha, x, y);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchScale(cudaStream_t s, size_t n, float alpha, float* x) {
  if (n == 0) return;
  ScaleKernel<<<GridFor(n), 256, 0, s>>>(n, alpha, x);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchMultiply(cudaStream_t s, size_t n, const float* a, const float* b, float* out) {
  if (n == 0) return;
  MultiplyKernel<<<GridFor(n), 256, 0, s>>>(n, a, b, out);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
