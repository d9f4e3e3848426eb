// AdamW, exactly as torch.optim.AdamW (amsgrad = False, maximize = False):
//   w *= 1 - lr * weight_decay                      (decoupled decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once

#include "nn/optimizer.h"

namespace shoal::nn {

class AdamW final : public Optimizer {
 public:
  // Use MakeOptimizer, which validates the config first.
  AdamW(size_t n, const OptimizerConfig& config, Backend* backend);

  void Step(float* w, const float* g) override;
  // Zeroes both moments and the step count.
  void Reset() override;
  std::string name() const override { return "adamw"; }

 protected:
  std::vector<DeviceArray<float>*> StateBuffers() override { return {&m_, &v_}; }

 private:
  float beta1_;
  float beta2_;
  float eps_;
  float weight_decay_;
  DeviceArray<float> m_;  // first moment
  DeviceArray<float> v_;  // second moment
};

}  // namespace shoal::nn
