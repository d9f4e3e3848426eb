#include "check.cuh"
#include "softmax_xent.cuh"

namespace shoal::cuda {
namespace {

constexpr int kWarp = 32;

// One warp per row. The arithmetic follows the CPU reference: max in float, exp and log in
// double, p cast to float.
__global__ void SoftmaxXentRows(int rows, int cols, const float* logits, const int32_t* labels, float* dlogits,
                                double* row_loss, int32_t* row_correct) {
  const int warps_per_block = blockDim.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
  for (int r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < rows; r += gridDim.x * warps_per_block) {
    const float* z = logits + static_cast<size_t>(r) * cols;
    // Max and first argmax.
    float mx = -INFINITY;
    int arg = cols;
    for (int c = lane; c < cols; c += kWarp)
      if (z[c] > mx) {
        mx = z[c];
        arg = c;
      }
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float om = __shfl_down_sync(0xffffffffu, mx, off);
      const int oa = __shfl_down_sync(0xffffffffu, arg, off);
      if (om > mx || (om == mx && oa < arg)) {
        mx = om;
        arg = oa;
      }
    }
    mx = __shfl_sync(0xffffffffu, mx, 0);
    arg = __shfl_sync(0xffffffffu, arg, 0);
    double denom = 0.0;
    for (int c = lane; c < cols; c += kWarp) denom += exp(static_cast<double>(z[c] - mx));
    for (int off = kWarp / 2; off > 0; off /= 2) denom += __shfl_down_sync(0xffffffffu, denom, off);
    denom = __shfl_sync(0xffffffffu, denom, 0);
    const double log_denom = log(denom);
    const int y = labels[r];
    if (lane == 0) {
      row_loss[r] = log_denom - static_cast<double>(z[y] - mx);
      row_correct[r] = arg == y ? 1 : 0;
    }
    if (dlogits) {
      float* d = dlogits + static_cast<size_t>(r) * cols;
      for (int c = lane; c < cols; c += kWarp) {
        const float p = static_cast<float>(exp(static_cast<double>(z[c] - mx) - log_denom));
        d[c] = (p - (c == y ? 1.0f : 0.0f)) * inv_rows;
      }
    }
  }
}

// Row order, one thread: the batch is small and the sum must not depend on the grid.
__global__ void SumInOrder(int rows, const double* row_loss, const int32_t* row_correct, double* loss_total,
                           int64_t* correct_total) {
  double s = 0.0;
  int64_t c = 0;
  for (int r = 0; r < rows; ++r) {
    s += row_loss[r];
    c += row_correct[r];
  }
  *loss_total = s;
  *correct_total = c;
}

}  // namespace

void LaunchSoftmaxCrossEntropy(cudaStream_t s, int rows, int cols, const float* logits, const int32_t* labels,
                               float* dlogits, double* row_loss, int32_t* row_correct, double* loss_total,
                               int64_t* correct_total) {
  if (rows > 0) {
    constexpr int kThreads = 256;
    const int blocks = static_cast<int>(GridFor(static_cast<size_t>(rows), kThreads / kWarp));
    SoftmaxXentRows<<<blocks, kThreads, 0, s>>>(rows, cols, logits, labels, dlogits, row_loss, row_correct);
    SHOAL_CUDA_LAUNCHED();
  }
  SumInOrder<<<1, 1, 0, s>>>(rows, row_loss, row_correct, loss_total, correct_total);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
