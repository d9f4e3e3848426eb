#include "nn/loss.h"

namespace shoal::nn {

LossSums SoftmaxCrossEntropy(Backend* backend, int batch, int classes, const float* logits,
                             const int32_t* labels, float* dlogits) {
  LossSums sums;
  if (batch <= 0) return sums;
  backend->SoftmaxCrossEntropy(batch, classes, logits, labels, dlogits, &sums.loss_sum, &sums.correct);
  return sums;
}

}  // namespace shoal::nn
