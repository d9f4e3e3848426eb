// Dynamic loss scaling for fp16 training (as torch.cuda.amp.GradScaler): the loss gradient
// is multiplied by `scale` so small fp16 gradients do not flush to zero; a step whose scaled
// gradients overflowed (Inf/NaN) is skipped and the scale halved, and after `growth_interval`
// clean steps in a row the scale doubles.
#pragma once

#include <cstdint>

namespace shoal::nn {

class DynamicLossScaler {
 public:
  struct Options {
    float init_scale = 65536.0f;     // Default: 2^16
    float growth_factor = 2.0f;      // Default: 2
    float backoff_factor = 0.5f;     // Default: 0.5
    uint32_t growth_interval = 2000;  // clean steps before the scale grows. Default: 2000
    float min_scale = 1.0f;          // the scale never drops below this. Default: 1
  };
  DynamicLossScaler() : DynamicLossScaler(Options{}) {}
  explicit DynamicLossScaler(Options o) : o_(o), scale_(o.init_scale) {}

  float scale() const { return scale_; }
  uint64_t skipped_steps() const { return skipped_; }
  // What it carries from step to step (a trainer's state between rounds).
  struct State {
    float scale;
    uint32_t clean;
    uint64_t skipped;
  };
  State state() const { return {scale_, clean_, skipped_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    clean_ = s.clean;
    skipped_ = s.skipped;
  }

  // After each step: `overflow` says the scaled gradients held Inf/NaN (the step was skipped).
  void Update(bool overflow) {
    if (overflow) {
      ++skipped_;
      clean_ = 0;
      scale_ = scale_ * o_.backoff_factor < o_.min_scale ? o_.min_scale : scale_ * o_.backoff_factor;
      return;
    }
    if (++clean_ >= o_.growth_interval) {
      clean_ = 0;
      const float grown = scale_ * o_.growth_factor;
      if (grown <= 3.0e38f) scale_ = grown;
    }
  }

 private:
  Options o_;
  float scale_;
  uint32_t clean_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace shoal::nn
