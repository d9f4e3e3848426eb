// DeMo (Peng et al. 2024, "Decoupled Momentum Optimization"), server side. Clients training
// with the "demo" optimizer (sdk/src/nn/demo_optimizer.h) do not send w_local - w_global: each
// sends -Q, minus the sum of the DCT top-k components it extracted from its local momentum
// this round (for one local step, -q). DeMo's update, w = w - lr * sign(mean q), becomes
//   update = lr * server_lr * sign(mean delta)      (example-weighted mean, WeightedAverage)
// with lr the round's learning rate (--lr) and sign(0) = 0, so that
//   global = global + update = global - lr * server_lr * sign(mean Q).
// Round configuration as FedAvg. Running this strategy with clients that send ordinary deltas
// (or FedAvg with DeMo clients) is a configuration error the strategy cannot detect.
#include <memory>

#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {
namespace {

class Demo final : public FedAvg {
 public:
  using FedAvg::FedAvg;
  std::string name() const override { return "demo"; }
  StatusOr<std::optional<std::vector<float>>> Aggregate(uint64_t, std::span<const ClientResult> results,
                                                        std::span<const ClientFailure>,
                                                        std::span<const float>) override {
    std::optional<std::vector<float>> mean = WeightedAverage(results, 1.0f);
    if (!mean) return mean;
    const float step = options().learning_rate * options().server_learning_rate;
    for (float& x : *mean) {
      // A NaN mean (impossible with decoded, finite deltas) counts as 0: the coordinate stays.
      x = x > 0.0f ? step : (x < 0.0f ? -step : 0.0f);
    }
    return mean;
  }
};

}  // namespace

std::unique_ptr<Strategy> MakeDemo(const StrategyOptions& o) { return std::make_unique<Demo>(o); }

}  // namespace shoal::aggregator
