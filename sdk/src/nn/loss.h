// The classification loss: mean softmax cross-entropy over a batch, through the backend's
// fused op (the softmax is never materialized on its own).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace shoal::nn {

struct LossSums {
  double loss_sum = 0.0;  // summed (not mean) cross-entropy over the batch
  int64_t correct = 0;    // rows whose argmax logit is the label
};

// Loss of logits [batch, classes] against labels (in [0, classes)). When dlogits is not null
// it receives d(mean loss)/d(logits) [batch, classes], i.e. (softmax - onehot) / batch.
LossSums SoftmaxCrossEntropy(Backend* backend, int batch, int classes, const float* logits,
                             const int32_t* labels, float* dlogits);

}  // namespace shoal::nn
