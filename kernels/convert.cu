#include "check.cuh"
#include "convert.cuh"

namespace shoal::cuda {
namespace {
__global__ void ToBf16(size_t n, const float* x, __nv_bfloat16* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void ToHalf(size_t n, const float* x, __half* y) {
  SHOAL_GRID_LOOP(i, n) y[i] = __float2half_rn(x[i]);
}
}  // namespace

void LaunchToBf16(cudaStream_t s, size_t n, const float* x, __nv_bfloat16* y) {
  if (n == 0) return;
  ToBf16<<<GridFor(n), 256, 0, s>>>(n, x, y);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchToHalf(cudaStream_t s, size_t n, const float* x, __half* y) {
  if (n == 0) return;
  ToHalf<<<GridFor(n), 256, 0, s>>>(n, x, y);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
