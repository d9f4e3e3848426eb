// FedProx (Li et al. 2020): FedAvg aggregation; the difference is on the client, which adds
// the proximal term mu/2 * ||w - w_global||^2 to its local objective. The strategy's job is
// to send mu with every round's configuration.
#include <memory>

#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {
namespace {

class FedProx final : public FedAvg {
 public:
  using FedAvg::FedAvg;
  std::string name() const override { return "fedprox"; }
  RoundConfig Configure(uint64_t round) const override {
    RoundConfig c = FedAvg::Configure(round);
    c.prox_mu = options().prox_mu;
    return c;
  }
};

}  // namespace

std::unique_ptr<Strategy> MakeFedProx(const StrategyOptions& o) { return std::make_unique<FedProx>(o); }

}  // namespace shoal::aggregator
