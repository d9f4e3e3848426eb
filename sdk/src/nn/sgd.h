// SGD with optional momentum, Nesterov momentum and L2 weight decay, exactly as
// torch.optim.SGD (dampening = 0):
//   g = grad + weight_decay * w
//   buf = g on the first step, else momentum * buf + g      (only when momentum != 0)
//   g = nesterov ? g + momentum * buf : buf
//   w -= lr * g
#pragma once

#include "nn/optimizer.h"

namespace shoal::nn {

class Sgd final : public Optimizer {
 public:
  // Use MakeOptimizer, which validates the config first.
  Sgd(size_t n, const OptimizerConfig& config, Backend* backend);

  void Step(float* w, const float* g) override;
  void Reset() override { steps_ = 0; }
  std::string name() const override { return "sgd"; }

 protected:
  std::vector<DeviceArray<float>*> StateBuffers() override {
    if (momentum_ == 0.0f) return {};
    return {&momentum_buffer_};
  }

 private:
  float momentum_;
  float weight_decay_;
  bool nesterov_;
  DeviceArray<float> momentum_buffer_;  // empty when momentum == 0; set (not read) on step 1
};

}  // namespace shoal::nn
