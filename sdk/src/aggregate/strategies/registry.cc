#include <cmath>
#include <initializer_list>
#include <string>

#include "aggregate/strategies/fedbuff.h"
#include "aggregate/strategy.h"

namespace shoal::aggregator {

std::unique_ptr<Strategy> MakeFedAvg(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeFedProx(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeDemo(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeFedOpt(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeRobust(const StrategyOptions& o);

namespace {

constexpr const char* kNames =
    "fedavg, fedprox, demo, fedavgm, fedadam, fedyogi, fedadagrad, median, trimmed_mean, krum, multi_krum, "
    "centered_clip, fedbuff";

bool OneOf(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool Finite(float v, float lo) { return std::isfinite(v) && v >= lo; }

}  // namespace

StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const StrategyOptions& options) {
  StrategyOptions o = options;
  const bool fedopt = OneOf(o.name, {"fedavgm", "fedadam", "fedyogi", "fedadagrad"});
  const bool robust = OneOf(o.name, {"median", "trimmed_mean", "krum", "multi_krum", "centered_clip"});
  if (!fedopt && !robust && !OneOf(o.name, {"fedavg", "fedprox", "demo", "fedbuff"}))
    return Status::InvalidArgument("unknown --strategy '" + o.name + "' (valid: " + kNames + ")");
  if (!(o.learning_rate > 0.0f) || !std::isfinite(o.learning_rate))
    return Status::InvalidArgument("--lr must be a positive number");
  if (!Finite(o.server_learning_rate, 0.0f)) return Status::InvalidArgument("--server-lr must be >= 0 (0: the strategy's default)");
  if (o.server_learning_rate == 0.0f)
    o.server_learning_rate = OneOf(o.name, {"fedadam", "fedyogi"}) ? 0.01f : o.name == "fedadagrad" ? 0.1f : 1.0f;
  if (o.local_epochs == 0 && o.local_steps == 0)
    return Status::InvalidArgument("set --local-epochs or --local-steps to at least 1");
  if (o.name == "fedavg") return MakeFedAvg(o);
  if (o.name == "demo") return MakeDemo(o);  // needs clients with --client-optimizer demo
  if (o.name == "fedprox") {
    if (!Finite(o.prox_mu, 0.0f)) return Status::InvalidArgument("--prox-mu must be >= 0");
    return MakeFedProx(o);
  }
  if (o.name == "fedbuff") {
    if (o.buffer_size == 0) return Status::InvalidArgument("--buffer-size must be at least 1");
    return MakeFedBuff(o);
  }
  if (fedopt) {
    if (!Finite(o.server_momentum, 0.0f) || o.server_momentum >= 1.0f)
      return Status::InvalidArgument("--server-momentum must be in [0, 1)");
    if (!Finite(o.server_beta1, 0.0f) || o.server_beta1 >= 1.0f || !Finite(o.server_beta2, 0.0f) ||
        o.server_beta2 >= 1.0f)
      return Status::InvalidArgument("--server-beta1 and --server-beta2 must be in [0, 1)");
    if (!(o.server_tau > 0.0f) || !std::isfinite(o.server_tau))
      return Status::InvalidArgument("--server-tau must be a positive number");
    return MakeFedOpt(o);
  }
  if (!Finite(o.byzantine_fraction, 0.0f) || o.byzantine_fraction >= 0.5f)
    return Status::InvalidArgument("--byzantine must be in [0, 0.5)");
  if (!Finite(o.clip_radius, 0.0f)) return Status::InvalidArgument("--clip-radius must be >= 0 (0: the median distance)");
  if (o.clip_iterations == 0) return Status::InvalidArgument("--clip-iterations must be at least 1");
  return MakeRobust(o);
}

}  // namespace shoal::aggregator
