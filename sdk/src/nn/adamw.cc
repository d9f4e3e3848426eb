#include "nn/adamw.h"

#include <vector>

namespace shoal::nn {

AdamW::AdamW(size_t n, const OptimizerConfig& config, Backend* backend)
    : Optimizer(n, config.learning_rate, backend),
      beta1_(config.beta1),
      beta2_(config.beta2),
      eps_(config.eps),
      weight_decay_(config.weight_decay),
      m_(backend, n),
      v_(backend, n) {
  Reset();
}

void AdamW::Reset() {
  steps_ = 0;
  if (n_ == 0) return;
  // Fresh allocations may hold any bit pattern (NaN * 0 is NaN): copy zeros in, don't scale.
  const std::vector<float> zeros(n_, 0.0f);
  m_.Upload(zeros.data(), n_);
  v_.Upload(zeros.data(), n_);
}

void AdamW::Step(float* w, const float* g) {
  ++steps_;  // bias correction counts from t = 1
  backend_->AdamWStep(n_, w, g, m_.get(), v_.get(), lr_, beta1_, beta2_, eps_, weight_decay_, steps_);
}

}  // namespace shoal::nn
