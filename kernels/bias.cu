#include "bias.cuh"
#include "check.cuh"
#include "reduce.cuh"

namespace shoal::cuda {
namespace {
__global__ void AddBiasRows(size_t n, int cols, const float* bias, float* y) {
  SHOAL_GRID_LOOP(i, n) y[i] += bias[i % static_cast<size_t>(cols)];
}
// One block per 32 columns (ColumnSums).
__global__ void SumRows(int rows, int cols, const float* x, float beta, float* out) {
  const int c = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  double sum[1];
  ColumnSums<1>(rows, [&](int r, double (&acc)[1]) {
    if (c < cols) acc[0] += x[static_cast<size_t>(r) * cols + c];
  }, sum);
  if (threadIdx.y == 0 && c < cols) out[c] = (beta == 0.0f ? 0.0f : beta * out[c]) + static_cast<float>(sum[0]);
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
  SumRows<<<ColumnSumGrid(cols), ColumnSumBlock(), 0, s>>>(rows, cols, x, beta, out);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
