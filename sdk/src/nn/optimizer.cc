// MakeOptimizer: validation of an OptimizerConfig and the choice of implementation.
#include "nn/optimizer.h"

#include <cmath>
#include <cstdio>

#include "nn/adamw.h"
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

Status ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (c.name != "sgd" && c.name != "adamw")
    return Status::InvalidArgument("unknown optimizer '" + c.name + "': expected sgd or adamw");
  if (!std::isfinite(c.learning_rate) || c.learning_rate < 0.0f)
    return Bad(c, "learning rate must be finite and >= 0, got " + Num(c.learning_rate));
  if (!std::isfinite(c.weight_decay) || c.weight_decay < 0.0f)
    return Bad(c, "weight_decay must be finite and >= 0, got " + Num(c.weight_decay));
  if (c.name == "sgd") {
    if (!std::isfinite(c.momentum) || c.momentum < 0.0f)
      return Bad(c, "momentum must be finite and >= 0, got " + Num(c.momentum));
    if (c.nesterov && c.momentum == 0.0f) return Bad(c, "nesterov requires momentum > 0");
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
  return std::unique_ptr<Optimizer>(std::make_unique<AdamW>(n, config, backend));
}

}  // namespace shoal::nn
