#include "check.cuh"
#include "layernorm.cuh"
#include "reduce.cuh"

namespace shoal::cuda {
namespace {

// One block per row; statistics in double, as in the CPU reference.
__global__ void LayerNormRows(int rows, int cols, const float* x, const float* gamma, const float* beta, float eps,
                              float* y, float* mean, float* rstd) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const double mu = BlockSum(s) / cols;
    double ss = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += (xr[c] - mu) * (xr[c] - mu);
    ss = BlockSum(ss);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(ss / cols + static_cast<double>(eps)));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
    float* yr = y + static_cast<size_t>(r) * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; one block per row.
__global__ void LayerNormBackwardRows(int rows, int cols, const float* x, const float* gamma, const float* mean,
                                      const float* rstd, const float* dy, float* dx) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    const float* dyr = dy + static_cast<size_t>(r) * cols;
    double sg = 0.0, sgx = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (xr[c] - mean[r]) * rstd[r];
      const float g = dyr[c] * gamma[c];
      sg += g;
      sgx += static_cast<double>(g) * xhat;
    }
    const float mg = static_cast<float>(BlockSum(sg) / cols);
    const float mgx = static_cast<float>(BlockSum(sgx) / cols);
    float* dxr = dx + static_cast<size_t>(r) * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (xr[c] - mean[r]) * rstd[r];
      dxr[c] = rstd[r] * (dyr[c] * gamma[c] - mg - xhat * mgx);
    }
  }
}

// dgamma[c] = sum_r dy * xhat, dbeta[c] = sum_r dy; one block per 32 columns (ColumnSums).
__global__ void LayerNormParamGrads(int rows, int cols, const float* x, const float* mean, const float* rstd,
                                    const float* dy, float* dgamma, float* dbeta) {
  const int c = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  double sums[2];
  ColumnSums<2>(rows, [&](int r, double (&acc)[2]) {
    if (c >= cols) return;
    const size_t i = static_cast<size_t>(r) * cols + c;
    const float xhat = (x[i] - mean[r]) * rstd[r];
    acc[0] += static_cast<double>(dy[i]) * xhat;
    acc[1] += dy[i];
  }, sums);
  if (threadIdx.y == 0 && c < cols) {
    dgamma[c] = static_cast<float>(sums[0]);
    dbeta[c] = static_cast<float>(sums[1]);
  }
}

unsigned RowBlocks(int rows) { return static_cast<unsigned>(rows < 65535 ? (rows > 0 ? rows : 1) : 65535); }

}  // namespace

void LaunchLayerNorm(cudaStream_t s, int rows, int cols, const float* x, const float* gamma, const float* beta,
                     float eps, float* y, float* mean, float* rstd) {
  if (rows <= 0 || cols <= 0) return;
  LayerNormRows<<<RowBlocks(rows), 256, 0, s>>>(rows, cols, x, gamma, beta, eps, y, mean, rstd);
  SHOAL_CUDA_LAUNCHED();
}

void LaunchLayerNormBackward(cudaStream_t s, int rows, int cols, const float* x, const float* gamma,
                             const float* mean, const float* rstd, const float* dy, float* dx, float* dgamma,
                             float* dbeta) {
  if (cols <= 0) return;
  if (rows > 0) {
    LayerNormBackwardRows<<<RowBlocks(rows), 256, 0, s>>>(rows, cols, x, gamma, mean, rstd, dy, dx);
    SHOAL_CUDA_LAUNCHED();
  }
  LayerNormParamGrads<<<ColumnSumGrid(cols), ColumnSumBlock(), 0, s>>>(rows, cols, x, mean, rstd, dy, dgamma, dbeta);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
