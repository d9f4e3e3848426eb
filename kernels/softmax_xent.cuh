// Mean softmax cross-entropy over rows, its gradient, and the number of correct argmaxes.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace shoal::cuda {
// Writes row_loss[r] (double) and row_correct[r] (0/1) per row and dlogits (if not null), then
// sums both in row order into totals[0] (loss, double) and *correct_total.
void LaunchSoftmaxCrossEntropy(cudaStream_t s, int rows, int cols, const float* logits, const int32_t* labels,
                               float* dlogits, double* row_loss, int32_t* row_correct, double* loss_total,
                               int64_t* correct_total);
}  // namespace shoal::cuda
