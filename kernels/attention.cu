#include "attention.cuh"
#include "check.cuh"
#include "reduce.cuh"

#include <cmath>

namespace shoal::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxGrid = 65535;

// The largest of `v` over the block (blockDim.x a multiple of 32); valid in every thread.
__device__ float BlockMax(float v) {
  __shared__ float warp_max[32];
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) top = fmaxf(top, warp_max[w]);
  return top;
}

__global__ void CausalSoftmaxRows(long long rows, int n, float scale, float* x) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = x + r * n;
    const int seen = static_cast<int>(r % n) + 1;
    float top = -INFINITY;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) top = fmaxf(top, scale * row[j]);
    top = BlockMax(top);
    double sum = 0.0;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) {
      const float e = expf(scale * row[j] - top);
      row[j] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / BlockSum(sum));
    for (int j = threadIdx.x; j < n; j += blockDim.x) row[j] = j < seen ? row[j] * inv : 0.0f;
  }
}

__global__ void CausalSoftmaxBackwardRows(long long rows, int n, float scale, const float* p, const float* dp,
                                          float* dx) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* pr = p + r * n;
    const float* dpr = dp + r * n;
    float* dxr = dx + r * n;
    const int seen = static_cast<int>(r % n) + 1;
    double dot = 0.0;
    for (int j = threadIdx.x; j < seen; j += blockDim.x) dot += static_cast<double>(pr[j]) * dpr[j];
    const float d = static_cast<float>(BlockSum(dot));
    for (int j = threadIdx.x; j < n; j += blockDim.x) dxr[j] = j < seen ? scale * pr[j] * (dpr[j] - d) : 0.0f;
  }
}

int Grid(long long rows) { return static_cast<int>(rows < kMaxGrid ? rows : kMaxGrid); }

}  // namespace

void LaunchCausalSoftmax(cudaStream_t s, int mats, int n, float scale, float* x) {
  const long long rows = static_cast<long long>(mats) * n;
  if (rows == 0) return;
  CausalSoftmaxRows<<<Grid(rows), kThreads, 0, s>>>(rows, n, scale, x);
  SHOAL_CUDA_LAUNCHED();
}

void LaunchCausalSoftmaxBackward(cudaStream_t s, int mats, int n, float scale, const float* p, const float* dp,
                                 float* dx) {
  const long long rows = static_cast<long long>(mats) * n;
  if (rows == 0) return;
  CausalSoftmaxBackwardRows<<<Grid(rows), kThreads, 0, s>>>(rows, n, scale, p, dp, dx);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
