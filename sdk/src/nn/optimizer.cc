// MakeOptimizer: validation of an OptimizerConfig and the choice of implementation.
#include "nn/optimizer.h"

#include <bit>
#include <cmath>
#include <cstdio>

#include "nn/adamw.h"
#include "nn/demo_optimizer.h"
#include "nn/sgd.h"

namespace shoal::nn {
namespace {

std::string Num(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

Status Bad(const OptimizerConfig& c, const std::string& why) {
  return Status::InvalidArgument("optimizer '" + c.name + "': " + why);
}

}  // namespace

std::vector<float> Optimizer::SaveState() const {
  auto buffers = const_cast<Optimizer*>(this)->StateBuffers();
  std::vector<float> out(2 + buffers.size() * n_);
  const uint64_t steps = static_cast<uint64_t>(steps_);
  out[0] = std::bit_cast<float>(static_cast<uint32_t>(steps));
  out[1] = std::bit_cast<float>(static_cast<uint32_t>(steps >> 32));
  for (size_t b = 0; b < buffers.size(); ++b)
    if (n_) buffers[b]->Download(out.data() + 2 + b * n_, n_);
  return out;
}

Status Optimizer::LoadState(std::span<const float> state) {
  auto buffers = StateBuffers();
  const size_t want = 2 + buffers.size() * n_;
  if (state.size() != want)
    return Status::InvalidArgument("optimizer '" + name() + "' state has " + std::to_string(state.size()) +
                                   " values, expected " + std::to_string(want));
  const uint64_t steps = std::bit_cast<uint32_t>(state[0]) | (uint64_t{std::bit_cast<uint32_t>(state[1])} << 32);
  steps_ = static_cast<int64_t>(steps);
  for (size_t b = 0; b < buffers.size(); ++b)
    if (n_) buffers[b]->Upload(state.data() + 2 + b * n_, n_);
  return Status::Ok();
}

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (c.name != "sgd" && c.name != "adamw" && c.name != "demo")
    return Status::InvalidArgument("unknown optimizer '" + c.name + "': expected sgd, adamw or demo");
  if (!std::isfinite(c.learning_rate) || c.learning_rate < 0.0f)
    return Bad(c, "learning rate must be finite and >= 0, got " + Num(c.learning_rate));
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0.0f)
    return Bad(c, "weight_decay must be finite and >= 0, got " + Num(c.weight_decay));
  if (c.name == "sgd") {
    if (!std::isfinite(c.momentum) || c.momentum < 0.0f)
      return Bad(c, "momentum must be finite and >= 0, got " + Num(c.momentum));
    if (c.nesterov && c.momentum == 0.0f) return Bad(c, "nesterov requires momentum > 0");
  } else if (c.name == "demo") {
    if (!(c.demo_decay >= 0.0f && c.demo_decay <= 1.0f))
      return Bad(c, "demo_decay must be in [0, 1], got " + Num(c.demo_decay));
    if (c.demo_chunk < 1 || c.demo_chunk > 1024)
      return Bad(c, "demo_chunk must be in [1, 1024], got " + std::to_string(c.demo_chunk));
    if (c.demo_topk < 1) return Bad(c, "demo_topk must be >= 1, got " + std::to_string(c.demo_topk));
  } else {
    if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) return Bad(c, "beta1 must be in [0, 1), got " + Num(c.beta1));
    if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) return Bad(c, "beta2 must be in [0, 1), got " + Num(c.beta2));
    if (!std::isfinite(c.eps) || c.eps < 0.0f) return Bad(c, "eps must be finite and >= 0, got " + Num(c.eps));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerConfig& config, size_t n, Backend* backend) {
  SHOAL_RETURN_IF_ERROR(ValidateOptimizerConfig(config));
  if (backend == nullptr) return Status::InvalidArgument("optimizer '" + config.name + "': no backend");
  if (config.name == "sgd") return std::unique_ptr<Optimizer>(std::make_unique<Sgd>(n, config, backend));
  if (config.name == "demo") {  // without a layout: the arena as one vector (see MakeDemoOptimizer)
    SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<DemoOptimizer> demo,
                           MakeDemoOptimizer(config, {TensorSpec{"params", {static_cast<int64_t>(n)}}}, backend));
    return std::unique_ptr<Optimizer>(std::move(demo));
  }
  return std::unique_ptr<Optimizer>(std::make_unique<AdamW>(n, config, backend));
}

}  // namespace shoal::nn
