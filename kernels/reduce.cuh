// Reductions: sum of squares to a double on the device, and the block-level helper the other
// kernels use. The grid is fixed (kReduceBlocks), so a result does not depend on scheduling.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {

constexpr int kReduceBlocks = 1024;

// *out (device) = sum of x[i]^2 in double; `partials` holds kReduceBlocks doubles.
void LaunchSumSquares(cudaStream_t s, size_t n, const float* x, double* partials, double* out);

// Sum of `v` over the block (blockDim.x a multiple of 32, at most 1024); the result is valid
// in every thread. Uses 32 doubles of shared memory.
__device__ inline double BlockSum(double v) {
  __shared__ double warp_sums[32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  const int warps = blockDim.x / 32;
  for (int w = 0; w < warps; ++w) total += warp_sums[w];
  return total;
}

}  // namespace shoal::cuda
