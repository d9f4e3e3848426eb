#include "check.cuh"
#include "reduce.cuh"

namespace shoal::cuda {
namespace {
__global__ void SumSquaresPartials(size_t n, const float* x, double* partials) {
  double s = 0.0;
  SHOAL_GRID_LOOP(i, n) s += static_cast<double>(x[i]) * x[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
__global__ void SumPartials(const double* partials, int count, double* out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) *out = s;
}
}  // namespace

void LaunchSumSquares(cudaStream_t s, size_t n, const float* x, double* partials, double* out) {
  SumSquaresPartials<<<kReduceBlocks, 256, 0, s>>>(n, x, partials);
  SHOAL_CUDA_LAUNCHED();
  SumPartials<<<1, 256, 0, s>>>(partials, kReduceBlocks, out);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
