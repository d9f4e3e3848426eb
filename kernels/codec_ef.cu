// Error feedback (stage "ef"): the compensated update and the new residual.
#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {
__global__ void Compensate(size_t n, const float* delta, const float* residual, float* out) {
  SHOAL_GRID_LOOP(i, n) out[i] = delta[i] + residual[i];
}
__global__ void Update(size_t n, const float* compensated, const float* decoded, float* residual) {
  SHOAL_GRID_LOOP(i, n) residual[i] = compensated[i] - decoded[i];
}
}  // namespace

void ErrorFeedbackCompensate(Backend& backend, size_t n, const float* delta, const float* residual, float* out) {
  if (n == 0) return;
  Compensate<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, delta, residual, out);
  SHOAL_CUDA_LAUNCHED();
}
void ErrorFeedbackUpdate(Backend& backend, size_t n, const float* compensated, const float* decoded, float* residual) {
  if (n == 0) return;
  Update<<<GridFor(n), 256, 0, StreamFor(backend)>>>(n, compensated, decoded, residual);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
