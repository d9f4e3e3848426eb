// FedProx (Li et al. 2020): FedAvg aggregation; the difference is on the client, which adds
// the proximal term mu/2 * ||w - w_global||^2 to its local objective. The strategy's job is
// to send mu with every round's configuration.
#include <memory>

#include "strategy.h"

namespace shoal::aggregator {
namespace {

class FedProx final : public Strategy {
 public:
  explicit FedProx(const StrategyOptions& o) : o_(o) {}
  std::string name() const override { return "fedprox"; }
  RoundConfig Configure(uint64_t round) const override {
    return {round, o_.learning_rate, o_.local_epochs, o_.local_steps, o_.prox_mu};
  }
  StatusOr<std::optional<std::vector<float>>> Aggregate(uint64_t, std::span<const ClientResult> results,
                                                        std::span<const ClientFailure>,
                                                        std::span<const float>) override {
    return WeightedAverage(results, o_.server_learning_rate);
  }

 private:
  StrategyOptions o_;
};

}  // namespace

std::unique_ptr<Strategy> MakeFedProx(const StrategyOptions& o) { return std::make_unique<FedProx>(o); }

}  // namespace shoal::aggregator
