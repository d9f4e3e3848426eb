// Optimizer: updates a whole flat parameter arena from a whole gradient arena, in the
// backend's memory, with its state (momentum buffers, moments) in arenas of the same size.
// Semantics follow torch.optim exactly (see sgd.h, adamw.h), so trajectories can be checked
// against PyTorch. The client's local optimizer and DiLoCo's outer Nesterov step are the same
// objects; the aggregator's FedOpt optimizers follow Reddi et al.'s Algorithm 2 instead (no bias
// correction, tau outside the root) on the host, in aggregate/strategies/fedopt.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::nn {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of the size() weights at w (backend memory) with the gradient g.
  virtual void Step(float* w, const float* g) = 0;
  // Forgets all state: the next Step behaves like the first one of a fresh optimizer.
  virtual void Reset() = 0;
  virtual std::string name() const = 0;

  size_t size() const { return n_; }
  float learning_rate() const { return lr_; }
  // Takes effect from the next Step (like writing param_groups[0]["lr"] in PyTorch).
  void set_learning_rate(float lr) { lr_ = lr; }
  // Steps taken since construction or the last Reset.
  int64_t steps() const { return steps_; }

  // The whole state (step count and buffers) as floats, and back: for replicas that must stay
  // identical (a peer joining a swarm receives it) and checkpoints. LoadState refuses a state
  // of the wrong size. The step count travels as its two 32-bit halves, bit-cast.
  virtual std::vector<float> SaveState() const;
  virtual Status LoadState(std::span<const float> state);

 protected:
  Optimizer(size_t n, float lr, Backend* backend) : n_(n), lr_(lr), backend_(backend) {}
  // The buffers SaveState/LoadState carry after the step count, in order (default: none).
  virtual std::vector<DeviceArray<float>*> StateBuffers() { return {}; }

  size_t n_;
  float lr_;
  Backend* backend_;
  int64_t steps_ = 0;
};

// Checks a config without building anything: unknown name, negative or non-finite
// learning rate / momentum / weight decay, nesterov without momentum, betas outside [0, 1),
// negative eps. The message names the offending field and its value.
Status ValidateOptimizerConfig(const OptimizerConfig& config);

// An optimizer for `n` parameters on `backend` (which must outlive it), state zeroed.
StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerConfig& config, size_t n, Backend* backend);

}  // namespace shoal::nn
