#include "bias.cuh"
#include "check.cuh"

namespace shoal::cuda {
namespace {
__global__ void AddBiasRows(size_t n, int cols, const float* bias, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] += bias[i % static_cast<size_t>(cols)];
}
// One thread per column: consecutive threads read consecutive addresses of each row.
__global__ void SumRows(int rows, int cols, const float* x, float beta, float* out) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += blockDim.x * gridDim.x) {
    double s = 0.0;
    for (int r = 0; r < rows; ++r) s += x[static_cast<size_t>(r) * cols + c];
    out[c] = (beta == 0.0f ? 0.0f : beta * out[c]) + static_cast<float>(s);
  }
}
}  // namespace

void LaunchAddBiasRows(cudaStream_t s, int rows, int cols, const float* bias, float* y) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  AddBiasRows<<<GridFor(n), 256, 0, s>>>(n, cols, bias, y);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchSumRows(cudaStream_t s, int rows, int cols, const float* x, float beta, float* out) {
  if (cols <= 0) return;
  SumRows<<<GridFor(static_cast<size_t>(cols)), 256, 0, s>>>(rows, cols, x, beta, out);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
