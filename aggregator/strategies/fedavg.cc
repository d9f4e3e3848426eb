// FedAvg (McMahan et al. 2017): the new model is the old one plus the example-weighted mean
// of the clients' deltas, optionally scaled by a server learning rate.
#include <memory>

#include "strategy.h"

namespace shoal::aggregator {

std::optional<std::vector<float>> WeightedAverage(std::span<const ClientResult> results, float scale) {
  if (results.empty()) return std::nullopt;
  uint64_t total = 0;
  for (const auto& r : results) total += r.num_examples;
  if (total == 0) return std::nullopt;
  const size_t n = results.front().delta.size();
  // Accumulate in double: with results in canonical order this is exactly reproducible,
  // and the rounding error does not grow with the number of clients.
  std::vector<double> acc(n, 0.0);
  for (const auto& r : results) {
    const double w = static_cast<double>(r.num_examples) / static_cast<double>(total);
    const float* d = r.delta.data();
    for (size_t i = 0; i < n; ++i) acc[i] += w * d[i];
  }
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i] * scale);
  return out;
}

namespace {

class FedAvg final : public Strategy {
 public:
  explicit FedAvg(const StrategyOptions& o) : o_(o) {}
  std::string name() const override { return "fedavg"; }
  RoundConfig Configure(uint64_t round) const override {
    return {round, o_.learning_rate, o_.local_epochs, o_.local_steps, 0.0f};
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

std::unique_ptr<Strategy> MakeFedAvg(const StrategyOptions& o) { return std::make_unique<FedAvg>(o); }

}  // namespace shoal::aggregator
