#include <cmath>

#include "aggregate/strategy.h"

namespace shoal::aggregator {

std::unique_ptr<Strategy> MakeFedAvg(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeFedProx(const StrategyOptions& o);
std::unique_ptr<Strategy> MakeDemo(const StrategyOptions& o);

StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const StrategyOptions& o) {
  if (!(o.learning_rate > 0.0f) || !std::isfinite(o.learning_rate))
    return Status::InvalidArgument("--lr must be a positive number");
  if (!(o.server_learning_rate > 0.0f) || !std::isfinite(o.server_learning_rate))
    return Status::InvalidArgument("--server-lr must be a positive number");
  if (o.local_epochs == 0 && o.local_steps == 0)
    return Status::InvalidArgument("set --local-epochs or --local-steps to at least 1");
  if (o.name == "fedavg") return MakeFedAvg(o);
  if (o.name == "demo") return MakeDemo(o);  // needs clients with --client-optimizer demo
  if (o.name == "fedprox") {
    if (!(o.prox_mu >= 0.0f) || !std::isfinite(o.prox_mu)) return Status::InvalidArgument("--prox-mu must be >= 0");
    return MakeFedProx(o);
  }
  return Status::InvalidArgument("unknown --strategy '" + o.name + "' (valid: fedavg, fedprox, demo)");
}

}  // namespace shoal::aggregator
