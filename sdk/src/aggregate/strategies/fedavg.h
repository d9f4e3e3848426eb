// FedAvg (McMahan et al. 2017): the new model is the old one plus the example-weighted mean
// of the clients' deltas, scaled by a server learning rate (1 = plain FedAvg). Other
// strategies that only change the round configuration (FedProx) derive from it.
#pragma once

#include <memory>

#include "aggregate/strategy.h"
#include "aggregate/weighted_mean.h"

namespace shoal::aggregator {

class FedAvg : public Strategy {
 public:
  explicit FedAvg(const StrategyOptions& o) : o_(o) {}
  std::string name() const override { return "fedavg"; }
  RoundConfig Configure(uint64_t round) const override {
    return {round, o_.learning_rate, o_.local_epochs, o_.local_steps, 0.0f};
  }
  std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float> global) override {
    return std::make_unique<WeightedMean>(global.size(), o_.server_learning_rate);
  }

 protected:
  const StrategyOptions& options() const { return o_; }

 private:
  StrategyOptions o_;
};

}  // namespace shoal::aggregator
