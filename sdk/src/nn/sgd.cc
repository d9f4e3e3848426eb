#include "nn/sgd.h"

#include <vector>

namespace shoal::nn {

Sgd::Sgd(size_t n, const OptimizerConfig& config, Backend* backend)
    : Optimizer(n, config.learning_rate, backend),
      momentum_(config.momentum),
      weight_decay_(config.weight_decay),
      nesterov_(config.nesterov) {
  if (momentum_ != 0.0f && n > 0) {
    momentum_buffer_ = DeviceArray<float>(backend, n);
    const std::vector<float> zeros(n, 0.0f);  // defined bytes for SaveState before the first step
    momentum_buffer_.Upload(zeros.data(), n);
  }
}

void Sgd::Step(float* w, const float* g) {
  // The first step after construction or Reset() initializes the buffer from the gradient
  // (PyTorch's `buf = clone(d_p)`), so stale buffer contents are never read.
  backend_->SgdStep(n_, w, g, momentum_buffer_.get(), lr_, momentum_, weight_decay_, nesterov_, steps_ == 0);
  ++steps_;
}

}  // namespace shoal::nn
